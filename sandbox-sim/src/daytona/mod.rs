//! The Daytona simulator: the control-plane API under `/api` and each sandbox's toolbox under
//! `/toolbox/{sandboxId}` (the sandbox's `toolboxProxyUrl` is `{url}/toolbox`), written from
//! `PROTOCOL.md`, `api.json` and `toolbox.json` in the shared Daytona specs and from the
//! official TypeScript SDK's behaviour.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use sandbox_sim::Simulator;
//! use sandbox_sim::daytona::DaytonaSim;
//!
//! let sim = DaytonaSim::start().await.unwrap();
//! // DAYTONA_API_URL={url}/api and DAYTONA_API_KEY=<the key it accepts>:
//! let env = sim.env();
//! assert_eq!(env[0], ("DAYTONA_API_URL", format!("{}/api", sim.url())));
//! let sandboxes = reqwest::Client::new()
//!     .get(format!("{}/api/sandbox", sim.url()))
//!     .bearer_auth(sim.api_key())
//!     .send()
//!     .await
//!     .unwrap();
//! assert_eq!(sandboxes.status(), 200);
//! # }
//! ```
//!
//! ## Served
//!
//! Control plane (`/api`; the operation name of each request in parentheses):
//! - `POST /sandbox` (`create`): labels, env, resources (400 with a snapshot), 409 for a taken
//!   name; the sandbox is `creating` for the transition time, the answer waits for it (at most
//!   30 s) and carries the state from before the wait, as the API does.
//! - `GET /sandbox/{idOrName}` (`get`), `GET /sandbox` (`list`): `{items, nextCursor}`, cursor
//!   pagination (`limit` 1–200, default 100), filters `id`/`name` (prefix, case-insensitive),
//!   `labels` (JSON object), `states` (repeatable), `isPublic`, `snapshots`, `regionIds`.
//! - `POST /sandbox/{id}/start` (`start`), `/stop` (`stop`), `/pause` (`pause`), `/archive`
//!   (`archive`), `DELETE /sandbox/{id}` (`destroy`): the states and transitions of
//!   PROTOCOL.md §1.3 with 409 "Sandbox state change in progress" during a transition and the
//!   400 bodies for wrong states; delete renames to `DESTROYED_<name>_<ms>` and answers 404
//!   once the transition is over; stopping an ephemeral sandbox (`autoDeleteInterval` 0)
//!   deletes it.
//! - `PUT /sandbox/{id}/labels` (`labels`); `POST /sandbox/{id}/autostop|autopause|autoarchive|
//!   autodelete/{minutes}` and `/ttl/{minutes}` (`set_timeout`): auto-stop (idle minutes,
//!   toolbox traffic counts as activity) and the TTL (`autoDestroyAt`) are enforced.
//! - `POST /sandbox/{id}/fork` (`fork`) (a new sandbox with a copy of the files),
//!   `POST /sandbox/{id}/snapshot` (`snapshot`) (`snapshotting` for the transition time).
//! - `GET /sandbox/{id}/ports/{port}/preview-url`, `…/signed-preview-url?expiresInSeconds=`,
//!   `POST …/signed-preview-url/{token}/expire` (`preview`); the preview token changes on every
//!   start.
//! - `POST /sandbox/{id}/ssh-access?expiresInMinutes=`, `DELETE /sandbox/{id}/ssh-access`,
//!   `GET /sandbox/ssh-access/validate?token=` (`ssh`): one live token per sandbox.
//! - `GET /sandbox/{id}/toolbox-proxy-url`, `POST /sandbox/{id}/last-activity` (`other`);
//!   `GET /config` (no key needed) (`config`).
//!
//! Toolbox (`/toolbox/{sandboxId}`; a sandbox that is not running — anything but `started`,
//! `snapshotting`, `forking` — gets the proxy's empty 502):
//! - `POST /process/execute` (`exec`): the command on a shell's stdin in its own process group,
//!   stdout and stderr merged, `timeout` → 408 after killing the group.
//! - Sessions: `POST /process/session` (`session.create`), `GET /process/session[/{sid}]`,
//!   `GET …/command/{cid}` (`exec.status`), `DELETE /process/session/{sid}` (`kill`),
//!   `POST /process/session/{sid}/exec` (`exec`) (sync 200 or `runAsync` 202),
//!   `GET …/command/{cid}/logs` (`exec.output`) (JSON or text by `X-Daytona-SDK-Version`, and
//!   the WebSocket follow of PROTOCOL.md §4.2), `POST …/command/{cid}/input` (`stdin`).
//!   A session is a real `bash` reading commands from its stdin; each command runs in the
//!   daemon's wrapper, which labels every output line with the 3-byte stream marker into one
//!   log file and writes the exit code after both streams are drained. `exit` in a command
//!   ends the session (410 `SESSION_ENDED` for what waits on it); stopping the sandbox ends
//!   every session. A sync exec has no timeout: it answers when the exit code is written.
//! - Files: `GET /files` (`files.list`), `GET /files/info` (`files.stat`), `GET
//!   /files/download` and `POST /files/bulk-download` (`files.read`), `POST /files/bulk-upload`
//!   and `/files/upload-v2` (`files.write`), `POST /files/folder` (`files.mkdir`), `POST
//!   /files/move` (`files.move`), `DELETE /files` (`files.remove`). Every path is the
//!   sandbox's (`crate::disk`): relative ones resolve against its working directory, which
//!   shows at its own host path (what `GET /work-dir` and `GET /user-home-dir` report, and
//!   where commands run); every other absolute path lives in a root of the sandbox's own,
//!   never on the host, and links are followed inside the sandbox.
//! - `GET /system/metrics` (`metrics`) (host-wide memory and load, the sandbox directory's
//!   disk use).
//! - The stateful interpreter: `GET /process/interpreter/execute` upgraded to a WebSocket
//!   (`run_code`), `POST`/`GET /process/interpreter/context` and `DELETE …/context/{id}`
//!   (`code_contexts`); cells run in core's emulated kernel, answered in the daemon's
//!   vocabulary and close codes (see `interpreter.rs`).
//!
//! Every API request needs `Authorization: Bearer <key>` (401 otherwise, in the API's error
//! body); toolbox requests take the key or the sandbox's preview token
//! (`X-Daytona-Preview-Token`, `?DAYTONA_SANDBOX_AUTH_KEY=`). The API applies the documented
//! throttlers (`authenticated`, `sandbox-create`, `sandbox-lifecycle`; per minute, tier 1 by
//! default) with their `X-RateLimit-*-{name}` headers and `Retry-After-{name}` on 429.
//!
//! ## Not simulated
//!
//! The preview proxy (links are returned, nothing answers at them), the SSH gateway
//! (`sshCommand` names the simulator's own port, where no SSH server answers), the Socket.IO
//! event stream (404: the official SDK falls back to polling), build logs and `buildInfo`
//! builds, snapshots and volumes as resources, recover, resize, auto-archive, PTY, code-run,
//! git, LSP, computer use, the `failed-auth` throttler, JWT
//! organizations.

