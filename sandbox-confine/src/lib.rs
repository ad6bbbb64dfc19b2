//! Confinement of a local sandbox's processes (Linux): what the `local` provider and every
//! simulator run is kept inside namespaces of its own, a filesystem view, a seccomp filter,
//! Landlock rules and resource limits.
//!
//! Each confined sandbox has an **anchor**: a process cloned (not executed) into new user,
//! mount, PID, IPC and UTS namespaces (and a network namespace with only loopback when network
//! is off). It is PID 1 there: it builds the filesystem view, then only reaps orphans. Its view
//! is a read-only tmpfs root holding read-only binds of the host's system directories (`/usr`,
//! `/bin`, `/lib*`, `/etc` without its secrets, `/opt`), a minimal `/dev`, a fresh `/proc`, and
//! two writable binds: the sandbox's work directory at its home (`/home/user` by default) and
//! its own `tmp` directory at `/tmp`. The host's home, `/root`, `/run`, `/var`, other sandboxes
//! and the provider's state are not in it.
//!
//! Every command joins the anchor's namespaces before it starts (in the forked child, before
//! exec): then it sets its limits, `no_new_privs`, drops every capability (also from the
//! bounding set, so running as root inside gives none back), applies the Landlock rules (read
//! and execute the view, write only under home, `/tmp` and `/dev`) and the seccomp filter, and
//! forks once more, because only a child enters a PID namespace: the child runs the command,
//! the parent (outside, in the command's process group) waits for it and ends the same way, so
//! exit codes and signals read as without confinement. Destroy kills the anchor, which ends
//! every process of the sandbox, however it left its group.
//!
//! The user inside is root (uid 0), mapped to the caller's uid, or, when the caller is root, to
//! [`SANDBOX_UID`]: an unprivileged uid outside, so that the process limit holds (the kernel
//! exempts host root from it) and a remount of a read-only bind cannot write as host root.
//!
//! Code that runs after `clone`/`fork` in a multi-threaded process may only make system calls:
//! everything it needs (paths, the filter, descriptors) is prepared before, and it allocates
//! nothing.

use std::fmt;

#[cfg(target_os = "linux")]
mod anchor;
#[cfg(target_os = "linux")]
pub use anchor::{Anchor, ViewSpec};

/// How the `local` provider (`LocalProvider::confine`) confines what its sandboxes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Confine {
    /// Every layer this module builds, or create fails naming the one that is missing.
    Required,
    /// The layers this machine offers; the rest are reported missing
    /// (`LocalProvider::confinement`) and create goes on.
    BestEffort,
    /// No confinement: commands are ordinary host processes that can read and write whatever
    /// the user can. For trusted code only; the report says so. The default until the
    /// simulators and suites pass confined.
    #[default]
    Off,
}

/// The resource limits of each confined process (`setrlimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Processes (and threads) of the sandbox at once (`RLIMIT_NPROC`, counted per sandbox).
    pub processes: u64,
    /// The largest file a process may write, in bytes (`RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            processes: 1024,
            file_size: 4 << 30,
            open_files: 4096,
        }
    }
}

/// Which layers confine a sandbox's processes, as `LocalProvider::confinement` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layers {
    /// User, mount, PID, IPC and UTS namespaces of its own.
    pub namespaces: bool,
    /// The filesystem view (home, `/tmp`, read-only system directories, nothing else).
    pub filesystem_view: bool,
    /// A network namespace with only loopback (network off).
    pub network_off: bool,
    /// `no_new_privs` and no capabilities.
    pub no_new_privs: bool,
    /// The seccomp filter.
    pub seccomp: bool,
    /// The Landlock ABI whose rules are applied, if any.
    pub landlock_abi: Option<u32>,
    /// Process, file-size and open-file limits.
    pub limits: bool,
    /// Why a layer is missing, one entry per missing layer.
    pub missing: Vec<String>,
}

impl Layers {
    /// True when nothing confines the processes.
    pub fn is_unconfined(&self) -> bool {
        !self.namespaces
    }
}

impl fmt::Display for Layers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unconfined() {
            f.write_str("UNCONFINED: commands run as ordinary host processes")?;
        } else {
            let mut on = vec!["namespaces (user, mount, pid, ipc, uts)"];
            if self.filesystem_view {
                on.push("filesystem view");
            }
            if self.network_off {
                on.push("network off");
            }
            if self.no_new_privs {
                on.push("no_new_privs, no capabilities");
            }
            if self.seccomp {
                on.push("seccomp");
            }
            if self.limits {
                on.push("limits (processes, file size, open files)");
            }
            f.write_str(&on.join(", "))?;
            if let Some(abi) = self.landlock_abi {
                write!(f, ", landlock (ABI {abi})")?;
            }
        }
        for why in &self.missing {
            write!(f, "; missing: {why}")?;
        }
        Ok(())
    }
}

/// The uid (and gid) outside that root inside a sandbox maps to when the caller is root.
pub const SANDBOX_UID: u32 = 0x7000_0000;

/// The `PATH` of a confined command.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
