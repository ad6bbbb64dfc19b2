//! # sandbox-fly
//!
//! A [Fly Machines](https://fly.io/docs/machines/) adapter for
//! [`sandbox-sdk-core`](sandbox_sdk_core): each sandbox is one Fly Machine in an app you own.
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
//! - **Files** are emulated over `/exec` with base64, in chunks ([`UPLOAD_CHUNK`],
//!   [`DOWNLOAD_CHUNK`]) kept under [`MAX_EXEC_BODY`], so any size moves in constant memory.
//! - **Leases** ([`FlySandbox::acquire_lease`]) are native; a held nonce is sent on every mutation.
//! - **Preview links** point at `https://{app}.fly.dev` for ports exposed with
//!   [`FlyBuilder::expose_port`], pinned to the machine with `fly-force-instance-id`.
//! - **Idempotent create**: the idempotency key is stored in a metadata label (Fly has no
//!   idempotency header and does not document machine names as unique); a create lists by it
//!   first and adopts the machine it finds, and a create whose answer was lost keeps listing
//!   for [`FlyBuilder::create_lookup`]'s window before anything is sent again.
//!
//! Rate limits: Fly allows about 1 request per second per action and machine (bursts of 3; Get
//! Machine 5/s). Every `/exec` on a machine (commands, file chunks, output polls) waits its turn
//! in one token bucket per machine, shared by every operation and every handle of a provider, so
//! back-to-back transfers and commands stay within Fly's exec rate. A call answered 429 anyway
//! (another client on the same machine) is sent again after its `Retry-After`, or the
//! documented rate when there is none, up to [`RATE_LIMIT_ATTEMPTS`] times. Any other call
//! answered 429 is `QuotaExceeded` carrying `Retry-After` or the documented rate, and the
//! adapter does not send it again (the client layer's retry policy does).

mod api;
mod builder;
mod capabilities;
mod error;
mod exec;
mod files;
mod pace;
mod provider;
mod sandbox;
pub mod scripts;
mod state;
pub mod wire;

pub use api::{LEASE_NONCE_HEADER, MAX_RATE_LIMIT_WAIT, MAX_WAIT, RATE_LIMIT_ATTEMPTS};
pub use builder::{
    DEFAULT_BASE_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_IMAGE, DEFAULT_LAUNCH_WAIT,
    EXEC_DEADLINE, FlyBuilder,
};
pub use capabilities::CAPABILITIES;
pub use error::{PROVIDER, REQUEST_ID_HEADER, documented_retry_after};
pub use exec::{
    DIRECT_ANSWER_LIMIT, LISTING_ANSWER_LIMIT, POLL_CHUNK, SCRIPT_ANSWER_LIMIT, STDIN_LIMIT,
};
pub use files::{DOWNLOAD_CHUNK, MAX_EXEC_BODY, UPLOAD_CHUNK};
pub use provider::{FlyProvider, IDEMPOTENCY_LABEL, SANDBOX_LABEL, user_metadata};
pub use sandbox::{FORCE_INSTANCE_HEADER, FlySandbox};
pub use state::{fly_states, map_state};
