//! What the simulator holds: named sandboxes (config, disk, current session), sessions (states
//! and their timestamps, commands) and snapshots, and the lifecycle steps between them
//! (PROTOCOL.md §4, §5, §10).

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::output::Cmd;
use super::{CWD, Settings, lock, now_ms};
use crate::{Backing, SimResponse};
use sandbox_sdk_core::local::LocalSandbox;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// `time` as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`), for the `Date` header.
pub(crate) fn http_date(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days.rem_euclid(7)) as usize],
        MONTHS[(month - 1) as usize],
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// `{"error": {"code", "message"}}` with `status` (PROTOCOL.md §13.1).
pub(crate) fn error(status: u16, code: &str, message: &str) -> SimResponse {
    SimResponse::json(
        status,
        &json!({ "error": { "code": code, "message": message } }),
    )
}

/// The code Vercel uses for `status` when nothing more precise applies.
pub(crate) fn code_of(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_unknown",
        410 => "sandbox_stopped",
        413 => "payload_too_large",
        422 => "unprocessable_entity",
        429 => "rate_limited",
        500 => "internal_server_error",
        502 => "bad_gateway",
        503 => "service_unavailable",
        _ => "error",
    }
}

/// A sandbox's disk: its `local` sandbox (whose directory is `/vercel/sandbox`) and where its
/// paths live ([`crate::disk`]: every other absolute path under a private root beside it,
/// removed with the sandbox; links followed inside the sandbox).
#[derive(Clone)]
pub(crate) struct Disk {
    pub local: LocalSandbox,
    /// Where its paths live on the host, and how a path gets there.
    pub files: crate::disk::Disk,
}

impl Disk {
    pub fn new(local: LocalSandbox) -> Disk {
        let files = crate::disk::Disk::new(local.dir(), CWD);
        Disk { local, files }
    }

    /// The host directory behind `/vercel/sandbox`.
    pub fn work(&self) -> &Path {
        self.files.work()
    }

    /// `path` (relative to `base`, itself absolute) as the sandbox shows it, normalised, and
    /// the host path behind it ([`crate::disk::Disk::resolve`]).
    pub fn resolve(&self, base: &str, path: &str) -> (String, std::io::Result<PathBuf>) {
        self.files.resolve(base, path)
    }

    /// Empties the disk (a session of a sandbox that does not persist starts from nothing).
    pub fn wipe(&self) {
        for dir in [self.work(), self.files.root()] {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    let _ = if path.is_dir() && !path.is_symlink() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                }
            }
        }
        self.files.prepare();
    }

    /// Copies the whole disk into `to` (`to/work`, `to/root`).
    pub fn save(&self, to: &Path) -> std::io::Result<()> {
        copy_tree(self.work(), &to.join("work"))?;
        copy_tree(self.files.root(), &to.join("root"))
    }

    /// Replaces the disk with what [`Disk::save`] wrote into `from` (or another disk's
    /// directories).
    pub fn restore(&self, from: &Path) -> std::io::Result<()> {
        self.copy_from(&from.join("work"), &from.join("root"))
    }

    /// Replaces the disk with another one's files.
    pub fn restore_disk(&self, source: &Disk) -> std::io::Result<()> {
        self.copy_from(source.work(), source.files.root())
    }

    fn copy_from(&self, work: &Path, root: &Path) -> std::io::Result<()> {
        self.wipe();
        copy_tree(work, self.work())?;
        if root.exists() {
            copy_tree(root, self.files.root())?;
        }
        Ok(())
    }
}

pub(crate) use crate::copy_tree;

/// A session's life (PROTOCOL.md §5.2, §5.3).
pub(crate) struct Life {
    pub status: &'static str,
    pub requested_at: u64,
    pub started_at: Option<u64>,
    pub requested_stop_at: Option<u64>,
    pub stopped_at: Option<u64>,
    pub snapshotted_at: Option<u64>,
    /// Milliseconds from `startedAt` the session may live.
    pub timeout: u64,
    /// When it stops by itself (the server runtime's clock).
    pub deadline: Instant,
    pub network_policy: Option<Value>,
}

