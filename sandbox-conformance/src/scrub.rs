//! Finding and scrubbing secrets in cassettes: the one implementation behind the recorder's
//! scrubbing and refusal and behind `cargo xtask fixtures`.
//!
//! A secret is either a value the caller knows (the live credential, a token the service
//! handed out) or a value that looks like one ([`SECRET_PATTERNS`]: provider API keys, JWTs,
//! `sk_live_`/`sk_test_` keys, long bearer tokens, signed URL parameters, private keys). It is
//! found in plain form, percent-encoded (`tok%2Fen` in a path), base64-encoded (a `base64`
//! body or frame, a base64 field of a JSON answer, standard or URL-safe alphabet, padded or
//! not) and split across two frames of a streamed answer.

use base64::Engine as _;
use base64::engine::GeneralPurpose;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use regex::bytes::Regex;
use serde_json::Value;
use std::ops::Range;
use std::sync::OnceLock;

/// A value pattern that marks a secret: its kind (shown in messages instead of the value) and
/// the regex; a capture group named `s` marks the secret part (the rest is context such as
/// `Bearer `), otherwise the whole match is the secret.
struct Pattern {
    kind: &'static str,
    re: Regex,
    placeholder: &'static str,
}

/// The kinds of value the check recognises, with their regexes (as documented on
/// [`SecretCheck`]).
pub const SECRET_PATTERNS: &[(&str, &str)] = &[
    ("E2B API key", r"e2b_[0-9a-f]{20,}"),
    ("E2B access token", r"sk_e2b_[0-9A-Za-z]{20,}"),
    ("Daytona API key", r"dtn_[A-Za-z0-9]{20,}"),
    (
        "Fly token",
        r#"FlyV1 (?P<s>[^\s"'\\{][^\s"'\\]*)|fm[12]_[A-Za-z0-9+/=_-]{20,}"#,
    ),
    ("bearer token", r"(?i)bearer (?P<s>[A-Za-z0-9._~+/=-]{24,})"),
    (
        "JWT",
        r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    (
        "AWS access key id",
        r"(?-u:\b)(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b)",
    ),
    (
        "signed URL parameter",
        r#"(?i)[?&](?:x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential)=(?P<s>[^&\s"\\]+)"#,
    ),
    (
        "signed URL parameter",
        r#"(?i)"(?:x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential)"\s*:\s*"(?P<s>[^"]+)""#,
    ),
    (
        "private key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)?",
    ),
    ("GitHub token", r"(?-u:\b)gh[pousr]_[A-Za-z0-9]{30,}"),
    ("secret key", r"(?-u:\b)sk_(?:live|test)_[A-Za-z0-9]{10,}"),
];

/// The kind reported for a value the caller said is secret.
const KNOWN: &str = "a credential of the recording";

fn patterns() -> &'static [Pattern] {
    static PATTERNS: OnceLock<Vec<Pattern>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        SECRET_PATTERNS
            .iter()
            .map(|(kind, re)| Pattern {
                kind,
                re: Regex::new(re).expect("SECRET_PATTERNS are valid regexes"),
                placeholder: if *kind == "signed URL parameter" {
                    "{{signature}}"
                } else {
                    "{{token}}"
                },
            })
            .collect()
    })
}

/// One edit of a scrub: replace `range` by `with`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    pub range: Range<usize>,
    pub with: Vec<u8>,
    pub kind: &'static str,
    pub form: Form,
}

/// How a secret was written where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Form {
    /// As is.
    Plain,
    /// Percent-encoded (in a path or query).
    PercentEncoded,
    /// Inside base64 (a base64 body or frame, a base64 field).
    Base64,
    /// Split across two or more frames of a streamed answer.
    SplitAcrossFrames,
}

impl std::fmt::Display for Form {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Form::Plain => "plain",
            Form::PercentEncoded => "percent-encoded",
            Form::Base64 => "base64-encoded",
            Form::SplitAcrossFrames => "split across frames",
        })
    }
}

