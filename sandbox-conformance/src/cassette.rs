//! The cassette format: one JSON file per provider and scenario holding the HTTP interactions the
//! scenario makes, in order, with placeholders for ids and tokens.
//!
//! ```json
//! {
//!   "provider": "e2b",
//!   "scenario": "exec_exit_codes",
//!   "provenance": { "kind": "spec", "date": "2026-12-01", "source": "specs/e2b/PROTOCOL.md §4" },
//!   "order": "strict",
//!   "interactions": [
//!     {
//!       "request": {
//!         "method": "POST",
//!         "path": "/process.Process/Start",
//!         "query": {},
//!         "headers": { "content-type": "application/connect+json" },
//!         "body": { "connect": { "process": { "cmd": "sh", "args": ["-c", "exit 3"] } } },
//!         "match": "subset"
//!       },
//!       "response": {
//!         "status": 200,
//!         "headers": { "content-type": "application/connect+json" },
//!         "frames": [
//!           { "connect": { "event": { "start": { "pid": 7 } } } },
//!           { "connect": { "event": { "end": { "exited": true, "status": "exit status 3" } } } },
//!           { "connect_end": {} }
//!         ]
//!       },
//!       "times": 1
//!     }
//!   ]
//! }
//! ```
//!
//! # Requests
//!
//! An incoming request matches an interaction when all of these hold:
//!
//! - `method` is equal (case-insensitive);
//! - `path` is equal, where a path segment written `{{any}}` matches any one segment;
//! - `query` (a map of name to a string or an array of strings) holds exactly the request's query
//!   pairs: a parameter the cassette does not list fails the match, order does not matter, and a
//!   value `{{any}}` matches any value. An absent `query` means "no query string";
//! - every header in `headers` is present with that value (names case-insensitive, `{{any}}`
//!   matches any value); headers the cassette does not list are ignored, so list only those that
//!   matter (content type, protocol versions, lease nonces, idempotency keys). Never list a
//!   real credential: `authorization: Bearer {{token}}` is how a credential is written (the
//!   recorder writes it so);
//! - `body`, when present and not `null`, matches as its kind says (see [`Body`]); an absent body
//!   is not checked;
//! - **the API key is required**: a request must carry [`TOKEN`] in a credential header
//!   (`authorization`, `x-api-key`, `x-access-token`, …) or credential query parameter, even when
//!   the interaction lists none, so an adapter that drops its credentials fails replay with a
//!   message saying so. `"auth": "none"` in the request marks one that is authorised otherwise
//!   (a signed URL) or not at all.
//!
//! JSON bodies compare **exactly** by default (semantic equality: key order and whitespace do not
//! matter, every field must be there and no other), so an adapter that sends a field the cassette
//! does not list — such as a default it should have left alone — fails. `"match": "subset"` relaxes
//! this for one request: objects may then carry fields the cassette does not list (arrays still
//! compare element by element, at the same length). In both modes the string `"{{any}}"` matches any
//! value. Text and base64 bodies compare byte for byte.
//!
//! # Responses
//!
//! `status`, optional `headers`, and either `body` (one [`Body`]: `json`, `text`, `base64` or
//! `connect`) or `frames` (a streamed body: each [`Frame`] encoded and concatenated in order), or a
//! `fault` (see [`Fault`]) for connection resets and truncated streams; `delay_ms` holds the answer
//! back (a slow server). A JSON body gets
//! `content-type: application/json` unless the cassette sets one; text gets `text/plain`, bytes
//! `application/octet-stream`; frames get the type of their first frame's kind (`connect` →
//! `application/connect+json`, `jsonl` → `application/x-ndjson`).
//!
//! # WebSocket exchanges
//!
//! An interaction whose `response` holds `websocket` (status `101`) is a WebSocket exchange: its
//! `request` is the upgrade request (method `GET`, matched like any other request, so path
//! templates, `query`, `headers` and the API-key rule apply; the upgrade headers themselves are
//! not listed), and `websocket` is the script replay plays on the upgraded connection, each
//! [`WsStep`] in order:
//!
//! ```json
//! {
//!   "request": {
//!     "method": "GET",
//!     "path": "/v1/sprites/{{sandbox_id}}/exec",
//!     "query": { "cmd": ["sh", "-c", "cat"], "path": "sh", "stdin": "true" },
//!     "headers": { "authorization": "Bearer {{token}}" }
//!   },
//!   "response": {
//!     "status": 101,
//!     "websocket": [
//!       { "server": { "text": "{\"type\":\"session_info\",\"session_id\":7,\"tty\":false}" } },
//!       { "client": { "binary_base64": "AGhp" } },
//!       { "client": { "binary_base64": "BA==" } },
//!       { "server": { "binary_base64": "AWhp" } },
//!       { "server": { "binary_base64": "AwA=" } },
//!       { "client_close": 1000 }
//!     ]
//!   }
//! }
//! ```
//!
//! - `{"server": M}` sends message `M`; `{"client": M}` waits for the client's next data message
//!   (pings and pongs are ignored: replay answers pings itself) and compares it with `M`. A
//!   message ([`WsMessage`]) is `{"text": "..."}` (a text frame, byte for byte),
//!   `{"json": ...}` (a text frame holding this JSON, compared like an exact JSON body, so
//!   `"{{any}}"` matches any value) or `{"binary_base64": "..."}` (a binary frame, standard
//!   base64).
//! - `{"close": 1000}` sends a close frame with that code and ends the script
//!   (`{"close_with_reason": {"code": 1008, "reason": "..."}}` with a reason too);
//!   `{"client_close": 1000}` waits for the client to close with that code (`null`: any code,
//!   or the client just going away).
//! - `{"delay_ms": N}` pauses the script; `"silent"` stops reading and writing without closing
//!   (a ping gets no pong: a dead peer); `"reset"` drops the connection without a close frame.
//!   These are the analogues of `delay_ms` and [`Fault`] for a socket.
//! - After the last step the connection stays open: replay answers pings and waits for the client
//!   to close (a held, silent stream when the script sends nothing more). A data message the
//!   script does not expect is a failure.
//!
//! A wrong client message, a client that closes or goes away before the script expects it, and
//! an upgrade that never came are failures the replay server reports at its end-of-scenario
//! verification, like an unmatched request or an unmet call count; `times` and strict order hold
//! across HTTP and WebSocket interactions alike. A **refused** upgrade is an ordinary
//! interaction: the upgrade request answered with a plain status and body (`404`, `400`).
//! `close`, `client_close`, `silent` and `reset` can only be the last step.
//!
//! # Counts and order
//!
//! `times` (default 1) is how often the interaction must be used: exactly that many, no more and
//! no fewer. In `"order": "strict"` (the default) interaction *n + 1* matches only after
//! interaction *n* has been used `times` times; `"any"` lets them match in any order (for
//! adapters that send requests concurrently).
//!
//! # Placeholders
//!
//! Any string in a cassette may contain `{{name}}` placeholders, replaced before replay by the
//! values in [`Placeholders::standard`]: `{{sandbox_id}}`, `{{sandbox_id_2}}`, `{{missing_id}}`,
//! `{{snapshot_id}}`, `{{token}}`, `{{base_url}}`, `{{host}}`, `{{port}}`, and `{{signature}}`
//! (what the recorder writes for a signed URL parameter). `{{any}}` is kept for matching, and
//! `{{open}}` stands for a literal `{{` (for answers whose own text holds braces, such as
//! Daytona's `proxyTemplateUrl`, `https://{{open}}PORT}}-{{open}}sandboxId}}.proxy...`). An
//! unknown placeholder is an error, so a typo cannot silently match nothing.
//!
//! # Provenance
//!
//! `kind` is `spec` (written by hand from the provider's published API description and
//! `specs/<provider>/PROTOCOL.md`, `source` naming the document and section; or derived by the
//! recorder from live answers with a failure put in, `source` starting `derived by
//! sandbox-conformance from` and naming them) or `recorded` (captured verbatim from the live
//! service by the recorder; `source` names the service). `date` is the ISO date it was written,
//! derived or recorded. A `spec` cassette must never be presented as recorded.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The wildcard placeholder: matches any path segment, query value, header value or JSON value.
pub const ANY: &str = "{{any}}";

