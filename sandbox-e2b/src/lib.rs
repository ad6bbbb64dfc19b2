//! # sandbox-e2b
//!
//! The [E2B](https://e2b.dev) adapter for [`sandbox_sdk_core`]: create, connect to, list and drive
//! E2B sandboxes from Rust through the core [`Provider`](sandbox_sdk_core::Provider) and
//! [`Sandbox`](sandbox_sdk_core::Sandbox) traits, plus E2B-specific inherent methods on
//! [`E2bProvider`] and [`E2bSandbox`].
//!
//! It speaks E2B's real protocols: the REST control plane (`X-API-Key`), and envd inside each
//! sandbox — Connect-RPC (JSON) for processes and filesystem metadata, with an explicit frame
//! decoder for server streams, and the `/files` endpoint for bytes. `PROTOCOL.md` beside this
//! crate's `Cargo.toml` holds the wire facts the code relies on.
//!
//! Build a provider with [`E2bProvider::builder()`] or [`E2bBuilder::from_env()`] (or
//! [`E2bBuilder::from_lookup`] to read the variables from elsewhere). Environment:
//! `E2B_API_KEY` (required), `E2B_DOMAIN`, `E2B_API_URL`, `E2B_SANDBOX_URL`; see
//! [`E2bBuilder`]. The core crate is re-exported as [`sandbox_sdk_core`], so this crate alone
//! is enough as a dependency.
//!
//! ```no_run
//! use sandbox_e2b::E2bBuilder;
//! use sandbox_e2b::sandbox_sdk_core::prelude::*;
//! use sandbox_e2b::sandbox_sdk_core::{Command, CreateSpec};
//! use std::time::Duration;
//!
//! # async fn demo() -> sandbox_e2b::sandbox_sdk_core::Result<()> {
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

// Imports point one way, from each rank to the ranks after it: builder; provider, sandbox;
// lifecycle, exec, files (the operations); api (the only code that speaks HTTP); config, wire,
// error, capabilities.
mod api;
mod builder;
mod capabilities;
mod code;
mod config;
mod error;
mod exec;
mod files;
mod lifecycle;
mod provider;
mod sandbox;
mod wire;

pub use sandbox_sdk_core;

pub use builder::E2bBuilder;
pub use capabilities::CAPABILITIES;
pub use config::{
    DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_DOMAIN, DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TEMPLATE,
    DEFAULT_TRANSFER_IDLE_TIMEOUT, IDEMPOTENCY_LABEL, KEEPALIVE_SECS, NAME_METADATA_KEY, PROVIDER,
    PauseMode, env,
};
pub use exec::{SHELL, TIMEOUT_GRACE};
pub use lifecycle::templates::TemplateSpec;
pub use lifecycle::{CreateOptions, ListQuery, LogQuery};
pub use provider::E2bProvider;
pub use sandbox::{E2bSandbox, ForkOutcome};
pub use wire::{LogEntry, NetworkConfig, NetworkUpdate, TemplateStep, Volume, VolumeMount};

/// Internals the crate's own integration tests check against (envd addressing, signatures,
/// header mapping). Not part of the API: it may change in any release.
#[doc(hidden)]
pub mod testing {
    pub use crate::api::envd::envd_base_url;
    pub use crate::config::ENVD_PORT;
    pub use crate::files::file_signature;
    pub use crate::lifecycle::idempotency_header_value;

    /// Reads `data`, cut into `chunk`-byte pieces, as a process's Connect output stream and
    /// returns what `exec` would yield (for the fuzz targets and proptests of the decoders).
    pub async fn read_process_stream(
        data: &[u8],
        chunk: usize,
    ) -> Vec<sandbox_sdk_core::Result<sandbox_sdk_core::ProcessEvent>> {
        crate::exec::read_process_stream(data, chunk).await
    }
}
