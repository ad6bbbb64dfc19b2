//! # sandbox-vercel
//!
//! A [Vercel Sandbox](https://vercel.com/docs/vercel-sandbox) adapter for
//! [`sandbox-sdk-core`](sandbox_sdk_core): each sandbox is one of Vercel's *named sandboxes*
//! in a project you own, addressed by its name.
//!
//! ```no_run
//! # async fn demo() -> sandbox_sdk_core::Result<()> {
//! use sandbox_vercel::VercelBuilder;
//! use sandbox_sdk_core::prelude::*;
//! use sandbox_sdk_core::{Command, CreateSpec};
//!
//! let vercel = VercelBuilder::from_env().expose_port(3000).build()?;
//! let sandbox = vercel.create(&CreateSpec::new().idempotency_key("job-42")).await?;
//! let out = sandbox.run(&Command::shell("echo hi; echo oops >&2; exit 3")).await?;
//! assert_eq!(out.stdout_lossy(), "hi\n");
//! assert_eq!(out.status.code, Some(3));
//! sandbox.write_file("data.bin", vec![0u8, 1, 2].into()).await?;
//! sandbox.destroy().await?;
//! # Ok(()) }
//! ```
//!
//! What is native and what is not (see [`CAPABILITIES`] and the crate README):
//!
//! - **Sandboxes and sessions** (PROTOCOL.md §1, §4, §5): the sandbox id is the name; the
//!   session (`sbx_…`, one VM run) that commands and files go to is read from each answer.
//!   `connect` and `info` never resume; `resume` starts a new session from the latest
//!   snapshot; `stop` stops the session and waits until it is over.
//! - **Exec** is native: env, cwd, `root` via `sudo` and a process timeout travel with the
//!   command; output streams as NDJSON with stdout and stderr apart; the exit comes from the
//!   command object. Streams cut by Vercel's edge (after about 5–6 minutes) or gone silent are
//!   reconnected through `/logs` without repeating output. Background commands can be listed,
//!   re-attached and killed by signal. Stdin is native (`attachStdin`, ordered offset-carrying
//!   writes, PROTOCOL.md §6.6); there is no pty.
//! - **Code** (`run_code` and contexts) is emulated: core's kernel runs as a command with
//!   stdin (the image needs `python3`).
//! - **Files**: write (a gzip tar, streamed), read (streamed) and mkdir are native; stat,
//!   list, remove and rename run as commands (the API has no such calls).
//! - **Preview links** are the public routes of the ports declared at create
//!   ([`VercelBuilder::expose_port`]), handed out only as `https://<subdomain>.vercel.run`
//!   (any other route in an answer is a `Provider` error).
//! - **Snapshots** stop the session; **fork** starts from the latest snapshot.
//! - **Idempotent create**: Vercel has no idempotency key, but names are unique per project.
//!   A keyed create names its sandbox after the key ([`idempotency_name`]) and tags it with
//!   the create fingerprint; a sandbox found under that name is adopted only when it carries
//!   this create's fingerprint and labels, otherwise the create is a `Conflict`.

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

pub use builder::VercelBuilder;
pub use capabilities::CAPABILITIES;
pub use config::{
    DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_MAX_RECONNECTS,
    DEFAULT_STREAM_IDLE_TIMEOUT, MAX_JSON, MAX_LINE, MAX_LIST_JSON, MAX_PORTS, MAX_TAGS,
    SCRIPT_OUTPUT_LIMIT,
};
pub use lifecycle::create::{RUNTIMES, VercelCreate, idempotency_name};
pub use provider::VercelProvider;
pub use sandbox::VercelSandbox;
/// Vercel's objects as the provider's own operations return them.
pub use wire::{NamedSandbox, Route, Session, Snapshot, VercelCommand};

pub use sandbox_sdk_core;
