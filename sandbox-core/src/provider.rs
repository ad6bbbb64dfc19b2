//! The two traits every adapter implements: [`Provider`] makes and finds sandboxes, [`Sandbox`]
//! drives one. Both are dyn-compatible. Conveniences live in [`crate::SandboxExt`] and
//! [`crate::ProviderExt`].
//!
//! Each method's docs name the [`Capability`](crate::Capability) it needs. When that capability
//! is `Unsupported` the adapter returns [`ErrorKind::NotSupported`](crate::ErrorKind) without
//! sending anything, and the client's gating layer refuses the call before the adapter sees it.
//!
//! The optional operations default to `NotSupported`; [`Sandbox`] says why that hides no
//! mistake.

use crate::access::{PreviewLink, SshAccess};
use crate::capability::{Capabilities, Capability};
use crate::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{Command, Process, ProcessInfo};
use crate::files::{Download, FileEvent, FileInfo, ListOptions, Transfer, UploadBody};
use crate::fleet::{PrepareSpec, Prepared, Usage};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SnapshotInfo};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use std::any::Any;
use std::fmt::Debug;
use std::time::{Duration, SystemTime};

/// A stream of sandboxes from [`Provider::list`], fetched page by page as it is polled.
pub type SandboxStream<'a> = BoxStream<'a, Result<SandboxInfo>>;

/// A stream of file changes from [`Sandbox::watch`].
pub type FileEventStream = BoxStream<'static, Result<FileEvent>>;

/// Makes, finds and lists sandboxes of one provider.
#[async_trait]
pub trait Provider: Any + Send + Sync + Debug {
    /// The provider's name (`e2b`, `daytona`, `fly`, `local`, ...).
    fn name(&self) -> &str;

    /// The provider this one wraps, if it is a wrapper (the client's layers are); `None` for an
    /// adapter's own provider. [`downcast_ref`](trait.Provider.html#method.downcast_ref)
    /// follows it.
    fn wrapped(&self) -> Option<&dyn Provider> {
        None
    }

    /// What the provider can do.
    fn capabilities(&self) -> Capabilities;

    /// Creates a sandbox and waits until it can run commands.
    ///
    /// When `spec.idempotency_key` is set the adapter first looks for a sandbox already made under
    /// that key and returns it instead of making a second one, but only one this create made:
    /// a keyed create labels its sandbox with its
    /// [`create_fingerprint`](crate::idempotency::create_fingerprint), and a sandbox found under
    /// the key without it (or without the spec's labels, the owner's among them) is a
    /// `Conflict` ([`check_adoption`](crate::idempotency::check_adoption)), neither adopted nor
    /// touched, with nothing created in its place.
    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>>;

    /// Connects to an existing sandbox by id (resuming it where the provider does that on connect).
    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>>;