/// The id replay substitutes for `{{sandbox_id}}`: the sandbox most scenarios connect to.
pub const SANDBOX_ID: &str = "cfsbx0001";
/// The id replay substitutes for `{{sandbox_id_2}}`: a second sandbox (a fork, a second create).
pub const SANDBOX_ID_2: &str = "cfsbx0002";
/// The id replay substitutes for `{{missing_id}}`: a sandbox that does not exist.
pub const MISSING_ID: &str = "cfsbx0404";
/// The id replay substitutes for `{{snapshot_id}}`.
pub const SNAPSHOT_ID: &str = "cfsnap0001";
/// The credential replay substitutes for `{{token}}`: build the adapter under test with this API
/// key / token so its auth header can be matched.
pub const TOKEN: &str = "conformance-test-token";
/// What replay substitutes for `{{signature}}` (a scrubbed signed-URL parameter).
pub const SIGNATURE: &str = "conformance-signature";

/// One cassette: the interactions one scenario makes against one provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cassette {
    /// The provider's name, as `Provider::name` returns it.
    pub provider: String,
    /// The scenario's name (see `SCENARIOS.md`).
    pub scenario: String,
    /// Where the interactions come from.
    pub provenance: Provenance,
    /// Whether interactions must arrive in order.
    #[serde(default)]
    pub order: Order,
    /// The interactions, in the order the scenario makes them.
    pub interactions: Vec<Interaction>,
}

/// Where a cassette's interactions come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Written from the spec, or recorded from the live service.
    pub kind: ProvenanceKind,
    /// ISO date (`YYYY-MM-DD`) it was written or recorded.
    pub date: String,
    /// The document and section it follows (`spec`), or the service it was recorded from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The two kinds of provenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProvenanceKind {
    /// Written by hand from the provider's published spec and PROTOCOL.md, or derived by the
    /// recorder from live answers with a failure put in.
    Spec,
    /// Captured verbatim from the live service by the recorder.
    Recorded,
}

/// Whether interactions must arrive in the cassette's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Interaction n + 1 matches only once interaction n has been used `times` times.
    #[default]
    Strict,
    /// Any interaction matches whenever it has uses left.
    Any,
}

/// One request and the answer to give it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interaction {
    /// What the adapter must send.
    pub request: RequestSpec,
    /// What the mock answers.
    pub response: ResponseSpec,
    /// Exactly how many times it must be used (default 1).
    #[serde(default = "one")]
    pub times: u64,
}

fn one() -> u64 {
    1
}

/// How a JSON request body is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonMatch {
    /// Semantic equality: same fields, same values (key order does not matter).
    #[default]
    Exact,
    /// The cassette's fields must be present and equal; extra object fields are allowed.
    Subset,
}

