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