    /// Lists sandboxes, page by page as the stream is polled. Needs `list`.
    ///
    /// The default yields one `NotSupported` error, or when the provider declares `list`, one
    /// saying it does not implement `Provider::list` (see [`Sandbox`] on the defaults).
    fn list(&self, _filter: &ListFilter) -> SandboxStream<'_> {
        let error = not_implemented(
            self.name(),
            &self.capabilities(),
            "Provider::list",
            operation::LIST.0,
            &[Capability::List],
        );
        Box::pin(futures::stream::once(async move { Err(error) }))
    }

    /// Destroys sandbox `id` without connecting to it first (a paused sandbox is not resumed
    /// to be destroyed), as the reaper and the fallback layer do for sandboxes they only know
    /// from a listing. A sandbox already gone is `NotFound`.
    ///
    /// The default connects and destroys: right for a provider whose connect has no side
    /// effect; one whose connect resumes a paused sandbox should destroy by id instead.
    async fn destroy(&self, id: &str) -> Result<()> {
        self.connect(id).await?.destroy().await
    }

    /// The live sandbox a create carrying idempotency key `key` made, if any: looked up the
    /// way the adapter's own create looks before it sends (the provider's idempotency label or
    /// name), without creating, connecting to or resuming anything. What it finds carries the
    /// key, which proves nothing about who made it: a caller about to act on it checks it with
    /// [`made_by`](crate::idempotency::made_by) (the fallback layer does before destroying).
    /// Through an owned client the key is the caller's, scoped to the owner there.
    ///
    /// The default is `NotSupported`: an adapter that dedupes creates by key implements it, so
    /// the fallback layer can find (and destroy) the sandbox a failed attempt left.
    async fn find_by_idempotency_key(&self, _key: &str) -> Result<Option<SandboxInfo>> {
        Err(Error::not_supported(self.name(), "find_by_idempotency_key"))
    }

    /// What `sandbox` (as listed or reported by `info`) ran and cost from its creation until
    /// `to` (usually `SystemTime::now()`). Needs `usage`: the provider's own meter where it has
    /// one; where it has none the client's emulation estimates it from `sandbox` and the price
    /// table, marked [`estimated`](crate::fleet::Usage::estimated).
    async fn usage(&self, _sandbox: &SandboxInfo, _to: SystemTime) -> Result<Usage> {
        let (op, cap) = operation::USAGE;
        Err(not_implemented(
            self.name(),
            &self.capabilities(),
            "Provider::usage",
            op,
            &[cap],
        ))
    }

    /// Finds or builds the provider's template or snapshot for `spec` (named by its content
    /// hash), waits until it is ready and returns what to create sandboxes from. A ready one
    /// is reused, one being built is waited for, one whose build failed is built again; a
    /// build that fails is an error with the provider's reason. Needs `prepare`.
    async fn prepare(&self, _spec: &PrepareSpec) -> Result<Prepared> {
        let (op, cap) = operation::PREPARE;
        Err(not_implemented(
            self.name(),
            &self.capabilities(),
            "Provider::prepare",
            op,
            &[cap],
        ))
    }
}

/// The error of an optional operation left at its default body: `NotSupported` naming the
/// operation, and when the adapter declares a capability it needs (`needs`, any one of them)
/// available, saying that the adapter declares it but does not implement `method`.
fn not_implemented(
    provider: &str,
    caps: &Capabilities,
    method: &str,
    operation: &str,
    needs: &[Capability],
) -> Error {
    match needs.iter().find(|c| caps.level(**c).is_available()) {
        Some(declared) => Error::new(
            ErrorKind::NotSupported,
            format!(
                "{provider} declares {declared} ({}) but does not implement {method}: implement \
                 it, or declare {declared} unsupported",
                caps.level(*declared).as_str()
            ),
        )
        .with_provider(provider)
        .with_operation(operation),
        None => Error::not_supported(provider, operation),
    }
}

/// The default body of an optional [`Sandbox`] operation.
macro_rules! optional {
    ($self:ident, $method:literal, $requirement:expr) => {{
        let (operation, capability) = $requirement;
        Err(not_implemented(
            $self.provider(),
            &$self.capabilities(),
            concat!("Sandbox::", $method),
            operation,
            &[capability],
        ))
    }};
}

/// One sandbox: exec, files, lifecycle and the optional operations.
///
/// # Required and optional methods
///
/// What every adapter has is required: `name`, `capabilities`, `create` and `connect` of a
/// provider; `id`, `provider`, `capabilities`, `info`, `exec` and `destroy` of a sandbox. The
/// optional operations — each needs a capability an adapter may declare `Unsupported`:
/// [`Provider::list`], the background and kill operations, the file operations, `watch`,
/// `stop`/`pause`/`resume`, `set_timeout`, `preview_link`, `ssh_access`, `fork`, `snapshot`,
/// `metrics`, the code operations — have a default body that sends nothing and returns `NotSupported`.
///
/// The defaults spare an adapter one stub per operation it does not offer (the conformance kit's fake
/// adapter dropped 13), and they hide no mistake:
///
/// - an adapter that declares a capability `Native` or `Emulated` but leaves its operation at the
///   default gets an error saying exactly that (`… declares fork (native) but does not implement
///   Sandbox::fork …`), never a silent `NotSupported`;
/// - the conformance kit (`sandbox-conformance`) proves every capability an adapter declares: a
///   declared operation left at the default fails its scenario, a capability no scenario
///   exercises fails `capability_coverage`, and an operation implemented for a capability
///   declared unsupported fails its probe;
/// - a wrapper that forwards every method (the client's layers in [`crate::client`]) must not
///   fall back to a default: each such `impl` carries `#[deny(clippy::missing_trait_methods)]`,
///   so a forward it lacks fails clippy instead of silently turning a provider's operation into
///   `NotSupported`. Wrappers outside this crate should do the same.
#[async_trait]
pub trait Sandbox: Any + Send + Sync + Debug {
    /// The provider's id for the sandbox.
    fn id(&self) -> &str;