mod access;
mod api;
mod call;
mod files;
mod follow;
mod interpreter;
mod logs;
mod record;
mod session;
#[cfg(test)]
mod tests;
mod toolbox;

use super::{Backing, FaultPlan, Handler, SimRequest, SimResponse, SimServer, Simulator};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// How long a state transition (creating, starting, stopping, …) takes by default.
pub const DEFAULT_TRANSITION: Duration = Duration::from_millis(100);

/// How long the log WebSocket stays open after the command's exit code exists with no new
/// output, before the server closes it (PROTOCOL.md §4.2: 50 × 20 ms).
pub const DEFAULT_FOLLOW_LINGER: Duration = Duration::from_secs(1);

/// The documented tier-1 limits per minute: (`authenticated`, `sandbox-create`,
/// `sandbox-lifecycle`).
pub const DEFAULT_RATE_LIMITS: (u32, u32, u32) = (10_000, 300, 10_000);

/// The organization every sandbox belongs to.
pub const ORGANIZATION_ID: &str = "5a1de7a0-0000-4000-8000-00000000d170";

/// Settings of a simulator, fixed at start.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub api_key: String,
    pub transition: Duration,
    pub follow_linger: Duration,
    /// (`authenticated`, `sandbox-create`, `sandbox-lifecycle`) per minute.
    pub rate_limits: (u32, u32, u32),
}

/// Builds a [`DaytonaSim`].
#[derive(Debug)]
pub struct DaytonaSimBuilder {
    port: u16,
    faults: FaultPlan,
    config: Config,
}

impl DaytonaSimBuilder {
    /// Serves on `127.0.0.1:port` (default 0: a free port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Applies `faults` (default: none).
    pub fn faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
    }

    /// Accepts `key` as the API key (default: a fresh random `dtn_` key for each builder, so
    /// for each start).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.config.api_key = key.into();
        self
    }

    /// How long each state transition takes (default [`DEFAULT_TRANSITION`]).
    pub fn transition(mut self, time: Duration) -> Self {
        self.config.transition = time;
        self
    }

    /// How long the log WebSocket lingers after the command ended (default
    /// [`DEFAULT_FOLLOW_LINGER`]).
    pub fn follow_linger(mut self, linger: Duration) -> Self {
        self.config.follow_linger = linger;
        self
    }

    /// Requests per minute of the `authenticated`, `sandbox-create` and `sandbox-lifecycle`
    /// throttlers (default [`DEFAULT_RATE_LIMITS`]).
    pub fn rate_limits(mut self, authenticated: u32, create: u32, lifecycle: u32) -> Self {
        self.config.rate_limits = (authenticated, create, lifecycle);
        self
    }

    /// Starts the simulator on the current runtime.
    pub async fn start(self) -> std::io::Result<DaytonaSim> {
        let backing = Backing::new()?;
        let state = Arc::new(api::Api::new(self.config, backing));
        let handler = Arc::new(DaytonaHandler(state.clone()));
        let server = SimServer::start(handler, self.port, self.faults).await?;
        state.set_url(server.url());
        Ok(DaytonaSim { server, state })
    }
}