/// A query parameter's value: one string, or several for a repeated parameter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QueryValue {
    /// `?name=value`.
    One(String),
    /// `?name=a&name=b`.
    Many(Vec<String>),
}

impl QueryValue {
    /// The values in order.
    pub fn values(&self) -> Vec<&str> {
        match self {
            QueryValue::One(v) => vec![v.as_str()],
            QueryValue::Many(vs) => vs.iter().map(String::as_str).collect(),
        }
    }
}

/// The request half of an interaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// HTTP method.
    pub method: String,
    /// Path without query string, starting with `/`.
    pub path: String,
    /// The whole query string as a map; absent means no query string.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, QueryValue>,
    /// Headers that must be present with these values; others are ignored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body to expect; `None` means not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Body>,
    /// How a JSON body is compared.
    #[serde(default, rename = "match", skip_serializing_if = "is_default")]
    pub json_match: JsonMatch,
    /// Whether the request must carry the API key. By default it must: replay refuses a request
    /// without a credential header (`authorization`, `x-api-key`, `x-access-token`, …) or
    /// credential query parameter holding [`TOKEN`], unless the interaction names its credential
    /// header itself. `"auth": "none"` marks a request that is authorised otherwise (a signed
    /// URL) or not at all.
    #[serde(default, skip_serializing_if = "is_default")]
    pub auth: Auth,
}

/// Whether a request must carry the API key ([`RequestSpec::auth`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Auth {
    /// It must carry [`TOKEN`] in a credential header or query parameter.
    #[default]
    Required,
    /// It carries none (or one replay cannot know).
    None,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The response half of an interaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseSpec {
    /// HTTP status.
    #[serde(default = "ok")]
    pub status: u16,
    /// Response headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A whole body (`json`, `text`, `base64` or `connect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Body>,
    /// A streamed body: frames concatenated in order. Exclusive with `body`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<Vec<Frame>>,
    /// A transport failure instead of (or in the middle of) the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// How long the server takes before it answers, in milliseconds (a slow server: the request
    /// counts as received at once). Replay builds adapters with
    /// [`crate::REPLAY_REQUEST_TIMEOUT`], so a delay above it makes the answer arrive too late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// A WebSocket exchange: the upgrade is accepted (status `101`) and this script is played on
    /// the connection (see the [module docs](self#websocket-exchanges)). Exclusive with `body`,
    /// `frames` and `fault`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket: Option<Vec<WsStep>>,
}

/// One step of a WebSocket exchange's script ([`ResponseSpec::websocket`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WsStep {
    /// The server sends this message.
    Server(WsMessage),
    /// The client's next data message must be this one.
    Client(WsMessage),
    /// The server sends a close frame with this code; the script ends.
    Close(u16),
    /// The server sends a close frame with this code and reason (at most 123 bytes); the
    /// script ends.
    CloseWithReason {
        /// The close code.
        code: u16,
        /// The reason.
        reason: String,
    },
    /// The client closes with this code (`None`: any code, or the connection just ending); the
    /// script ends.
    ClientClose(Option<u16>),
    /// The script pauses this many milliseconds.
    DelayMs(u64),
    /// The server stops reading and writing without closing (pings go unanswered); the script
    /// ends.
    Silent,
    /// The server drops the connection without a close frame; the script ends.
    Reset,
}

impl WsStep {
    /// Whether the script cannot go on after this step.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            WsStep::Close(_)
                | WsStep::CloseWithReason { .. }
                | WsStep::ClientClose(_)
                | WsStep::Silent
                | WsStep::Reset
        )
    }
}

/// One WebSocket data message in a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WsMessage {
    /// A text frame, byte for byte.
    Text(String),
    /// A text frame holding this JSON (sent compactly; compared semantically, `"{{any}}"`
    /// matching any value).
    Json(Value),
    /// A binary frame, standard base64.
    BinaryBase64(String),
}

impl WsMessage {
    /// Whether this is a binary frame.
    pub fn is_binary(&self) -> bool {
        matches!(self, WsMessage::BinaryBase64(_))
    }

    /// The payload this message puts on the wire.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            WsMessage::Text(t) => Ok(t.as_bytes().to_vec()),
            WsMessage::Json(v) => serde_json::to_vec(v).map_err(|e| e.to_string()),
            WsMessage::BinaryBase64(b) => decode_base64(b),
        }
    }

    /// The message a recorder writes for a received frame: text as text, binary as base64.
    pub fn from_frame(binary: bool, payload: &[u8]) -> WsMessage {
        if binary {
            WsMessage::BinaryBase64(encode_base64(payload))
        } else {
            WsMessage::Text(String::from_utf8_lossy(payload).into_owned())
        }
    }

    /// Whether a received frame (`binary` or text, with `payload`) is this message; on a
    /// mismatch, what differs.
    pub fn matches(&self, binary: bool, payload: &[u8]) -> Result<(), String> {
        let got = || describe_ws(binary, payload);
        if binary != self.is_binary() {
            return Err(format!("expected {}, got {}", self.describe(), got()));
        }
        match self {
            WsMessage::Json(want) => {
                let value: Value = serde_json::from_slice(payload)
                    .map_err(|_| format!("expected {}, got {}", self.describe(), got()))?;
                json_matches(want, &value, JsonMatch::Exact)
                    .map_err(|diff| format!("text frame JSON {diff}"))
            }
            _ => {
                let want = self.bytes()?;
                if want == payload {
                    Ok(())
                } else {
                    Err(format!("expected {}, got {}", self.describe(), got()))
                }
            }
        }
    }

    /// A short rendering for messages: `text "..."`, `json {...}`, `binary AGhp ("\0hi")`.
    pub fn describe(&self) -> String {
        match self {
            WsMessage::Json(v) => cut_line(&format!("json {v}")),
            other => match other.bytes() {
                Ok(bytes) => describe_ws(other.is_binary(), &bytes),
                Err(e) => format!("an invalid message ({e})"),
            },
        }
    }
}

