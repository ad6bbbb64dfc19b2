//! The E2B simulator: the control plane (`api.e2b.app`), the edge proxy and envd (the daemon in
//! every sandbox) on one loopback listener, written from `specs/e2b/PROTOCOL.md`, the OpenAPI
//! files beside it and the official JS SDK 2.51.0's behaviour.
//!
//! Point a client at it with `E2B_API_URL` and `E2B_SANDBOX_URL` both set to [`E2bSim::url`]
//! and `E2B_API_KEY` set to [`E2bSim::api_key`] ([`Simulator::env`] returns exactly these):
//! the official SDKs then send envd requests to that URL with the `E2b-Sandbox-Id` and
//! `E2b-Sandbox-Port` headers, which the simulated proxy reads because the host is an IP
//! literal, as the real proxy does for `localhost` and IP hosts. Requests to envd paths are
//! told apart from control-plane paths by their path.
//!
//! ## Served
//!
//! Control plane (`X-API-Key`, keys start with `e2b_`; errors `{"code","message"}`):
//!
//! | request | operation |
//! | --- | --- |
//! | `POST /v2/sandboxes` (honours `Idempotency-Key`) | `create` |
//! | `POST /v2/sandboxes/{id}/connect`, `POST /sandboxes/{id}/connect` | `connect` |
//! | `POST /sandboxes/{id}/resume` (deprecated) | `resume` |
//! | `GET /sandboxes/{id}` | `get` |
//! | `GET /v2/sandboxes` (`metadata`, `state`, `order`, `limit`, `nextToken`; `X-Next-Token`) | `list` |
//! | `DELETE /sandboxes/{id}` | `destroy` |
//! | `POST /sandboxes/{id}/pause` | `pause` |
//! | `POST /sandboxes/{id}/timeout` | `set_timeout` |
//! | `POST /sandboxes/{id}/refreshes` | `refresh` |
//! | `POST /sandboxes/{id}/fork` | `fork` |
//! | `POST /sandboxes/{id}/snapshots`, `GET /snapshots`, `DELETE /templates/{id}` | `snapshot` |
//! | `GET /sandboxes/{id}/metrics`, `GET /sandboxes/metrics` | `metrics` |
//!
//! envd (`X-Access-Token`; Connect JSON, unary and enveloped streams):
//!
//! | request | operation |
//! | --- | --- |
//! | `process.Process/Start` | `exec` |
//! | `process.Process/Connect` | `exec.output` |
//! | `process.Process/SendInput`, `StreamInput`, `CloseStdin` | `stdin` |
//! | `process.Process/SendSignal` | `kill` |
//! | `process.Process/List` | `exec.list` |
//! | `process.Process/Update` | `exec.update` |
//! | `GET /files` (token or signature; gzip when accepted; `Range`) | `files.read` |
//! | `POST /files` (multipart or octet-stream, gzip request bodies) | `files.write` |
//! | `filesystem.Filesystem/ListDir` | `files.list` |
//! | `filesystem.Filesystem/Stat` | `files.stat` |
//! | `filesystem.Filesystem/MakeDir` | `files.mkdir` |
//! | `filesystem.Filesystem/Move` | `files.move` |
//! | `filesystem.Filesystem/Remove` | `files.remove` |
//! | `filesystem.Filesystem/WatchDir`, `CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher` | `files.watch` |
//! | `GET /health`, `GET /envs`, `GET /metrics` | `health`, `other`, `other` |
//!
//! The code interpreter of template `code-interpreter-v1` (port 49999 behind the proxy; see
//! `interpreter.rs` for what differs from the real server):
//!
//! | request | operation |
//! | --- | --- |
//! | `GET /health` | `health` |
//! | `POST /execute` (NDJSON: `number_of_executions`, `stdout`, `stderr`, `result`, `error`, `keepalive`, `end_of_execution`) | `run_code` |
//! | `POST /contexts`, `GET /contexts`, `POST /contexts/{id}/restart`, `DELETE /contexts/{id}` | `code_contexts` |
//!
//! Anything else is `other`. The proxy answers a sandbox that is gone or paused (without
//! auto-resume) with its 502 body, one still pausing or resuming with 409, and its control
//! endpoints (`/init`, …) with 404.
//!
//! ## Behaviour
//!
//! Sandboxes are `local` sandboxes ([`Backing`]): commands are real processes (every one started
//! as a background process, so closing a `Start` stream leaves it running, as envd does), files
//! are real files. The sandbox's home `/home/user` is its host directory: file paths under it
//! (and relative ones) map there; every other absolute path lives in a root of the sandbox's
//! own (`/tmp/x` is the sandbox's, never the host's), and links are followed inside the
//! sandbox (`crate::disk`). Snapshots and forks carry the home. Commands are host processes:
//! their cwd maps the same way, but command lines are not rewritten (use relative paths or
//! `$HOME` in them).
//! Pause stops the processes (`SIGSTOP`; `memory: false` kills them), resume continues them.
//! A sandbox past its timeout is killed, or paused when created with `autoPause`. More than
//! [`E2bSimBuilder::max_running`] running sandboxes (20 by default, the hobby tier's cap) is a 429.
//! Pause and resume take [`E2bSimBuilder::transition`] (zero by default); while they run, envd
//! requests get the proxy's 409. A sandbox created with `network.allowPublicTraffic: false` gets
//! a `trafficAccessToken`, which the proxy then asks for on ports other than envd's (403); no
//! such port is ever open (502). A PTY is a real terminal made by `script(1)`, resized by `Update`.
//!
//! ## Not simulated
//!
//! Templates and their builds (only `base`, `code-interpreter-v1` and snapshots of simulated
//! sandboxes can be created from), volumes, egress rules (accepted and echoed, not enforced), logs, MCP, running as a
//! user other than the host user (`user` and `root` are accepted and both run as it), memory in
//! forks and snapshots (they copy files only), xattrs (upload metadata is kept in memory),
//! request-rate limits (inject them with a fault plan). `StreamInput` is applied when its
//! request body ends, since the server reads request bodies whole.

