//! [`VercelSim`]: Vercel Sandbox's REST API (`https://vercel.com/api`, `https://api.vercel.com`)
//! as a loopback server, written from `sandbox-vercel/PROTOCOL.md` (the provider facts, with
//! their sources) and the official JS SDK `@vercel/sandbox` 3.5.0's requests and response
//! validators.
//!
//! ```
//! # async fn demo() {
//! use sandbox_sim::Simulator;
//! use sandbox_sim::vercel::VercelSim;
//!
//! let sim = VercelSim::start().await.unwrap();
//! // VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID and VERCEL_API_URL point a client at it.
//! let env = sim.env();
//! assert_eq!(env[3], ("VERCEL_API_URL", sim.url().to_owned()));
//! # }
//! ```
//!
//! ## Endpoints served
//!
//! Every request needs `Authorization: Bearer <token>` ([`VercelSim::token`]) and
//! `teamId=<team>` ([`VercelSim::team_id`]) in its query; by-name calls need
//! `projectId=<project>` ([`VercelSim::project_id`]), listings `project=<project>`, create a
//! `projectId` in its body (PROTOCOL.md §2).
//!
//! | endpoint | operation name |
//! | --- | --- |
//! | `POST /v2/sandboxes` (with `runtime`), `POST /v3/sandboxes`, `POST /v4/sandboxes` (`image`) | `create` |
//! | `GET /v2/sandboxes` (`limit` 1–50, `cursor`, `sortBy`, `sortOrder`, `namePrefix`, `status`, `tags`) | `list` |
//! | `GET /v2/sandboxes/{name}` (`resume=false`, the default) | `get` |
//! | `GET /v2/sandboxes/{name}?resume=true` (a new session for a stopped sandbox) | `resume` |
//! | `PATCH /v2/sandboxes/{name}` | `update` |
//! | `DELETE /v2/sandboxes/{name}` (`deleteOrphanSnapshots`) | `destroy` |
//! | `POST /v2/sandboxes/{name}/fork`, `POST /v3/sandboxes/{name}/fork` | `fork` |
//! | `GET /v2/sandboxes/sessions` (`project`, `name`, `limit`, `cursor`, `sortOrder`) | `list` |
//! | `GET /v2/sandboxes/sessions/{id}` | `get` |
//! | `POST …/sessions/{id}/stop` | `stop` |
//! | `POST …/sessions/{id}/extend-timeout` (`{"duration"}`) | `set_timeout` |
//! | `POST …/sessions/{id}/network-policy` | `update` |
//! | `POST …/sessions/{id}/snapshot` (`{"expiration"}`) and `/v3/…/snapshot` | `snapshot` |
//! | `GET /v2/sandboxes/snapshots`, `GET`/`DELETE /v2/sandboxes/snapshots/{id}` | `snapshot` |
//! | `POST …/sessions/{id}/cmd` (detached, or `wait` + `logs`: an NDJSON stream) | `exec` |
//! | `GET …/sessions/{id}/cmd` | `exec.list` |
//! | `GET …/cmd/{cmdId}` (`wait=true`: a long poll), `GET …/cmd/{cmdId}/logs` (NDJSON) | `exec.output` |
//! | `POST …/cmd/{cmdId}/kill` (`{"signal"}`, a POSIX number) | `kill` |
//! | `POST …/cmd/{cmdId}/stdin` (`{"data"?, "offset"?, "close"?}`, a command started with `attachStdin`) | `stdin` |
//! | `POST …/fs/write` (a gzip tar, `x-cwd`) | `files.write` |
//! | `POST …/fs/read` (`{"path", "cwd"}`: the bytes, streamed; 404 when missing) | `files.read` |
//! | `POST …/fs/mkdir` (`{"path", "cwd", "recursive"}`) | `files.mkdir` |
//!
//! Anything else is `other` and answers 404 `not_found`.
//!
//! ## Behaviour
//!
//! - **Errors** are Vercel's envelope `{"error": {"code", "message"}}` (§13.1): 401
//!   `unauthorized` for a missing or wrong token, 403 `forbidden` for another team, 404
//!   `not_found` (unknown sandbox, session, command, snapshot, project, route), 400
//!   `bad_request` (invalid fields; a duplicate name with the message of §4.2), 410
//!   `sandbox_stopped` (a command or file call on a stopped session) and `snapshot_not_found`
//!   (resuming a sandbox whose snapshot was deleted), 422 `sandbox_stopping` /
//!   `sandbox_snapshotting` (a call on a session that is stopping), 429 `rate_limited` with
//!   `Retry-After` and the `limit` object. Every answer carries `Date`.
//! - **Sandboxes and sessions** (§4, §5): a create makes the named sandbox and its first
//!   session at once, `running` (or `pending` for [`VercelSimBuilder::start_time`], during which
//!   commands wait). A name is unique per project; without one the server makes one. Stop
//!   answers `stopping` and the session is `stopped` after [`VercelSimBuilder::stop_time`]; a
//!   snapshot passes through `snapshotting` the same way. A stopped session never runs again:
//!   `GET …?resume=true` starts a new session (a new `sbx_` id, new routes) and says
//!   `resumed: true`. A session past its `timeout` (ms from `startedAt`; `extend-timeout` adds,
//!   up to [`VercelSimBuilder::max_timeout`]) stops by itself.
//! - **Disks**: each sandbox is one `local` sandbox ([`crate::Backing`]): its directory is
//!   `/vercel/sandbox`, the session `cwd`; every other absolute path of the file API and of a
//!   command's `cwd` resolves under a private root beside it, never onto the host, and links
//!   are followed inside the sandbox (`crate::disk`). A persistent
//!   sandbox (the default) keeps its disk across sessions (each stop records an automatic
//!   snapshot); `persistent: false` starts every new session from an empty disk. A manual
//!   snapshot copies the disk; a fork (and a create with a snapshot `source`) starts from the
//!   source's latest snapshot, never from a running session's live disk (§10.2), or empty when
//!   it has none. There is no other per-sandbox cost: no process runs until a command does.
//! - **Commands** (§6) are real processes (`command` + `args`, no shell) with the sandbox's
//!   `env` under the command's, `HOME` set to the sandbox directory. Output is kept for the
//!   session's life as `{"stream", "data"}` lines (text; invalid UTF-8 replaced), so `/logs`
//!   always replays from the first byte and then follows: a stream the server cut is resumed
//!   by reading `/logs` again. The waited start streams `{"command"}`, the lines (with `logs`),
//!   then `{"command"}` with `exitCode` and `durationMs`. A `timeout` kills the command with
//!   SIGKILL (exit 137). A kill sends the signal to the process group; a command killed by
//!   signal `n` exits `128 + n`. Killing a finished command answers it as it is.
//! - **Stdin** (§6.6): a command started with `attachStdin: true` has a pipe for stdin; each
//!   `POST …/stdin` writes its base64 `data` at once (not held until `close`), skipping the
//!   bytes before `bytesWritten` when `offset` is below it (a resend), and answers
//!   `{command, bytesWritten}`; an `offset` past `bytesWritten` is 400 `bad_request` (with
//!   `bytesWritten` in the error), `close` closes the pipe (a resent close is answered again), a
//!   body over 1 MB is 413, and a command without `attachStdin`, exited, or whose stdin is
//!   closed or broken answers 400 `command_stdin_unavailable`. A write the process does not
//!   read within 10 s answers 504 with the `bytesWritten` reached.
//! - **Files** (§7): write extracts a gzip tar under `x-cwd` (default: the session cwd),
//!   creating parents, with the entries' modes, whole or not at all: an archive that unpacks
//!   past 128 MiB is 413 `payload_too_large`, a link entry that leaves the tree it is in is
//!   400 (see `files.rs`); read answers `application/octet-stream` with
//!   `Content-Disposition`, 404 `file_not_found` when missing, 400 for a directory; mkdir makes
//!   parents and accepts an existing directory.
//! - **Rate limits** (§12, on unless [`Simulator::set_rate_limits`] turns them off): creates
//!   draw on a per-team vCPU allocation of [`VercelSimBuilder::vcpu_rate`] vCPUs per minute (a
//!   bucket that holds one minute's worth), and at most [`VercelSimBuilder::max_running`]
//!   sessions run at once; over either a create or resume answers 429.
//! - **Stream cuts**: with [`VercelSimBuilder::edge_cut`] set, every NDJSON stream and long
//!   poll is cut (connection reset) after that long, as Vercel's edge does after 5–6 minutes
//!   (§11). Off by default.
//!
//! ## Not simulated
//!
//! Traffic through routes (the `https://<subdomain>.vercel.run` URLs are returned but reach
//! nothing), network policies (stored and echoed, not enforced), `sudo` and users (every command
//! runs as the host user), git and tarball sources, drives and mounts, `/interactive` shells,
//! the snapshot tree, regions (a create's region is recorded as given), OIDC tokens (only the
//! access token is accepted), the legacy v1 API, snapshot expiry and `keepLastSnapshots`
//! eviction (recorded, never applied), per-plan quotas other than the two rate limits. Command
//! lines are not rewritten: an absolute path inside a command's arguments is a host path (use
//! relative paths or `$HOME`).

