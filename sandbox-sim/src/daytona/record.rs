//! One sandbox as the control plane keeps it, and what time does to it: transitions landing,
//! auto-stop, the TTL.

use super::session::Session;
use sandbox_sdk_core::Sandbox;
use sandbox_sdk_core::local::LocalSandbox;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// States a sandbox passes through on its way somewhere else (lifecycle calls get 409).
pub(super) const TRANSITIONAL: &[&str] = &[
    "creating",
    "starting",
    "stopping",
    "pausing",
    "resuming",
    "archiving",
    "restoring",
    "destroying",
    "snapshotting",
    "forking",
];

/// One interpreter context (`interpreter.rs`): what the daemon shows, and the backing
/// sandbox's context behind it.
#[derive(Clone)]
pub(crate) struct InterpreterContext {
    pub cwd: String,
    pub created_at: SystemTime,
    pub local_id: String,
}

/// The interpreter contexts of one sandbox, by id.
#[derive(Default)]
pub(crate) struct InterpreterContexts {
    pub by_id: tokio::sync::Mutex<BTreeMap<String, InterpreterContext>>,
}

/// One sandbox as the API keeps it.
pub(crate) struct Record {
    pub(super) seq: u64,
    pub id: String,
    pub(super) name: String,
    pub(super) spec: Map<String, Value>,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) env: BTreeMap<String, String>,
    pub state: &'static str,
    pub(super) desired: &'static str,
    /// The state the current transition lands in, and when.
    pub(super) pending: Option<(&'static str, Instant)>,
    pub(super) auto_stop: i64,
    pub(super) auto_pause: i64,
    pub(super) auto_archive: i64,
    pub(super) auto_delete: i64,
    pub(super) auto_destroy_at: Option<SystemTime>,
    pub(super) created_at: SystemTime,
    pub(super) updated_at: SystemTime,
    pub(super) last_activity: SystemTime,
    pub(super) last_activity_instant: Instant,
    pub backing: LocalSandbox,
    /// Its files as the toolbox sees them: the working directory shown at its own (host)
    /// path, every other absolute path in a root of the sandbox's own ([`crate::disk`]).
    pub disk: crate::disk::Disk,
    pub preview_token: String,
    pub(super) signed: Vec<(String, u16, SystemTime)>,
    pub(super) ssh: Option<(String, SystemTime)>,
    pub sessions: HashMap<String, Arc<Session>>,
    /// Host pids of running `process/execute` commands (killed on stop).
    pub executing: Vec<String>,
    /// The interpreter's contexts.
    pub interpreter: std::sync::Arc<InterpreterContexts>,
}

impl Record {
    /// A sandbox just created from `spec` (its resources and options as the DTO shows them),
    /// with the default intervals and a fresh preview token.
    pub(super) fn new(
        id: String,
        name: String,
        spec: Map<String, Value>,
        labels: BTreeMap<String, String>,
        env: BTreeMap<String, String>,
        backing: LocalSandbox,
    ) -> Record {
        let now = SystemTime::now();
        Record {
            seq: 0,
            id,
            name,
            spec,
            labels,
            env,
            state: "creating",
            desired: "started",
            pending: None,
            auto_stop: 15,
            auto_pause: 0,
            auto_archive: 10080,
            auto_delete: -1,
            auto_destroy_at: None,
            created_at: now,
            updated_at: now,
            last_activity: now,
            last_activity_instant: Instant::now(),
            disk: crate::disk::Disk::new(backing.dir(), &backing.dir().to_string_lossy()),
            backing,
            preview_token: super::random_token(32),
            signed: Vec::new(),
            ssh: None,
            sessions: HashMap::new(),
            executing: Vec::new(),
            interpreter: Default::default(),
        }
    }

    pub(super) fn set_state(
        &mut self,
        state: &'static str,
        desired: &'static str,
        lands: Option<(&'static str, Duration)>,
    ) {
        self.state = state;
        self.desired = desired;
        self.pending = lands.map(|(to, after)| (to, Instant::now() + after));
        self.updated_at = SystemTime::now();
    }

    pub(super) fn in_transition(&self) -> bool {
        self.pending.is_some() || TRANSITIONAL.contains(&self.state)
    }

    /// The disk size in GB.
    pub fn disk_gb(&self) -> u64 {
        self.spec.get("disk").and_then(Value::as_u64).unwrap_or(3)
    }

    /// Marks toolbox (or keep-alive) traffic: resets the auto-stop idle timer.
    pub fn touch(&mut self) {
        self.last_activity = SystemTime::now();
        self.last_activity_instant = Instant::now();
    }
}

/// What settling a sandbox's time-driven changes asks for.
pub(super) enum Landing {
    Nothing,
    /// The sandbox is gone: forget it (its backing is already being destroyed).
    Gone,
    /// Auto-stop fired: its processes must die.
    Stopped,
    /// The TTL passed or an ephemeral sandbox stopped: destroy it and forget it.
    Expired,
}

/// Applies what time has brought: a transition's landing, auto-stop, the TTL.
pub(super) fn settle(r: &mut Record, now: Instant) -> Landing {
    if let Some((to, at)) = r.pending
        && now >= at
    {
        r.pending = None;
        r.state = to;
        r.updated_at = SystemTime::now();
        match to {
            "destroyed" => return Landing::Gone,
            "stopped" if r.auto_delete == 0 => return Landing::Expired,
            _ => {}
        }
    }
    if r.auto_destroy_at.is_some_and(|at| at <= SystemTime::now()) && r.desired != "destroyed" {
        return Landing::Expired;
    }
    let idle = now.duration_since(r.last_activity_instant);
    if r.state == "started"
        && r.pending.is_none()
        && r.auto_stop > 0
        && idle >= Duration::from_secs(r.auto_stop as u64 * 60)
    {
        r.state = "stopped";
        r.desired = "stopped";
        r.updated_at = SystemTime::now();
        return if r.auto_delete == 0 {
            Landing::Expired
        } else {
            Landing::Stopped
        };
    }
    Landing::Nothing
}

/// Kills every process of the sandbox: its sessions' shells (and so their commands) and its
/// running `process/execute` commands.
pub(crate) fn kill_processes(rt: &tokio::runtime::Handle, r: &mut Record) {
    let backing = r.backing.clone();
    let mut pids: Vec<String> = r.sessions.drain().map(|(_, s)| s.end()).collect();
    pids.append(&mut r.executing);
    if pids.is_empty() {
        return;
    }
    rt.spawn(async move {
        for pid in pids {
            let _ = backing.kill_process(&pid).await;
        }
    });
}

pub(super) fn destroy_backing(rt: &tokio::runtime::Handle, backing: LocalSandbox) {
    rt.spawn(async move {
        let _ = backing.destroy().await;
    });
}

/// Copies the directory tree at `from` into `to` (files, directories, links).
pub(super) fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_symlink() {
            #[cfg(unix)]
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}
