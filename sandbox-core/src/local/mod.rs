//! The embedded `local` provider: each sandbox is a private directory on this machine, and its
//! commands are real child processes. It needs no account and no network.
//!
//! **This is not an isolation boundary.** Processes run as the current user, on the host, with
//! the host's filesystem and network: any command can read and write whatever the user can, and
//! a command's cwd may be anywhere (`..`, an absolute host path, a link out). Use it for
//! development, tests and trusted code. What *is* confined are the sandbox's own file
//! primitives (read, write, upload, download, list, stat, mkdir, remove, rename): they stay
//! inside the sandbox's directory, so a caller that offers only those (such as
//! `sbox mcp --read-only`) does not hand out the host's files.
//!
//! What it does:
//!
//! - Each sandbox is a fresh directory (mode `0700`) under [`LocalProvider::with_root`] (by default
//!   `sandbox-sdk-local-{uid}/` in the system temp directory, one per user, made `0700`), with a
//!   uuid id. The root must be owned by the current user and not writable by its group or
//!   others (nor be a link someone else owns); otherwise create fails with `Validation` naming
//!   the root and the problem. Its user-visible directory is `<root>/<id>/work`; process output
//!   of background commands goes to `<root>/<id>/state`, outside the work directory.
//! - **File paths are confined to the work directory.** A relative path resolves against it; an
//!   absolute path must lie under it (as created, `<root>/<id>/work/...`, or canonical, as
//!   `pwd` prints it) and means the same file. Every file primitive resolves its path beneath
//!   the work directory, which the sandbox holds open from create on, one component at a time
//!   from a directory already open, never following a symbolic link by the system: each
//!   component is looked at with `fstatat(AT_SYMLINK_NOFOLLOW)` and opened with `O_NOFOLLOW`,
//!   and a link is read and its target walked the same way (a relative target from where the
//!   link is, an absolute one only if it names the work directory). A path that would leave the
//!   work directory fails with `Validation` naming the path and saying it leads outside: `..`
//!   above it (by text, or through a link), an absolute path elsewhere (`/etc/passwd`,
//!   `/proc/self/environ`, the sandbox's own `state` directory), a link whose target is outside
//!   (to `/etc/passwd`, `/proc`, a host directory), also when it is planted in the directory
//!   by a process of the sandbox or arrives with a checked-out repository, and also when it
//!   appears between two steps of the walk. Links inside the work directory are followed (at
//!   most 40 per path). `stat`, `remove` and `rename` act on a final link itself (remove takes
//!   the link away, never what it points to; a tree is removed following no link in it), and
//!   the work directory itself is never removed or renamed. What this does not cover: a
//!   process of the sandbox that moves a directory the walk has already opened out of the work
//!   directory at that very moment takes the rest of that walk with it; such a process can
//!   read and write the user's files by itself anyway.
//! - **Commands are not confined:** a command's cwd resolves like a file path, relative against
//!   the work directory, which is also every command's default cwd, but an absolute cwd is a
//!   host path used as is, and `..` and links lead out.
//! - Sandboxes live in a process-wide registry, so [`Provider::connect`] finds them from any
//!   [`LocalProvider`] in the process. They are not persisted: when the process ends, background
//!   processes keep running and directories stay until removed. A later process can adopt such
//!   a directory with [`LocalProvider::reopen_local`] (without the earlier process's metadata,
//!   environment or background processes), and [`Provider::list`] shows such directories
//!   under the provider's root beside the sandboxes of this process, as running and without
//!   labels (so a label filter passes them by).
//! - **Environment:** a command gets [`CreateSpec::env`](crate::CreateSpec) plus
//!   [`Command::env`] plus, from the host environment, only [`INHERITED_ENV`] (`PATH`, `HOME`,
//!   `USER`, `LOGNAME`, `SHELL`, `LANG`, `LANGUAGE`, `TERM`, `TZ`, `TMPDIR`) and `LC_*`: the
//!   host's credentials (`E2B_API_KEY`, `DAYTONA_API_KEY`, `FLY_API_TOKEN`, cloud keys, ...)
//!   stay out. [`LocalProvider::inherit_env`] adds named variables,
//!   [`LocalProvider::inherit_all_env`] passes everything. `HOME` stays the host's: the files
//!   under it are readable anyway (this is not an isolation boundary), and tools keep their
//!   configuration and caches.
//! - Exec runs each command in its own process group (`setpgid`). Stdout and stderr are
//!   streamed live and apart, read only as the stream is polled (a slow reader slows the child).
//!   Kill, timeout, drop of a foreground handle and destroy send `SIGKILL` to the whole group,
//!   but only while the group's leader is unreaped (on Linux its exit is observed with
//!   `waitid(WNOWAIT)` and it is reaped under the lock that signals take): once the leader is
//!   reaped its id may be taken by an unrelated group, which is never signalled.
//!   Process ids are host pids. A foreground stream ends when every holder of the child's
//!   stdout and stderr has closed them (as with a shell's `$(...)`): a grandchild left running in
//!   the background with inherited output keeps the stream open until it exits or is killed.
//! - **How far destroy reaches.** On Linux, destroy walks `/proc` and stops, then kills, every
//!   process that belongs to the sandbox as far as it can tell: a member of a group of one of
//!   its commands (for a finished command: one that started before its leader was reaped, in a
//!   group whose id has not been taken again), a process carrying the sandbox id in
//!   [`SANDBOX_MARKER`], and every descendant of these. This catches a process that clears
//!   the marker (`unset SANDBOX_SDK_LOCAL_SANDBOX`) or leaves its group (`setsid`) while its
//!   parent in the sandbox lives. None of it is unsheddable: unprivileged Linux offers no such
//!   mechanism here (a cgroup needs delegation; making the host process a child subreaper would
//!   change how the whole host process reaps children). **A process escapes destroy** when it
//!   clears the marker, leaves its group and loses its parent, as a daemon's double fork does:
//!   `unset SANDBOX_SDK_LOCAL_SANDBOX; (setsid sleep 1000 &)` keeps running. Where there is no
//!   `/proc` (macOS, BSDs), destroy reaches only the groups of commands still running.
//! - Background commands write stdout and stderr to files in the state directory, so nothing blocks
//!   when nobody reads; a dedicated thread reaps each one, so its exit is recorded even after the
//!   async runtime that started it is gone. The handle returned by `exec` streams the files from
//!   the start, [`Sandbox::attach`] from the current end ("output from now on"); both poll the
//!   files every few milliseconds and are marked as emulated streaming. The process timeout of a
//!   background command is enforced by a task on the runtime that started it. A background
//!   command started with stdin gets end-of-file when its handle's [`Stdin`] is dropped.
//! - A [`CreateSpec::idempotency_key`](crate::CreateSpec) already used by a live sandbox of this
//!   process returns that sandbox instead of making a second one.
//! - Pause sends `SIGSTOP` to every process group of the sandbox, resume sends `SIGCONT`; memory is
//!   kept. While paused, `exec` fails with `NotRunning`; files stay reachable.
//! - Preview links are `http://127.0.0.1:{port}`: nothing is proxied, the port is the host's.
//!
//! What it does not do (each is `Unsupported` in [`CAPABILITIES`] and fails with `NotSupported`):
//! stop, time to live (`set_timeout`; [`CreateSpec::timeout`](crate::CreateSpec) is ignored), pty,
//! running as another user, file watching, code interpreter, egress control, SSH, proxied fetch,
//! snapshots, fork, volumes, GPUs, regions, secrets, metrics, usage (the client's emulation
//! estimates running time from the listing, with no cost), prepare. A
//! [`CreateSpec::template`](crate::CreateSpec) is refused with `NotSupported`; `resources` and
//! `region` are ignored.
//!
//! ```
//! use sandbox_sdk_core::local::LocalProvider;
//! use sandbox_sdk_core::prelude::*;
//! use sandbox_sdk_core::{Command, CreateSpec};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> sandbox_sdk_core::Result<()> {
//! let provider = LocalProvider::new();
//! let sandbox = provider.create(&CreateSpec::new()).await?;
//! let out = sandbox.run(&Command::shell("echo hi; exit 3")).await?;
//! assert_eq!(out.stdout_lossy(), "hi\n");
//! assert_eq!(out.status.code, Some(3));
//! sandbox.destroy().await?;
//! # Ok(())
//! # }
//! ```

