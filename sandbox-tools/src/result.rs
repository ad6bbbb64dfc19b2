//! What a tool call returns: text for the model, images for it to see, structured JSON for
//! programs, and an error flag. Failures are results too ([`ToolError`] → [`ToolResult`] with
//! `is_error`), never panics or protocol failures, so an MCP server or agent loop can hand them
//! straight back to the model: as MCP's `tools/call` result ([`ToolResult::to_mcp`]), as an
//! Anthropic `tool_result` block ([`ToolResult::to_anthropic`]) or as an OpenAI
//! `function_call_output` item ([`ToolResult::to_openai`]).

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
    /// Images for the model to see, after the text (for example the plots a code cell
    /// displayed). Empty for every tool but `sandbox_run_code_v1`. They are not in
    /// `structured`, which says only what they were.
    pub images: Vec<ToolImage>,
}

/// An image in a tool result: its MIME type and its bytes in base64, as the MCP, Anthropic and
/// OpenAI shapes carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolImage {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: String,
    /// The image's bytes, base64 (standard alphabet, padded, no line breaks).
    pub data: String,
}

impl ToolImage {
    /// The image as a `data:` URL (`data:image/png;base64,...`).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime_type, self.data)
    }
}

impl ToolResult {
    /// A successful result.
    pub fn ok(text: impl Into<String>, structured: Value) -> Self {
        ToolResult {
            text: text.into(),
            structured,
            is_error: false,
            images: Vec::new(),
        }
    }

    /// The result with `images` after its text.
    pub fn with_images(mut self, images: Vec<ToolImage>) -> Self {
        self.images = images;
        self
    }

    /// The result as MCP's `tools/call` answers: `content` (one text item, then one image item
    /// `{"type": "image", "data", "mimeType"}` per image), `structuredContent` (when the
    /// structured form is an object) and `isError`.
    pub fn to_mcp(&self) -> Value {
        let mut content = vec![json!({"type": "text", "text": self.text})];
        content.extend(
            self.images
                .iter()
                .map(|i| json!({"type": "image", "data": i.data, "mimeType": i.mime_type})),
        );
        let mut out = json!({
            "content": content,
            "isError": self.is_error,
        });
        if self.structured.is_object() {
            out["structuredContent"] = self.structured.clone();
        }
        out
    }

    /// The result as a `tool_result` block of Anthropic's Messages API, answering the
    /// `tool_use` block `tool_use_id`: `content` is a text block and then one image block
    /// (`{"type": "image", "source": {"type": "base64", "media_type", "data"}}`) per image.
    pub fn to_anthropic(&self, tool_use_id: &str) -> Value {
        let mut content = vec![json!({"type": "text", "text": self.text})];
        content.extend(self.images.iter().map(|i| {
            json!({
                "type": "image",
                "source": {"type": "base64", "media_type": i.mime_type, "data": i.data},
            })
        }));
        json!({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": self.is_error,
        })
    }

    /// The result as a `function_call_output` item of OpenAI's Responses API, answering the
    /// function call `call_id`: `output` is the text, or, when there are images, a list of an
    /// `input_text` item and one `input_image` item (a `data:` URL) per image. The Responses
    /// API has no error flag: a failure is said in the text (`error (KIND): ...`).
    pub fn to_openai(&self, call_id: &str) -> Value {
        let output = if self.images.is_empty() {
            json!(self.text)
        } else {
            let mut items = vec![json!({"type": "input_text", "text": self.text})];
            items.extend(
                self.images
                    .iter()
                    .map(|i| json!({"type": "input_image", "image_url": i.data_url()})),
            );
            Value::Array(items)
        };
        json!({"type": "function_call_output", "call_id": call_id, "output": output})
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
            images: Vec::new(),
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
        ErrorKind::ContextLost => {
            "the code context's kernel is gone and so is its state: call again with the same context and restart: true to start it afresh, or with context: \"new\"".into()
        }
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
        let anthropic = r.to_anthropic("toolu_1");
        assert_eq!(anthropic["is_error"], true);
        assert_eq!(anthropic["content"][0]["text"], r.text.as_str());
        let openai = r.to_openai("call_1");
        assert_eq!(openai["output"], r.text.as_str());
    }

    #[test]
    fn images_follow_the_text_in_each_vendors_shape() {
        let image = ToolImage {
            mime_type: "image/png".into(),
            data: "iVBORw0K".into(),
        };
        let r = ToolResult::ok("a plot", json!({"n": 1})).with_images(vec![image]);
        let mcp = r.to_mcp();
        assert_eq!(mcp["content"][0], json!({"type": "text", "text": "a plot"}));
        assert_eq!(
            mcp["content"][1],
            json!({"type": "image", "data": "iVBORw0K", "mimeType": "image/png"})
        );
        let anthropic = r.to_anthropic("toolu_1");
        assert_eq!(anthropic["type"], "tool_result");
        assert_eq!(anthropic["tool_use_id"], "toolu_1");
        assert_eq!(
            anthropic["content"][1],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}})
        );
        let openai = r.to_openai("call_1");
        assert_eq!(openai["type"], "function_call_output");
        assert_eq!(openai["call_id"], "call_1");
        assert_eq!(
            openai["output"],
            json!([
                {"type": "input_text", "text": "a plot"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K"},
            ])
        );
    }
}
