#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

// What a program using sandboxes names, by name: the traits and their conveniences, the create,
// command, process and file types, capabilities, errors and the drop guard.
/// The retrying, rate-limited client layer over any provider (`Client`, `RetryPolicy`).
pub use sandbox_sdk_core::client;
/// Stateful code: contexts, `run_code` events, rich results, and the emulated kernel.
pub use sandbox_sdk_core::code;
/// Fleets of sandboxes: owners, find-or-build preparation, prices, usage and reaping.
pub use sandbox_sdk_core::fleet;
/// The embedded `local` provider: sandboxes as private directories on this machine.
#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub use sandbox_sdk_core::local;
/// Bounded waits with backoff, for a caller waiting on a sandbox of its own.
pub use sandbox_sdk_core::wait;
pub use sandbox_sdk_core::{
    ByteStream, Capabilities, Capability, Command, CreateSpec, DestroyOnDrop, Download, Error,
    ErrorKind, EventStream, ExitStatus, FileEvent, FileEventKind, FileEventStream, FileInfo,
    FileKind, Flags, Level, ListFilter, ListOptions, Metrics, Output, PreviewLink, PreviewModel,
    Process, ProcessControl, ProcessEvent, ProcessInfo, Provider, ProviderExt, PtySize, Resources,
    Result, Sandbox, SandboxExt, SandboxInfo, SandboxState, SandboxStream, SnapshotInfo, SshAccess,
    StateChange, Stdin, StdinOutcome, Transfer, UploadBody, matrix_json, matrix_markdown,
};

/// What an adapter author needs and a program using sandboxes does not: the HTTP kit, command
/// emulation over a shell, shell quoting, idempotent creates, paging, time formats, redaction
/// and the validators adapters share. An adapter crate usually depends on
/// `sandbox-sdk-core` directly; this module is the same API from the facade.
pub mod author {
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub use sandbox_sdk_core::http;
    pub use sandbox_sdk_core::prelude::async_trait;
    pub use sandbox_sdk_core::{
        Attempt, emulate, idempotency, operation, paging, redact, shell, text, time, upload_body,
        validate_env_name, validate_path,
    };
}

#[cfg(feature = "daytona")]
#[cfg_attr(docsrs, doc(cfg(feature = "daytona")))]
pub use sandbox_daytona as daytona;
#[cfg(feature = "e2b")]
#[cfg_attr(docsrs, doc(cfg(feature = "e2b")))]
pub use sandbox_e2b as e2b;
#[cfg(feature = "fly")]
#[cfg_attr(docsrs, doc(cfg(feature = "fly")))]
pub use sandbox_fly as fly;
#[cfg(feature = "sprites")]
#[cfg_attr(docsrs, doc(cfg(feature = "sprites")))]
pub use sandbox_sprites as sprites;
#[cfg(feature = "vercel")]
#[cfg_attr(docsrs, doc(cfg(feature = "vercel")))]
pub use sandbox_vercel as vercel;

mod registry;

/// The workspace README's snippets, compiled as doc tests so they stay true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct WorkspaceReadmeDoctests;
pub use registry::{
    ALL_PROVIDERS, capabilities_of, provider_from_env, provider_from_lookup, providers,
};

/// What a program using sandboxes needs in scope: the traits and their conveniences, the
/// command and create types, process events, errors and the drop guard.
pub mod prelude {
    pub use sandbox_sdk_core::{
        Command, CreateSpec, DestroyOnDrop, Error, ErrorKind, ProcessEvent, Provider, ProviderExt,
        Result, Sandbox, SandboxExt,
    };
}
