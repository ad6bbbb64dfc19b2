//! [`FlySim`]: the Fly Machines API (`https://api.machines.dev/v1`) as a loopback server,
//! written from `specs/fly/PROTOCOL.md` and the Machines OpenAPI document.
//!
//! ```
//! # async fn demo() {
//! use sandbox_sim::Simulator;
//! use sandbox_sim::fly::FlySim;
//!
//! let sim = FlySim::start().await.unwrap();
//! // FLY_API_HOSTNAME, FLY_API_TOKEN and FLY_APP_NAME point a client at it.
//! let env = sim.env();
//! assert_eq!(env[0], ("FLY_API_HOSTNAME", sim.url().to_owned()));
//! # }
//! ```
//!
//! ## Endpoints served (under `/v1/apps/{app}`)
//!
//! | endpoint | operation name |
//! | --- | --- |
//! | `POST /machines` (config, name, region, `skip_launch`, `lease_ttl`) | `create` |
//! | `GET /machines` (`metadata.{key}`, `state`, `region`, `include_deleted`, `summary`, `include_leases`) | `list` |
//! | `GET /machines/{id}` (`include_leases`) | `get` |
//! | `POST /machines/{id}` (whole config, `current_version`, `skip_launch`) | `update` |
//! | `DELETE /machines/{id}` (`force=true`; fly-go's `kill=true`) | `destroy` |
//! | `POST …/start`, `…/stop` (`{signal, timeout}`), `…/suspend`, `…/restart` | `start`, `stop`, `pause`, `restart` |
//! | `POST …/signal`, `…/cordon`, `…/uncordon` | `signal`, `cordon`, `uncordon` |
//! | `GET …/wait` (`state` repeated or comma-separated, `timeout` 1–60 s, `version`/`instance_id`) | `wait` |
//! | `POST …/exec` (`command` or `cmd`, `timeout`, `stdin`) | `exec` |
//! | `POST`/`GET`/`DELETE …/lease` (`fly-machine-lease-nonce`) | `lease` |
//! | `GET`/`PUT`/`PATCH …/metadata`, `GET`/`POST`/`DELETE …/metadata/{key}` | `metadata` |
//! | `GET …/events` (`limit`, default 20, at most 50) | `events` |
//! | `GET /v1/apps/{app}`, `POST /v1/apps` (`{"name", "org_slug"}`: 201, 422 `name_taken`) | `other` |
//!
//! ## Behaviour
//!
//! - **Auth**: `Authorization: Bearer <token>` or `FlyV1 <token>`; anything else is 401
//!   `{"error": "…"}`. An unknown app or machine is 404 `{"error": "…"}`; an unknown route is
//!   Go's plain-text `404 page not found`.
//! - **States** (PROTOCOL.md §5): create answers `created`, then `starting` → `started` after
//!   [`FlySimBuilder::start_time`] (`skip_launch` stays `created`); stop: `stopping` →
//!   `stopped`, suspend: `suspending` → `suspended`, destroy: `destroying` → `destroyed` (each
//!   after [`FlySimBuilder::stop_time`]). Start from `stopped`, `suspended`, `created` or
//!   `failed` answers `{"previous_state", "migrated", "new_host"}`; from any other state 412
//!   `unable to start machine from current state`. Suspend needs `started`; destroy without
//!   `force` needs a machine that is not running (412 otherwise). A destroyed machine is still
//!   shown (`state: destroyed`) for [`FlySimBuilder::destroyed_linger`], then 404; lists show
//!   it with `include_deleted=true`. Stopping a stopped machine succeeds. The machine list
//!   has no pages: every match comes in one answer, so the server's page cap
//!   ([`crate::SimServer::set_page_cap`]) does not apply.
//! - **Machines are real**: a machine boots into a fresh directory (its root filesystem, reset
//!   on every stop, as a stopped Fly Machine boots from its image again) with `config.env`;
//!   its main process (`init.exec`, or `init.entrypoint` + `init.cmd`) runs for real, and when
//!   it exits the machine stops with an `exit` event. Suspend freezes every process
//!   (`SIGSTOP`) and start thaws them, memory kept.
//! - **`/wait`**: answers `{ok, state, version, event_id}` as soon as the machine is in one of
//!   the states (`settled` is any non-transient one); after `timeout` seconds 408 `machine
//!   failed to reach desired state, …, currently …`; a timeout outside 1–60 s is 400
//!   `invalid_argument`. A `version` that is no longer current waits on a `replaced` machine.
//! - **`/exec`**: runs the argv (or `cmd` split on spaces, as flyctl's server does) in the
//!   machine with its env, the whole `stdin` string as input, and answers `{stdout, stderr,
//!   exit_code, exit_signal}` when it ends. A command still running after its `timeout` (or
//!   [`FlySimBuilder::exec_deadline`], the platform's cap, whichever is shorter) is killed
//!   and answered 408 `deadline_exceeded`. A machine that is not `started` is 412.
//! - **Leases**: `POST …/lease` (`{"ttl", "description"}` or `?ttl=`) answers 201 with the
//!   `{"status": "success", "data": {nonce, expires_at, owner, description, version}}`
//!   envelope; the same call with the nonce refreshes it. While a lease is live, a mutation
//!   (update, start, stop, suspend, restart, signal, cordon, destroy, metadata writes,
//!   another lease) without its nonce is 409 `{"status": "error", "message": "machine ID …
//!   lease currently held by …"}`. `lease_ttl` on create takes one and returns `nonce`.
//! - **Rate limits** (PROTOCOL.md §3, on unless [`FlySimBuilder::rate_limits`] is off): per
//!   action and machine (create and list: per app), 1 request/s with bursts of 3; Get Machine
//!   5/s with bursts of 10. Over it: 429 `{"error": "rate limit exceeded"}`. Fly's docs name no
//!   `Retry-After`, so none is sent unless [`FlySimBuilder::retry_after`] asks for it.
//! - Every answer carries `fly-request-id` (`<ULID>-<region>`).
//!
//! ## Not simulated
//!
//! Apps beyond create and get (delete, IPs, secrets, org-wide lists), volumes and mounts,
//! services and Fly Proxy (no `{app}.fly.dev`), regions and placement (a create's `region` is
//! recorded as given), health checks, restart policies (a main process that exits always stops
//! the machine), `/ps`, `/versions`, memory endpoints, the org-wide list, containers, GPUs.
//! The machine's filesystem outside its own directory is the host's: absolute paths (`/tmp`)
//! are shared by every simulated machine, and a stop resets only the machine's directory.
//! Stop's `signal` and `timeout` are accepted and ignored (every process is killed). Machine
//! names are not checked for uniqueness.