/// One VM run of a sandbox.
pub(crate) struct Session {
    pub id: String,
    pub name: String,
    pub seq: u64,
    pub project: String,
    pub region: String,
    pub vcpus: u32,
    pub memory: u64,
    pub runtime: String,
    pub disk: Disk,
    pub env: BTreeMap<String, String>,
    pub source_snapshot: Option<String>,
    pub routes: Vec<Value>,
    pub life: Mutex<Life>,
    pub commands: Mutex<Vec<Arc<Cmd>>>,
    pub changed: tokio::sync::watch::Sender<u64>,
}

pub(crate) fn is_terminal(status: &str) -> bool {
    matches!(status, "stopped" | "failed" | "aborted")
}

impl Session {
    pub fn status(&self) -> &'static str {
        lock(&self.life).status
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    pub fn to_json(&self) -> Value {
        let life = lock(&self.life);
        let updated = [
            Some(life.requested_at),
            life.started_at,
            life.requested_stop_at,
            life.stopped_at,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(life.requested_at);
        let mut s = json!({
            "id": self.id,
            "projectId": self.project,
            "sourceSandboxName": self.name,
            "status": life.status,
            "memory": self.memory,
            "vcpus": self.vcpus,
            "region": self.region,
            "runtime": self.runtime,
            "timeout": life.timeout,
            "cwd": CWD,
            "requestedAt": life.requested_at,
            "createdAt": life.requested_at,
            "updatedAt": updated,
        });
        let put = |s: &mut Value, k: &str, v: Option<Value>| {
            if let Some(v) = v {
                s[k] = v;
            }
        };
        put(&mut s, "startedAt", life.started_at.map(Value::from));
        put(
            &mut s,
            "requestedStopAt",
            life.requested_stop_at.map(Value::from),
        );
        put(&mut s, "stoppedAt", life.stopped_at.map(Value::from));
        put(
            &mut s,
            "snapshottedAt",
            life.snapshotted_at.map(Value::from),
        );
        if let (Some(start), Some(stop)) = (life.started_at, life.stopped_at) {
            s["duration"] = json!(stop.saturating_sub(start));
            s["activeCpuDurationMs"] = json!(0);
            s["networkTransfer"] = json!({ "ingress": 0, "egress": 0 });
        }
        put(
            &mut s,
            "sourceSnapshotId",
            self.source_snapshot.clone().map(Value::from),
        );
        put(&mut s, "networkPolicy", life.network_policy.clone());
        s
    }

    /// Waits while the session is `pending`; then `Ok` when it runs, or the answer a call that
    /// needs a running VM gets (PROTOCOL.md §5.3).
    pub async fn ready(&self) -> Result<(), SimResponse> {
        let mut rx = self.changed.subscribe();
        loop {
            let status = self.status();
            match status {
                "running" => return Ok(()),
                "pending" => {
                    if rx.changed().await.is_err() {
                        return Err(stopped());
                    }
                }
                "stopping" => {
                    return Err(error(
                        422,
                        "sandbox_stopping",
                        "Sandbox is stopping and is not accepting commands.",
                    ));
                }
                "snapshotting" => {
                    return Err(error(
                        422,
                        "sandbox_snapshotting",
                        "Sandbox is being snapshotted and is not accepting commands.",
                    ));
                }
                _ => return Err(stopped()),
            }
        }
    }

    /// Waits until the session is in a terminal state.
    pub async fn settled(&self) {
        let mut rx = self.changed.subscribe();
        while !is_terminal(self.status()) {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Kills every command still running (the VM goes down).
    pub fn kill_all(&self) {
        let commands: Vec<Arc<Cmd>> = lock(&self.commands).clone();
        for cmd in commands {
            cmd.signal(9);
        }
    }
}

/// The 410 of a call on a stopped session.
pub(crate) fn stopped() -> SimResponse {
    error(
        410,
        "sandbox_stopped",
        "Sandbox has stopped and is not accepting commands.",
    )
}

/// A named sandbox's settings and where it is (PROTOCOL.md §4.5).
pub(crate) struct Cfg {
    pub persistent: bool,
    pub region: String,
    pub vcpus: u32,
    pub memory: u64,
    pub runtime: Option<String>,
    pub image: Option<String>,
    pub timeout: u64,
    pub ports: Vec<u16>,
    pub env: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub network_policy: Option<Value>,
    pub snapshot_expiration: Option<u64>,
    pub keep_last: Option<Value>,
    pub session: Arc<Session>,
    pub current_snapshot: Option<String>,
    /// A snapshot to restore the disk from when the next session starts.
    pub restore: Option<String>,
    pub updated_at: u64,
    pub status_updated_at: u64,
}

/// A named sandbox.
pub(crate) struct Sbx {
    pub name: String,
    pub seq: u64,
    pub created_at: u64,
    pub disk: Disk,
    pub cfg: Mutex<Cfg>,
    /// Orders resumes: one new session at a time.
    pub resuming: tokio::sync::Mutex<()>,
}

/// A sandbox's status from its session's (PROTOCOL.md §4.5: `running`, `stopping`, `stopped`).
fn sandbox_status(session: &str) -> &'static str {
    match session {
        "pending" | "running" => "running",
        "stopping" | "snapshotting" => "stopping",
        _ => "stopped",
    }
}

impl Sbx {
    pub fn status(&self) -> &'static str {
        sandbox_status(lock(&self.cfg).session.status())
    }

    pub fn session(&self) -> Arc<Session> {
        lock(&self.cfg).session.clone()
    }

    pub fn to_json(&self) -> Value {
        let cfg = lock(&self.cfg);
        let (status, expires) = {
            let life = lock(&cfg.session.life);
            let expires = match (life.status, life.started_at) {
                ("running", Some(start)) => Some(start + life.timeout),
                _ => None,
            };
            (sandbox_status(life.status), expires)
        };
        let mut s = json!({
            "name": self.name,
            "currentSessionId": cfg.session.id,
            "persistent": cfg.persistent,
            "status": status,
            "statusUpdatedAt": cfg.status_updated_at,
            "createdAt": self.created_at,
            "updatedAt": cfg.updated_at,
            "region": cfg.region,
            "vcpus": cfg.vcpus,
            "memory": cfg.memory,
            "timeout": cfg.timeout,
            "cwd": CWD,
            "tags": cfg.tags,
            "totalEgressBytes": 0,
            "totalIngressBytes": 0,
            "totalActiveCpuDurationMs": 0,
            "totalDurationMs": 0,
        });
        let fields = [
            ("runtime", cfg.runtime.clone().map(Value::from)),
            ("image", cfg.image.clone().map(Value::from)),
            (
                "currentSnapshotId",
                cfg.current_snapshot.clone().map(Value::from),
            ),
            ("networkPolicy", cfg.network_policy.clone()),
            (
                "snapshotExpiration",
                cfg.snapshot_expiration.map(Value::from),
            ),
            ("keepLastSnapshots", cfg.keep_last.clone()),
            ("expiresAt", expires.map(Value::from)),
        ];
        for (k, v) in fields {
            if let Some(v) = v {
                s[k] = v;
            }
        }
        s
    }

    /// `{sandbox, session, routes}` (PROTOCOL.md §4.1).
    pub fn envelope(&self) -> Value {
        let session = self.session();
        json!({
            "sandbox": self.to_json(),
            "session": session.to_json(),
            "routes": session.routes,
        })
    }
}

/// A snapshot (PROTOCOL.md §10.1). `files` is where a manual one keeps its copy of the disk; an
/// automatic one (taken by a stop) is the sandbox's own disk as it stopped.
pub(crate) struct Snap {
    pub id: String,
    pub seq: u64,
    pub sandbox: String,
    pub source_session: String,
    pub region: String,
    pub created_at: u64,
    pub expires_at: Option<u64>,
    pub manual: bool,
    pub files: Option<PathBuf>,
    pub deleted: bool,
}

impl Snap {
    pub fn to_json(&self) -> Value {
        let mut s = json!({
            "id": self.id,
            "sourceSessionId": self.source_session,
            "region": self.region,
            "status": if self.deleted { "deleted" } else { "created" },
            "sizeBytes": 0,
            "createdAt": self.created_at,
            "updatedAt": self.created_at,
            "creationMethod": if self.manual { "manual" } else { "automatic" },
        });
        if let Some(at) = self.expires_at {
            s["expiresAt"] = json!(at);
        }
        s
    }
}

/// What a new session is made from.
pub(crate) struct SessionSpec {
    pub name: String,
    pub region: String,
    pub vcpus: u32,
    pub memory: u64,
    pub runtime: String,
    pub timeout: u64,
    pub ports: Vec<u16>,
    pub env: BTreeMap<String, String>,
    pub network_policy: Option<Value>,
    pub source_snapshot: Option<String>,
}

/// A simple token bucket on the server runtime's clock.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The simulator's state.
pub(crate) struct State {
    pub settings: Settings,
    pub limited: AtomicBool,
    sandboxes: Mutex<BTreeMap<String, Arc<Sbx>>>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    pub snapshots: Mutex<BTreeMap<String, Snap>>,
    seq: AtomicU64,
    bucket: Mutex<Option<Bucket>>,
    snapshot_root: PathBuf,
    /// Last, so it is dropped (and its directory removed) after everything on it.
    pub backing: Backing,
}

const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

impl State {
    pub fn new(settings: Settings, backing: Backing) -> State {
        State {
            limited: AtomicBool::new(true),
            snapshot_root: backing.root().join("snapshots"),
            settings,
            sandboxes: Mutex::default(),
            sessions: Mutex::default(),
            snapshots: Mutex::default(),
            seq: AtomicU64::new(0),
            bucket: Mutex::new(None),
            backing,
        }
    }

    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub fn names(&self) -> Vec<String> {
        lock(&self.sandboxes).keys().cloned().collect()
    }

