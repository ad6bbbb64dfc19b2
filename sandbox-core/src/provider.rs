//! The two traits every adapter implements: [`Provider`] makes and finds sandboxes, [`Sandbox`]
//! drives one. Both are dyn-compatible; every method is a primitive with no default, so a wrapper
//! that forwards them cannot silently lose an override. Conveniences live in
//! [`crate::SandboxExt`] and [`crate::ProviderExt`].
//!
//! Each method's docs name the [`Capability`](crate::Capability) it needs. When that capability
//! is `Unsupported` the adapter returns [`ErrorKind::NotSupported`](crate::ErrorKind) without
//! sending anything, and the client's gating layer refuses the call before the adapter sees it.

use crate::access::{PreviewLink, SshAccess};
use crate::capability::Capabilities;
use crate::error::Result;
use crate::exec::{Command, Process, ProcessInfo};
use crate::files::{Download, FileEvent, FileInfo, ListOptions, Transfer, UploadBody};
use crate::fleet::{PrepareSpec, Prepared, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use std::fmt::Debug;
use std::time::{Duration, SystemTime};

/// A stream of sandboxes from [`Provider::list`], fetched page by page as it is polled.
pub type SandboxStream<'a> = BoxStream<'a, Result<SandboxInfo>>;

/// A stream of file changes from [`Sandbox::watch`].
pub type FileEventStream = BoxStream<'static, Result<FileEvent>>;

/// Makes, finds and lists sandboxes of one provider.
#[async_trait]
pub trait Provider: Send + Sync + Debug {
    /// The provider's name (`e2b`, `daytona`, `fly`, `local`, ...).
    fn name(&self) -> &str;

    /// What the provider can do.
    fn capabilities(&self) -> Capabilities;

    /// Creates a sandbox and waits until it can run commands.
    ///
    /// When `spec.idempotency_key` is set the adapter first looks for a sandbox already made under
    /// that key and returns it instead of making a second one.
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>>;

    /// Connects to an existing sandbox by id (resuming it where the provider does that on connect).
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>>;

    /// Lists sandboxes, page by page as the stream is polled. Needs `list`.
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_>;

    /// Destroys sandbox `id` without connecting to it first (a paused sandbox is not resumed
    /// to be destroyed), as the reaper and the fallback layer do for sandboxes they only know
    /// from a listing. A sandbox already gone is `NotFound`.
    async fn destroy(&self, id: &str) -> Result<()>;

    /// The live sandbox a create carrying idempotency key `key` made, if any: looked up the
    /// way the adapter's own create looks before it sends (the provider's idempotency label or
    /// name), without creating, connecting to or resuming anything.
    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>>;

    /// What `sandbox` (as listed or reported by `info`) ran and cost from its creation until
    /// `to` (usually `SystemTime::now()`). Needs `usage`: the provider's own meter where it has
    /// one; where it has none the client's emulation estimates it from `sandbox` and the price
    /// table, marked [`estimated`](crate::fleet::Usage::estimated).
    async fn usage(&self, sandbox: &SandboxInfo, to: SystemTime) -> Result<Usage>;

    /// Finds or builds the provider's template or snapshot for `spec` (named by its content
    /// hash), waits until it is ready and returns what to create sandboxes from. A ready one
    /// is reused, one being built is waited for, one whose build failed is built again; a
    /// build that fails is an error with the provider's reason. Needs `prepare`.
    async fn prepare(&self, spec: &PrepareSpec) -> Result<Prepared>;
}

/// One sandbox: exec, files, lifecycle and the optional operations.
#[async_trait]
pub trait Sandbox: Send + Sync + Debug {
    /// The provider's id for the sandbox.
    fn id(&self) -> &str;

    /// The provider's name.
    fn provider(&self) -> &str;

    /// What this sandbox can do (the provider's map, after any emulation).
    fn capabilities(&self) -> Capabilities;

    /// Fetches the sandbox's current state and details.
    async fn info(&self) -> Result<SandboxInfo>;

    // ---- exec ----

    /// Starts a command. Stdin needs `stdin`, a pty needs `pty`, `background` needs `background`.
    async fn exec(&self, command: &Command) -> Result<Process>;

    /// Lists processes started in the background. Needs `background`.
    async fn processes(&self) -> Result<Vec<ProcessInfo>>;

    /// Reattaches to a running process by pid (or tag, where the provider has tags): output from
    /// now on, then its exit. Needs `background`.
    async fn attach(&self, pid: &str) -> Result<Process>;

    /// Kills a process by pid. Needs `kill_process`.
    async fn kill_process(&self, pid: &str) -> Result<()>;

    // ---- files (need `files_upload`) ----

    /// Writes `body` to `path`, reading it in chunks as it goes (constant memory), creating
    /// parent directories and replacing any existing file.
    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer>;

    /// Writes a whole buffer to `path`, creating parents and replacing any existing file.
    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer>;

    /// Streams the file at `path` in chunks (constant memory). A missing file is `NotFound`.
    async fn download(&self, path: &str) -> Result<Download>;

    /// Lists a directory.
    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>>;

    /// Metadata of one path. A missing path is `NotFound`.
    async fn stat(&self, path: &str) -> Result<FileInfo>;

    /// Creates a directory and its parents; an existing directory is not an error.
    async fn mkdir(&self, path: &str) -> Result<()>;

    /// Removes a file or a directory tree. A missing path is `NotFound`.
    async fn remove(&self, path: &str) -> Result<()>;

    /// Renames or moves a path.
    async fn rename(&self, from: &str, to: &str) -> Result<()>;

    /// Watches a directory for changes. Needs `files_watch`.
    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream>;

    // ---- lifecycle ----

    /// Stops the sandbox (compute released; disk kept if `preserves_disk_on_stop`). Needs `stop`.
    async fn stop(&self) -> Result<()>;

    /// Pauses the sandbox (memory kept if `preserves_memory_on_pause`). Needs `pause`.
    async fn pause(&self) -> Result<()>;

    /// Resumes a paused or stopped sandbox, reapplying the time to live the caller asked for.
    /// Needs `pause` or `stop`.
    async fn resume(&self) -> Result<()>;

    /// Destroys the sandbox and everything in it. Destroying one already gone is `NotFound`.
    async fn destroy(&self) -> Result<()>;

    /// Sets the time to live from now. Needs `set_timeout`.
    async fn set_timeout(&self, timeout: Duration) -> Result<()>;

    // ---- optional operations ----

    /// A link that reaches `port` inside the sandbox. Needs `expose_port`.
    async fn preview_link(&self, port: u16) -> Result<PreviewLink>;

    /// SSH access valid for about `ttl`. Needs `ssh`.
    async fn ssh_access(&self, ttl: Duration) -> Result<SshAccess>;

    /// Forks the running sandbox into a new one. Needs `fork`.
    async fn fork(&self) -> Result<Box<dyn Sandbox>>;

    /// Takes a snapshot. Needs `snapshot`.
    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo>;

    /// Current resource use. Needs `metrics`.
    async fn metrics(&self) -> Result<Metrics>;
}

/// Which capability each gated operation needs; used by the gating layer and the conformance kit.
pub mod operation {
    use crate::capability::Capability;

    /// An operation and the capability it needs.
    pub type Requirement = (&'static str, Capability);

    /// `Provider::list`.
    pub const LIST: Requirement = ("list", Capability::List);
    /// `Sandbox::processes` and `Sandbox::attach`.
    pub const BACKGROUND: Requirement = ("background", Capability::Background);
    /// `Sandbox::kill_process`.
    pub const KILL_PROCESS: Requirement = ("kill_process", Capability::KillProcess);
    /// Exec with stdin.
    pub const STDIN: Requirement = ("stdin", Capability::Stdin);
    /// Exec in a pty.
    pub const PTY: Requirement = ("pty", Capability::Pty);
    /// File operations.
    pub const FILES: Requirement = ("files", Capability::FilesUpload);
    /// `Sandbox::watch`.
    pub const WATCH: Requirement = ("watch", Capability::FilesWatch);
    /// `Sandbox::stop`.
    pub const STOP: Requirement = ("stop", Capability::Stop);
    /// `Sandbox::pause`.
    pub const PAUSE: Requirement = ("pause", Capability::Pause);
    /// `Sandbox::set_timeout`.
    pub const SET_TIMEOUT: Requirement = ("set_timeout", Capability::SetTimeout);
    /// `Sandbox::preview_link`.
    pub const PREVIEW_LINK: Requirement = ("preview_link", Capability::ExposePort);
    /// `Sandbox::ssh_access`.
    pub const SSH_ACCESS: Requirement = ("ssh_access", Capability::Ssh);
    /// `Sandbox::fork`.
    pub const FORK: Requirement = ("fork", Capability::Fork);
    /// `Sandbox::snapshot`.
    pub const SNAPSHOT: Requirement = ("snapshot", Capability::Snapshot);
    /// `Sandbox::metrics`.
    pub const METRICS: Requirement = ("metrics", Capability::Metrics);
    /// `Provider::usage`.
    pub const USAGE: Requirement = ("usage", Capability::Usage);
    /// `Provider::prepare`.
    pub const PREPARE: Requirement = ("prepare", Capability::Prepare);
}