mod api;
mod command;
mod files;
mod output;
mod state;
#[cfg(test)]
mod tests;

use crate::{Backing, FaultPlan, SimServer, Simulator};
use api::VercelHandler;
use state::State;
use std::sync::Arc;
use std::time::Duration;

/// The project [`VercelSim`] serves unless [`VercelSimBuilder::project_id`] says otherwise.
pub const PROJECT: &str = "prj_simulator";

/// The team [`VercelSim`] serves unless [`VercelSimBuilder::team_id`] says otherwise.
pub const TEAM: &str = "team_simulator";

/// Every session's working directory, the sandbox's own directory (PROTOCOL.md §4.5).
pub const CWD: &str = "/vercel/sandbox";

/// Settings of a [`VercelSim`].
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub token: String,
    pub team_id: String,
    pub project_id: String,
    pub region: String,
    pub start_time: Duration,
    pub stop_time: Duration,
    pub max_timeout: Duration,
    pub vcpu_rate: u32,
    pub max_running: usize,
    pub edge_cut: Option<Duration>,
}

/// Builds a [`VercelSim`]: port, faults, timings, limits and credentials.
#[derive(Clone, Debug)]
pub struct VercelSimBuilder {
    port: u16,
    faults: FaultPlan,
    settings: Settings,
}