    /// The sandbox this one wraps, if it is a wrapper (the client's layers are); `None` for an
    /// adapter's own sandbox. [`downcast_ref`](trait.Sandbox.html#method.downcast_ref) follows
    /// it.
    fn wrapped(&self) -> Option<&dyn Sandbox> {
        None
    }

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
    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        optional!(self, "processes", operation::BACKGROUND)
    }

    /// Reattaches to a running process by pid (or tag, where the provider has tags): output from
    /// now on, then its exit. Needs `background`.
    async fn attach(&self, _pid: &str) -> Result<Process> {
        optional!(self, "attach", operation::BACKGROUND)
    }

    /// Kills a process by pid. Needs `kill_process`.
    async fn kill_process(&self, _pid: &str) -> Result<()> {
        optional!(self, "kill_process", operation::KILL_PROCESS)
    }

    // ---- files (need `files_upload`; each defaults to `NotSupported`) ----

    /// Writes `body` to `path`, reading it in chunks as it goes (constant memory), creating
    /// parent directories and replacing any existing file.
    async fn upload(&self, _path: &str, _body: UploadBody) -> Result<Transfer> {
        optional!(self, "upload", operation::FILES)
    }

    /// Writes a whole buffer to `path`, creating parents and replacing any existing file.
    async fn write_file(&self, _path: &str, _data: Bytes) -> Result<Transfer> {
        optional!(self, "write_file", operation::FILES)
    }

    /// Streams the file at `path` in chunks (constant memory). A missing file is `NotFound`.
    async fn download(&self, _path: &str) -> Result<Download> {
        optional!(self, "download", operation::FILES)
    }

    /// Lists a directory.
    async fn list_files(&self, _path: &str, _options: ListOptions) -> Result<Vec<FileInfo>> {
        optional!(self, "list_files", operation::FILES)
    }

    /// Metadata of one path. A missing path is `NotFound`.
    async fn stat(&self, _path: &str) -> Result<FileInfo> {
        optional!(self, "stat", operation::FILES)
    }

    /// Creates a directory and its parents; an existing directory is not an error.
    async fn mkdir(&self, _path: &str) -> Result<()> {
        optional!(self, "mkdir", operation::FILES)
    }

    /// Removes a file or a directory tree. A missing path is `NotFound`.
    async fn remove(&self, _path: &str) -> Result<()> {
        optional!(self, "remove", operation::FILES)
    }

    /// Renames or moves a path.
    async fn rename(&self, _from: &str, _to: &str) -> Result<()> {
        optional!(self, "rename", operation::FILES)
    }

    /// Watches a directory for changes. Needs `files_watch`.
    async fn watch(&self, _path: &str, _recursive: bool) -> Result<FileEventStream> {
        optional!(self, "watch", operation::WATCH)
    }

    // ---- lifecycle ----

    /// Stops the sandbox (compute released; disk kept if `preserves_disk_on_stop`). Needs `stop`.
    async fn stop(&self) -> Result<()> {
        optional!(self, "stop", operation::STOP)
    }

    /// Pauses the sandbox (memory kept if `preserves_memory_on_pause`). Needs `pause`.
    async fn pause(&self) -> Result<()> {
        optional!(self, "pause", operation::PAUSE)
    }

    /// Resumes a paused or stopped sandbox, reapplying the time to live the caller asked for.
    /// Needs `pause` or `stop`.
    async fn resume(&self) -> Result<()> {
        Err(not_implemented(
            self.provider(),
            &self.capabilities(),
            "Sandbox::resume",
            "resume",
            &[Capability::Pause, Capability::Stop],
        ))
    }

    /// Destroys the sandbox and everything in it. Destroying one already gone is `NotFound`.
    async fn destroy(&self) -> Result<()>;

    /// Sets the time to live from now. Needs `set_timeout`.
    async fn set_timeout(&self, _timeout: Duration) -> Result<()> {
        optional!(self, "set_timeout", operation::SET_TIMEOUT)
    }

    // ---- optional operations (each defaults to `NotSupported`) ----

    /// A link that reaches `port` inside the sandbox. Needs `expose_port`.
    async fn preview_link(&self, _port: u16) -> Result<PreviewLink> {
        optional!(self, "preview_link", operation::PREVIEW_LINK)
    }

    /// SSH access valid for about `ttl`. Needs `ssh`.
    async fn ssh_access(&self, _ttl: Duration) -> Result<SshAccess> {
        optional!(self, "ssh_access", operation::SSH_ACCESS)
    }

    /// Forks the running sandbox into a new one. Needs `fork`.
    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        optional!(self, "fork", operation::FORK)
    }

    /// Takes a snapshot. Needs `snapshot`.
    async fn snapshot(&self, _name: Option<&str>) -> Result<SnapshotInfo> {
        optional!(self, "snapshot", operation::SNAPSHOT)
    }

    /// Current resource use. Needs `metrics`.
    async fn metrics(&self) -> Result<Metrics> {
        optional!(self, "metrics", operation::METRICS)
    }

    /// Starts a new code context: a kernel that keeps its state between
    /// [`run_code`](Sandbox::run_code) calls. Needs `stateful_kernel`.
    async fn create_code_context(&self, _spec: &ContextSpec) -> Result<CodeContext> {
        optional!(self, "create_code_context", operation::CODE_CONTEXTS)
    }

    /// The code contexts of this sandbox. Needs `stateful_kernel`.
    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        optional!(self, "list_code_contexts", operation::CODE_CONTEXTS)
    }

    /// Restarts a context's kernel: its state is cleared, its id kept; a lost context works
    /// again. Needs `stateful_kernel`.
    async fn restart_code_context(&self, _id: &str) -> Result<()> {
        optional!(self, "restart_code_context", operation::CODE_CONTEXTS)
    }

    /// Stops a context's kernel and forgets it. Needs `stateful_kernel`.
    async fn remove_code_context(&self, _id: &str) -> Result<()> {
        optional!(self, "remove_code_context", operation::CODE_CONTEXTS)
    }

    /// Runs a cell in a context (the language's default one when the request names none) and
    /// streams its output and results. Dropping the [`CodeRun`] interrupts the cell; the
    /// context keeps its state. Needs `code_interpreter`.
    async fn run_code(&self, _request: &RunCode) -> Result<CodeRun> {
        optional!(self, "run_code", operation::RUN_CODE)
    }
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
    /// `Sandbox::run_code`.
    pub const RUN_CODE: Requirement = ("run_code", Capability::CodeInterpreter);
    /// `Sandbox::create_code_context` and the other context operations.
    pub const CODE_CONTEXTS: Requirement = ("code_contexts", Capability::StatefulKernel);
    /// `Provider::usage`.
    pub const USAGE: Requirement = ("usage", Capability::Usage);
    /// `Provider::prepare`.
    pub const PREPARE: Requirement = ("prepare", Capability::Prepare);
}

