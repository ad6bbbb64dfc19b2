//! `sbox mcp`: the tool set of `sandbox-tools` served over MCP on stdio with `rmcp`, as a
//! tools-only server. `tools/list` answers from [`ToolSet::specs`], `tools/call` from
//! [`ToolSet::call`]; a failed call (bad input, unknown tool, provider error, timeout) is a tool
//! result with `isError`, never a protocol error, so the model reads what went wrong.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use sandbox_tools::{ToolResult, ToolSet};
use serde_json::Value;
use std::sync::Arc;

/// The MCP server: a tool set and its listing, built once.
#[derive(Clone)]
pub struct ToolServer {
    tools: ToolSet,
    listed: Arc<Vec<Tool>>,
    instructions: String,
}

impl ToolServer {
    /// A server for `tools`. Fails only if a spec does not map onto MCP's tool shape.
    pub fn new(tools: ToolSet, instructions: String) -> Result<Self, String> {
        let listed = tools
            .specs()
            .into_iter()
            .map(|spec| {
                serde_json::from_value::<Tool>(spec.to_mcp())
                    .map_err(|e| format!("tool {} does not fit MCP: {e}", spec.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ToolServer {
            tools,
            listed: Arc::new(listed),
            instructions,
        })
    }

    /// Serves on this process's stdin and stdout until the client closes them.
    pub async fn serve_stdio(self) -> Result<(), String> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| format!("MCP initialisation failed: {e}"))?;
        running
            .waiting()
            .await
            .map_err(|e| format!("MCP server stopped: {e}"))?;
        Ok(())
    }
}

/// A tool result in MCP's shape: one text block, the structured form when it is an object, and
/// `isError`.
pub fn to_call_result(result: &ToolResult) -> CallToolResult {
    let content = vec![ContentBlock::text(result.text.clone())];
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
            .with_instructions(self.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.listed.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let result = self.tools.call(&request.name, input).await;
        Ok(CallToolResponse::Complete(to_call_result(&result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        };
        let wire = serde_json::to_value(to_call_result(&failed)).unwrap();
        assert_eq!(wire["isError"], true);
        assert!(wire.get("structuredContent").is_none());
    }
}