pub mod confine;
mod fs;
mod process;

use crate::access::{PreviewLink, SshAccess};
use crate::capability::{Capabilities, Flags, Level, PreviewModel};
use crate::code::kernel::EmulatedKernels;
use crate::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{Command, EventStream, Process, ProcessInfo, Stdin};
use crate::files::{Download, FileInfo, ListOptions, Transfer, UploadBody, validate_path};
use crate::lifecycle::{CreateSpec, ListFilter, Metrics, SandboxInfo, SandboxState, SnapshotInfo};
use crate::provider::{FileEventStream, Provider, Sandbox, SandboxStream};
use async_trait::async_trait;
use bytes::Bytes;
use nix::sys::signal::Signal;
use process::{ForegroundGuard, GroupControl, ProcState};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// The provider's name.
const NAME: &str = "local";

/// Environment variable carrying the sandbox id into every process it starts (and, by
/// inheritance, their children), one of the ways destroy finds processes that left their
/// process group. A process can clear it; see the [module docs](self) for how far destroy
/// reaches.
pub const SANDBOX_MARKER: &str = "SANDBOX_SDK_LOCAL_SANDBOX";

/// What the `local` provider does. The code interpreter is core's emulated kernel
/// ([`crate::code::kernel`]), run with the host's `python3`; everything not listed here is
/// unsupported.
pub const CAPABILITIES: Capabilities = Capabilities {
    list: Level::Native,
    pause: Level::Native,
    background: Level::Native,
    streaming: Level::Native,
    kill_process: Level::Native,
    stdin: Level::Native,
    files_upload: Level::Native,
    expose_port: Level::Native,
    code_interpreter: Level::Emulated,
    stateful_kernel: Level::Emulated,
    flags: Flags {
        preserves_memory_on_pause: true,
        preserves_disk_on_stop: false,
        per_command_env_cwd: true,
        exit_code_native: true,
        preview_model: PreviewModel::Localhost,
    },
    ..Capabilities::NONE
};

/// Every live local sandbox of this process, by id.
static REGISTRY: LazyLock<Mutex<HashMap<String, Arc<Inner>>>> = LazyLock::new(Default::default);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes local sandboxes: private directories on this machine with real child processes.
/// Not an isolation boundary; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct LocalProvider {
    root: PathBuf,
    host_env: HostEnv,
    /// Bytes of output one code cell may send.
    code_output_cap: usize,
    /// How the sandboxes' processes are confined, and their view.
    confinement: confine::Settings,
}

/// The variables of the host environment a sandbox's processes get by default (besides every
/// `LC_*` locale variable). Credentials such as `E2B_API_KEY` are not among them.
pub const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
];

/// Which variables of the host environment a sandbox's processes get.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostEnv {
    /// [`INHERITED_ENV`], `LC_*`, and these names.
    Listed(std::collections::BTreeSet<String>),
    /// All of it.
    All,
}

impl HostEnv {
    fn passes(&self, name: &std::ffi::OsStr) -> bool {
        match self {
            HostEnv::All => true,
            HostEnv::Listed(extra) => name.to_str().is_some_and(|name| {
                INHERITED_ENV.contains(&name) || name.starts_with("LC_") || extra.contains(name)
            }),
        }
    }
}

impl Default for LocalProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalProvider {
    /// A provider keeping sandboxes under `sandbox-sdk-local-{uid}/` in the system temp
    /// directory: one root per user, created with mode `0700`.
    pub fn new() -> Self {
        let uid = nix::unistd::geteuid();
        Self::with_root(std::env::temp_dir().join(format!("sandbox-sdk-local-{uid}")))
    }