/// A frame as messages show it: text quoted; binary as base64 and, when short, escaped bytes.
pub(crate) fn describe_ws(binary: bool, payload: &[u8]) -> String {
    if !binary {
        return cut_line(&format!("text {:?}", String::from_utf8_lossy(payload)));
    }
    let escaped: String = payload
        .iter()
        .take(48)
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect();
    let more = if payload.len() > 48 { "…" } else { "" };
    cut_line(&format!(
        "binary {} (\"{escaped}{more}\", {} bytes)",
        encode_base64(&payload[..payload.len().min(96)]),
        payload.len()
    ))
}

fn cut_line(text: &str) -> String {
    const MAX: usize = 240;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head}…")
    }
}

fn ok() -> u16 {
    200
}

/// A body, in a request or a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    /// A JSON document (compared semantically in requests).
    Json(Value),
    /// UTF-8 text, byte for byte.
    Text(String),
    /// Bytes, standard base64 with padding.
    Base64(String),
    /// One Connect-protocol envelope (flags 0) holding this JSON message (`application/connect+json`).
    Connect(Value),
    /// Requests only: the body contains this text (for multipart bodies with random boundaries).
    Contains(String),
    /// Requests only: the body contains these bytes (standard base64).
    ContainsBase64(String),
}

/// One piece of a streamed response body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Frame {
    /// UTF-8 text as is.
    Text(String),
    /// Bytes, standard base64.
    Base64(String),
    /// A JSON value serialized compactly, no newline.
    Json(Value),
    /// A JSON value serialized compactly followed by `\n` (NDJSON).
    Jsonl(Value),
    /// A Connect data envelope: flags `0x00`, 4-byte big-endian length, compact JSON.
    Connect(Value),
    /// A Connect end-of-stream envelope: flags `0x02`, then the end-stream JSON (`{}` or `{"error":..}`).
    ConnectEnd(Value),
    /// One frame sent `times` times in a row (a flood of output without a flood of cassette),
    /// at most [`MAX_REPEAT`] times.
    Repeat {
        /// How many times.
        times: usize,
        /// The frame.
        frame: Box<Frame>,
    },
}

/// The most times a [`Frame::Repeat`] repeats.
pub const MAX_REPEAT: usize = 1 << 16;

/// A transport failure the replayer produces instead of a clean response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The connection is closed after the request arrives, before any response byte.
    Reset,
    /// The status line, headers (with the full `content-length`) and the first half of the body
    /// are sent, then the connection is closed.
    Truncate,
}

/// An error in a cassette file: which file and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CassetteError {
    /// The file (or a description of the source).
    pub file: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for CassetteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cassette {}: {}", self.file, self.message)
    }
}

impl std::error::Error for CassetteError {}

/// Values substituted for `{{name}}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholders {
    values: BTreeMap<String, String>,
}

impl Placeholders {
    /// The standard set for a mock server at `base_url` (`http://127.0.0.1:PORT`).
    pub fn standard(base_url: &str) -> Self {
        let base = base_url.trim_end_matches('/');
        let host = base
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(base)
            .to_owned();
        let port = host
            .rsplit_once(':')
            .map(|(_, p)| p.to_owned())
            .unwrap_or_default();
        let mut values = BTreeMap::new();
        for (k, v) in [
            ("sandbox_id", SANDBOX_ID),
            ("sandbox_id_2", SANDBOX_ID_2),
            ("missing_id", MISSING_ID),
            ("snapshot_id", SNAPSHOT_ID),
            ("token", TOKEN),
            ("signature", SIGNATURE),
        ] {
            values.insert(k.to_owned(), v.to_owned());
        }
        values.insert("base_url".into(), base.to_owned());
        values.insert("host".into(), host);
        values.insert("port".into(), port);
        Placeholders { values }
    }