    pub fn count(&self) -> usize {
        lock(&self.sandboxes).len()
    }

    pub fn sandbox(&self, name: &str) -> Option<Arc<Sbx>> {
        lock(&self.sandboxes).get(name).cloned()
    }

    pub fn all_sandboxes(&self) -> Vec<Arc<Sbx>> {
        lock(&self.sandboxes).values().cloned().collect()
    }

    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(id).cloned()
    }

    pub fn all_sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// A fresh name for a sandbox created without one.
    pub fn generated_name(&self) -> String {
        format!("sandbox-{}", crate::random_from(ALNUM, 12))
    }

    pub fn rate_limited(&self) -> bool {
        self.limited.load(Ordering::Relaxed)
    }

    /// Takes `vcpus` from the team's allocation, or the 429 to answer (PROTOCOL.md §12).
    pub fn allocate(&self, vcpus: u32) -> Result<(), SimResponse> {
        if !self.rate_limited() {
            return Ok(());
        }
        let running = lock(&self.sessions)
            .values()
            .filter(|s| matches!(s.status(), "pending" | "running"))
            .count();
        if running >= self.settings.max_running {
            return Err(too_many(
                &format!(
                    "You have reached the limit of {} concurrent sandboxes.",
                    self.settings.max_running
                ),
                Duration::from_secs(1),
                self.settings.max_running as u64,
            ));
        }
        let rate = f64::from(self.settings.vcpu_rate);
        let per_sec = rate / 60.0;
        let now = Instant::now();
        let mut bucket = lock(&self.bucket);
        let b = bucket.get_or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        b.tokens =
            (b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_sec).min(rate);
        b.at = now;
        let want = f64::from(vcpus.max(1));
        if b.tokens >= want {
            b.tokens -= want;
            return Ok(());
        }
        let wait = Duration::from_secs_f64((want - b.tokens) / per_sec);
        Err(too_many(
            &format!(
                "vCPU allocation rate exceeded: {} vCPUs per minute.",
                self.settings.vcpu_rate
            ),
            wait,
            u64::from(self.settings.vcpu_rate),
        ))
    }