    /// A provider keeping sandbox directories under `root` (created with mode `0700` on first
    /// use). Each create checks that the root is a directory owned by the current user that
    /// neither its group nor others can write to, and otherwise fails with `Validation`: whoever
    /// can write to the root could plant a sandbox's working directory.
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        LocalProvider {
            root: root.into(),
            host_env: HostEnv::Listed(Default::default()),
            code_output_cap: crate::code::kernel::MAX_OUTPUT,
            confinement: confine::Settings::default(),
        }
    }

    /// How the sandboxes this provider creates confine their processes.
    /// [`Confine::Required`](confine::Confine::Required): every layer (namespaces, view,
    /// seccomp, Landlock, limits), or create fails saying which is missing;
    /// [`Confine::BestEffort`](confine::Confine::BestEffort): what this machine offers, the
    /// rest reported by [`confinement`](Self::confinement);
    /// [`Confine::Off`](confine::Confine::Off), for now the default: plain host processes, for
    /// trusted code only (the simulators and suites do not yet all pass confined).
    pub fn confine(mut self, mode: confine::Confine) -> Self {
        self.confinement.mode = mode;
        self
    }

    /// Gives the sandboxes this provider creates the host's network (default: off, a network
    /// namespace with only its own loopback). Preview links need it.
    pub fn network(mut self, on: bool) -> Self {
        self.confinement.network = on;
        self
    }

    /// The resource limits of each confined process (default [`confine::Limits::default`]).
    pub fn limits(mut self, limits: confine::Limits) -> Self {
        self.confinement.limits = limits;
        self
    }

    /// Ends the confined sandboxes this provider creates (and every process in them) when
    /// this process ends, as a test harness or a simulator wants. By default they run on
    /// until destroyed or until their directory is removed, so a later process (another `sbox`
    /// call) finds them running.
    pub fn end_with_process(mut self, on: bool) -> Self {
        self.confinement.tethered = on;
        self
    }

    /// Where a confined sandbox's commands see its work directory, and where the file
    /// primitives map absolute paths under it (default `/home/user`, as on E2B).
    pub fn home(mut self, path: impl Into<String>) -> Self {
        self.confinement.home = path.into();
        self
    }

    /// The layers that confine this provider's sandboxes on this machine, found by making (and
    /// ending) one anchor as create would. `sbox caps -p local` prints it.
    pub async fn confinement(&self) -> Result<confine::Layers> {
        let settings = self.confinement.clone();
        tokio::task::spawn_blocking(move || settings.probe())
            .await
            .map_err(|e| Error::new(ErrorKind::Provider, format!("probe task failed: {e}")))
    }

    /// Also passes these variables of the host environment (when set there) to the processes of
    /// the sandboxes this provider creates, on top of [`INHERITED_ENV`] and `LC_*`. For example
    /// `inherit_env(["CARGO_HOME", "SSL_CERT_FILE"])`. No effect after
    /// [`inherit_all_env`](Self::inherit_all_env).
    pub fn inherit_env<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let HostEnv::Listed(extra) = &mut self.host_env {
            extra.extend(names.into_iter().map(Into::into));
        }
        self
    }

    /// Passes the whole host environment (credentials such as `E2B_API_KEY` included) to the
    /// processes of the sandboxes this provider creates, as a plain child process would get it.
    pub fn inherit_all_env(mut self) -> Self {
        self.host_env = HostEnv::All;
        self
    }

    /// How many bytes of stdout and stderr one `run_code` cell may send before the rest is
    /// dropped and reported (default [`MAX_OUTPUT`](crate::code::kernel::MAX_OUTPUT)).
    pub fn code_output_cap(mut self, bytes: usize) -> Self {
        self.code_output_cap = bytes;
        self
    }

    /// Where this provider creates sandbox directories.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates a sandbox and returns it as its concrete type.
    pub async fn create_local(&self, spec: &CreateSpec) -> Result<LocalSandbox> {
        self.create_inner(spec)
            .await
            .map_err(|e| e.or_context(NAME, "create", None))
    }

    /// Finds a live sandbox of this process by id, as its concrete type.
    pub fn connect_local(&self, id: &str) -> Result<LocalSandbox> {
        match lock(&REGISTRY).get(id) {
            Some(inner) => Ok(LocalSandbox {
                inner: inner.clone(),
            }),
            None => Err(Error::new(
                ErrorKind::NotFound,
                format!("no local sandbox with id {id:?} in this process"),
            )
            .or_context(NAME, "connect", Some(id))),
        }
    }

    /// Finds a sandbox by id in this process, or else adopts the directory a sandbox of an
    /// earlier process left under this provider's root (`<root>/<id>/work` and `state`), so a
    /// later process (a command-line tool run once per command) can reach it. The id must be a
    /// uuid as create makes them; the root gets the same ownership checks as on create, and
    /// the sandbox's directories must be real directories owned by the current user. What the
    /// earlier process kept in memory is not recovered: an adopted sandbox has no metadata, no
    /// create-time environment, and none of the earlier process's background processes.
    pub async fn reopen_local(&self, id: &str) -> Result<LocalSandbox> {
        if let Ok(found) = self.connect_local(id) {
            return Ok(found);
        }
        let not_found = || {
            Error::new(
                ErrorKind::NotFound,
                format!("no local sandbox with id {id:?} under this provider's root"),
            )
            .or_context(NAME, "connect", Some(id))
        };
        let root = self.root.clone();
        let base = root.join(id);
        let (work, state) = (base.join("work"), base.join("state"));
        let settings = self.confinement.clone();
        let checks = {
            let (id, work, base) = (id.to_owned(), work.clone(), base.clone());
            move || -> Result<Option<(u32, SystemTime, fs::Root, confine::Confined)>> {
                let me = nix::unistd::geteuid().as_raw();
                if std::fs::symlink_metadata(&root).is_err() {
                    return Ok(None);
                }
                fs::check_root(&root, me)?;
                let Some(created) = left_sandbox(&root, &id, me) else {
                    return Ok(None);
                };
                let Ok(opened) = fs::Root::open(&work) else {
                    return Ok(None);
                };
                let confined = settings.reopen(&base)?;
                let opened = confined.view_root(opened).map_err(|e| {
                    fs::io_error(e, "cannot open sandbox directory", &base_shown(&base))
                })?;
                Ok(Some((me, created, opened, confined)))
            }
        };
        let found = tokio::task::spawn_blocking(checks)
            .await
            .map_err(|e| Error::new(ErrorKind::Provider, format!("connect task failed: {e}")))??;
        let Some((uid, created_at, opened, confined)) = found else {
            return Err(not_found());
        };
        let inner = Arc::new(Inner {
            id: id.to_owned(),
            base,
            work,
            root: Arc::new(opened),
            state,
            uid,
            created_at,
            updated_at: Mutex::new(created_at),
            last_activity: Mutex::new(None),
            history: Mutex::new(Vec::new()),
            metadata: BTreeMap::new(),
            env: BTreeMap::new(),
            host_env: self.host_env.clone(),
            idempotency_key: None,
            destroyed: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            processes: Mutex::new(BTreeMap::new()),
            next_output: std::sync::atomic::AtomicU64::new(0),
            ended_groups: Default::default(),
            kernels: EmulatedKernels::with_max_output(self.code_output_cap),
            confined,
        });
        let inner = lock(&REGISTRY)
            .entry(id.to_owned())
            .or_insert(inner)
            .clone();
        Ok(LocalSandbox { inner })
    }

    async fn create_inner(&self, spec: &CreateSpec) -> Result<LocalSandbox> {
        if let Some(template) = &spec.template {
            return Err(Error::new(
                ErrorKind::NotSupported,
                format!("local sandboxes have no templates (asked for {template:?})"),
            ));
        }
        for (key, value) in &spec.env {
            crate::exec::validate_env_name(key)?;
            if value.contains('\0') {
                return Err(Error::validation(format!(
                    "value of environment variable {key} contains a NUL byte"
                )));
            }
        }
        if let Some(existing) = find_by_key(&lock(&REGISTRY), spec) {
            return Ok(existing);
        }
        let root = self.root.clone();
        let id = uuid::Uuid::new_v4().to_string();
        let base = root.join(&id);
        let (work, state) = (base.join("work"), base.join("state"));
        let settings = self.confinement.clone();
        let dirs = {
            let (base, work, state) = (base.clone(), work.clone(), state.clone());
            move || -> Result<(u32, fs::Root, confine::Confined)> {
                use std::os::unix::fs::DirBuilderExt;
                let me = nix::unistd::geteuid().as_raw();
                // A root that exists is checked first, so a problem with it (say a dangling
                // link of someone else's, where mkdir says only "File exists") is named.
                if std::fs::symlink_metadata(&root).is_ok() {
                    fs::check_root(&root, me)?;
                }
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&root)
                    .map_err(|e| {
                        fs::io_error(e, "cannot create sandbox root", &base_shown(&root))
                    })?;
                fs::check_root(&root, me)?;
                let mut builder = std::fs::DirBuilder::new();
                builder.mode(0o700);
                for dir in [&base, &work, &state] {
                    builder.create(dir).map_err(|e| {
                        fs::io_error(e, "cannot create sandbox directory", &base_shown(dir))
                    })?;
                }
                let confined = match settings.start(&base) {
                    Ok(confined) => confined,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&base);
                        return Err(e);
                    }
                };
                let opened = fs::Root::open(&work)
                    .and_then(|root| confined.view_root(root))
                    .map_err(|e| {
                        fs::io_error(e, "cannot open sandbox directory", &base_shown(&work))
                    })?;
                Ok((me, opened, confined))
            }
        };
        let (uid, opened, confined) = tokio::task::spawn_blocking(dirs)
            .await
            .map_err(|e| Error::new(ErrorKind::Provider, format!("create task failed: {e}")))??;
        let inner = Arc::new(Inner {
            id: id.clone(),
            base,
            work,
            root: Arc::new(opened),
            state,
            uid,
            created_at: SystemTime::now(),
            updated_at: Mutex::new(SystemTime::now()),
            last_activity: Mutex::new(None),
            history: Mutex::new(vec![crate::lifecycle::StateChange {
                at: SystemTime::now(),
                state: SandboxState::Running,
            }]),
            metadata: spec.metadata.clone(),
            env: spec.env.clone(),
            host_env: self.host_env.clone(),
            idempotency_key: spec.idempotency_key.clone(),
            destroyed: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            processes: Mutex::new(BTreeMap::new()),
            next_output: std::sync::atomic::AtomicU64::new(0),
            ended_groups: Default::default(),
            kernels: EmulatedKernels::with_max_output(self.code_output_cap),
            confined,
        });
        let existing = {
            let mut registry = lock(&REGISTRY);
            // A concurrent create under the same key may have won the race: keep its sandbox.
            let existing = find_by_key(&registry, spec);
            if existing.is_none() {
                registry.insert(id, inner.clone());
            }
            existing
        };
        match existing {
            Some(existing) => {
                let _ = tokio::fs::remove_dir_all(&inner.base).await;
                Ok(existing)
            }
            None => Ok(LocalSandbox { inner }),
        }
    }
}