    /// Adds or replaces one placeholder.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.values.insert(name.into(), value.into());
        self
    }

    /// The value of one placeholder.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Every `(name, value)` pair.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Replaces every `{{name}}` in `text`; `{{any}}` is kept and `{{open}}` is a literal `{{`.
    /// Unknown names are an error.
    pub fn substitute(&self, text: &str) -> Result<String, String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find("}}") else {
                out.push_str(&rest[start..]);
                return Ok(out);
            };
            let name = &after[..end];
            if name == "any" {
                out.push_str(ANY);
            } else if name == "open" {
                out.push_str("{{");
            } else if let Some(value) = self.values.get(name) {
                out.push_str(value);
            } else {
                return Err(format!("unknown placeholder {{{{{name}}}}} in {text:?}"));
            }
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Replaces placeholder values in `text` by their `{{name}}` (longest values first), the
    /// inverse of [`Placeholders::substitute`]; used to normalise request logs for snapshots.
    pub fn normalise(&self, text: &str) -> String {
        let mut pairs: Vec<(&String, &String)> = self
            .values
            .iter()
            .filter(|(k, v)| v.len() >= 4 && k.as_str() != "port")
            .collect();
        pairs.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        let mut out = text.to_owned();
        for (name, value) in pairs {
            out = out.replace(value.as_str(), &format!("{{{{{name}}}}}"));
        }
        out
    }

    fn substitute_value(&self, value: &mut Value) -> Result<(), String> {
        match value {
            Value::String(s) => *s = self.substitute(s)?,
            Value::Array(items) => {
                for item in items {
                    self.substitute_value(item)?;
                }
            }
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.substitute_value(&mut v)?;
                    map.insert(self.substitute(&k)?, v);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Cassette {
    /// Parses a cassette from JSON text without substituting placeholders.
    pub fn from_json(text: &str) -> Result<Cassette, CassetteError> {
        let cassette: Cassette = serde_json::from_str(text).map_err(|e| CassetteError {
            file: "<text>".into(),
            message: format!("invalid cassette JSON: {e}"),
        })?;
        cassette.check().map_err(|message| CassetteError {
            file: "<text>".into(),
            message,
        })?;
        Ok(cassette)
    }

    /// Reads and parses a cassette file without substituting placeholders.
    ///
    /// A cassette in which [`crate::scrub::SecretCheck`] finds anything that looks like a
    /// secret (a JWT, an `sk_live_` key, a provider key, plain, base64 or percent-encoded) is
    /// refused, naming the line and the kind, never the value: replay is where an author who
    /// wrote or edited a cassette by hand finds out.
    pub fn load(path: &Path) -> Result<Cassette, CassetteError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| CassetteError {
            file: file.clone(),
            message: format!("cannot read: {e}"),
        })?;
        let findings = crate::scrub::SecretCheck::new().cassette(&text);
        if !findings.is_empty() {
            let lines: Vec<String> = findings.iter().map(|f| format!("line {f}")).collect();
            return Err(CassetteError {
                file,
                message: format!(
                    "holds what looks like a secret; replace it with a placeholder such as {{{{token}}}}: {}",
                    lines.join("; ")
                ),
            });
        }
        Cassette::from_json(&text).map_err(|e| CassetteError {
            file,
            message: e.message,
        })
    }

    /// The path of `scenario`'s cassette in `dir`: `dir/<scenario>.json`.
    pub fn path_in(dir: &Path, scenario: &str) -> PathBuf {
        dir.join(format!("{scenario}.json"))
    }

    /// A copy with every placeholder replaced by its value.
    pub fn substituted(&self, placeholders: &Placeholders) -> Result<Cassette, String> {
        let mut value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        placeholders.substitute_value(&mut value)?;
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// Serializes the cassette as pretty JSON with a trailing newline.
    pub fn to_json_pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Checks what serde cannot: known method, path shape, valid base64, body kinds allowed
    /// where they are used, body and frames not both set, `times` at least 1, WebSocket scripts
    /// well formed (see the [module docs](self#websocket-exchanges)).
    pub fn check(&self) -> Result<(), String> {
        if self.provenance.date.trim().is_empty() {
            return Err("provenance.date is empty".into());
        }
        if self.provenance.kind == ProvenanceKind::Spec
            && self
                .provenance
                .source
                .as_deref()
                .is_none_or(|s| s.trim().is_empty())
        {
            return Err("a spec cassette must name its source in provenance.source".into());
        }
        for (i, interaction) in self.interactions.iter().enumerate() {
            let at = |m: String| format!("interaction {i}: {m}");
            let req = &interaction.request;
            if req.method.is_empty() || !req.method.chars().all(|c| c.is_ascii_alphabetic()) {
                return Err(at(format!("bad method {:?}", req.method)));
            }
            if !req.path.starts_with('/') || req.path.contains('?') {
                return Err(at(format!(
                    "path {:?} must start with / and carry no query string (use \"query\")",
                    req.path
                )));
            }
            if interaction.times == 0 {
                return Err(at("times must be at least 1".into()));
            }
            for (side, headers) in [
                ("request", &req.headers),
                ("response", &interaction.response.headers),
            ] {
                for (name, value) in headers {
                    if let Some(why) = header_problem(name, value) {
                        return Err(at(format!("{side} header {name:?}: {why}")));
                    }
                }
            }
            if let Some(body) = &req.body {
                body.bytes().map_err(|e| at(format!("request body: {e}")))?;
            }
            let resp = &interaction.response;
            if !(100..=999).contains(&resp.status) {
                return Err(at(format!("bad status {}", resp.status)));
            }
            if resp.body.is_some() && resp.frames.is_some() {
                return Err(at("response has both body and frames".into()));
            }
            if let Some(body) = &resp.body {
                if matches!(body, Body::Contains(_) | Body::ContainsBase64(_)) {
                    return Err(at("contains/contains_base64 are for requests only".into()));
                }
                body.bytes()
                    .map_err(|e| at(format!("response body: {e}")))?;
            }
            for frame in resp.frames.iter().flatten() {
                frame.bytes().map_err(|e| at(format!("frame: {e}")))?;
            }
            match &resp.websocket {
                Some(steps) => check_websocket(req, resp, steps).map_err(at)?,
                None if resp.status == 101 => {
                    return Err(at(
                        "status 101 needs a \"websocket\" script (a refused upgrade is an \
                         ordinary status such as 404)"
                            .into(),
                    ));
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// What is wrong with a WebSocket interaction, if anything.
fn check_websocket(req: &RequestSpec, resp: &ResponseSpec, steps: &[WsStep]) -> Result<(), String> {
    if !req.method.eq_ignore_ascii_case("GET") {
        return Err(format!(
            "a WebSocket upgrade is a GET, not {}",
            req.method.to_ascii_uppercase()
        ));
    }
    if resp.status != 101 {
        return Err(format!(
            "a websocket response has status 101, not {} (a refused upgrade is an ordinary \
             response without \"websocket\")",
            resp.status
        ));
    }
    if resp.body.is_some() || resp.frames.is_some() || resp.fault.is_some() {
        return Err(
            "a websocket response has no body, frames or fault (use its script's steps)".into(),
        );
    }
    for (n, step) in steps.iter().enumerate() {
        let at = |m: String| format!("websocket step {n}: {m}");
        if n + 1 < steps.len() && step.is_terminal() {
            return Err(at(
                "close, client_close, silent and reset must be the last step".into(),
            ));
        }
        match step {
            WsStep::Server(m) | WsStep::Client(m) => {
                m.bytes().map_err(at)?;
            }
            WsStep::CloseWithReason { reason, .. } if reason.len() > 123 => {
                return Err(at(format!(
                    "a close reason of {} bytes does not fit a control frame (123)",
                    reason.len()
                )));
            }
            WsStep::Close(code)
            | WsStep::CloseWithReason { code, .. }
            | WsStep::ClientClose(Some(code)) => {
                if !close_code_ok(*code) {
                    return Err(at(format!(
                        "close code {code} cannot be sent (1000-1003, 1007-1014 or 3000-4999)"
                    )));
                }
            }
            WsStep::ClientClose(None) | WsStep::DelayMs(_) | WsStep::Silent | WsStep::Reset => {}
        }
    }
    Ok(())
}

/// Whether a close frame may carry `code` (RFC 6455 §7.4).
fn close_code_ok(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Why `name: value` cannot be sent as an HTTP header (wiremock would panic on it), if it can't.
pub(crate) fn header_problem(name: &str, value: &str) -> Option<&'static str> {
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Some("not a valid header name");
    }
    if http::HeaderValue::from_str(value).is_err() {
        return Some("not a valid header value (visible ASCII, spaces and tabs only)");
    }
    None
}

impl Body {
    /// The bytes this body stands for (for `contains` kinds, the bytes to look for).
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            Body::Json(v) => serde_json::to_vec(v).map_err(|e| e.to_string()),
            Body::Text(t) | Body::Contains(t) => Ok(t.as_bytes().to_vec()),
            Body::Base64(b) | Body::ContainsBase64(b) => decode_base64(b),
            Body::Connect(v) => Ok(connect_envelope(0, v)),
        }
    }

    /// The content type a response with this body gets when the cassette sets none.
    pub fn default_content_type(&self) -> &'static str {
        match self {
            Body::Json(_) => "application/json",
            Body::Text(_) | Body::Contains(_) => "text/plain; charset=utf-8",
            Body::Base64(_) | Body::ContainsBase64(_) => "application/octet-stream",
            Body::Connect(_) => "application/connect+json",
        }
    }

    /// The body a recorder writes for `bytes` sent with `content_type`: JSON when it parses as
    /// JSON, text when it is UTF-8, base64 otherwise.
    pub fn from_bytes(bytes: &[u8], content_type: Option<&str>) -> Option<Body> {
        if bytes.is_empty() {
            return None;
        }
        let ct = content_type.unwrap_or("").to_ascii_lowercase();
        if ((ct.contains("json") && !ct.contains("connect+json"))
            || (ct.is_empty() && matches!(bytes.first(), Some(b'{' | b'['))))
            && let Ok(v) = serde_json::from_slice::<Value>(bytes)
        {
            return Some(Body::Json(v));
        }
        if ct.contains("connect+json")
            && let Some(frames) = decode_connect(bytes)
            && frames.len() == 1
            && frames[0].0 == 0
        {
            return Some(Body::Connect(frames[0].1.clone()));
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => Some(Body::Text(text.to_owned())),
            Err(_) => Some(Body::Base64(encode_base64(bytes))),
        }
    }
}

impl Frame {
    /// The bytes this frame puts on the wire.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            Frame::Text(t) => Ok(t.as_bytes().to_vec()),
            Frame::Base64(b) => decode_base64(b),
            Frame::Json(v) => serde_json::to_vec(v).map_err(|e| e.to_string()),
            Frame::Jsonl(v) => {
                let mut out = serde_json::to_vec(v).map_err(|e| e.to_string())?;
                out.push(b'\n');
                Ok(out)
            }
            Frame::Connect(v) => Ok(connect_envelope(0, v)),
            Frame::ConnectEnd(v) => Ok(connect_envelope(2, v)),
            Frame::Repeat { times, frame } => {
                if *times > MAX_REPEAT {
                    return Err(format!(
                        "a frame repeated {times} times (at most {MAX_REPEAT})"
                    ));
                }
                Ok(frame.bytes()?.repeat(*times))
            }
        }
    }

    /// Splits a recorded streamed body into frames: Connect envelopes when the content type is
    /// `application/connect+json` and the body parses as envelopes, otherwise the chunks as they
    /// arrived (text when UTF-8, base64 otherwise).
    pub fn from_chunks(chunks: &[Vec<u8>], content_type: Option<&str>) -> Vec<Frame> {
        if content_type.is_some_and(|ct| ct.to_ascii_lowercase().contains("connect+json")) {
            let all: Vec<u8> = chunks.concat();
            if let Some(envelopes) = decode_connect(&all) {
                return envelopes
                    .into_iter()
                    .map(|(flags, v)| {
                        if flags & 2 != 0 {
                            Frame::ConnectEnd(v)
                        } else {
                            Frame::Connect(v)
                        }
                    })
                    .collect();
            }
        }
        chunks
            .iter()
            .filter(|c| !c.is_empty())
            .map(|c| match std::str::from_utf8(c) {
                Ok(t) => Frame::Text(t.to_owned()),
                Err(_) => Frame::Base64(encode_base64(c)),
            })
            .collect()
    }
}

