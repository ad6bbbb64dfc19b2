//! Keeps credentials out of tool output: every text and JSON string a tool returns passes
//! through a [`Redactor`] that replaces known secret values.

use serde_json::Value;

/// What stands in for a secret in tool output.
pub const REDACTED: &str = "[REDACTED]";

/// Host environment variables holding provider credentials; their values never appear in tool
/// output. Any variable whose name ends in `_API_KEY`, `_TOKEN`, `_SECRET`, `_PASSWORD` or
/// `_ACCESS_KEY` (or starts with `AWS_SECRET`) is treated the same way.
pub const CREDENTIAL_ENV: &[&str] = &[
    "E2B_API_KEY",
    "E2B_ACCESS_TOKEN",
    "DAYTONA_API_KEY",
    "FLY_API_TOKEN",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GITHUB_TOKEN",
];

/// Secret values shorter than this are not redacted: replacing every `1` or `abc` in output
/// would destroy it and protect nothing.
pub const MIN_SECRET_LEN: usize = 8;

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

/// Whether an environment variable name looks like it holds a credential.
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_ENV.contains(&upper.as_str())
        || ["_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY"]
            .iter()
            .any(|suffix| upper.ends_with(suffix))
        || upper.starts_with("AWS_SECRET")
}

impl Redactor {
    /// A redactor that knows no secrets.
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Adds the values of this process's environment variables whose names look like
    /// credentials ([`is_credential_name`]).
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

    #[test]
    fn credential_names() {
        assert!(is_credential_name("E2B_API_KEY"));
        assert!(is_credential_name("my_service_token"));
        assert!(is_credential_name("AWS_SECRET_ACCESS_KEY"));
        assert!(!is_credential_name("PATH"));
        assert!(!is_credential_name("TOKENIZER"));
    }
}