/// When the sandbox `id` under `root` was made, if `<root>/<id>` is a sandbox's directory as
/// create makes them: `id` a uuid in the form create writes, and `<root>/<id>`, its `work`
/// and its `state` real directories (not links) owned by `me`. The time is the directory's
/// modification time, which later changes leave alone (its entries never change). The root
/// itself is the caller's to check ([`fs::check_root`]).
fn left_sandbox(root: &Path, id: &str, me: u32) -> Option<SystemTime> {
    use std::os::unix::fs::MetadataExt;
    let parsed = uuid::Uuid::parse_str(id).ok()?;
    if parsed.hyphenated().to_string() != id {
        return None;
    }
    let base = root.join(id);
    let mut created = None;
    for dir in [base.clone(), base.join("work"), base.join("state")] {
        let meta = std::fs::symlink_metadata(&dir).ok()?;
        if !meta.is_dir() || meta.uid() != me {
            return None;
        }
        created.get_or_insert_with(|| meta.modified().unwrap_or_else(|_| SystemTime::now()));
    }
    created
}

/// Every sandbox directory under `root` ([`left_sandbox`]), with when each was made. A root
/// that does not exist holds none; one that fails create's checks is an error.
fn left_sandboxes(root: &Path) -> Result<Vec<(String, SystemTime)>> {
    let me = nix::unistd::geteuid().as_raw();
    if std::fs::symlink_metadata(root).is_err() {
        return Ok(Vec::new());
    }
    fs::check_root(root, me)?;
    let entries = std::fs::read_dir(root)
        .map_err(|e| fs::io_error(e, "cannot list sandbox root", &base_shown(root)))?;
    Ok(entries
        .filter_map(|entry| {
            let id = entry.ok()?.file_name().into_string().ok()?;
            let created = left_sandbox(root, &id, me)?;
            Some((id, created))
        })
        .collect())
}

/// How a sandbox directory an earlier process left shows in a listing: what
/// [`LocalProvider::reopen_local`] would adopt, running, without the earlier process's
/// metadata.
fn left_info(id: &str, created: SystemTime) -> SandboxInfo {
    let state = SandboxState::Running;
    let mut info = SandboxInfo::new(id, NAME, state);
    info.raw_state = Some(state.as_str().to_owned());
    info.created_at = Some(created);
    info.updated_at = Some(created);
    info
}

/// The live sandbox made under `spec`'s idempotency key, if any.
fn find_by_key(registry: &HashMap<String, Arc<Inner>>, spec: &CreateSpec) -> Option<LocalSandbox> {
    let key = spec.idempotency_key.as_deref()?;
    registry
        .values()
        .find(|i| i.idempotency_key.as_deref() == Some(key))
        .map(|inner| LocalSandbox {
            inner: inner.clone(),
        })
}