/// Encodes one Connect envelope: flags byte, 4-byte big-endian length, compact JSON.
pub fn connect_envelope(flags: u8, message: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(message).unwrap_or_default();
    let mut out = Vec::with_capacity(payload.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Decodes a body made only of uncompressed Connect envelopes holding JSON; `None` otherwise.
pub fn decode_connect(mut bytes: &[u8]) -> Option<Vec<(u8, Value)>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 5 {
            return None;
        }
        let flags = bytes[0];
        if flags & 1 != 0 {
            return None;
        }
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        let payload = bytes.get(5..5 + len)?;
        out.push((flags, serde_json::from_slice(payload).ok()?));
        bytes = &bytes[5 + len..];
    }
    Some(out)
}

/// Standard base64 with padding.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("invalid base64: {e}"))
}

/// Whether `actual` matches the cassette's `expected` JSON: exact (semantic equality) or subset,
/// with `"{{any}}"` matching any value. On a mismatch, the JSON pointer of the first difference.
pub fn json_matches(expected: &Value, actual: &Value, mode: JsonMatch) -> Result<(), String> {
    json_diff(expected, actual, mode, String::new())
}

fn json_diff(expected: &Value, actual: &Value, mode: JsonMatch, at: String) -> Result<(), String> {
    if expected.as_str() == Some(ANY) {
        return Ok(());
    }
    let where_ = || {
        if at.is_empty() {
            "/".to_owned()
        } else {
            at.clone()
        }
    };
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                match a.get(k) {
                    Some(av) => json_diff(ev, av, mode, format!("{at}/{k}"))?,
                    None => return Err(format!("{at}/{k}: missing")),
                }
            }
            if mode == JsonMatch::Exact
                && let Some(extra) = a.keys().find(|k| !e.contains_key(*k))
            {
                return Err(format!("{at}/{extra}: not in the cassette"));
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!(
                    "{}: expected {} items, got {}",
                    where_(),
                    e.len(),
                    a.len()
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                json_diff(ev, av, mode, format!("{at}/{i}"))?;
            }
            Ok(())
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => Ok(()),
        (e, a) if e == a => Ok(()),
        (e, a) => Err(format!("{}: expected {e}, got {a}", where_())),
    }
}