mod api;
mod host;
mod limits;
mod machine;
#[cfg(test)]
mod tests;

use crate::{FaultPlan, SimServer, Simulator};
use api::Fly;
use std::sync::Arc;
use std::time::Duration;

/// The app [`FlySim`] serves unless [`FlySimBuilder::app`] says otherwise.
pub const APP: &str = "fly-sim-app";

/// Settings of a [`FlySim`].
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub app: String,
    pub token: String,
    pub region: String,
    pub owner: String,
    pub start_time: Duration,
    pub stop_time: Duration,
    pub destroyed_linger: Duration,
    pub exec_deadline: Duration,
    pub rate_limits: bool,
    pub retry_after: bool,
}

/// Builds a [`FlySim`]: port, faults, timings and Fly-specific switches.
#[derive(Clone, Debug)]
pub struct FlySimBuilder {
    port: u16,
    faults: FaultPlan,
    settings: Settings,
}

impl Default for FlySimBuilder {
    fn default() -> Self {
        FlySimBuilder {
            port: 0,
            faults: FaultPlan::new(),
            settings: Settings {
                app: APP.to_owned(),
                token: crate::new_key("fo1_", 64),
                region: "ord".to_owned(),
                owner: "sim@fly.local".to_owned(),
                start_time: Duration::from_millis(50),
                stop_time: Duration::from_millis(20),
                destroyed_linger: Duration::from_secs(2),
                exec_deadline: Duration::from_secs(30),
                rate_limits: true,
                retry_after: false,
            },
        }
    }
}

