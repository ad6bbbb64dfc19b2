//! # sandbox-sdk-core
//!
//! One Rust API for the throwaway Linux boxes AI agents run code in, whichever provider sells
//! them. This crate holds what every provider shares:
//!
//! - the [`Provider`] and [`Sandbox`] traits, with conveniences in [`SandboxExt`] and [`ProviderExt`];
//! - the [`Capabilities`] map each provider declares, and the [`Error`] type with its [`ErrorKind`];
//! - the exec model ([`Command`], [`Process`], [`ProcessEvent`]), files ([`FileInfo`], [`Download`]),
//!   lifecycle ([`SandboxState`], [`CreateSpec`]), [`PreviewLink`] and [`SshAccess`];
//! - stateful code ([`code`]): contexts, `run_code` events and rich results, and the emulated
//!   kernel for providers without one;
//! - fleet and cost ([`fleet`]): owner labels, the reaper, shapes and prices, usage;
//! - the embedded `local` provider (feature `local`, on by default).
//!
//! Provider adapters live in their own crates: `sandbox-e2b`, `sandbox-daytona`, `sandbox-fly`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod access;
mod capability;
mod error;
mod exec;
mod ext;
mod files;
mod guard;
mod lifecycle;
mod provider;

pub mod client;
pub mod code;
pub mod emulate;
pub mod fleet;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod idempotency;
pub mod lines;
#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub mod local;
pub mod paging;
pub mod redact;
pub mod shell;
pub mod text;
pub mod time;
pub mod wait;

pub use access::{PreviewLink, SshAccess};
pub use capability::{
    Capabilities, Capability, Flags, Level, PreviewModel, matrix_json, matrix_markdown,
};
pub use error::{Attempt, Error, ErrorKind, Result};
pub use exec::{
    Command, EventStream, ExitStatus, Output, Process, ProcessControl, ProcessEvent, ProcessInfo,
    PtySize, Stdin, StdinOutcome, validate_env_name,
};
pub use ext::{ProviderExt, SandboxExt};
pub use files::{
    ByteStream, Download, FileEvent, FileEventKind, FileInfo, FileKind, ListOptions, Transfer,
    UploadBody, absolute_path, upload_body, validate_path,
};
pub use guard::DestroyOnDrop;
pub use lifecycle::{
    CreateSpec, ListFilter, Metrics, Resources, SandboxInfo, SandboxState, SnapshotInfo,
    StateChange,
};
pub use provider::{FileEventStream, Provider, Sandbox, SandboxStream, operation};

/// Re-exports for adapters and tests: the async-trait macro and stream types used in signatures.
pub mod prelude {
    pub use crate::{Provider, ProviderExt, Sandbox, SandboxExt};
    pub use async_trait::async_trait;
    pub use bytes::Bytes;
    pub use futures::{Stream, StreamExt, TryStreamExt};
}