/// Finds (and, for the recorder, replaces) secrets in every form: see the module docs.
#[derive(Clone, Default)]
pub struct SecretCheck {
    /// Known secret values with their placeholders, longest first.
    known: Vec<(Vec<u8>, String)>,
    /// All known values.
    known_re: Option<Regex>,
    /// Known values of 8 bytes or more: the ones looked for inside decoded base64, where
    /// arbitrary bytes would match a short value by chance.
    known_long_re: Option<Regex>,
}

impl std::fmt::Debug for SecretCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretCheck")
            .field("known", &self.known.len())
            .field("patterns", &SECRET_PATTERNS.len())
            .finish()
    }
}

/// A secret found in a cassette: where, what kind and in which form; never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFinding {
    /// The 1-based line of the cassette text.
    pub line: usize,
    /// The kind of secret (a [`SECRET_PATTERNS`] name, or a credential of the recording).
    pub kind: &'static str,
    /// How it is written.
    pub form: Form,
}

impl std::fmt::Display for SecretFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: looks like a secret ({}", self.line, self.kind)?;
        if self.form != Form::Plain {
            write!(f, ", {}", self.form)?;
        }
        f.write_str(")")
    }
}

impl SecretCheck {
    /// A check for the value patterns only.
    pub fn new() -> SecretCheck {
        SecretCheck::default()
    }

    /// Also finds this value (3 bytes or more), wherever and however it is written.
    pub fn known(self, secret: impl Into<String>) -> SecretCheck {
        self.known_as(secret, "{{token}}")
    }

    /// Also finds `value`; a scrub writes `placeholder` for it.
    pub(crate) fn known_as(
        mut self,
        value: impl Into<String>,
        placeholder: impl Into<String>,
    ) -> SecretCheck {
        let value = value.into();
        if value.len() < 3 || self.known.iter().any(|(k, _)| k == value.as_bytes()) {
            return self;
        }
        self.known.push((value.into_bytes(), placeholder.into()));
        self.known.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        let alternation = |min: usize| {
            let values: Vec<String> = self
                .known
                .iter()
                .filter(|(v, _)| v.len() >= min)
                .map(|(v, _)| regex::escape(&String::from_utf8_lossy(v)))
                .collect();
            (!values.is_empty())
                .then(|| Regex::new(&values.join("|")).ok())
                .flatten()
        };
        self.known_re = alternation(3);
        self.known_long_re = alternation(8);
        self
    }

    /// Whether `text` holds a secret in any form; the kinds found (each once).
    pub fn kinds(&self, text: &[u8]) -> Vec<&'static str> {
        let mut kinds: Vec<&'static str> = self.all_edits(text, 0).iter().map(|e| e.kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }

