//! Which names carry secrets: the one rule the HTTP transport, the conformance kit, the
//! simulators and the agent tools use to decide whose value is never shown.
//!
//! A header, query parameter, JSON field or environment variable is a credential when one of
//! the words of its name says so ([`CREDENTIAL_WORDS`]). Names are split into words at `-`, `_`, `.`, spaces and
//! lower-to-upper case changes (`apiKey` is `api` `key`), so `TOKENIZER` or `MONKEY` is not a
//! credential while `E2B_API_KEY`, `x-api-key` and `accessToken` are.
//!
//! ```
//! use sandbox_sdk_core::redact::is_credential_name;
//!
//! assert!(is_credential_name("Authorization"));
//! assert!(is_credential_name("E2B_API_KEY"));
//! assert!(is_credential_name("accessToken"));
//! assert!(!is_credential_name("Idempotency-Key"));
//! assert!(!is_credential_name("TOKENIZER"));
//! ```
//!
//! Values known to be secret (a bearer token, a path token) are scrubbed from any text an
//! answer turns into ([`scrub`], [`scrub_text`]), in every spelling a decoder would turn back
//! into the value: as written, JSON-escaped (`\/`, `\u0074`) or percent-encoded.

/// The words that make a name a credential (compared lower-cased, singular or plural); any
/// word starting with `auth` (`authorization`, `www-authenticate`) is one too.
pub const CREDENTIAL_WORDS: &[&str] = &[
    "apikey",
    "cookie",
    "credential",
    "key",
    "nonce",
    "passwd",
    "password",
    "secret",
    "session",
    "sig",
    "signature",
    "token",
];

/// Whether a value under `name` may be a credential, so it is never shown or recorded.
///
/// An idempotency key is not one: it names a create, and replay matches it as it is.
pub fn is_credential_name(name: &str) -> bool {
    let words = words(name);
    !words.iter().any(|w| w == "idempotency")
        && words.iter().any(|w| {
            let singular = w.strip_suffix('s').unwrap_or(w);
            w.starts_with("auth")
                || CREDENTIAL_WORDS.contains(&w.as_str())
                || CREDENTIAL_WORDS.contains(&singular)
        })
}

/// What a scrubbed secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// The secrets of a bearer credential: the whole `Bearer <token>` header value and the token
/// alone, either of which an answer may echo.
pub fn bearer_secrets(token: &str) -> Vec<String> {
    vec![format!("Bearer {token}"), token.to_owned()]
}

/// Secrets shorter than this are left alone by [`scrub`]: too likely to match ordinary text.
pub const MIN_SECRET_LEN: usize = 6;

/// `data` with every occurrence of each secret replaced by [`REDACTED`], longest secret
/// first (secrets shorter than [`MIN_SECRET_LEN`] bytes are left alone).
///
/// An occurrence is the secret as written, or with any of its characters spelled as a JSON
/// string may spell them (`\/` for `/`, `\"`, `\\`, `\n`, `\u0074` or a surrogate pair
/// for any character) or percent-encoded (`%2F`, `+` for a space), so an answer that quotes a
/// token in escaped form cannot bring it back when its text is decoded. Scrub raw bodies with
/// this before they are decoded, and decoded text with [`scrub_text`].
///
/// ```
/// use sandbox_sdk_core::redact::scrub;
///
/// let secrets = ["tok/en-123".to_owned()];
/// let body = br#"{"error":"bad token tok\/en-123 or \u0074ok%2Fen-123"}"#;
/// assert_eq!(scrub(body, &secrets), br#"{"error":"bad token <redacted> or <redacted>"}"#);
/// ```
pub fn scrub(data: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut secrets: Vec<&str> = secrets
        .iter()
        .map(String::as_str)
        .filter(|s| s.len() >= MIN_SECRET_LEN)
        .collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    'scan: while at < data.len() {
        for secret in &secrets {
            if let Some(end) = occurrence_at(data, at, secret) {
                out.extend_from_slice(REDACTED.as_bytes());
                at = end;
                continue 'scan;
            }
        }
        out.push(data[at]);
        at += 1;
    }
    out
}