/// A running Daytona simulator; dropping it stops the server and destroys every sandbox left
/// (their processes are killed, their directories removed).
pub struct DaytonaSim {
    server: SimServer,
    state: Arc<api::Api>,
}

impl DaytonaSim {
    /// A builder with the defaults.
    pub fn builder() -> DaytonaSimBuilder {
        DaytonaSimBuilder {
            port: 0,
            faults: FaultPlan::new(),
            config: Config {
                api_key: super::new_key("dtn_", 64),
                transition: DEFAULT_TRANSITION,
                follow_linger: DEFAULT_FOLLOW_LINGER,
                rate_limits: DEFAULT_RATE_LIMITS,
            },
        }
    }

    /// Starts a simulator on a free port with the defaults and no faults.
    pub async fn start() -> std::io::Result<DaytonaSim> {
        Self::builder().start().await
    }

    /// The API key it accepts.
    pub fn api_key(&self) -> &str {
        &self.state.config.api_key
    }

    /// The control-plane base URL (`{url}/api`), what `DAYTONA_API_URL` should say.
    pub fn api_url(&self) -> String {
        format!("{}/api", self.server.url())
    }

    /// The state (as the API shows it) of the sandbox with this id or name, if it exists.
    pub fn state_of(&self, id_or_name: &str) -> Option<String> {
        self.state.state_of(id_or_name)
    }
}

impl Drop for DaytonaSim {
    /// Destroys every sandbox still there, so no process of theirs outlives the simulator
    /// (on a thread of its own: a drop may happen on or off a runtime).
    fn drop(&mut self) {
        let backings = self.state.take_all();
        if backings.is_empty() {
            return;
        }
        let destroyer = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                for backing in backings {
                    let _ = sandbox_sdk_core::Sandbox::destroy(&backing).await;
                }
            });
        });
        let _ = destroyer.join();
    }
}

impl Simulator for DaytonaSim {
    fn provider(&self) -> &'static str {
        "daytona"
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
        DaytonaSim::api_key(self)
    }

    fn set_rate_limits(&self, enabled: bool) {
        self.state
            .limited
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DAYTONA_API_URL", self.api_url()),
            ("DAYTONA_API_KEY", self.state.config.api_key.clone()),
        ]
    }
}

struct DaytonaHandler(Arc<api::Api>);

impl Handler for DaytonaHandler {
    fn admit(&self, head: &SimRequest) -> Result<usize, SimResponse> {
        let segments = head.segments();
        match segments.first().map(String::as_str) {
            Some("api") => self.0.admit(head),
            Some("toolbox") if segments.len() > 1 => toolbox::admit(&self.0, head),
            _ => Ok(crate::MAX_JSON_BODY),
        }
    }

    fn operation(&self, request: &SimRequest) -> &'static str {
        let segments = request.segments();
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        match s.first() {
            Some(&"api") => api::operation(&request.method, &s[1..]),
            Some(&"toolbox") if s.len() > 1 => toolbox::operation(&request.method, &s[2..]),
            _ => "other",
        }
    }

    fn handle(&self, request: SimRequest) -> BoxFuture<'static, SimResponse> {
        let api = self.0.clone();
        Box::pin(async move {
            let segments = request.segments();
            match segments.first().map(String::as_str) {
                Some("api") => api.handle(request).await,
                Some("toolbox") if segments.len() > 1 => toolbox::handle(api, request).await,
                _ => api::error(
                    404,
                    &request.path,
                    &format!("Cannot {} {}", request.method, request.path),
                ),
            }
        })
    }

    fn error(&self, status: u16, message: &str) -> SimResponse {
        api::error(status, "", message)
    }

    fn error_for(&self, request: &SimRequest, status: u16, message: &str) -> SimResponse {
        if request.path.starts_with("/toolbox/") {
            call::error(status, &request.method, &request.path, message)
        } else {
            api::error(status, &api::full_path(request), message)
        }
    }
}

pub(crate) use super::random_hex;

/// A random UUID v4 in its text form.
pub(crate) fn random_uuid() -> String {
    let h = random_hex(32);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// A random token of `len` letters and digits (the alphabet of Daytona's SSH and preview
/// tokens: URL-safe without `_` and `-`).
pub(crate) fn random_token(len: usize) -> String {
    super::random_from(
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
        len,
    )
}
