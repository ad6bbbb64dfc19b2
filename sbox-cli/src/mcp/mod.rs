//! `sbox mcp`: the tool set of `sandbox-tools` served over MCP with `rmcp`, as a tools-only
//! server, on stdio or over streamable HTTP ([`http`]). `tools/list` answers from
//! [`ToolSet::specs`], `tools/call` from [`ToolSet::call`]; a failed call (bad input, unknown
//! tool, provider error, timeout) is a tool result with `isError`, never a protocol error, so
//! the model reads what went wrong.
//!
//! **Tool state per MCP session.** The tools keep state between calls: the current sandbox,
//! background processes, the sandboxes reached so far. Each MCP session gets its own tool set:
//! the stdio connection is one session, and over HTTP each client that initializes gets one
//! (keyed by its `Mcp-Session-Id`), so two clients never move each other's current sandbox. A
//! client speaking the session-less protocol (2026-07-28, no `initialize`) cannot be told
//! apart from another, so all such requests share one tool set of their own.

pub mod http;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use sandbox_tools::{ToolResult, ToolSet};
use serde_json::Value;
use std::sync::{Arc, Mutex, MutexGuard};

/// How a tool set is made: for one MCP session ([`Clients::Session`]), or for every HTTP
/// request that names no session ([`Clients::Sessionless`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clients {
    /// One client: calls without `sandbox_id` go to its current sandbox.
    Session,
    /// Clients that cannot be told apart: a call names its sandbox
    /// (`ToolConfig::implicit_sandbox` off), so one client's create never moves another's calls.
    Sessionless,
}

/// Builds a tool set (the same provider, sandbox and settings each time) for `Clients`.
pub type MakeTools = Box<dyn Fn(Clients) -> Result<ToolSet, sandbox_sdk_core::Error> + Send + Sync>;

/// What every session of one server shares: how to make a tool set, the listing, the
/// instructions, and the tool set of session-less HTTP requests.
struct Shared {
    make: MakeTools,
    listed: Vec<Tool>,
    instructions: String,
    sessionless: Slot,
}

/// A tool set made on first use.
#[derive(Default)]
struct Slot(Mutex<Option<ToolSet>>);

impl Slot {
    fn get(&self, make: &MakeTools, clients: Clients) -> Result<ToolSet, sandbox_sdk_core::Error> {
        let mut slot = lock(&self.0);
        if let Some(tools) = &*slot {
            return Ok(tools.clone());
        }
        let tools = make(clients)?;
        *slot = Some(tools.clone());
        Ok(tools)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The MCP server of one session. Cheap to make: its tool set is built at its first call.
pub struct ToolServer {
    shared: Arc<Shared>,
    own: Slot,
}

impl ToolServer {
    /// A server whose sessions each get a tool set from `make`. Builds one set up front, to
    /// fail early and to list the tools; fails if `make` does or a spec does not map onto
    /// MCP's tool shape.
    pub fn new(make: MakeTools, instructions: String) -> Result<Self, String> {
        let first = make(Clients::Session).map_err(|e| e.to_string())?;
        let listed = first
            .specs()
            .into_iter()
            .map(|spec| {
                serde_json::from_value::<Tool>(spec.to_mcp())
                    .map_err(|e| format!("tool {} does not fit MCP: {e}", spec.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let own = Slot(Mutex::new(Some(first)));
        let shared = Arc::new(Shared {
            make,
            listed,
            instructions,
            sessionless: Slot::default(),
        });
        Ok(ToolServer { shared, own })
    }

    /// A server for another session: the same tools, fresh state.
    pub fn for_new_session(&self) -> ToolServer {
        ToolServer {
            shared: self.shared.clone(),
            own: Slot::default(),
        }
    }

    /// Serves on this process's stdin and stdout until the client closes them.
    pub async fn serve_stdio(self) -> Result<(), String> {
        let running = self
            // A client that closed our stdout is gone: end quietly (see `crate::out`).
            .serve((tokio::io::stdin(), crate::out::Closing(tokio::io::stdout())))
            .await
            .map_err(|e| format!("MCP initialisation failed: {e}"))?;
        running
            .waiting()
            .await
            .map_err(|e| format!("MCP server stopped: {e}"))?;
        Ok(())
    }

    /// The tool set a request goes to: the session-less one for an HTTP request that names no
    /// session, else this session's own.
    fn tools(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ToolSet, sandbox_sdk_core::Error> {
        let sessionless = context
            .extensions
            .get::<::http::request::Parts>()
            .is_some_and(|parts| !parts.headers.contains_key("mcp-session-id"));
        if sessionless {
            self.shared
                .sessionless
                .get(&self.shared.make, Clients::Sessionless)
        } else {
            self.own.get(&self.shared.make, Clients::Session)
        }
    }
}

/// A tool result in MCP's shape: one text block, then one image block per image (the plots a
/// code cell displayed: `{"type": "image", "data": base64, "mimeType"}`), the structured form
/// when it is an object, and `isError`.
pub fn to_call_result(result: &ToolResult) -> CallToolResult {
    let mut content = vec![ContentBlock::text(result.text.clone())];
    content.extend(
        result
            .images
            .iter()
            .map(|image| ContentBlock::image(image.data.clone(), image.mime_type.clone())),
    );
    let mut out = if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    if result.structured.is_object() {
        out.structured_content = Some(result.structured.clone());
    }
    out
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.shared.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.shared.listed.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.tools(&context) {
            Ok(tools) => tools.call(&request.name, input).await,
            Err(e) => sandbox_tools::ToolError::from(e).into_result(),
        };
        Ok(CallToolResponse::Complete(to_call_result(&result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_tools::ToolImage;
    use serde_json::json;

    #[test]
    fn results_keep_text_structure_and_error_flag() {
        let ok = to_call_result(&ToolResult::ok("fine", json!({"a": 1})));
        let wire = serde_json::to_value(&ok).unwrap();
        assert_eq!(wire["content"][0]["text"], "fine");
        assert_eq!(wire["structuredContent"]["a"], 1);
        assert_eq!(wire["isError"], false);

        let failed = ToolResult {
            text: "error (not_found): nope".into(),
            structured: json!("not an object"),
            is_error: true,
            images: Vec::new(),
        };
        let wire = serde_json::to_value(to_call_result(&failed)).unwrap();
        assert_eq!(wire["isError"], true);
        assert!(wire.get("structuredContent").is_none());
    }

    #[test]
    fn images_are_image_blocks_after_the_text() {
        let result = ToolResult::ok("a plot", json!({})).with_images(vec![ToolImage {
            mime_type: "image/png".into(),
            data: "iVBORw0K".into(),
        }]);
        let wire = serde_json::to_value(to_call_result(&result)).unwrap();
        assert_eq!(
            wire["content"][0],
            json!({"type": "text", "text": "a plot"})
        );
        assert_eq!(
            wire["content"][1],
            json!({"type": "image", "data": "iVBORw0K", "mimeType": "image/png"})
        );
        // The same shape the tool set's own MCP form has.
        assert_eq!(wire["content"], result.to_mcp()["content"]);
    }
}