impl Default for VercelSimBuilder {
    fn default() -> Self {
        VercelSimBuilder {
            port: 0,
            faults: FaultPlan::new(),
            settings: Settings {
                token: crate::new_key("vcp_", 48),
                team_id: TEAM.to_owned(),
                project_id: PROJECT.to_owned(),
                region: "iad1".to_owned(),
                start_time: Duration::ZERO,
                stop_time: Duration::from_millis(50),
                max_timeout: Duration::from_secs(24 * 3600),
                vcpu_rate: 150,
                max_running: 10_000,
                edge_cut: None,
            },
        }
    }
}

impl VercelSimBuilder {
    /// The port on 127.0.0.1 (default 0: a free one).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The fault plan (default none).
    pub fn faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
    }

    /// The access token accepted (default: a fresh random one for each builder, so for each
    /// start).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.settings.token = token.into();
        self
    }

    /// The team (`teamId`) served (default [`TEAM`]).
    pub fn team_id(mut self, team: impl Into<String>) -> Self {
        self.settings.team_id = team.into();
        self
    }

    /// The project sandboxes live in (default [`PROJECT`]).
    pub fn project_id(mut self, project: impl Into<String>) -> Self {
        self.settings.project_id = project.into();
        self
    }

    /// How long a new session is `pending` before it runs (default zero: created running).
    pub fn start_time(mut self, time: Duration) -> Self {
        self.settings.start_time = time;
        self
    }

    /// How long `stopping` and `snapshotting` last (default 50 ms).
    pub fn stop_time(mut self, time: Duration) -> Self {
        self.settings.stop_time = time;
        self
    }

    /// The longest a session may be made to last, create `timeout` or extended (default 24
    /// hours, the Pro plan's maximum in August 2026, PROTOCOL.md §12).
    pub fn max_timeout(mut self, time: Duration) -> Self {
        self.settings.max_timeout = time;
        self
    }

    /// vCPUs a team may allocate per minute (default 150, the Pro plan's starting rate).
    pub fn vcpu_rate(mut self, per_minute: u32) -> Self {
        self.settings.vcpu_rate = per_minute.max(1);
        self
    }

    /// How many sessions may run at once (default 10,000, the Pro plan's concurrency).
    pub fn max_running(mut self, n: usize) -> Self {
        self.settings.max_running = n;
        self
    }

    /// Cuts every NDJSON stream and long poll after `after`, as Vercel's edge does (default
    /// none).
    pub fn edge_cut(mut self, after: Option<Duration>) -> Self {
        self.settings.edge_cut = after;
        self
    }

    /// Starts the simulator on the current runtime.
    pub async fn start(self) -> std::io::Result<VercelSim> {
        let state = Arc::new(State::new(self.settings, Backing::new()?));
        let server = SimServer::start(
            Arc::new(VercelHandler(state.clone())),
            self.port,
            self.faults,
        )
        .await?;
        let weak = Arc::downgrade(&state);
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(state) => state.expire(),
                    None => return,
                }
            }
        });
        Ok(VercelSim {
            server,
            state,
            ticker,
        })
    }
}

