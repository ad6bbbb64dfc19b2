//! # sandbox-daytona
//!
//! The [Daytona](https://www.daytona.io) adapter for `sandbox-sdk-core`: Daytona sandboxes
//! through the SDK's one [`Provider`](sandbox_sdk_core::Provider) /
//! [`Sandbox`](sandbox_sdk_core::Sandbox) API, speaking Daytona's real protocols — the REST
//! control plane, each sandbox's toolbox API, and the log WebSocket.
//!
//! ```no_run
//! # async fn demo() -> sandbox_sdk_core::Result<()> {
//! use sandbox_daytona::DaytonaBuilder;
//! use sandbox_daytona::sandbox_sdk_core::{Command, CreateSpec, Provider, SandboxExt};
//!
//! let provider = DaytonaBuilder::from_env().build()?; // DAYTONA_API_KEY, ...
//! let sandbox = provider.create(&CreateSpec::new().metadata("team", "agents")).await?;
//! let out = sandbox.run(&Command::shell("echo hi; echo oops >&2; exit 3")).await?;
//! assert_eq!(out.stdout_lossy(), "hi\n");
//! assert_eq!(out.stderr_lossy(), "oops\n");
//! assert_eq!(out.status.code, Some(3));
//! sandbox.destroy().await?;
//! # Ok(()) }
//! ```
//!
//! ## How it maps onto Daytona
//!
//! - **Configuration**: [`DaytonaBuilder`] (`from_env()` reads `DAYTONA_API_KEY`,
//!   `DAYTONA_JWT_TOKEN`, `DAYTONA_ORGANIZATION_ID`, `DAYTONA_API_URL`, `DAYTONA_TARGET`,
//!   `DAYTONA_TOOLBOX_URL`). Every API, toolbox and WebSocket request carries
//!   `Authorization`, `X-Daytona-Source: sdk-rust`, `X-Daytona-SDK-Version` (at least
//!   0.167.0, below which the daemon merges stdout and stderr) and a matching `User-Agent`.
//! - **Lifecycle**: create posts the sandbox and polls until `started` (bounded by the start
//!   timeout); `error`/`build_failed` fail with the server's `errorReason`. All 22 states map
//!   onto [`SandboxState`](sandbox_sdk_core::SandboxState). A 409
//!   "Sandbox state change in progress" is waited out — poll until the sandbox rests, then
//!   send again — within the state-change timeout. List streams pages over both the
//!   `{items,nextCursor}` answer and the older bare array. Destroy waits for the 404. With an
//!   idempotency key the sandbox name is the dedupe key ([`idempotency_name`]): a create that
//!   may have happened is looked up by name, never blindly sent again.
//! - **Commands**: each command is a session command. A foreground one is sent synchronously in
//!   a session the sandbox keeps for its next commands; when it ends within the builder's direct
//!   window (1 s) that one answer carries stdout, stderr and the exit code. A longer one keeps
//!   running and is followed live over the log WebSocket (or by polling, also when the upgrade
//!   is refused), its output split by a state machine over the 3-byte stream
//!   markers that survives markers split across frames. Because the daemon's wrapper reads
//!   output line by line (and would add a newline to a last partial line), each command ends by
//!   printing end marks (stdout's with the exit status) that the adapter strips, so output comes
//!   back byte for byte and following ends as soon as both marks arrive. Background commands
//!   keep their session (pid `session/command`, or a tag); `kill_process` deletes the session.
//!   [`DaytonaSandbox::execute`] is the one-shot endpoint (merged output, server-side timeout).
//!   The README's "Behaviour worth knowing" lists every bound.
//! - **Files**: uploads are `bulk-upload` multipart (`files[i].path` before `files[i].file`),
//!   streamed; downloads stream in constant memory; list, stat, mkdir, move, delete,
//!   permissions, find and search are the toolbox's own calls.
//! - **Errors**: one function, `map_error`, reads both body shapes (API and daemon/proxy),
//!   turns `Retry-After-{throttler}` headers into `QuotaExceeded` with the delay, and the
//!   proxy's empty 502 into `Transport` — or `NotRunning` once a look at the sandbox shows it
//!   is not started, whether the 502 answered an HTTP request or a log-stream WebSocket upgrade.
//! - **Previews**: preview links carry `x-daytona-preview-token` and the warning-skip header;
//!   signed URLs expire; a 307 to the login page is `Unauthorized`.
//! - **SSH**: access tokens are cached once per sandbox for the whole process (minting revokes
//!   the previous token) and renewed before they expire. [`DaytonaSandbox::ssh_exec`] — or
//!   [`ExecTransport::Ssh`] for every foreground command — runs a command over an SSH session
//!   channel through Daytona's gateway (russh; auth method `none`, the token as user): stdout,
//!   stderr and exit status apart, stdin, pty and resize. A dropped connection is reported, after
//!   a look at the sandbox, as `NotRunning` or an invalid/expired token. The gateway's host key
//!   is verified by default: pinned with [`DaytonaBuilder::ssh_host_key`], or refused before the
//!   token is sent unless the caller opts into
//!   [`DaytonaBuilder::ssh_trust_host_key_on_first_use`].
//! - **Snapshots and limits**: [`DaytonaProvider::prepare`] makes a snapshot idempotently by a
//!   content hash in its name; [`DaytonaProvider::limits`] reads the organization's
//!   per-sandbox limits.
//!
//! What the adapter does not offer is `Unsupported` in [`CAPABILITIES`] and fails fast with
//! `NotSupported`: with the toolbox transport per-byte streaming (output is live per line), stdin
//! (session input has no end of file) and pty — all three native over SSH
//! ([`capabilities_for`]) — and file watching, code interpreter, secrets.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod provider;
mod sandbox;

mod exec;
mod files;
mod lifecycle;

mod api;

mod capabilities;
mod code;
mod config;
mod error;
mod wire;

/// Test support: not part of the API, may change without notice.
#[doc(hidden)]
pub mod testing {
    pub use crate::exec::logs::Split;

    /// Reads `data`, cut into `chunk`-byte pieces, as a command's log both ways it arrives
    /// (marker-framed WebSocket frames, and a polled logs body, JSON when `json`): the stdout
    /// and stderr bytes each way passed on, or the polled body's error (for the fuzz targets
    /// and proptests of the decoders).
    pub fn read_command_log(
        data: &[u8],
        chunk: usize,
        json: bool,
    ) -> (Split, sandbox_sdk_core::Result<Split>) {
        crate::exec::logs::read_command_log(data, chunk, json)
    }
}

pub use sandbox_sdk_core;

pub use builder::DaytonaBuilder;
pub use capabilities::{CAPABILITIES, FLAGS, capabilities_for};
pub use config::{
    DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_DIRECT_WINDOW, DEFAULT_PING_ANSWER,
    DEFAULT_PING_EVERY, DEFAULT_SDK_VERSION, DEFAULT_STREAM_IDLE_TIMEOUT, ExecTransport,
    IDEMPOTENCY_LABEL, LogFollow, MIN_SDK_VERSION,
};
pub use files::{DaytonaFileInfo, FileMatch};
pub use lifecycle::create::{DaytonaCreate, idempotency_name};
pub use lifecycle::snapshots::{SnapshotSize, snapshot_name};
pub use lifecycle::usage::{SandboxLimits, UsagePeriod};
pub use provider::DaytonaProvider;
pub use sandbox::{DaytonaSandbox, ExecuteResult, Session, SessionCommand, SessionExec};
pub use wire::VolumeMount;