    /// Makes a session for `disk` from `spec`, registered and running (or pending for the
    /// start time).
    pub fn new_session(self: &Arc<Self>, disk: &Disk, spec: &SessionSpec) -> Arc<Session> {
        let now = now_ms();
        let id = format!("sbx_{}", crate::random_from(ALNUM, 24));
        let pending = !self.settings.start_time.is_zero();
        let routes = spec
            .ports
            .iter()
            .map(|port| {
                let sub = format!("sb-{}", crate::random_from(ALNUM, 16));
                json!({ "url": format!("https://{sub}.vercel.run"), "subdomain": sub, "port": port })
            })
            .collect();
        let session = Arc::new(Session {
            id: id.clone(),
            name: spec.name.clone(),
            seq: self.next_seq(),
            project: self.settings.project_id.clone(),
            region: spec.region.clone(),
            vcpus: spec.vcpus,
            memory: spec.memory,
            runtime: spec.runtime.clone(),
            disk: disk.clone(),
            env: spec.env.clone(),
            source_snapshot: spec.source_snapshot.clone(),
            routes,
            life: Mutex::new(Life {
                status: if pending { "pending" } else { "running" },
                requested_at: now,
                started_at: (!pending).then_some(now),
                requested_stop_at: None,
                stopped_at: None,
                snapshotted_at: None,
                timeout: spec.timeout,
                deadline: Instant::now()
                    + self.settings.start_time
                    + Duration::from_millis(spec.timeout),
                network_policy: spec.network_policy.clone(),
            }),
            commands: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
        });
        lock(&self.sessions).insert(id, session.clone());
        if pending {
            let (weak, start) = (Arc::downgrade(&session), self.settings.start_time);
            tokio::spawn(async move {
                tokio::time::sleep(start).await;
                if let Some(s) = weak.upgrade() {
                    {
                        let mut life = lock(&s.life);
                        if life.status == "pending" {
                            life.status = "running";
                            life.started_at = Some(now_ms());
                        }
                    }
                    s.notify();
                }
            });
        }
        session
    }