fn base_shown(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn create(&self, spec: &CreateSpec) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.create_local(spec).await?))
    }

    async fn connect(&self, id: &str) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.connect_local(id)?))
    }

    /// Lists the live sandboxes of this process and, as [`LocalProvider::reopen_local`] would
    /// adopt them, the sandbox directories earlier processes left under this provider's root
    /// (without their metadata, so a label filter passes them by), oldest first.
    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let (root, filter) = (self.root.clone(), filter.clone());
        let listed = async move {
            let left = tokio::task::spawn_blocking(move || left_sandboxes(&root))
                .await
                .map_err(|e| Error::new(ErrorKind::Provider, format!("list task failed: {e}")))?
                .map_err(|e| e.or_context(NAME, "list", None))?;
            let mut infos: Vec<SandboxInfo> =
                lock(&REGISTRY).values().map(|inner| inner.info()).collect();
            for (id, created) in left {
                if !infos.iter().any(|info| info.id == id) {
                    infos.push(left_info(&id, created));
                }
            }
            infos.retain(|info| filter.matches(info));
            infos.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
            Ok(infos)
        };
        let items = |listed: Result<Vec<SandboxInfo>>| {
            futures::stream::iter(match listed {
                Ok(infos) => infos.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            })
        };
        Box::pin(futures::StreamExt::flat_map(
            futures::stream::once(listed),
            items,
        ))
    }

    /// Destroys a live sandbox of this process by id, as [`Sandbox::destroy`] does.
    async fn destroy(&self, id: &str) -> Result<()> {
        self.connect_local(id)?.destroy().await
    }

    async fn find_by_idempotency_key(&self, key: &str) -> Result<Option<SandboxInfo>> {
        let spec = CreateSpec {
            idempotency_key: Some(key.to_owned()),
            ..CreateSpec::default()
        };
        Ok(find_by_key(&lock(&REGISTRY), &spec).map(|sandbox| sandbox.inner.info()))
    }

    /// `usage` is unsupported: a local sandbox costs nothing to meter. The client's emulation
    /// estimates running time from the listing.
    async fn usage(
        &self,
        sandbox: &SandboxInfo,
        _to: std::time::SystemTime,
    ) -> Result<crate::fleet::Usage> {
        Err(Error::not_supported(NAME, "usage").with_sandbox_id(&sandbox.id))
    }

    /// Unsupported: a local sandbox is a directory on this machine, with no image to build.
    async fn prepare(&self, _spec: &crate::fleet::PrepareSpec) -> Result<crate::fleet::Prepared> {
        Err(Error::not_supported(NAME, "prepare"))
    }
}

/// One local sandbox. Handles are cheap to clone and share the sandbox; dropping one does not
/// destroy it (call [`Sandbox::destroy`]).
#[derive(Clone)]
pub struct LocalSandbox {
    inner: Arc<Inner>,
}

impl fmt::Debug for LocalSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalSandbox")
            .field("id", &self.inner.id)
            .field("dir", &self.inner.work)
            .field("destroyed", &self.inner.destroyed.load(Ordering::SeqCst))
            .finish()
    }
}

struct Inner {
    id: String,
    /// `<root>/<id>`: removed by destroy.
    base: PathBuf,
    /// The user-visible directory and default cwd.
    work: PathBuf,
    /// `work`, held open: every file primitive resolves beneath it.
    root: Arc<fs::Root>,
    /// Background output files.
    state: PathBuf,
    /// The uid owning the sandbox (the current user).
    uid: u32,
    created_at: SystemTime,
    /// When it was last created, paused or resumed (`SandboxInfo::updated_at`).
    updated_at: Mutex<SystemTime>,
    /// When a command was last started in it (`SandboxInfo::last_activity_at`).
    last_activity: Mutex<Option<SystemTime>>,
    /// Its state changes in this process (`SandboxInfo::history`).
    history: Mutex<Vec<crate::lifecycle::StateChange>>,
    metadata: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    idempotency_key: Option<String>,
    /// What its processes get from the host environment.
    host_env: HostEnv,
    destroyed: AtomicBool,
    paused: AtomicBool,
    /// Every process started and not yet forgotten, by pid.
    processes: Mutex<BTreeMap<u32, Arc<ProcState>>>,
    next_output: std::sync::atomic::AtomicU64,
    /// The process groups whose leaders have been reaped (for destroy's sweep).
    ended_groups: Arc<Mutex<Vec<process::EndedGroup>>>,
    /// The code contexts, run by core's emulated kernel over exec with stdin.
    kernels: EmulatedKernels,
    /// What confines its processes.
    confined: confine::Confined,
}

impl Inner {
    fn info(&self) -> SandboxInfo {
        let state = if self.destroyed.load(Ordering::SeqCst) {
            SandboxState::Destroyed
        } else if self.paused.load(Ordering::SeqCst) {
            SandboxState::Paused
        } else {
            SandboxState::Running
        };
        let mut info = SandboxInfo::new(&self.id, NAME, state);
        info.raw_state = Some(state.as_str().to_owned());
        info.metadata = self.metadata.clone();
        info.created_at = Some(self.created_at);
        info.updated_at = Some(*lock(&self.updated_at));
        info.last_activity_at = *lock(&self.last_activity);
        info.history = lock(&self.history).clone();
        info
    }

    fn alive(&self) -> Result<()> {
        if self.destroyed.load(Ordering::SeqCst) {
            Err(self.destroyed_error())
        } else {
            Ok(())
        }
    }

    fn destroyed_error(&self) -> Error {
        Error::new(
            ErrorKind::NotFound,
            format!("sandbox {} was destroyed", self.id),
        )
    }

    fn running(&self) -> Result<()> {
        self.alive()?;
        if self.paused.load(Ordering::SeqCst) {
            Err(Error::new(
                ErrorKind::NotRunning,
                format!("sandbox {} is paused; resume it first", self.id),
            ))
        } else {
            Ok(())
        }
    }

    /// Resolves a command's working directory: relative against the work directory, absolute
    /// as a host path. Commands are not confined; file primitives are (see [`fs`]).
    fn resolve_cwd(&self, path: &str) -> Result<PathBuf> {
        validate_path(path)?;
        let p = Path::new(path);
        Ok(if p.is_absolute() {
            p.to_owned()
        } else {
            self.work.join(p)
        })
    }

    fn forget(&self, pid: u32) {
        lock(&self.processes).remove(&pid);
    }

    fn signal_all(&self, signal: Signal) {
        let states: Vec<Arc<ProcState>> = lock(&self.processes).values().cloned().collect();
        for state in states {
            let _ = state.signal_group(signal);
        }
        self.confined.signal_members(signal);
    }

    fn is_current_user(&self, user: &str) -> bool {
        if user == self.uid.to_string() {
            return true;
        }
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        passwd.lines().any(|line| {
            let mut fields = line.split(':');
            let name = fields.next();
            let uid = fields.nth(1);
            name == Some(user) && uid == Some(self.uid.to_string().as_str())
        })
    }