mod api;
mod connect;
mod envd;
mod filesystem;
mod interpreter;
mod process;
#[cfg(test)]
mod tests;

use super::{
    Backing, FaultPlan, FaultRule, Handler, SimRequest, SimResponse, SimServer, Simulator,
};
pub(crate) use super::{random_from, random_hex};
use futures::future::BoxFuture;
use sandbox_sdk_core::local::LocalSandbox;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// The envd version every simulated sandbox reports.
pub const ENVD_VERSION: &str = "0.6.13";
/// The id of the `base` template.
pub const BASE_TEMPLATE_ID: &str = "rki5dems9wqfm4r03t7g";
/// The id of the `code-interpreter-v1` template.
pub const INTERPRETER_TEMPLATE_ID: &str = "nlhz8vlwyupq845jsdg9";
/// The home directory of the sandbox's user, as envd shows it.
pub const HOME: &str = "/home/user";
/// The port envd listens on, as the routing header names it.
pub const ENVD_PORT: u16 = 49983;

/// A running E2B simulator; dropping it stops it and removes its sandboxes' directories.
pub struct E2bSim {
    server: SimServer,
    state: Arc<State>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Drop for E2bSim {
    fn drop(&mut self) {
        self.ticker.abort();
    }
}

/// Configures an [`E2bSim`] before it starts.
#[derive(Clone, Debug)]
pub struct E2bSimBuilder {
    port: u16,
    faults: FaultPlan,
    api_key: String,
    transition: Duration,
    max_running: usize,
}

impl Default for E2bSimBuilder {
    fn default() -> Self {
        E2bSimBuilder {
            port: 0,
            faults: FaultPlan::new(),
            api_key: super::new_key("e2b_", 40),
            transition: Duration::ZERO,
            max_running: 20,
        }
    }
}

impl E2bSimBuilder {
    /// Serves on `127.0.0.1:port` (0, the default, for a free port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Applies `faults` (see [`FaultPlan`]); it can also be changed while the simulator runs.
    pub fn faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
    }

    /// Makes every request of `operation` (`*` for all) wait `latency` before it is handled.
    pub fn latency(self, operation: &str, latency: Duration) -> Self {
        self.faults
            .add(FaultRule::new(operation, super::Fault::Stall(latency)));
        self
    }