/// [`scrub`] for text: a message decoded out of an answer (a JSON field, a close reason).
pub fn scrub_text(text: &str, secrets: &[String]) -> String {
    match String::from_utf8(scrub(text.as_bytes(), secrets)) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Where an occurrence of `secret` starting at `at` ends, in any of the spellings [`scrub`]
/// knows.
fn occurrence_at(data: &[u8], at: usize, secret: &str) -> Option<usize> {
    secret.chars().try_fold(at, |i, c| {
        char_at(&data[i.min(data.len())..], c).map(|n| i + n)
    })
}

/// How many bytes at the start of `data` spell `c`.
fn char_at(data: &[u8], c: char) -> Option<usize> {
    let mut utf8 = [0; 4];
    let raw = c.encode_utf8(&mut utf8).as_bytes();
    if data.starts_with(raw) {
        return Some(raw.len());
    }
    let short = match c {
        '"' => Some(b'"'),
        '\\' => Some(b'\\'),
        '/' => Some(b'/'),
        '\u{8}' => Some(b'b'),
        '\u{c}' => Some(b'f'),
        '\n' => Some(b'n'),
        '\r' => Some(b'r'),
        '\t' => Some(b't'),
        _ => None,
    };
    if short.is_some_and(|e| data.starts_with(&[b'\\', e])) {
        return Some(2);
    }
    if c == ' ' && data.starts_with(b"+") {
        return Some(1);
    }
    let mut utf16 = [0; 2];
    let json_escaped = c.encode_utf16(&mut utf16).iter().try_fold(0, |n, unit| {
        let escape = data.get(n..n + 6)?;
        (escape[..2] == *b"\\u" && hex(&escape[2..]) == Some(u32::from(*unit))).then_some(n + 6)
    });
    json_escaped.or_else(|| {
        raw.iter().try_fold(0, |n, byte| {
            let escape = data.get(n..n + 3)?;
            (escape[0] == b'%' && hex(&escape[1..]) == Some(u32::from(*byte))).then_some(n + 3)
        })
    })
}

/// The value of hex digits (either case).
fn hex(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0, |value, d| {
        Some(value * 16 + char::from(*d).to_digit(16)?)
    })
}

/// `name` split into lower-cased words (see the module docs).
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            words.push(std::mem::take(&mut word));
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        word.push(c.to_ascii_lowercase());
    }
    words.push(word);
    words.retain(|w| !w.is_empty());
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_found_by_their_words() {
        for name in [
            "authorization",
            "Proxy-Authorization",
            "WWW-Authenticate",
            "cookie",
            "Set-Cookie",
            "X-API-Key",
            "x-access-token",
            "X-Daytona-Preview-Token",
            "E2B_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "my_service_token",
            "GITHUB_TOKEN",
            "apiKey",
            "accessToken",
            "X-Amz-Signature",
            "sig",
            "session_id",
            "password",
            "client.secret",
            "nonce",
            "credentials",
            "tokens",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
    }

    /// Issue 33 item 6: a token echoed with JSON escapes passed the byte-level scrub and came
    /// back whole when the body was decoded into an error message.
    #[test]
    fn a_secret_is_scrubbed_in_every_spelling_a_decoder_undoes() {
        let token = "sk_live/AbC+9\"é😀".to_owned();
        let secrets = bearer_secrets(&token);
        let encoded = serde_json::to_string(&token).unwrap();
        let ascii: String = token
            .encode_utf16()
            .map(|u| format!("\\u{u:04X}"))
            .collect();
        let percent: String = token.bytes().map(|b| format!("%{b:02x}")).collect();
        for spelling in [
            token.clone(),
            encoded[1..encoded.len() - 1].to_owned(),
            token.replace('/', "\\/"),
            ascii,
            percent,
            format!("Bearer+{token}"),
        ] {
            let body = format!(r#"{{"message":"no: {spelling}!"}}"#);
            let scrubbed = scrub_text(&body, &secrets);
            assert!(
                scrubbed.contains("no: <redacted>!"),
                "{spelling} -> {scrubbed}"
            );
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&scrubbed) {
                assert!(!value["message"].as_str().unwrap().contains(&token));
            }
        }
        assert_eq!(scrub_text("tok", &["".to_owned(), "tok".to_owned()]), "tok");
        assert_eq!(scrub_text("a\\u00", &["abcdef".to_owned()]), "a\\u00");
    }

    #[test]
    fn other_names_are_not_credentials() {
        for name in [
            "PATH",
            "HOME",
            "TOKENIZER",
            "MONKEY",
            "keyboard",
            "Idempotency-Key",
            "idempotencyKey",
            "content-type",
            "",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
    }
}