    async fn exec(self: &Arc<Self>, command: &Command) -> Result<Process> {
        command.validate()?;
        self.running()?;
        *lock(&self.last_activity) = Some(SystemTime::now());
        if command.pty.is_some() {
            return Err(Error::not_supported(NAME, "pty"));
        }
        if let Some(user) = &command.user
            && !self.is_current_user(user)
        {
            return Err(Error::new(
                ErrorKind::NotSupported,
                format!("local sandboxes run commands as the current user only, not as {user:?}"),
            ));
        }
        let (cwd, cwd_shown) = match &command.cwd {
            Some(c) => (self.resolve_cwd(c)?, c.clone()),
            None => (self.work.clone(), ".".to_owned()),
        };
        // Confined, the cwd is a path inside the view; only one under home or /tmp can be
        // checked from here (any other is left to the command's start).
        let inside = self
            .confined
            .anchor
            .as_ref()
            .map(|_| self.confined.inside_cwd(command.cwd.as_deref()));
        let check = match &inside {
            Some(path) => self.confined.host_path(path),
            None => Some(cwd.clone()),
        };
        let checked = match check {
            Some(cwd) => tokio::fs::metadata(&cwd).await.map(Some),
            None => Ok(None),
        };
        match checked {
            Ok(None) => {}
            Ok(Some(m)) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::validation(format!(
                    "working directory {cwd_shown} is not a directory"
                )));
            }
            Err(e) => return Err(fs::io_error(e, "working directory", &cwd_shown)),
        }
        let program = &command.argv[0];
        let confined_env = self.confined.env();
        let mut cmd = std::process::Command::new(program);
        {
            use std::os::unix::process::CommandExt;
            if self.host_env != HostEnv::All {
                cmd.env_clear()
                    .envs(std::env::vars_os().filter(|(name, _)| self.host_env.passes(name)));
            }
            cmd.args(&command.argv[1..]);
            match (&self.confined.anchor, &inside) {
                (Some(anchor), Some(inside)) => {
                    cmd.envs(confined_env);
                    anchor
                        .confine(&mut cmd, inside)
                        .map_err(|e| fs::io_error(e, "working directory", &cwd_shown))?;
                }
                _ => {
                    cmd.current_dir(&cwd);
                }
            }
            cmd.envs(&self.env)
                .envs(&command.env)
                .env(SANDBOX_MARKER, &self.id)
                .process_group(0)
                .stdin(if command.stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                });
        }
        let spawn_error = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => Error::new(
                ErrorKind::NotFound,
                format!("program {program:?} not found"),
            )
            .with_source(e),
            _ => fs::io_error(e, "cannot start program", program),
        };
        // Background children are spawned with std and reaped by a dedicated thread, so their
        // exit is recorded even after the runtime that started them is gone. Foreground children
        // are tokio children whose pipes the event stream reads.
        let (spawned, output_files) = if command.background {
            let n = self.next_output.fetch_add(1, Ordering::SeqCst);
            let out = self.state.join(format!("{n}.stdout"));
            let err = self.state.join(format!("{n}.stderr"));
            let create = |p: &Path| {
                std::fs::File::create(p)
                    .map_err(|e| fs::io_error(e, "cannot create output file", &base_shown(p)))
            };
            cmd.stdout(create(&out)?).stderr(create(&err)?);
            let child = cmd.spawn().map_err(spawn_error)?;
            (Spawned::Background(child), Some((out, err)))
        } else {
            let mut cmd = tokio::process::Command::from(cmd);
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            (Spawned::Foreground(cmd.spawn().map_err(spawn_error)?), None)
        };
        let pid = match &spawned {
            Spawned::Background(child) => Some(child.id()),
            Spawned::Foreground(child) => child.id(),
        };
        let Some(pid) = pid else {
            return Err(Error::new(
                ErrorKind::Provider,
                format!("program {program:?} exited before its pid was known"),
            ));
        };
        let pgid = i32::try_from(pid)
            .map_err(|_| Error::new(ErrorKind::Provider, format!("pid {pid} out of range")))?;
        let state = Arc::new(
            ProcState::new(
                pgid,
                command.argv.clone(),
                command.describe(),
                cwd_shown,
                command.tag.clone(),
                output_files,
                command.timeout,
            )
            .recording_to(self.ended_groups.clone()),
        );
        lock(&self.processes).insert(pid, state.clone());
        // Destroy sets the flag before it kills what it finds in the table: either it saw this
        // process, or we see the flag now.
        if self.destroyed.load(Ordering::SeqCst) {
            let _ = state.signal_group(Signal::SIGKILL);
            if let Spawned::Background(child) = spawned {
                process::reap_in_background(child, state.clone(), None);
            }
            self.forget(pid);
            return Err(self.destroyed_error());
        }
        let watchdog = process::watchdog(&state);
        let control = Arc::new(GroupControl(state.clone(), self.id.clone()));
        let mut child = match spawned {
            Spawned::Foreground(child) => child,
            Spawned::Background(mut child) => {
                let stdin = child.stdin.take();
                process::reap_in_background(child, state.clone(), watchdog);
                let stdin = match stdin {
                    Some(s) => Some(Stdin::new(
                        tokio::process::ChildStdin::from_std(s)
                            .map_err(|e| fs::io_error(e, "cannot open stdin of", program))?,
                    )),
                    None => None,
                };
                let (out, err) = state.output.clone().unwrap_or_default();
                let (out, err) = (open_output(&out).await?, open_output(&err).await?);
                let events = self.in_context(process::tail_stream(out, err, state), "exec");
                return Ok(
                    Process::new(pid.to_string(), events, stdin, control).with_emulated_streaming()
                );
            }
        };
        let stdin = child.stdin.take().map(Stdin::new);
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = state.signal_group(Signal::SIGKILL);
            self.forget(pid);
            return Err(Error::new(
                ErrorKind::Provider,
                "child started without its output pipes",
            ));
        };
        let weak = Arc::downgrade(self);
        let guard = ForegroundGuard {
            state,
            watchdog,
            on_drop: Some(Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    inner.forget(pid);
                }
            })),
        };
        let events = self.in_context(process::foreground_stream(child, out, err, guard), "exec");
        Ok(Process::new(pid.to_string(), events, stdin, control))
    }

    /// Adds provider, operation and sandbox id to the errors of an event stream.
    fn in_context(&self, events: EventStream, op: &'static str) -> EventStream {
        let id = self.id.clone();
        Box::pin(futures::StreamExt::map(events, move |event| {
            event.map_err(|e| e.or_context(NAME, op, Some(&id)))
        }))
    }

    /// A process by pid, or else by tag (if several carry it, the one with the highest pid).
    fn find_process(&self, pid: &str) -> Result<Arc<ProcState>> {
        let processes = lock(&self.processes);
        let by_pid = pid.parse::<u32>().ok().and_then(|n| processes.get(&n));
        let by_tag = || {
            processes
                .iter()
                .filter(|(_, state)| state.tag.as_deref() == Some(pid))
                .max_by_key(|(n, _)| **n)
                .map(|(_, state)| state)
        };
        let found = by_pid.or_else(by_tag).cloned();
        drop(processes);
        found.ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("no process {pid:?} in sandbox {}", self.id),
            )
        })
    }

    async fn attach(&self, pid: &str) -> Result<Process> {
        self.alive()?;
        let state = self.find_process(pid)?;
        let Some((out, err)) = &state.output else {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("process {pid} runs in the foreground; its output belongs to its handle"),
            ));
        };
        let mut out = open_output(out).await?;
        let mut err = open_output(err).await?;
        use tokio::io::AsyncSeekExt;
        // Output from now on, as `Sandbox::attach` promises.
        out.seek(std::io::SeekFrom::End(0))
            .await
            .map_err(|e| fs::io_error(e, "cannot read output of process", pid))?;
        err.seek(std::io::SeekFrom::End(0))
            .await
            .map_err(|e| fs::io_error(e, "cannot read output of process", pid))?;
        let real_pid = state.pgid.to_string();
        let control = Arc::new(GroupControl(state.clone(), self.id.clone()));
        let events = self.in_context(process::tail_stream(out, err, state), "attach");
        Ok(Process::new(real_pid, events, None, control).with_emulated_streaming())
    }
}