    /// The API key it accepts (it must start with `e2b_`; by default a fresh random one for
    /// each start).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = key.into();
        self
    }

    /// How long a pause or a resume takes (zero by default).
    pub fn transition(mut self, time: Duration) -> Self {
        self.transition = time;
        self
    }

    /// How many sandboxes may run at once before create and resume answer 429 (20 by default).
    pub fn max_running(mut self, n: usize) -> Self {
        self.max_running = n;
        self
    }

    /// Starts the simulator on the current tokio runtime.
    pub async fn start(self) -> std::io::Result<E2bSim> {
        let state = Arc::new(State {
            api_key: self.api_key,
            backing: Backing::new()?,
            transition: self.transition,
            max_running: self.max_running,
            limited: std::sync::atomic::AtomicBool::new(true),
            sandboxes: Mutex::new(BTreeMap::new()),
            keys: tokio::sync::Mutex::new(HashMap::new()),
            snapshots: Mutex::new(BTreeMap::new()),
            seq: AtomicU64::new(0),
        });
        let handler = Arc::new(E2bHandler(state.clone()));
        let server = SimServer::start(handler, self.port, self.faults).await?;
        let weak = Arc::downgrade(&state);
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(state) => state.expire().await,
                    None => return,
                }
            }
        });
        Ok(E2bSim {
            server,
            state,
            ticker,
        })
    }
}

impl E2bSim {
    /// Starts a simulator on a free port, without faults.
    pub async fn start() -> std::io::Result<E2bSim> {
        E2bSimBuilder::default().start().await
    }

    /// A builder for port, faults, latency, transition time, key and the running cap.
    pub fn builder() -> E2bSimBuilder {
        E2bSimBuilder::default()
    }

    /// The base URL of the control plane and of envd: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// The API key it accepts.
    pub fn api_key(&self) -> &str {
        &self.state.api_key
    }

    /// The ids of the sandboxes that exist, in any state.
    pub fn sandbox_ids(&self) -> Vec<String> {
        lock(&self.state.sandboxes).keys().cloned().collect()
    }

    /// The host directory behind a sandbox's `/home/user`, while it exists.
    pub fn sandbox_dir(&self, id: &str) -> Option<PathBuf> {
        self.state.get(id).map(|sb| sb.home().to_owned())
    }

    /// The envd access token of a sandbox, while it exists.
    pub fn envd_token(&self, id: &str) -> Option<String> {
        self.state.get(id).map(|sb| sb.envd_token.clone())
    }
}

impl Simulator for E2bSim {
    fn provider(&self) -> &'static str {
        "e2b"
    }

    fn url(&self) -> &str {
        self.server.url()
    }

    fn server(&self) -> &SimServer {
        &self.server
    }

    fn sandboxes(&self) -> usize {
        lock(&self.state.sandboxes).len()
    }

    fn set_rate_limits(&self, enabled: bool) {
        self.state
            .limited
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    fn api_key(&self) -> &str {
        E2bSim::api_key(self)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("E2B_API_KEY", self.state.api_key.clone()),
            ("E2B_API_URL", self.url().to_owned()),
            ("E2B_SANDBOX_URL", self.url().to_owned()),
        ]
    }
}

/// Where a sandbox is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    Pausing,
    Paused,
    Resuming,
}

impl Phase {
    fn counts_as_running(self) -> bool {
        self != Phase::Paused
    }
}

pub(crate) struct Life {
    pub phase: Phase,
    pub end_at: SystemTime,
}

/// One simulated sandbox.
pub(crate) struct Sandbox {
    pub id: String,
    pub template_id: String,
    pub alias: Option<String>,
    pub envd_token: String,
    /// Set when created with `network.allowPublicTraffic: false`: needed on ports other than envd's.
    pub traffic_token: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub started_at: SystemTime,
    pub seq: u64,
    pub timeout: Duration,
    pub auto_pause: bool,
    pub auto_resume: bool,
    pub allow_internet: Option<bool>,
    pub network: Mutex<Option<serde_json::Value>>,
    pub local: LocalSandbox,
    /// Its files: the home shown at [`HOME`], every other absolute path in a root of its own.
    pub disk: crate::disk::Disk,
    pub life: Mutex<Life>,
    pub processes: Mutex<BTreeMap<u32, Arc<process::SimProcess>>>,
    pub file_meta: Mutex<HashMap<PathBuf, BTreeMap<String, String>>>,
    pub watchers: Mutex<HashMap<String, filesystem::Watcher>>,
    /// The code interpreter's contexts (served when the template is `code-interpreter-v1`).
    pub interpreter: interpreter::Contexts,
}

