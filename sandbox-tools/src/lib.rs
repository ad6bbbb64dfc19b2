//! # sandbox-tools
//!
//! Agent tools over any sandbox provider of [`sandbox_sdk_core`]: one [`ToolSet`] built from an
//! `Arc<dyn Provider>` and/or an `Arc<dyn Sandbox>`, offering each tool only where the
//! provider's capability map allows it (`Native` or `Emulated`; `Unsupported` leaves it out).
//!
//! | tool | needs | annotations |
//! | --- | --- | --- |
//! | `sandbox_create_v1`, `sandbox_connect_v1`, `sandbox_destroy_v1` | a provider | create: idempotent by key; destroy: destructive |
//! | `sandbox_list_v1` | a provider, `list` | read-only |
//! | `sandbox_run_v1` | — | destructive |
//! | `sandbox_run_code_v1` (a stateful interpreter; images come back in [`ToolResult::images`]) | `code_interpreter` | destructive |
//! | `sandbox_process_start_v1`, `sandbox_process_output_v1` | `background` | start: destructive; output: read-only |
//! | `sandbox_process_kill_v1` | `kill_process` | destructive |
//! | `sandbox_file_{read,list,stat}_v1` | `files_upload` | read-only |
//! | `sandbox_file_{write,mkdir,move,remove}_v1`, `sandbox_editor_v1`, `sandbox_apply_patch_v1` | `files_upload` | mkdir additive; the rest destructive |
//! | `sandbox_preview_link_v1` | `expose_port` | read-only |
//! | `bash`, `str_replace_based_edit_tool` (Anthropic shapes) | editor: `files_upload` | destructive |
//! | `shell`, `apply_patch` (OpenAI shapes) | patch: `files_upload` | destructive |
//!
//! Every tool has a stable name (the `sandbox_*` ones versioned), a description written for a
//! model, a JSON Schema of its input (from `schemars`), and [`Annotations`]. Calling one takes a
//! JSON value and returns a [`ToolResult`]: text for the model, images ([`ToolImage`]),
//! structured JSON, and an error flag, in MCP's, Anthropic's or OpenAI's result shape
//! ([`ToolResult::to_mcp`], [`ToolResult::to_anthropic`], [`ToolResult::to_openai`]). Failures (bad input, provider errors, timeouts, even a panic) come back as error results
//! naming the error kind and what to do next, so an MCP server or agent loop can serve the tools
//! generically: list [`ToolSet::specs`] ([`ToolSpec::to_mcp`]) and route calls to
//! [`ToolSet::call`].
//!
//! ## Safety by default
//!
//! - Output is capped ([`ToolConfig::max_output_bytes`] per stream), keeping the head and the
//!   tail and stating what was cut.
//! - Known credentials never appear in output: the host's credential variables (and any secret
//!   added to [`ToolConfig::redactor`]) are replaced by `[REDACTED]` in every text and JSON
//!   string, and preview-link tokens are withheld.
//! - Destructive tools are annotated so; [`ToolConfig::read_only`] offers only read-only tools.
//! - Paths are checked and normalised ([`PathPolicy`]); the sandbox itself is the boundary.
//! - Every call has a timeout; commands have their own, bounded by the configuration.
//! - The lifecycle tools touch only sandboxes this tool set created (an owner label) unless
//!   [`ToolConfig::only_ours`] is turned off.
//!
//! ```no_run
//! use sandbox_sdk_core::local::LocalProvider;
//! use sandbox_tools::ToolSet;
//! use std::sync::Arc;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let tools = ToolSet::for_provider(Arc::new(LocalProvider::new()))?;
//! for spec in tools.specs() {
//!     println!("{}: {}", spec.name, spec.title);
//! }
//! let created = tools
//!     .call("sandbox_create_v1", serde_json::json!({"idempotency_key": "demo"}))
//!     .await;
//! let ran = tools
//!     .call("sandbox_run_v1", serde_json::json!({"command": "echo hello"}))
//!     .await;
//! assert!(!ran.is_error, "{}", ran.text);
//! # let _ = created; Ok(()) }
//! ```

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod config;
pub mod editor;
pub mod patch;
mod path;
pub mod redact;
mod result;
mod session;
mod set;
mod tool;
mod tools;
mod trailer;
pub mod truncate;

pub use config::{OWNER_LABEL, ToolConfig};
pub use path::PathPolicy;
pub use redact::Redactor;
pub use result::{ToolError, ToolImage, ToolResult, kind_name};
pub use set::{ToolInfo, ToolSet, ToolSetBuilder, catalogue_info};
pub use tool::{Annotations, Family, Tool, ToolSpec, schema_for};