    /// Inserts `sbx` unless its name is taken (then the duplicate-name 400, PROTOCOL.md §4.2).
    pub fn insert(&self, sbx: Arc<Sbx>) -> Result<(), SimResponse> {
        let mut sandboxes = lock(&self.sandboxes);
        if sandboxes.contains_key(&sbx.name) {
            return Err(duplicate(&sbx.name));
        }
        sandboxes.insert(sbx.name.clone(), sbx);
        Ok(())
    }

    pub fn remove(&self, name: &str) -> Option<Arc<Sbx>> {
        lock(&self.sandboxes).remove(name)
    }

    /// Begins stopping `session` (`snapshot`: as a snapshot does) and finishes it after the
    /// stop time; `false` when it was not running.
    pub fn stop(self: &Arc<Self>, session: &Arc<Session>, snapshot: bool) -> bool {
        {
            let mut life = lock(&session.life);
            if !matches!(life.status, "running" | "pending") {
                return false;
            }
            life.status = if snapshot { "snapshotting" } else { "stopping" };
            life.requested_stop_at = Some(now_ms());
            if snapshot {
                life.snapshotted_at = Some(now_ms());
            }
        }
        session.notify();
        session.kill_all();
        let (state, session) = (Arc::downgrade(self), session.clone());
        let took = self.settings.stop_time;
        tokio::spawn(async move {
            tokio::time::sleep(took).await;
            {
                let mut life = lock(&session.life);
                life.status = "stopped";
                life.stopped_at = Some(now_ms());
            }
            if let Some(state) = state.upgrade() {
                state.after_stop(&session, snapshot);
            }
            session.notify();
        });
        true
    }

    /// A persistent sandbox's stop records an automatic snapshot of its disk (PROTOCOL.md §10.1).
    fn after_stop(&self, session: &Session, snapshot: bool) {
        let Some(sbx) = self.sandbox(&session.name) else {
            return;
        };
        let now = now_ms();
        let mut cfg = lock(&sbx.cfg);
        if cfg.session.id != session.id {
            return;
        }
        cfg.status_updated_at = now;
        if snapshot || !cfg.persistent {
            return;
        }
        let id = format!("snap_{}", crate::random_from(ALNUM, 24));
        lock(&self.snapshots).insert(
            id.clone(),
            Snap {
                id: id.clone(),
                seq: self.next_seq(),
                sandbox: sbx.name.clone(),
                source_session: session.id.clone(),
                region: session.region.clone(),
                created_at: now,
                expires_at: cfg.snapshot_expiration.filter(|e| *e > 0).map(|e| now + e),
                manual: false,
                files: None,
                deleted: false,
            },
        );
        cfg.current_snapshot = Some(id);
    }

