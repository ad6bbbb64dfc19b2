//! Keeps credentials out of tool output: every text and JSON string a tool returns passes
//! through a [`Redactor`] that replaces known secret values.

use sandbox_sdk_core::redact::is_credential_name;
use serde_json::Value;

/// What stands in for a secret in tool output.
pub const REDACTED: &str = "[REDACTED]";

/// Secret values shorter than this are not redacted: replacing every `1` or `abc` in output
/// would destroy it and protect nothing.
pub const MIN_SECRET_LEN: usize = 8;

/// The shortest piece of a secret redacted where output was cut: a beginning of a secret that
/// ends text cut after it ([`Redactor::before_cut`]), or an end of one that starts text cut
/// before it ([`Redactor::after_cut`]). A shorter piece (at most 3 bytes of a secret at each
/// edge) may show; redacting every 1- to 3-byte match at an edge would eat ordinary output.
pub const MIN_PARTIAL_LEN: usize = 4;

/// Replaces known secret values in text and JSON.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor that knows no secrets.
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Adds the values of this process's environment variables whose names look like
    /// credentials (core's [`is_credential_name`]: `E2B_API_KEY`, `GITHUB_TOKEN`, …).
    pub fn with_host_credentials(mut self) -> Self {
        for (name, value) in std::env::vars() {
            if is_credential_name(&name) {
                self.add(value);
            }
        }
        self
    }

    /// Adds one secret value (ignored when shorter than [`MIN_SECRET_LEN`]).
    pub fn add(&mut self, secret: impl Into<String>) {
        let secret = secret.into();
        if secret.len() >= MIN_SECRET_LEN && !self.secrets.contains(&secret) {
            self.secrets.push(secret);
            // Longest first, so a secret containing another is replaced whole.
            self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    /// Adds one secret value and returns the redactor.
    pub fn with_secret(mut self, secret: impl Into<String>) -> Self {
        self.add(secret);
        self
    }

    /// How many secrets it knows.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Whether it knows no secret.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every known secret replaced by [`REDACTED`].
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// `text`, which ends where output was cut, with every known secret replaced and a piece
    /// of one (at least [`MIN_PARTIAL_LEN`] bytes) that starts a secret and ends the text
    /// replaced too: the rest of that secret was cut off.
    pub fn before_cut(&self, text: &str) -> String {
        let mut out = self.text(text);
        let piece = self
            .secrets
            .iter()
            .filter_map(|secret| {
                (MIN_PARTIAL_LEN..secret.len().min(out.len() + 1))
                    .rev()
                    .find(|&n| secret.is_char_boundary(n) && out.ends_with(&secret[..n]))
            })
            .max();
        if let Some(n) = piece {
            out.truncate(out.len() - n);
            out.push_str(REDACTED);
        }
        out
    }

    /// `text`, which starts where output was cut, with every known secret replaced and a piece
    /// of one (at least [`MIN_PARTIAL_LEN`] bytes) that ends a secret and starts the text
    /// replaced too: the beginning of that secret was cut off.
    pub fn after_cut(&self, text: &str) -> String {
        let out = self.text(text);
        let piece = self
            .secrets
            .iter()
            .filter_map(|secret| {
                (MIN_PARTIAL_LEN..secret.len().min(out.len() + 1))
                    .rev()
                    .find(|&n| {
                        let from = secret.len() - n;
                        secret.is_char_boundary(from) && out.starts_with(&secret[from..])
                    })
            })
            .max();
        match piece {
            Some(n) => format!("{REDACTED}{}", &out[n..]),
            None => out,
        }
    }

    /// Redacts every string (and object key) in a JSON value, in place.
    pub fn json(&self, value: &mut Value) {
        if self.secrets.is_empty() {
            return;
        }
        match value {
            Value::String(s)
                if self
                    .secrets
                    .iter()
                    .any(|secret| s.contains(secret.as_str())) =>
            {
                *s = self.text(s);
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.json(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut v) in entries {
                    self.json(&mut v);
                    map.insert(self.text(&key), v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_in_text_and_json() {
        let r = Redactor::new()
            .with_secret("canary-secret-123")
            .with_secret("short");
        assert_eq!(r.len(), 1);
        assert_eq!(r.text("a canary-secret-123 b"), "a [REDACTED] b");
        let mut v = serde_json::json!({"x": ["canary-secret-123"], "canary-secret-123": 1});
        r.json(&mut v);
        assert_eq!(v, serde_json::json!({"x": ["[REDACTED]"], "[REDACTED]": 1}));
    }

    /// A secret cut at an edge, with `n` of its bytes on the kept side, is redacted when `n`
    /// is at least [`MIN_PARTIAL_LEN`]; whole secrets are redacted on both sides too.
    #[test]
    fn pieces_of_a_secret_at_a_cut_edge_are_redacted() {
        let secret = "canary-secret-123";
        let r = Redactor::new().with_secret(secret);
        for n in 1..secret.len() {
            let head = format!("out {}", &secret[..n]);
            let tail = format!("{} out", &secret[secret.len() - n..]);
            let (before, after) = (r.before_cut(&head), r.after_cut(&tail));
            if n >= MIN_PARTIAL_LEN {
                assert_eq!(before, "out [REDACTED]", "n={n}");
                assert_eq!(after, "[REDACTED] out", "n={n}");
            } else {
                assert_eq!((before.as_str(), after.as_str()), (&head[..], &tail[..]));
            }
        }
        assert_eq!(
            r.before_cut("canary-secret-123 x canary"),
            "[REDACTED] x [REDACTED]"
        );
        assert_eq!(
            r.after_cut("t-123 canary-secret-123"),
            "[REDACTED] [REDACTED]"
        );
        // Only at the edge: a piece inside the text is ordinary output.
        assert_eq!(r.before_cut("canary x"), "canary x");
        assert_eq!(r.after_cut("x -123"), "x -123");
        // Multi-byte secrets are cut only between characters.
        let r = Redactor::new().with_secret("ключ-секрет");
        assert_eq!(r.before_cut("a ключ-с"), "a [REDACTED]");
        assert_eq!(r.after_cut("крет b"), "[REDACTED] b");
        assert_eq!(Redactor::new().before_cut("canary"), "canary");
    }
}
