//! What a tool call returns: text for the model, structured JSON for programs, and an error
//! flag. Failures are results too ([`ToolError`] → [`ToolResult`] with `is_error`), never panics
//! or protocol failures, so an MCP server or agent loop can hand them straight back to the model.

use sandbox_sdk_core::{Error, ErrorKind};
use serde_json::{Value, json};
use std::fmt;

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// What the model reads.
    pub text: String,
    /// The same result as JSON, for programs (MCP's `structuredContent`).
    pub structured: Value,
    /// Whether the call failed (MCP's `isError`).
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(text: impl Into<String>, structured: Value) -> Self {
        ToolResult {
            text: text.into(),
            structured,
            is_error: false,
        }
    }

    /// The result as MCP's `tools/call` answers: `content` (one text item), `structuredContent`
    /// (when the structured form is an object) and `isError`.
    pub fn to_mcp(&self) -> Value {
        let mut out = json!({
            "content": [{"type": "text", "text": self.text}],
            "isError": self.is_error,
        });
        if self.structured.is_object() {
            out["structuredContent"] = self.structured.clone();
        }
        out
    }

    /// The error's kind when the call failed (`not_found`, `timeout`, ...).
    pub fn error_kind(&self) -> Option<&str> {
        if !self.is_error {
            return None;
        }
        self.structured["error"]["kind"].as_str()
    }
}

/// Why a tool call failed, and what the model can do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// A stable snake_case name: `invalid_input`, `not_found`, `unauthorized`, `timeout`,
    /// `quota_exceeded`, `not_supported`, `conflict`, `not_running`, `provider_error`,
    /// `transport_error`, `cancelled`, `unknown_tool`, `internal`.
    pub kind: &'static str,
    /// What went wrong.
    pub message: String,
    /// What to do next.
    pub hint: String,
}

impl ToolError {
    /// An error of `kind`.
    pub fn new(kind: &'static str, message: impl Into<String>, hint: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// The input does not fit the tool.
    pub fn invalid_input(message: impl Into<String>, hint: impl Into<String>) -> Self {
        ToolError::new("invalid_input", message, hint)
    }

    /// Something the input names does not exist.
    pub fn not_found(message: impl Into<String>, hint: impl Into<String>) -> Self {
        ToolError::new("not_found", message, hint)
    }

    /// The operation conflicts with the current state.
    pub fn conflict(message: impl Into<String>, hint: impl Into<String>) -> Self {
        ToolError::new("conflict", message, hint)
    }

    /// The result for the model: `error (KIND): MESSAGE` and `what to do: HINT`, with the same in
    /// `structured.error`.
    pub fn into_result(self) -> ToolResult {
        ToolResult {
            text: format!(
                "error ({}): {}\nwhat to do: {}",
                self.kind, self.message, self.hint
            ),
            structured: json!({
                "error": {"kind": self.kind, "message": self.message, "what_to_do": self.hint}
            }),
            is_error: true,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind)
    }
}

impl std::error::Error for ToolError {}

/// The tool error's name for an SDK error kind.
pub fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "not_found",
        ErrorKind::Unauthorized => "unauthorized",
        ErrorKind::Timeout => "timeout",
        ErrorKind::QuotaExceeded => "quota_exceeded",
        ErrorKind::NotSupported => "not_supported",
        ErrorKind::Conflict => "conflict",
        ErrorKind::Validation => "invalid_input",
        ErrorKind::ProviderNotFound => "provider_not_found",
        ErrorKind::AllProvidersFailed => "all_providers_failed",
        ErrorKind::Provider => "provider_error",
        ErrorKind::Transport => "transport_error",
        ErrorKind::Cancelled => "cancelled",
        ErrorKind::NotRunning => "not_running",
        ErrorKind::ContextLost => "context_lost",
        _ => "provider_error",
    }
}

fn hint_for(error: &Error) -> String {
    match error.kind() {
        ErrorKind::NotFound => {
            "check the path or id: list the directory (or the sandboxes) to see what exists, then try again".into()
        }
        ErrorKind::Unauthorized => {
            "the provider refused the credentials; this cannot be fixed from a tool call, so tell the user".into()
        }
        ErrorKind::Timeout => {
            "the operation took too long: try a smaller step, a longer timeout, or start it in the background".into()
        }
        ErrorKind::QuotaExceeded => match error.retry_after() {
            Some(after) => format!(
                "the provider is rate limiting or out of quota: wait {}s and try again once",
                after.as_secs().max(1)
            ),
            None => "the provider is rate limiting or out of quota: wait a little and try again once, or tell the user".into(),
        },
        ErrorKind::NotSupported => {
            "this provider cannot do that: reach the goal another way (for example with a shell command)".into()
        }
        ErrorKind::Conflict => {
            "the sandbox is busy or in the wrong state for this: check its state and try again".into()
        }
        ErrorKind::Validation => "fix the input as the message says and call again".into(),
        ErrorKind::NotRunning => {
            "the sandbox is paused, stopped or gone: connect to it again (which resumes it where the provider can) or create a new one".into()
        }
        ErrorKind::Cancelled => "the call was cancelled; call again if it is still needed".into(),
        _ if error.is_retryable() => "a temporary failure at the provider: try again once".into(),
        _ => "the provider failed: try again once, and tell the user if it fails again".into(),
    }
}

impl From<Error> for ToolError {
    fn from(error: Error) -> Self {
        let hint = hint_for(&error);
        ToolError {
            kind: kind_name(error.kind()),
            message: error.to_string(),
            hint,
        }
    }
}

impl From<ToolError> for ToolResult {
    fn from(error: ToolError) -> Self {
        error.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_kind_and_what_to_do() {
        let r = ToolError::from(Error::new(ErrorKind::NotFound, "no file x")).into_result();
        assert!(r.is_error);
        assert_eq!(r.error_kind(), Some("not_found"));
        assert!(r.text.starts_with("error (not_found): "), "{}", r.text);
        assert!(r.text.contains("what to do: "));
        assert_eq!(r.structured["error"]["kind"], "not_found");
        let mcp = r.to_mcp();
        assert_eq!(mcp["isError"], true);
        assert_eq!(mcp["content"][0]["type"], "text");
        assert_eq!(mcp["structuredContent"]["error"]["kind"], "not_found");
    }
}