    /// The secrets in a cassette's text, by line (plain, percent-encoded and base64 forms),
    /// and secrets split across the frames of a streamed answer (at the line of its `frames`).
    pub fn cassette(&self, text: &str) -> Vec<SecretFinding> {
        let mut out: Vec<SecretFinding> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            for edit in self.all_edits(line.as_bytes(), 0) {
                let finding = SecretFinding {
                    line: i + 1,
                    kind: edit.kind,
                    form: edit.form,
                };
                if !out.contains(&finding) {
                    out.push(finding);
                }
            }
        }
        let Ok(cassette) = serde_json::from_str::<Value>(text) else {
            return out;
        };
        let frames_lines: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains("\"frames\""))
            .map(|(i, _)| i + 1)
            .collect();
        let streamed = cassette["interactions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["response"]["frames"].as_array());
        for (n, frames) in streamed.enumerate() {
            let line = frames_lines.get(n).copied().unwrap_or(1);
            for kind in self.split_kinds(frames) {
                out.push(SecretFinding {
                    line,
                    kind,
                    form: Form::SplitAcrossFrames,
                });
            }
        }
        // A WebSocket script: the server's messages, and the client's, each read in order.
        let script_lines: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains("\"websocket\""))
            .map(|(i, _)| i + 1)
            .collect();
        let scripts = cassette["interactions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["response"]["websocket"].as_array());
        for (n, steps) in scripts.enumerate() {
            let line = script_lines.get(n).copied().unwrap_or(1);
            // Read as they are, and without each binary message's first byte: protocols such as
            // Sprites' exec start every binary frame with a stream id.
            for (side, skip) in [("server", 0), ("client", 0), ("server", 1), ("client", 1)] {
                let messages: Vec<Value> = steps
                    .iter()
                    .filter_map(|step| step.get(side))
                    .map(|m| match m.get("binary_base64").and_then(Value::as_str) {
                        Some(b) => {
                            let bytes = decode_base64(b.trim().as_bytes())
                                .map(|(_, d)| d)
                                .unwrap_or_default();
                            let payload = bytes.get(skip..).unwrap_or_default();
                            serde_json::json!({ "base64": STANDARD.encode(payload) })
                        }
                        None => m.clone(),
                    })
                    .collect();
                for kind in self.split_kinds(&messages) {
                    let finding = SecretFinding {
                        line,
                        kind,
                        form: Form::SplitAcrossFrames,
                    };
                    if !out.contains(&finding) {
                        out.push(finding);
                    }
                }
            }
        }
        out
    }

    /// Kinds found in the frames read one after another but in no frame alone.
    fn split_kinds(&self, frames: &[Value]) -> Vec<&'static str> {
        let contents: Vec<(Vec<u8>, Vec<u8>)> = frames.iter().map(frame_content).collect();
        let alone: Vec<&'static str> = contents
            .iter()
            .flat_map(|(raw, decoded)| {
                let mut k = self.kinds(raw);
                k.extend(self.kinds(decoded));
                k
            })
            .collect();
        let raw: Vec<u8> = contents.iter().flat_map(|(r, _)| r.clone()).collect();
        let decoded: Vec<u8> = contents.iter().flat_map(|(_, d)| d.clone()).collect();
        let mut kinds = self.kinds(&raw);
        kinds.extend(self.kinds(&decoded));
        kinds.retain(|k| !alone.contains(k));
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }

    /// `bytes` with every secret replaced by its placeholder (twice over, so that a secret
    /// revealed by the first pass is caught too).
    pub(crate) fn scrub(&self, bytes: &[u8]) -> Vec<u8> {
        let once = apply(bytes, &self.edits(bytes, 0));
        let edits = self.edits(&once, 0);
        if edits.is_empty() {
            once
        } else {
            apply(&once, &edits)
        }
    }

    /// [`SecretCheck::scrub`] for text.
    pub(crate) fn scrub_text(&self, text: &str) -> String {
        match String::from_utf8(self.scrub(text.as_bytes())) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// Chunks regrouped so that no secret straddles two of them (the chunks a secret spans
    /// become one); the bytes are unchanged.
    pub(crate) fn regroup(&self, chunks: &[Vec<u8>]) -> Vec<Vec<u8>> {
        if chunks.len() < 2 {
            return chunks.to_vec();
        }
        let all: Vec<u8> = chunks.concat();
        let edits = self.edits(&all, 0);
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut at = 0;
        let mut join_next = false;
        for chunk in chunks {
            if join_next && let Some(last) = out.last_mut() {
                last.extend_from_slice(chunk);
            } else {
                out.push(chunk.clone());
            }
            at += chunk.len();
            join_next = edits.iter().any(|e| e.range.start < at && at < e.range.end);
        }
        out
    }

    /// The secrets of `bytes`: non-overlapping edits in order.
    pub(crate) fn edits(&self, bytes: &[u8], depth: usize) -> Vec<Edit> {
        let mut edits = self.all_edits(bytes, depth);
        edits.sort_by_key(|e| (e.range.start, std::cmp::Reverse(e.range.end)));
        let mut out: Vec<Edit> = Vec::new();
        for e in edits {
            if out
                .last()
                .is_none_or(|last| last.range.end <= e.range.start)
            {
                out.push(e);
            }
        }
        out
    }

    /// Every match of every rule in `bytes`, overlapping ones included (a bearer token that is
    /// also a JWT is both).
    fn all_edits(&self, bytes: &[u8], depth: usize) -> Vec<Edit> {
        let mut edits = self.plain(bytes, Form::Plain, depth);
        if bytes.contains(&b'%') {
            let (decoded, map) = percent_decode_mapped(bytes);
            for e in self.plain(&decoded, Form::PercentEncoded, depth) {
                let start = map[e.range.start].start;
                let end = map[e.range.end - 1].end;
                edits.push(Edit {
                    range: start..end,
                    ..e
                });
            }
        }
        if depth < 2 {
            edits.extend(self.base64(bytes, depth));
        }
        edits
    }

    /// Known values and value patterns written as they are.
    fn plain(&self, bytes: &[u8], form: Form, depth: usize) -> Vec<Edit> {
        let mut edits = Vec::new();
        let known = if depth == 0 {
            &self.known_re
        } else {
            &self.known_long_re
        };
        if let Some(re) = known {
            for m in re.find_iter(bytes) {
                let placeholder = self
                    .known
                    .iter()
                    .find(|(v, _)| v == m.as_bytes())
                    .map(|(_, p)| p.as_str())
                    .unwrap_or("{{token}}");
                edits.push(Edit {
                    range: m.range(),
                    with: placeholder.as_bytes().to_vec(),
                    kind: KNOWN,
                    form,
                });
            }
        }
        for p in patterns() {
            for caps in p.re.captures_iter(bytes) {
                let Some(m) = caps.name("s").or_else(|| caps.get(0)) else {
                    continue;
                };
                if m.as_bytes().starts_with(b"{{") {
                    continue;
                }
                edits.push(Edit {
                    range: m.range(),
                    with: p.placeholder.as_bytes().to_vec(),
                    kind: p.kind,
                    form,
                });
            }
        }
        edits
    }

    /// Base64 runs whose decoded bytes hold a secret: the run re-encoded from the scrubbed
    /// bytes.
    fn base64(&self, bytes: &[u8], depth: usize) -> Vec<Edit> {
        static RUN: OnceLock<Regex> = OnceLock::new();
        let run = RUN
            .get_or_init(|| Regex::new(r"(?-u)[A-Za-z0-9+/_-]{8,}={0,2}").expect("a valid regex"));
        let mut edits = Vec::new();
        for m in run.find_iter(bytes) {
            let Some((engine, decoded)) = decode_base64(m.as_bytes()) else {
                continue;
            };
            let inner = self.edits(&decoded, depth + 1);
            let Some(first) = inner.first() else {
                continue;
            };
            let scrubbed = apply(&decoded, &inner);
            edits.push(Edit {
                range: m.range(),
                with: engine.encode(scrubbed).into_bytes(),
                kind: first.kind,
                form: Form::Base64,
            });
        }
        edits
    }
}