impl dyn Provider {
    /// The adapter's own provider type under any wrappers, to reach its extras through a
    /// [`Client`](crate::client::Client): each layer's [`Provider::wrapped`] is followed until
    /// one is a `T`. `None` when no layer is (or a fallback client hides which one would be).
    ///
    /// ```
    /// # #[cfg(feature = "local")] {
    /// use sandbox_sdk_core::Provider;
    /// use sandbox_sdk_core::client::Client;
    /// use sandbox_sdk_core::local::LocalProvider;
    /// use std::sync::Arc;
    ///
    /// let client = Client::builder(Arc::new(LocalProvider::new())).build();
    /// let provider: &dyn Provider = &client;
    /// assert!(provider.downcast_ref::<LocalProvider>().is_some());
    /// # }
    /// ```
    pub fn downcast_ref<T: Provider>(&self) -> Option<&T> {
        let mut current: &dyn Provider = self;
        loop {
            if let Some(found) = (current as &dyn Any).downcast_ref::<T>() {
                return Some(found);
            }
            current = current.wrapped()?;
        }
    }
}

impl dyn Sandbox {
    /// The adapter's own sandbox type under any wrappers, so a sandbox made through a
    /// [`Client`](crate::client::Client) (with retry, gating, hooks) can still call its
    /// adapter's extras: each layer's [`Sandbox::wrapped`] is followed until one is a `T`.
    ///
    /// ```
    /// # #[cfg(feature = "local")]
    /// # async fn demo() -> sandbox_sdk_core::Result<()> {
    /// use sandbox_sdk_core::client::{Client, RetryPolicy};
    /// use sandbox_sdk_core::local::{LocalProvider, LocalSandbox};
    /// use sandbox_sdk_core::{CreateSpec, Provider, Sandbox};
    /// use std::sync::Arc;
    ///
    /// let client = Client::builder(Arc::new(LocalProvider::new()))
    ///     .retry(RetryPolicy::default())
    ///     .build();
    /// let sandbox = client.create(&CreateSpec::new()).await?;
    /// let local: &LocalSandbox = sandbox.downcast_ref().expect("a local sandbox");
    /// println!("{}", local.dir().display());
    /// # sandbox.destroy().await }
    /// ```
    pub fn downcast_ref<T: Sandbox>(&self) -> Option<&T> {
        let mut current: &dyn Sandbox = self;
        loop {
            if let Some(found) = (current as &dyn Any).downcast_ref::<T>() {
                return Some(found);
            }
            current = current.wrapped()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::Level;
    use crate::lifecycle::SandboxState;
    use futures::StreamExt;

    /// An adapter with only the required methods.
    #[derive(Debug)]
    struct Minimal {
        caps: Capabilities,
    }

    #[async_trait]
    impl Sandbox for Minimal {
        fn id(&self) -> &str {
            "sb-1"
        }
        fn provider(&self) -> &str {
            "minimal"
        }
        fn capabilities(&self) -> Capabilities {
            self.caps
        }
        async fn info(&self) -> Result<SandboxInfo> {
            Ok(SandboxInfo::new("sb-1", "minimal", SandboxState::Running))
        }
        async fn exec(&self, _command: &Command) -> Result<Process> {
            Err(Error::validation("not in this test"))
        }
        async fn destroy(&self) -> Result<()> {
            Ok(())
        }
    }

    #[async_trait]
    impl Provider for Minimal {
        fn name(&self) -> &str {
            "minimal"
        }
        fn capabilities(&self) -> Capabilities {
            self.caps
        }
        async fn create(&self, _spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
            Ok(Box::new(Minimal { caps: self.caps }))
        }
        async fn connect(&self, _id: &str) -> Result<Box<dyn Sandbox>> {
            Ok(Box::new(Minimal { caps: self.caps }))
        }
    }

    #[tokio::test]
    async fn an_operation_left_at_its_default_is_not_supported() {
        let sb = Minimal {
            caps: Capabilities::NONE,
        };
        let error = sb.fork().await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotSupported);
        assert_eq!(
            error.to_string(),
            Error::not_supported("minimal", "fork").to_string()
        );
        assert_eq!(
            sb.stat("a").await.unwrap_err().kind(),
            ErrorKind::NotSupported
        );
        assert_eq!(
            sb.resume().await.unwrap_err().kind(),
            ErrorKind::NotSupported
        );
        let listed = Provider::list(&sb, &ListFilter::new())
            .collect::<Vec<_>>()
            .await;
        assert_eq!(listed.len(), 1);
        assert_eq!(
            listed[0].as_ref().unwrap_err().kind(),
            ErrorKind::NotSupported
        );
    }

    #[tokio::test]
    async fn a_declared_capability_left_at_the_default_says_so() {
        let mut caps = Capabilities::NONE;
        caps.set(Capability::Fork, Level::Native);
        caps.set(Capability::Stop, Level::Emulated);
        caps.set(Capability::List, Level::Native);
        let sb = Minimal { caps };
        let error = sb.fork().await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotSupported);
        let text = error.to_string();
        assert!(
            text.contains("minimal declares fork (native) but does not implement Sandbox::fork"),
            "{text}"
        );
        let text = sb.resume().await.unwrap_err().to_string();
        assert!(
            text.contains("declares stop (emulated) but does not implement Sandbox::resume"),
            "{text}"
        );
        let listed = Provider::list(&sb, &ListFilter::new())
            .collect::<Vec<_>>()
            .await;
        let text = listed[0].as_ref().unwrap_err().to_string();
        assert!(text.contains("does not implement Provider::list"), "{text}");
        // An operation whose capability is not declared stays a plain NotSupported.
        let text = sb.metrics().await.unwrap_err().to_string();
        assert!(!text.contains("declares"), "{text}");
    }
}
