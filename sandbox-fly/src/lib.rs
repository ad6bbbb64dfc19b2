//! # sandbox-fly
//!
//! A [Fly Machines](https://fly.io/docs/machines/) adapter for
//! [`sandbox-sdk-core`](sandbox_sdk_core): each sandbox is one Fly Machine in an app you own.
//!
//! For agent sandboxes consider the `sandbox-sprites` adapter first: Fly's Sprites stream
//! commands over a WebSocket without the Machines exec API's limit of about one call per second
//! per machine (which holds this adapter's streams to roughly 0.3–0.7 MiB/s), keep sessions
//! across a dropped connection, and have a files API. Use Machines for your own image, region
//! control or machine sizes.
//!
//! ```no_run
//! # async fn demo() -> sandbox_sdk_core::Result<()> {
//! use sandbox_fly::FlyBuilder;
//! use sandbox_sdk_core::prelude::*;
//! use sandbox_sdk_core::{Command, CreateSpec};
//!
//! let fly = FlyBuilder::from_env().region("ord").build()?;
//! let sandbox = fly.create(&CreateSpec::new().idempotency_key("job-42")).await?;
//! let out = sandbox.run(&Command::shell("echo hi; echo oops >&2; exit 3")).await?;
//! assert_eq!(out.stdout_lossy(), "hi\n");
//! assert_eq!(out.status.code, Some(3));
//! sandbox.write_file("/work/data.bin", vec![0u8, 1, 2].into()).await?;
//! sandbox.destroy().await?;
//! # Ok(()) }
//! ```
//!
//! What is native and what is emulated (see [`CAPABILITIES`]):
//!
//! - **Lifecycle** is native: create (then wait until `started`, chaining Fly's 60 s `/wait`),
//!   get, list (filtered by the adapter's metadata label, your labels and states), stop,
//!   suspend/resume (memory kept), destroy (forced), update ([`FlySandbox::update`]).
//! - **Exec**: commands with a timeout within [`EXEC_DEADLINE`] use Fly's buffered `/exec`
//!   (output at the end, real exit code). Commands without a timeout, longer ones and background
//!   commands are *emulated*: started detached in the machine, their stdout and stderr written to
//!   files that the adapter polls by offset and streams as events, then the exit code the
//!   wrapping shell recorded. Such processes can be listed, reattached and killed.
//! - **Stdin** is emulated: `/exec` takes it as one string, so it is sent when the writer is shut
//!   down (at most [`STDIN_LIMIT`] bytes).
//! - **Stateful code** is emulated: core's driver runs as a polled process and takes its
//!   requests as mailbox files, since stdin cannot stream (PROTOCOL.md §8.1); Python only.
//! - **Files** are emulated over `/exec` with base64 by the core's
//!   [`sandbox_sdk_core::emulate::files`], in chunks ([`UPLOAD_CHUNK`], [`DOWNLOAD_CHUNK`]) kept
//!   under 1 MiB per exec body, so any size moves in constant memory.
//! - **Leases** ([`FlySandbox::acquire_lease`]) are native; a held nonce is sent on every mutation.
//! - **Preview links** point at `https://{app}.fly.dev` for ports exposed with
//!   [`FlyBuilder::expose_port`], pinned to the machine with `fly-force-instance-id`.
//! - **Idempotent create**: the idempotency key is stored in a metadata label (Fly has no
//!   idempotency header and does not document machine names as unique); a create lists by it
//!   first and adopts the machine it finds if this create made it (its create fingerprint and
//!   labels; anyone else's is a `Conflict`), and a create whose answer was lost keeps listing
//!   for [`FlyBuilder::create_lookup`]'s window before anything is sent again.
//!
//! Rate limits (PROTOCOL.md §3): Fly allows about 1 request per second per action and machine or
//! app (bursts of 3; Get Machine 5/s). Every `/exec` and `/wait` on a machine (commands, file
//! chunks, output polls, state waits) and every machine list of the app (idempotency look-ups,
//! `list`, the reaper) waits its turn in a token bucket per action and machine or app, shared by
//! every operation and every handle of a provider, so bursts stay within Fly's rate. Such a call
//! answered 429 anyway (another client of the same app) is sent again after its `Retry-After`,
//! or the documented rate when there is none, up to 6 times. Any other call answered 429 is
//! `QuotaExceeded` carrying `Retry-After` or the documented rate, and the adapter does not send
//! it again (the client layer's retry policy does).

mod api;
mod builder;
mod capabilities;
mod config;
mod error;
mod exec;
mod files;
mod lifecycle;
mod provider;
mod sandbox;
mod wire;

pub use builder::FlyBuilder;
pub use capabilities::CAPABILITIES;
pub use config::{
    DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_IMAGE, DEFAULT_LAUNCH_WAIT,
    DOWNLOAD_CHUNK, EXEC_DEADLINE, IDEMPOTENCY_LABEL, SANDBOX_LABEL, STDIN_LIMIT, UPLOAD_CHUNK,
};
pub use provider::FlyProvider;
pub use sandbox::FlySandbox;
/// The machine as Fly's own operations on [`FlySandbox`] read and write it.
pub use wire::{
    Autostop, Guest, ImageRef, InitConfig, Lease, Machine, MachineConfig, MachineEvent,
    MachineLeaseInfo, Mount, RestartPolicy, Service, ServicePort, StopConfig, WaitResponse,
};

pub use sandbox_sdk_core;

/// Limits the integration tests check; not part of the supported API.
#[doc(hidden)]
pub mod testing {
    pub use crate::config::{DIRECT_ANSWER_LIMIT, SCRIPT_ANSWER_LIMIT};

    /// Parses `text` as the answers of the adapter's poll and process-list scripts (for the
    /// fuzz targets and proptests of the decoders): `Some` when it is a poll answer, and the
    /// processes it lists.
    pub fn read_script_answers(text: &str) -> (bool, usize) {
        (
            crate::exec::parse_poll(text).is_some(),
            crate::exec::parse_processes(text).len(),
        )
    }
}