/// The bytes of a run of base64 text and the engine that writes it the same way (alphabet and
/// padding), if the run decodes. A run whose length is a multiple of 4 counts as padded: it is
/// written back with padding (cassettes' `base64` bodies and frames require it).
fn decode_base64(run: &[u8]) -> Option<(&'static GeneralPurpose, Vec<u8>)> {
    let url = run.iter().any(|b| matches!(b, b'-' | b'_'));
    let (padded, unpadded): (&'static GeneralPurpose, &'static GeneralPurpose) = if url {
        (&URL_SAFE, &URL_SAFE_NO_PAD)
    } else {
        (&STANDARD, &STANDARD_NO_PAD)
    };
    if run.ends_with(b"=") || run.len().is_multiple_of(4) {
        padded.decode(run).ok().map(|d| (padded, d))
    } else {
        unpadded.decode(run).ok().map(|d| (unpadded, d))
    }
}

/// The content of one recorded frame, as written and with base64 decoded: text as is, base64
/// decoded, the string values of a JSON frame one after another.
fn frame_content(frame: &Value) -> (Vec<u8>, Vec<u8>) {
    let Some((kind, value)) = frame.as_object().and_then(|o| o.iter().next()) else {
        return (Vec::new(), Vec::new());
    };
    match (kind.as_str(), value) {
        ("text", Value::String(t)) => (t.as_bytes().to_vec(), t.as_bytes().to_vec()),
        ("base64", Value::String(b)) => {
            let decoded = decode_base64(b.trim().as_bytes())
                .map(|(_, d)| d)
                .unwrap_or_default();
            (b.as_bytes().to_vec(), decoded)
        }
        (_, value) => {
            let mut raw = Vec::new();
            let mut decoded = Vec::new();
            let mut stack = vec![value];
            while let Some(v) = stack.pop() {
                match v {
                    Value::String(s) => {
                        raw.extend_from_slice(s.as_bytes());
                        match decode_base64(s.as_bytes()) {
                            Some((_, d)) if !s.is_empty() => decoded.extend(d),
                            _ => decoded.extend_from_slice(s.as_bytes()),
                        }
                    }
                    Value::Array(items) => stack.extend(items.iter().rev()),
                    Value::Object(map) => stack.extend(map.values().rev()),
                    _ => {}
                }
            }
            (raw, decoded)
        }
    }
}