impl Sandbox {
    /// Whether its template runs the code interpreter server (port 49999).
    pub fn serves_interpreter(&self) -> bool {
        self.template_id == INTERPRETER_TEMPLATE_ID
            || self.alias.as_deref() == Some(interpreter::TEMPLATE)
    }

    /// The host directory behind `/home/user`.
    pub fn home(&self) -> &Path {
        self.local.dir()
    }

    pub fn phase(&self) -> Phase {
        lock(&self.life).phase
    }

    /// Resolves an envd path inside the sandbox (`crate::disk`): relative against the home,
    /// links followed. Returns (shown path, host path).
    pub fn resolve(&self, path: &str) -> (String, std::io::Result<PathBuf>) {
        self.disk.resolve(HOME, path)
    }

    /// Like [`Sandbox::resolve`], a link in the last component being the entry itself.
    pub fn entry(&self, path: &str) -> (String, std::io::Result<PathBuf>) {
        self.disk.entry(HOME, path)
    }

    /// The envd path of a host path of the sandbox (the inverse of [`Sandbox::resolve`]).
    pub fn shown(&self, host: &Path) -> String {
        self.disk
            .shown(host)
            .unwrap_or_else(|| host.to_string_lossy().into_owned())
    }
}

/// The simulator's state.
pub(crate) struct State {
    pub api_key: String,
    pub transition: Duration,
    pub max_running: usize,
    /// Whether the running-sandbox cap applies ([`Simulator::set_rate_limits`]).
    pub limited: std::sync::atomic::AtomicBool,
    pub sandboxes: Mutex<BTreeMap<String, Arc<Sandbox>>>,
    /// Idempotency key → the sandbox it made; held across a keyed create.
    pub keys: tokio::sync::Mutex<HashMap<String, String>>,
    /// Snapshot id → the directory holding its files.
    pub snapshots: Mutex<BTreeMap<String, api::Snapshot>>,
    pub seq: AtomicU64,
    /// Last, so it is dropped (and its directory removed) after the sandboxes on it.
    pub backing: Backing,
}

impl State {
    pub fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.sandboxes).get(id).cloned()
    }

    /// Whether one more sandbox may run: under the cap, or the cap is off.
    pub fn may_run_another(&self) -> bool {
        !self.limited.load(std::sync::atomic::Ordering::Relaxed)
            || self.running_count() < self.max_running
    }

    pub fn running_count(&self) -> usize {
        lock(&self.sandboxes)
            .values()
            .filter(|sb| sb.phase().counts_as_running())
            .count()
    }

    /// Kills (or, with `autoPause`, pauses) every running sandbox past its end.
    pub async fn expire(&self) {
        let now = SystemTime::now();
        let due: Vec<Arc<Sandbox>> = lock(&self.sandboxes)
            .values()
            .filter(|sb| {
                let life = lock(&sb.life);
                life.phase == Phase::Running && life.end_at <= now
            })
            .cloned()
            .collect();
        for sb in due {
            if sb.auto_pause {
                api::pause_now(&sb, true, self.transition).await;
            } else {
                self.kill(&sb.id).await;
            }
        }
    }

    /// Removes a sandbox and destroys what backs it; false when there was none.
    pub async fn kill(&self, id: &str) -> bool {
        let Some(sb) = lock(&self.sandboxes).remove(id) else {
            return false;
        };
        process::end_all(&sb);
        lock(&sb.watchers).clear();
        let _ = sandbox_sdk_core::Sandbox::destroy(&sb.local).await;
        true
    }
}

struct E2bHandler(Arc<State>);

impl Handler for E2bHandler {
    fn admit(&self, head: &SimRequest) -> Result<usize, SimResponse> {
        if envd::is_envd(head) {
            envd::admit(&self.0, head)
        } else {
            api::admit(&self.0, head)
        }
    }

    fn operation(&self, request: &SimRequest) -> &'static str {
        if envd::is_envd(request) {
            envd::operation(request)
        } else {
            api::operation(request)
        }
    }

    fn handle(&self, request: SimRequest) -> BoxFuture<'static, SimResponse> {
        let state = self.0.clone();
        Box::pin(async move {
            state.expire().await;
            if envd::is_envd(&request) {
                envd::handle(state, request).await
            } else {
                api::handle(state, request).await
            }
        })
    }

    fn error(&self, status: u16, message: &str) -> SimResponse {
        api::error(status, message)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
