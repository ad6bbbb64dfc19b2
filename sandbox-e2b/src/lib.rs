//! # sandbox-e2b
//!
//! The [E2B](https://e2b.dev) adapter for [`sandbox_sdk_core`]: create, connect to, list and drive
//! E2B sandboxes from Rust through the core [`Provider`](sandbox_sdk_core::Provider) and
//! [`Sandbox`](sandbox_sdk_core::Sandbox) traits, plus E2B-specific inherent methods on
//! [`E2bProvider`] and [`E2bSandbox`].
//!
//! It speaks E2B's real protocols: the REST control plane (`X-API-Key`), and envd inside each
//! sandbox — Connect-RPC (JSON) for processes and filesystem metadata, with an explicit frame
//! decoder ([`connect::FrameDecoder`]) for server streams, and the `/files` endpoint for bytes.
//!
//! Environment: `E2B_API_KEY` (required), `E2B_DOMAIN`, `E2B_API_URL`, `E2B_SANDBOX_URL`; see
//! [`E2bBuilder`].
//!
//! ```no_run
//! use sandbox_e2b::E2bBuilder;
//! use sandbox_sdk_core::prelude::*;
//! use sandbox_sdk_core::{Command, CreateSpec};
//! use std::time::Duration;
//!
//! # async fn demo() -> sandbox_sdk_core::Result<()> {
//! let provider = E2bBuilder::from_env().build()?;
//! let sandbox = provider
//!     .create(&CreateSpec::new().timeout(Duration::from_secs(300)))
//!     .await?;
//! let out = sandbox
//!     .run(&Command::new("bash").arg("-c").arg("echo hi; echo oops >&2; exit 3"))
//!     .await?;
//! assert_eq!(out.stdout_lossy(), "hi\n");
//! assert_eq!(out.stderr_lossy(), "oops\n");
//! assert_eq!(out.status.code, Some(3));
//! sandbox.destroy().await?;
//! # Ok(()) }
//! ```
//!
//! Notes on behaviour:
//! - A command's [`timeout`](sandbox_sdk_core::Command::timeout) is sent as `Connect-Timeout-Ms`,
//!   which envd also applies to the process's lifetime; `Duration::ZERO` (the default) sends no
//!   header and means no limit. There is no hidden default. The client enforces it too, with
//!   [`TIMEOUT_GRACE`] to spare.
//! - Opening a stream (exec, attach, watch) is bounded by the request timeout (a command's
//!   own `request_timeout` first, for exec): its response head and `start` event must arrive
//!   within it, else a `Timeout` error naming the operation. An open stream has no total limit
//!   but ends with a `Transport` error after [`DEFAULT_STREAM_IDLE_TIMEOUT`] without a byte
//!   (envd sends a keepalive every [`KEEPALIVE_SECS`] s of quiet); `/files` transfers likewise
//!   after [`DEFAULT_TRANSFER_IDLE_TIMEOUT`] (both configurable on [`E2bBuilder`]).
//! - All envd traffic goes over HTTP/1.1 (E2B's proxy pads HTTP/2 responses with empty DATA
//!   frames, which `h2` refuses after 100).
//! - [`Command::shell`](sandbox_sdk_core::Command::shell) lines run as [`SHELL`] (`/bin/bash -l
//!   -c`), like the official SDKs run them.
//! - Dropping a [`Process`](sandbox_sdk_core::Process) closes its stream and leaves no task
//!   behind; the process itself keeps running in the sandbox and can be reattached by pid or tag.
//! - Killing a process is a unary `SendSignal` call, independent of its output stream.
//! - No compression is requested unless the caller asks with `E2bBuilder::gzip(true)` (crate
//!   feature `gzip`; it then asks for and decodes gzip on REST, unary envd and `/files`
//!   responses); Connect streams are never compressed, as no
//!   `Connect-Accept-Encoding` is sent.

mod builder;
mod capabilities;
pub mod connect;
mod envd;
pub mod error;
mod files;
mod process;
mod provider;
mod sandbox;
mod templates;
pub mod wire;

/// The provider's name.
pub const PROVIDER: &str = "e2b";

pub use builder::{
    DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_DOMAIN, E2bBuilder, ENVD_PORT, SHARED_HOST_DOMAINS, env,
};
pub use capabilities::CAPABILITIES;
pub use envd::{
    DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TRANSFER_IDLE_TIMEOUT, KEEPALIVE_SECS, LIST_DIR_MAX_BODY,
    PROCESS_LIST_MAX_BODY, UNARY_MAX_BODY, envd_base_url, port_host,
};
pub use files::file_signature;
pub use process::{SHELL, TIMEOUT_GRACE, exit_status, start_request};
pub use provider::{
    CreateOptions, DEFAULT_TEMPLATE, E2bProvider, IDEMPOTENCY_HEADER, IDEMPOTENCY_METADATA_KEY,
    ListQuery, NAME_METADATA_KEY, ONE_OBJECT_MAX_BODY, idempotency_header_value, map_state,
};
pub use sandbox::{E2bSandbox, ForkOutcome, LogQuery, PauseMode};
pub use templates::{TemplateSpec, template_spec};