/// Applies non-overlapping edits, in order.
fn apply(bytes: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    for e in edits {
        out.extend_from_slice(&bytes[at..e.range.start]);
        out.extend_from_slice(&e.with);
        at = e.range.end;
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

/// Percent-decodes `bytes` (bad escapes kept), with, for each decoded byte, the range of
/// `bytes` it came from.
fn percent_decode_mapped(bytes: &[u8]) -> (Vec<u8>, Vec<Range<usize>>) {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut map = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(h * 16 + l);
            map.push(i..i + 3);
            i += 3;
        } else {
            out.push(bytes[i]);
            map.push(i..i + 1);
            i += 1;
        }
    }
    (out, map)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRIPE: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";

    #[test]
    fn every_form_of_a_secret_is_found_without_showing_it() {
        let check = SecretCheck::new().known("tok/en+live=0001");
        let b64 = STANDARD.encode(format!("key={STRIPE}\n"));
        let cases: &[(&str, Form)] = &[
            (STRIPE, Form::Plain),
            ("/files/tok%2Fen%2Blive%3D0001/x", Form::PercentEncoded),
            (&b64, Form::Base64),
        ];
        for (text, form) in cases {
            let found = check.edits(text.as_bytes(), 0);
            assert_eq!(found.len(), 1, "{text}: {found:?}");
            assert_eq!(found[0].form, *form, "{text}");
        }
        assert!(
            check
                .kinds(b"nothing {{token}} here, Bearer {{token}}")
                .is_empty()
        );
    }

    #[test]
    fn scrubbing_keeps_context_and_reencodes_base64() {
        let check = SecretCheck::new().known("tok/en+live=0001");
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLWJ5dGVz";
        assert_eq!(
            check.scrub_text(&format!("Authorization: Bearer {jwt}")),
            "Authorization: Bearer {{token}}"
        );
        assert_eq!(
            check.scrub_text("/files/tok%2Fen%2Blive%3D0001/x"),
            "/files/{{token}}/x"
        );
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            let b64 = engine.encode(format!("a {STRIPE} b??>>"));
            let out = check.scrub_text(&format!("\"{b64}\""));
            let out = out.trim_matches('"');
            assert_eq!(
                engine.decode(out).expect("written back the same way"),
                b"a {{token}} b??>>"
            );
        }
    }

    #[test]
    fn a_secret_split_across_frames_is_found_and_regrouped() {
        let check = SecretCheck::new();
        let (a, b) = STRIPE.split_at(12);
        let cassette = serde_json::json!({"interactions": [{
            "request": {"method": "GET", "path": "/x"},
            "response": {"frames": [{"text": format!("out {a}")}, {"base64": STANDARD.encode(format!("{b} end"))}]}
        }]});
        let text = serde_json::to_string_pretty(&cassette).expect("json");
        let found = check.cassette(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].form, Form::SplitAcrossFrames);
        assert_eq!(found[0].kind, "secret key");
        assert!(
            text.lines()
                .nth(found[0].line - 1)
                .expect("line")
                .contains("frames")
        );
        let chunks = vec![
            b"x".to_vec(),
            format!("out {a}").into_bytes(),
            format!("{b} end").into_bytes(),
        ];
        assert_eq!(
            check.regroup(&chunks),
            vec![b"x".to_vec(), format!("out {STRIPE} end").into_bytes()]
        );
    }
}