    /// Copies `disk` into a new manual snapshot of `sbx`'s `session`.
    pub async fn take_snapshot(
        &self,
        sbx: &Sbx,
        session: &Session,
        expiration: Option<u64>,
    ) -> Result<Value, SimResponse> {
        let id = format!("snap_{}", crate::random_from(ALNUM, 24));
        let dir = self.snapshot_root.join(&id);
        let disk = session.disk.clone();
        let copy_to = dir.clone();
        let copied = tokio::task::spawn_blocking(move || disk.save(&copy_to))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        if let Err(why) = copied {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(error(500, "internal_server_error", &why));
        }
        let now = now_ms();
        let mut cfg = lock(&sbx.cfg);
        let expiration = expiration.or(cfg.snapshot_expiration).filter(|e| *e > 0);
        let snap = Snap {
            id: id.clone(),
            seq: self.next_seq(),
            sandbox: sbx.name.clone(),
            source_session: session.id.clone(),
            region: session.region.clone(),
            created_at: now,
            expires_at: expiration.map(|e| now + e),
            manual: true,
            files: Some(dir),
            deleted: false,
        };
        let answer = snap.to_json();
        lock(&self.snapshots).insert(id.clone(), snap);
        cfg.current_snapshot = Some(id);
        cfg.updated_at = now;
        Ok(answer)
    }

    /// Fills `disk` from snapshot `id` (a manual one's copy, or an automatic one's sandbox disk).
    pub async fn fill_from(&self, disk: &Disk, id: &str) -> Result<(), SimResponse> {
        let (files, sandbox) = {
            let snaps = lock(&self.snapshots);
            match snaps.get(id).filter(|s| !s.deleted) {
                Some(s) => (s.files.clone(), s.sandbox.clone()),
                None => {
                    return Err(error(
                        404,
                        "snapshot_not_found",
                        &format!("Snapshot {id} not found"),
                    ));
                }
            }
        };
        let from_disk = match files {
            Some(_) => None,
            None => match self.sandbox(&sandbox) {
                Some(s) if s.disk.work() != disk.work() => Some(s.disk.clone()),
                Some(_) => return Ok(()),
                None => return Ok(()),
            },
        };
        let disk = disk.clone();
        let result = tokio::task::spawn_blocking(move || match (files, from_disk) {
            (Some(dir), _) => disk.restore(&dir),
            (None, Some(source)) => disk.restore_disk(&source),
            (None, None) => Ok(()),
        })
        .await;
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(error(500, "internal_server_error", &e.to_string())),
            Err(e) => Err(error(500, "internal_server_error", &e.to_string())),
        }
    }

    /// Stops every running session past its timeout.
    pub fn expire(self: &Arc<Self>) {
        let now = Instant::now();
        let due: Vec<Arc<Session>> = lock(&self.sessions)
            .values()
            .filter(|s| {
                let life = lock(&s.life);
                life.status == "running" && life.deadline <= now
            })
            .cloned()
            .collect();
        for session in due {
            self.stop(&session, false);
        }
    }

    /// Kills every command (the simulator is going away).
    pub fn shutdown(&self) {
        for session in self.all_sessions() {
            session.kill_all();
        }
    }

    /// Forgets session `id` (one made for a create that lost its name to another).
    pub fn forget_session(&self, id: &str) {
        lock(&self.sessions).remove(id);
    }

    /// Forgets the sessions of a deleted sandbox once they stopped, keeping memory flat.
    pub fn forget_sessions(&self, name: &str) {
        lock(&self.sessions).retain(|_, s| s.name != name);
    }
}

/// The duplicate-name 400 (PROTOCOL.md §4.2).
pub(crate) fn duplicate(name: &str) -> SimResponse {
    error(
        400,
        "bad_request",
        &format!(
            "A sandbox with the name '{name}' already exists for this project. Use GET /sandboxes/:name to resume it or delete it first."
        ),
    )
}

/// A 429 with `Retry-After` and Vercel's `limit` object (PROTOCOL.md §13.1).
pub(crate) fn too_many(message: &str, wait: Duration, total: u64) -> SimResponse {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let reset_ms = now_ms() + secs * 1000;
    SimResponse::json(
        429,
        &json!({ "error": {
            "code": "rate_limited",
            "message": message,
            "limit": { "remaining": 0, "reset": reset_ms / 1000, "resetMs": reset_ms, "total": total },
        }}),
    )
    .header("retry-after", &secs.to_string())
}

/// A JSON object from `body` (empty is `{}`), or a 400.
pub(crate) fn body_object(body: &[u8]) -> Result<Map<String, Value>, SimResponse> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(error(
            400,
            "bad_request",
            "The request body must be an object.",
        )),
        Err(e) => Err(error(
            400,
            "bad_request",
            &format!("Invalid JSON body: {e}"),
        )),
    }
}
