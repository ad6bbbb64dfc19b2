//! The preview-link tool: a URL that reaches a port inside the sandbox.

use super::{Def, call_timeout, make, ok};
use crate::redact::REDACTED;
use crate::result::{ToolError, ToolResult};
use crate::session::Session;
use crate::tool::{Annotations, Family};
use sandbox_sdk_core::Capability;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

pub(super) fn defs() -> Vec<Def> {
    vec![Def {
        name: "sandbox_preview_link_v1",
        title: "Preview link for a port",
        description: "Get a URL that reaches a port inside the sandbox from outside, for example to show the user a web server started with sandbox_process_start_v1. Start the server first, listening on 0.0.0.0 and that port. A private link also needs request headers; their values are withheld from this output.",
        annotations: Annotations {
            open_world: true,
            ..Annotations::READ_ONLY
        },
        family: Family::Standard,
        requires: &[Capability::ExposePort],
        needs_provider: false,
        native: None,
        build: |def, s| make::<PreviewInput>(def, s, |s, i| Box::pin(preview(s, i)), call_timeout),
    }]
}

/// Input of `sandbox_preview_link_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PreviewInput {
    /// The port inside the sandbox, 1 to 65535.
    #[schemars(range(min = 1))]
    port: u16,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

async fn preview(s: Arc<Session>, input: PreviewInput) -> Result<ToolResult, ToolError> {
    if input.port == 0 {
        return Err(ToolError::invalid_input(
            "port 0 is not a port",
            "pass the port the server listens on",
        ));
    }
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let link = sandbox.preview_link(input.port).await?;
    let reveal = s.config.reveal_preview_tokens;
    let hide = |text: &str| -> String {
        let mut out = text.to_owned();
        if !reveal {
            if let Some(token) = link.token.as_deref().filter(|t| !t.is_empty()) {
                out = out.replace(token, REDACTED);
            }
            for value in link.headers.values().filter(|v| v.len() >= 8) {
                out = out.replace(value.as_str(), REDACTED);
            }
        }
        out
    };
    let url = hide(&link.url);
    let headers: BTreeMap<String, String> = link
        .headers
        .iter()
        .map(|(k, v)| {
            let v = if reveal {
                v.clone()
            } else {
                REDACTED.to_owned()
            };
            (k.clone(), v)
        })
        .collect();
    let private = link.token.is_some() || !link.headers.is_empty();
    let expires = link
        .expires_at
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    let mut text = format!("port {} is reachable at {url}", link.port);
    if private {
        let names: Vec<&str> = link.headers.keys().map(String::as_str).collect();
        text.push_str(&format!(
            "\nthe link is private: requests need the header(s) {}{}",
            names.join(", "),
            if reveal {
                ""
            } else {
                " (values withheld; the application holding the credentials must add them)"
            }
        ));
    }
    Ok(ok(
        text,
        json!({
            "url": url,
            "port": link.port,
            "private": private,
            "headers": headers,
            "expires_at_unix": expires,
        }),
    ))
}