/// A freshly spawned child, before it is handed to its reader or reaper.
enum Spawned {
    Foreground(tokio::process::Child),
    Background(std::process::Child),
}

async fn open_output(path: &Path) -> Result<tokio::fs::File> {
    tokio::fs::File::open(path)
        .await
        .map_err(|e| fs::io_error(e, "cannot open output file", &base_shown(path)))
}

impl LocalSandbox {
    /// The sandbox's working directory on the host (relative paths resolve against it).
    pub fn dir(&self) -> &Path {
        &self.inner.work
    }

    fn ctx(&self, op: &str) -> impl FnOnce(Error) -> Error + '_ {
        let id = self.inner.id.as_str();
        let op = op.to_owned();
        move |e| e.or_context(NAME, &op, Some(id))
    }

    fn unsupported<T>(&self, op: &str) -> Result<T> {
        Err(Error::not_supported(NAME, op).with_sandbox_id(&self.inner.id))
    }

    async fn files_op<T, F, Fut>(&self, op: &str, f: F) -> Result<T>
    where
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        async {
            self.inner.alive()?;
            f(self.inner.clone()).await
        }
        .await
        .map_err(self.ctx(op))
    }

    async fn destroy_inner(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.destroyed.swap(true, Ordering::SeqCst) {
            return inner.alive();
        }
        lock(&REGISTRY).remove(&inner.id);
        // Confined, ending the anchor ends every process of the sandbox.
        inner.confined.end();
        // Stop and kill what /proc shows to be ours first, while the ppid links of the whole
        // tree are intact, then the groups whose leaders are still unreaped.
        let live: Vec<i32> = lock(&inner.processes)
            .values()
            .filter(|s| s.finished().is_none())
            .map(|s| s.pgid)
            .collect();
        let ended = lock(&inner.ended_groups).clone();
        let id = inner.id.clone();
        let _ =
            tokio::task::spawn_blocking(move || process::sweep(SANDBOX_MARKER, &id, &live, &ended))
                .await;
        inner.signal_all(Signal::SIGKILL);
        let base = inner.base.clone();
        // A dying process may still create a file for a moment; try a few times.
        let mut last = None;
        for _ in 0..5 {
            match tokio::fs::remove_dir_all(&base).await {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        match last {
            Some(e) => Err(fs::io_error(
                e,
                "cannot remove sandbox directory",
                &base_shown(&base),
            )),
            None => Ok(()),
        }
    }

    fn set_paused(&self, paused: bool) -> Result<()> {
        let inner = &self.inner;
        inner.alive()?;
        inner.paused.store(paused, Ordering::SeqCst);
        let now = SystemTime::now();
        *lock(&inner.updated_at) = now;
        lock(&inner.history).push(crate::lifecycle::StateChange {
            at: now,
            state: if paused {
                SandboxState::Paused
            } else {
                SandboxState::Running
            },
        });
        let states: Vec<Arc<ProcState>> = lock(&inner.processes).values().cloned().collect();
        let signal = if paused {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        for state in states.iter().filter(|s| s.finished().is_none()) {
            state.signal_group(signal)?;
        }
        // Confined, also what left its group: every process of the sandbox's PID namespace.
        inner.confined.signal_members(signal);
        Ok(())
    }
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn provider(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn info(&self) -> Result<SandboxInfo> {
        self.inner.alive().map_err(self.ctx("info"))?;
        Ok(self.inner.info())
    }

    async fn exec(&self, command: &Command) -> Result<Process> {
        self.inner.exec(command).await.map_err(self.ctx("exec"))
    }

    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.inner.alive().map_err(self.ctx("processes"))?;
        let procs = lock(&self.inner.processes);
        Ok(procs
            .iter()
            .filter(|(_, s)| s.output.is_some())
            .map(|(pid, s)| ProcessInfo {
                pid: pid.to_string(),
                tag: s.tag.clone(),
                argv: s.argv.clone(),
                cwd: Some(s.cwd.clone()),
                running: s.finished().is_none(),
            })
            .collect())
    }

    async fn attach(&self, pid: &str) -> Result<Process> {
        self.inner.attach(pid).await.map_err(self.ctx("attach"))
    }

    async fn kill_process(&self, pid: &str) -> Result<()> {
        let inner = &self.inner;
        async {
            inner.alive()?;
            let state = inner.find_process(pid)?;
            if state.finished().is_none() {
                state.signal_group(Signal::SIGKILL)?;
            }
            Ok(())
        }
        .await
        .map_err(self.ctx("kill_process"))
    }

    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        self.files_op("upload", |inner| async move {
            validate_path(path)?;
            let bytes = fs::write_from(&inner.root, path, body).await?;
            Ok(Transfer {
                bytes,
                emulated: false,
            })
        })
        .await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        self.files_op("write_file", |inner| async move {
            validate_path(path)?;
            let bytes = fs::write_from(&inner.root, path, &data[..]).await?;
            Ok(Transfer {
                bytes,
                emulated: false,
            })
        })
        .await
    }

    async fn download(&self, path: &str) -> Result<Download> {
        let id = self.inner.id.clone();
        self.files_op("download", |inner| async move {
            validate_path(path)?;
            let stream = fs::download(&inner.root, path).await?;
            let stream = futures::TryStreamExt::map_err(stream, move |e| {
                e.or_context(NAME, "download", Some(&id))
            });
            Ok(Download::new(Box::pin(stream)))
        })
        .await
    }

    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        self.files_op("list_files", |inner| async move {
            validate_path(path)?;
            fs::list(&inner.root, path, options.depth.max(1)).await
        })
        .await
    }

    async fn stat(&self, path: &str) -> Result<FileInfo> {
        self.files_op("stat", |inner| async move {
            validate_path(path)?;
            fs::stat(&inner.root, path).await
        })
        .await
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        self.files_op("mkdir", |inner| async move {
            validate_path(path)?;
            fs::mkdir(&inner.root, path).await
        })
        .await
    }

    /// Removes a file, a link (never what it points to) or a tree (following no link in it);
    /// never the working directory itself.
    async fn remove(&self, path: &str) -> Result<()> {
        self.files_op("remove", |inner| async move {
            validate_path(path)?;
            fs::remove(&inner.root, path).await
        })
        .await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.files_op("rename", |inner| async move {
            validate_path(from)?;
            validate_path(to)?;
            fs::rename(&inner.root, from, to).await
        })
        .await
    }

    async fn watch(&self, _path: &str, _recursive: bool) -> Result<FileEventStream> {
        self.unsupported("watch")
    }

    async fn stop(&self) -> Result<()> {
        self.unsupported("stop")
    }

    /// Sends `SIGSTOP` to every process group of the sandbox; `exec` then fails until resumed.
    async fn pause(&self) -> Result<()> {
        self.set_paused(true).map_err(self.ctx("pause"))
    }

    /// Sends `SIGCONT` to every process group of the sandbox.
    async fn resume(&self) -> Result<()> {
        self.set_paused(false).map_err(self.ctx("resume"))
    }

    /// Kills every process of the sandbox (foreground and background), removes its directory and
    /// forgets it. A second destroy is `NotFound`.
    async fn destroy(&self) -> Result<()> {
        self.destroy_inner().await.map_err(self.ctx("destroy"))
    }

    async fn set_timeout(&self, _timeout: Duration) -> Result<()> {
        self.unsupported("set_timeout")
    }

    /// `http://127.0.0.1:{port}`, no token: the port is the host's own. A confined sandbox
    /// without network ([`LocalProvider::network`]) has no port the host can reach:
    /// `NotSupported`.
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        async {
            self.inner.alive()?;
            if port == 0 {
                return Err(Error::validation("port 0 cannot be exposed"));
            }
            if self.inner.confined.network_off() {
                return Err(Error::new(
                    ErrorKind::NotSupported,
                    format!(
                        "local sandbox {} has no network, so the host cannot reach its ports; \
                         LocalProvider::network(true) gives new sandboxes the host's",
                        self.inner.id
                    ),
                ));
            }
            Ok(PreviewLink {
                url: format!("http://127.0.0.1:{port}"),
                port,
                headers: BTreeMap::new(),
                token: None,
                expires_at: None,
            })
        }
        .await
        .map_err(self.ctx("preview_link"))
    }

    async fn ssh_access(&self, _ttl: Duration) -> Result<SshAccess> {
        self.unsupported("ssh_access")
    }

    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        self.unsupported("fork")
    }

    async fn snapshot(&self, _name: Option<&str>) -> Result<SnapshotInfo> {
        self.unsupported("snapshot")
    }

    async fn metrics(&self) -> Result<Metrics> {
        self.unsupported("metrics")
    }

    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.inner.kernels.create_context(self, spec).await
    }

    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.inner.kernels.list_contexts().await
    }

    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.inner.kernels.restart_context(self, id).await
    }

    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.inner.kernels.remove_context(self, id).await
    }

    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.inner.kernels.run_code(self, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProviderExt;

    /// Makes `<root>/<id>/work` and `state`, as a create of an earlier process left them.
    fn left_behind(root: &Path, id: &str) {
        for sub in ["work", "state"] {
            std::fs::create_dir_all(root.join(id).join(sub)).unwrap();
        }
    }

    #[tokio::test]
    async fn list_shows_sandboxes_an_earlier_process_left_under_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let provider = LocalProvider::with_root(&root);
        let earlier = "4fa07d69-c085-4b1b-a3d4-8b5c9f1e2d34";
        left_behind(&root, earlier);
        // Not sandboxes: no uuid, a half-made directory, a link to a directory elsewhere.
        left_behind(&root, "not-a-uuid");
        std::fs::create_dir_all(root.join("5ab18e7a-d196-4c2c-b4e5-9c6d0a2f3e45/work")).unwrap();
        left_behind(dir.path(), "elsewhere");
        std::os::unix::fs::symlink(
            dir.path().join("elsewhere"),
            root.join("6bc29f8b-e2a7-4d3d-85f6-0d7e1b3a4f56"),
        )
        .unwrap();
        let ours = provider
            .create_local(&CreateSpec::new().metadata("suite", "list-on-disk"))
            .await
            .unwrap();

        let listed = provider.list_all(&ListFilter::new()).await.unwrap();
        let ids: Vec<&str> = listed.iter().map(|i| i.id.as_str()).collect();
        assert!(ids.contains(&earlier), "{ids:?}");
        assert_eq!(
            ids.iter().filter(|id| **id == ours.id()).count(),
            1,
            "{ids:?}"
        );
        for absent in [
            "not-a-uuid",
            "5ab18e7a-d196-4c2c-b4e5-9c6d0a2f3e45",
            "6bc29f8b-e2a7-4d3d-85f6-0d7e1b3a4f56",
        ] {
            assert!(!ids.contains(&absent), "{ids:?}");
        }
        let info = listed.iter().find(|i| i.id == earlier).unwrap();
        assert_eq!(info.state, SandboxState::Running);
        assert_eq!(info.provider, "local");
        assert!(info.created_at.is_some());
        // What only the earlier process knew (its labels) is gone, so label filters pass it by.
        let labelled = provider
            .list_all(&ListFilter::new().metadata("suite", "list-on-disk"))
            .await
            .unwrap();
        assert_eq!(labelled.len(), 1);
        assert_eq!(labelled[0].id, ours.id());

        // The listing matches what adopting the directory shows.
        let adopted = provider.reopen_local(earlier).await.unwrap();
        assert_eq!(adopted.info().await.unwrap().created_at, info.created_at);
        adopted.destroy().await.unwrap();
        ours.destroy().await.unwrap();
        let ids: Vec<String> = provider
            .list_all(&ListFilter::new())
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert!(
            !ids.iter().any(|id| id == earlier || id == ours.id()),
            "{ids:?}"
        );
    }
}