/// Decodes `%XX` escapes (and, with `plus_is_space`, `+` as a space); invalid escapes are kept.
pub(crate) fn percent_decode(text: &str, plus_is_space: bool) -> String {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(if plus_is_space && b == b'+' { b' ' } else { b });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `"METHOD path"` of each interaction of a cassette read as raw JSON (such as one a recording
/// just wrote), in order; a missing method or path reads as empty, and a value with no
/// `interactions` array gives no lines. Tests use it to check what a recording captured.
pub fn request_lines(cassette: &Value) -> Vec<String> {
    cassette["interactions"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|i| {
                    let field = |name: &str| i["request"][name].as_str().unwrap_or("").to_owned();
                    format!("{} {}", field("method"), field("path"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cassette_holding_a_secret_under_an_unknown_field_is_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let jwt = [
            "eyJhbGciOiJIUzI1NiJ9",
            "eyJzdWIiOiJzYW5kYm94In0",
            "c2lnbmF0dXJlLXZhbHVlLTEyMzQ",
        ]
        .join(".");
        let text = format!(
            r#"{{"provider":"fake","scenario":"connect","provenance":{{"kind":"spec","date":"2026-12-01","source":"test"}},
"interactions":[{{"request":{{"method":"GET","path":"/v1/sandboxes/{{{{sandbox_id}}}}"}},
"response":{{"status":200,"body":{{"json":{{"id":"x","exec_jwt":"{jwt}"}}}}}}}}]}}"#
        );
        let path = dir.path().join("connect.json");
        std::fs::write(&path, &text).unwrap();
        let error = super::Cassette::load(&path).unwrap_err().to_string();
        assert!(error.contains("looks like a secret"), "{error}");
        assert!(error.contains("line 3"), "{error}");
        assert!(!error.contains(&jwt), "{error}");
        std::fs::write(&path, text.replace(&jwt, "{{token}}")).unwrap();
        super::Cassette::load(&path).unwrap();
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn request_lines_lists_method_and_path_of_each_interaction() {
        let c: Value = serde_json::from_str(SAMPLE).unwrap();
        assert_eq!(request_lines(&c), ["GET /sandboxes/{{sandbox_id}}"]);
        let c = json!({"interactions": [
            {"request": {"method": "POST", "path": "/a", "body": {"json": {}}}},
            {"request": {"path": "/b"}},
            {"request": {"method": "DELETE"}}
        ]});
        assert_eq!(request_lines(&c), ["POST /a", " /b", "DELETE "]);
        assert!(request_lines(&json!({"provider": "demo"})).is_empty());
        assert!(request_lines(&json!({"interactions": {}})).is_empty());
    }

    const SAMPLE: &str = r#"{
      "provider": "demo",
      "scenario": "connect",
      "provenance": {"kind": "spec", "date": "2026-12-01", "source": "demo API §1"},
      "interactions": [
        {"request": {"method": "GET", "path": "/sandboxes/{{sandbox_id}}",
                     "headers": {"authorization": "Bearer {{token}}"}},
         "response": {"status": 200, "body": {"json": {"id": "{{sandbox_id}}", "url": "{{base_url}}/x"}}}}
      ]
    }"#;

    #[test]
    fn parses_defaults_and_substitutes_placeholders() {
        let c = Cassette::from_json(SAMPLE).unwrap();
        assert_eq!(c.order, Order::Strict);
        assert_eq!(c.interactions[0].times, 1);
        let s = c
            .substituted(&Placeholders::standard("http://127.0.0.1:4000"))
            .unwrap();
        let i = &s.interactions[0];
        assert_eq!(i.request.path, format!("/sandboxes/{SANDBOX_ID}"));
        assert_eq!(
            i.request.headers["authorization"],
            format!("Bearer {TOKEN}")
        );
        assert_eq!(
            i.response.body,
            Some(Body::Json(
                json!({"id": SANDBOX_ID, "url": "http://127.0.0.1:4000/x"})
            ))
        );
    }

    #[test]
    fn open_is_a_literal_pair_of_braces() {
        let p = Placeholders::standard("http://h:1");
        assert_eq!(
            p.substitute("https://{{open}}PORT}}-{{open}}sandboxId}}.proxy/{{sandbox_id}}")
                .unwrap(),
            "https://{{PORT}}-{{sandboxId}}.proxy/cfsbx0001"
        );
        assert!(p.substitute("{{PORT}}").is_err());
    }

    #[test]
    fn unknown_placeholders_and_bad_shapes_are_errors() {
        let c = Cassette::from_json(&SAMPLE.replace("{{token}}", "{{tokn}}")).unwrap();
        let err = c
            .substituted(&Placeholders::standard("http://h:1"))
            .unwrap_err();
        assert!(err.contains("tokn"), "{err}");
        assert!(Cassette::from_json(&SAMPLE.replace("\"/sandboxes", "\"sandboxes")).is_err());
        assert!(
            Cassette::from_json(&SAMPLE.replace("\"source\": \"demo API §1\"", "\"source\": \"\""))
                .is_err()
        );
        assert!(
            Cassette::from_json(
                &SAMPLE.replace("\"status\": 200", "\"status\": 200, \"bogus\": 1")
            )
            .is_err()
        );
    }

    #[test]
    fn a_header_wiremock_cannot_send_is_an_error_not_a_panic() {
        for (name, value) in [("content type", "text/plain"), ("x-ok", "two\\nlines")] {
            let text = SAMPLE.replace(
                r#""status": 200,"#,
                &format!(r#""status": 200, "headers": {{"{name}": "{value}"}},"#),
            );
            let err = Cassette::from_json(&text).expect_err("bad header accepted");
            assert!(err.message.contains("response header"), "{err}");
        }
        let text = SAMPLE.replace(
            r#""authorization": "Bearer"#,
            r#""author ization": "Bearer"#,
        );
        let err = Cassette::from_json(&text).expect_err("bad request header accepted");
        assert!(err.message.contains("request header"), "{err}");
    }

    #[test]
    fn json_match_exact_subset_and_any() {
        let e = json!({"a": 1, "b": {"c": "{{any}}"}});
        assert!(json_matches(&e, &json!({"b": {"c": [1]}, "a": 1.0}), JsonMatch::Exact).is_ok());
        let err = json_matches(
            &e,
            &json!({"a": 1, "b": {"c": 1}, "d": 2}),
            JsonMatch::Exact,
        )
        .unwrap_err();
        assert_eq!(err, "/d: not in the cassette");
        assert!(
            json_matches(
                &e,
                &json!({"a": 1, "b": {"c": 1}, "d": 2}),
                JsonMatch::Subset
            )
            .is_ok()
        );
        let err = json_matches(&e, &json!({"a": 2, "b": {"c": 1}}), JsonMatch::Subset).unwrap_err();
        assert_eq!(err, "/a: expected 1, got 2");
        assert!(json_matches(&json!([1, 2]), &json!([1]), JsonMatch::Subset).is_err());
    }

    #[test]
    fn connect_frames_round_trip() {
        let frames = [
            Frame::Connect(json!({"event": {"start": {"pid": 1}}})),
            Frame::ConnectEnd(json!({})),
        ];
        let bytes: Vec<Vec<u8>> = frames.iter().map(|f| f.bytes().unwrap()).collect();
        assert_eq!(bytes[1], vec![2, 0, 0, 0, 2, b'{', b'}']);
        // Split at an arbitrary point: recorded chunks need not align with envelopes.
        let all = bytes.concat();
        let chunks = vec![all[..3].to_vec(), all[3..].to_vec()];
        assert_eq!(
            Frame::from_chunks(&chunks, Some("application/connect+json")),
            frames.to_vec()
        );
    }

    #[test]
    fn percent_decode_keeps_bad_escapes_and_never_splits_characters() {
        assert_eq!(percent_decode("a%2Fb+c", true), "a/b c");
        assert_eq!(percent_decode("a%2Fb+c", false), "a/b+c");
        assert_eq!(percent_decode("%é%zz%4", false), "%é%zz%4");
    }

    #[test]
    fn normalise_inverts_substitute() {
        let p = Placeholders::standard("http://127.0.0.1:4000");
        let text = format!("GET http://127.0.0.1:4000/sandboxes/{SANDBOX_ID} Bearer {TOKEN}");
        assert_eq!(
            p.normalise(&text),
            "GET {{base_url}}/sandboxes/{{sandbox_id}} Bearer {{token}}"
        );
    }
}