/// A running Vercel Sandbox simulator; dropping it stops the server, every command and removes
/// the sandboxes' directories. See the [module docs](self).
pub struct VercelSim {
    server: SimServer,
    state: Arc<State>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Drop for VercelSim {
    fn drop(&mut self) {
        self.ticker.abort();
        self.state.shutdown();
    }
}

impl VercelSim {
    /// A simulator on a free port with the defaults of [`VercelSimBuilder`].
    pub async fn start() -> std::io::Result<VercelSim> {
        VercelSim::builder().start().await
    }

    /// A builder.
    pub fn builder() -> VercelSimBuilder {
        VercelSimBuilder::default()
    }

    /// The token it accepts.
    pub fn token(&self) -> &str {
        &self.state.settings.token
    }

    /// The team it serves.
    pub fn team_id(&self) -> &str {
        &self.state.settings.team_id
    }

    /// The project sandboxes live in.
    pub fn project_id(&self) -> &str {
        &self.state.settings.project_id
    }

    /// The names of the sandboxes that exist, in any state.
    pub fn sandbox_names(&self) -> Vec<String> {
        self.state.names()
    }

    /// The status of session `id` (`running`, `stopped`, …), `None` when there is none.
    pub fn session_status(&self, id: &str) -> Option<&'static str> {
        self.state.session(id).map(|s| s.status())
    }

    /// The host directory behind sandbox `name`'s `/vercel/sandbox`, while it exists.
    pub fn sandbox_dir(&self, name: &str) -> Option<std::path::PathBuf> {
        self.state.sandbox(name).map(|sb| sb.disk.work().to_owned())
    }
}

impl Simulator for VercelSim {
    fn provider(&self) -> &'static str {
        "vercel"
    }

    fn url(&self) -> &str {
        self.server.url()
    }

    fn server(&self) -> &SimServer {
        &self.server
    }

    fn sandboxes(&self) -> usize {
        self.state.count()
    }

    fn api_key(&self) -> &str {
        self.token()
    }

    fn set_rate_limits(&self, enabled: bool) {
        self.state
            .limited
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("VERCEL_TOKEN", self.state.settings.token.clone()),
            ("VERCEL_TEAM_ID", self.state.settings.team_id.clone()),
            ("VERCEL_PROJECT_ID", self.state.settings.project_id.clone()),
            ("VERCEL_API_URL", self.server.url().to_owned()),
        ]
    }
}

/// A mutex's guard, poisoned or not (a panicked handler must not wedge the simulator).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
