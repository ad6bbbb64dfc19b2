//! # sandbox-sprites
//!
//! A [Fly.io Sprites](https://sprites.dev) adapter for
//! [`sandbox-sdk-core`](sandbox_sdk_core): each sandbox is a sprite — a persistent Linux VM
//! that hibernates when idle and wakes on the next call — addressed by its name.
//!
//! ```no_run
//! # async fn demo() -> sandbox_sdk_core::Result<()> {
//! use sandbox_sprites::SpritesBuilder;
//! use sandbox_sdk_core::prelude::*;
//! use sandbox_sdk_core::{Command, CreateSpec};
//!
//! let sprites = SpritesBuilder::from_env().build()?;
//! let sandbox = sprites.create(&CreateSpec::new().idempotency_key("job-42")).await?;
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
//! - **Sprites** (PROTOCOL.md §4): the sandbox id is the name. There is no start, stop or
//!   pause: a sprite hibernates after 30 s idle and wakes on the next command or file call,
//!   disk kept, processes lost once it goes cold.
//! - **Exec** runs over a WebSocket (§5): stdout and stderr apart, stdin, a one-byte exit code,
//!   or a pty (a TTY session with resize).
//!   Sessions outlive a dropped socket, so a broken or silent stream is re-attached by session
//!   id without repeating output; background commands can be listed, re-attached and killed.
//!   There is no per-call rate limit, unlike Fly Machines' exec.
//!   **`Command::env` is not private on Sprites**: like the arguments, its values travel in the
//!   exec URL's query and show in the sprite's session list (PROTOCOL.md §13 trap 15; the
//!   protocol has no private place for them). Keep secrets in the sprite's environment at
//!   create or in a file. The adapter never logs the URL and scrubs the values from errors.
//! - **Files** are native (`fs/*`, §7), streamed both ways.
//! - **Preview links**: the sprite's one URL, when it is public, and only when it is
//!   `https://<name>-<suffix>.sprites.app` (anything else in the answer is a `Provider` error).
//! - **Snapshots** are checkpoints, restored in place ([`SpritesSandbox::restore`]).
//! - **Idempotent create**: names are the dedupe key; a keyed create names its sprite after the
//!   key ([`idempotency_name`]) and labels it with the create fingerprint; a sprite found under
//!   that name is adopted only when it carries this create's fingerprint and labels.

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

pub use builder::SpritesBuilder;
pub use capabilities::CAPABILITIES;
pub use config::{
    DEFAULT_API_URL, DEFAULT_CREATE_LOOKUP_WINDOW, DEFAULT_CREATE_TIMEOUT, DEFAULT_DETACH_GRACE,
    DEFAULT_MAX_REATTACHES, DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_URL_PORT, HOME,
};
pub use lifecycle::create::{SpritesCreate, idempotency_name};
pub use provider::SpritesProvider;
pub use sandbox::SpritesSandbox;
/// Sprites' objects as the provider's own operations return them.
pub use wire::{Checkpoint, ExecSession, Sprite, SpriteConfig, UrlSettings};

pub use sandbox_sdk_core;