impl FlySimBuilder {
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

    /// The app whose machines are served (default [`APP`]).
    pub fn app(mut self, app: impl Into<String>) -> Self {
        self.settings.app = app.into();
        self
    }

    /// The API token accepted (default: a fresh random one for each builder, so for each
    /// start; sent as `Bearer`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.settings.token = token.into();
        self
    }

    /// The region of machines created without one (default `ord`).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.settings.region = region.into();
        self
    }

    /// How long a machine takes from `starting` to `started` (default 50 ms).
    pub fn start_time(mut self, time: Duration) -> Self {
        self.settings.start_time = time;
        self
    }

    /// How long stopping, suspending and destroying take (default 20 ms).
    pub fn stop_time(mut self, time: Duration) -> Self {
        self.settings.stop_time = time;
        self
    }

    /// How long a destroyed machine is still shown by `GET` before it is 404 (default 2 s).
    pub fn destroyed_linger(mut self, time: Duration) -> Self {
        self.settings.destroyed_linger = time;
        self
    }

    /// The longest an `/exec` may run whatever its `timeout` asks (default 30 s: field reports
    /// show Fly failing longer execs with `deadline_exceeded`, PROTOCOL.md §8).
    pub fn exec_deadline(mut self, deadline: Duration) -> Self {
        self.settings.exec_deadline = deadline;
        self
    }

    /// Whether Fly's documented rate limits apply (default on).
    pub fn rate_limits(mut self, on: bool) -> Self {
        self.settings.rate_limits = on;
        self
    }

    /// Whether a 429 carries `Retry-After` (whole seconds until the next allowed request).
    /// Default off: Fly's docs name no such header (PROTOCOL.md §2).
    pub fn retry_after(mut self, on: bool) -> Self {
        self.settings.retry_after = on;
        self
    }

    /// Starts the simulator on the current runtime.
    pub async fn start(self) -> std::io::Result<FlySim> {
        let fly = Arc::new(Fly::new(self.settings)?);
        let server = SimServer::start(fly.clone().handler(), self.port, self.faults).await?;
        Ok(FlySim { server, fly })
    }
}

/// A running Fly Machines API simulator; dropping it stops the server and every machine's
/// processes. See the [module docs](self).
pub struct FlySim {
    server: SimServer,
    fly: Arc<Fly>,
}

impl FlySim {
    /// A simulator on a free port with the defaults of [`FlySimBuilder`].
    pub async fn start() -> std::io::Result<FlySim> {
        FlySim::builder().start().await
    }

    /// A builder.
    pub fn builder() -> FlySimBuilder {
        FlySimBuilder::default()
    }

    /// The app it serves.
    pub fn app(&self) -> &str {
        &self.fly.settings.app
    }

    /// Makes another app (as `POST /v1/apps` does); `false` when it exists already. Each app
    /// has its own machines and its own create and list rate limits.
    pub fn add_app(&self, name: &str) -> bool {
        self.fly.add_app(name)
    }

    /// The token it accepts.
    pub fn token(&self) -> &str {
        &self.fly.settings.token
    }

    /// The state of machine `id` (`started`, `stopped`, …), `None` when there is none.
    pub fn state(&self, id: &str) -> Option<String> {
        self.fly.state_of(id)
    }

    /// How many machines have live processes (booted and not stopped or destroyed).
    pub fn running(&self) -> usize {
        self.fly.host.running()
    }
}

impl Simulator for FlySim {
    fn provider(&self) -> &'static str {
        "fly"
    }

    fn url(&self) -> &str {
        self.server.url()
    }

    fn server(&self) -> &SimServer {
        &self.server
    }

    fn sandboxes(&self) -> usize {
        self.fly.live_machines()
    }

    fn api_key(&self) -> &str {
        self.token()
    }

    fn set_rate_limits(&self, enabled: bool) {
        self.fly
            .limited
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FLY_API_HOSTNAME", self.server.url().to_owned()),
            ("FLY_API_TOKEN", self.fly.settings.token.clone()),
            ("FLY_APP_NAME", self.fly.settings.app.clone()),
        ]
    }
}
