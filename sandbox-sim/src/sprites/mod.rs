//! [`SpritesSim`]: Fly.io Sprites' API (`https://api.sprites.dev`) as a loopback server,
//! written from `sandbox-sprites/PROTOCOL.md` (the provider facts, with their sources; §18 the
//! choices this simulator and the `sandbox-sprites` adapter share where the facts stop) and
//! the official JS SDK `@fly/sprites` 0.1.0's requests.
//!
//! ```
//! # async fn demo() {
//! use sandbox_sim::Simulator;
//! use sandbox_sim::sprites::SpritesSim;
//!
//! let sim = SpritesSim::start().await.unwrap();
//! // SPRITES_TOKEN and SPRITES_API_URL point a client at it
//! // (`new SpritesClient(token, { baseURL })` in the JS SDK).
//! let env = sim.env();
//! assert_eq!(env[1], ("SPRITES_API_URL", sim.url().to_owned()));
//! # }
//! ```
//!
//! ## Endpoints served
//!
//! Every request needs `Authorization: Bearer <token>` ([`SpritesSim::token`]), WebSocket
//! upgrades included (PROTOCOL.md §2); anything else is 401.
//!
//! | endpoint | operation name |
//! | --- | --- |
//! | `POST /v1/sprites` | `create` |
//! | `GET /v1/sprites` (`prefix`, `max_results`: over 50 is capped at 50, `continuation_token`) | `list` |
//! | `GET /v1/sprites/{name}` | `get` |
//! | `PUT /v1/sprites/{name}` (`labels`, `url_settings`) | `update` |
//! | `DELETE /v1/sprites/{name}` | `destroy` |
//! | `GET /v1/sprites/{name}/exec?cmd=…` (WebSocket) | `exec` |
//! | `GET /v1/sprites/{name}/exec/{id}` (WebSocket attach) | `exec.output` |
//! | `GET /v1/sprites/{name}/exec` (no upgrade: the session list) | `exec.list` |
//! | `POST /v1/sprites/{name}/exec/{id}/kill` (NDJSON) | `kill` |
//! | `GET …/fs/read` | `files.read` |
//! | `PUT …/fs/write` | `files.write` |
//! | `GET …/fs/list` | `files.list` |
//! | `DELETE …/fs/delete` | `files.remove` |
//! | `POST …/fs/rename` | `files.move` |
//! | `POST …/checkpoint`, `GET …/checkpoints[/{id}]` | `snapshot` |
//! | `POST …/checkpoints/{id}/restore` | `restore` |
//!
//! Anything else is `other` and answers 404.
//!
//! ## Behaviour
//!
//! - **Errors** (§10): `{"error": code, "message"}` (401 `unauthorized`, 404 `not_found`,
//!   400 `invalid_request`), `{"errors": [..]}` for an invalid name (§18.2), the duplicate
//!   name 400 of §18.1, file errors `{"error", "code", "path"}` (§7; `ENOENT` is 404, every
//!   other code 400), 429 `sprite_creation_rate_limited` with the §11 body fields and
//!   `Retry-After`/`X-RateLimit-*` headers when more than [`SpritesSimBuilder::create_limit`]
//!   creates arrive in [`SpritesSimBuilder::create_window`] (on unless
//!   [`Simulator::set_rate_limits`] turns it off).
//! - **Sprites** (§4, §18.4, §18.5): created `cold`; `running` while an exec session or a file
//!   call is live and for [`SpritesSimBuilder::idle`] after it (30 s by default); `warm` after
//!   that. `config` and `url_settings` are stored and echoed; `environment` is every exec's base
//!   environment. List entries are partial (`name`, `org_slug`, `updated_at`, §18.14), sorted by
//!   name; the continuation token is the last name of the page.
//! - **Disks**: each sprite is one `local` sandbox ([`crate::Backing`]) whose directory is the
//!   sprite's `/`; `/home/sprite` is the home and default working directory (§18.11). Every
//!   file call goes through the `local` provider's confined file primitives, so `..`, absolute
//!   paths and symbolic links cannot leave the sprite's root.
//! - **Exec** (§5, §18.6–§18.10): real processes in their own process group, argv from `cmd`
//!   (`path` the executable), the sprite's environment plus `PATH`/`HOME` (or exactly `env`
//!   when given). Non-TTY frames carry stream ids 0–4; TTY sessions run on a pseudo-terminal
//!   (raw bytes, `resize` and `signal` text messages, an `exit` JSON message). Every connection
//!   gets `session_info` (first on spawn, after the replayed scrollback on attach); the last
//!   [`SpritesSimBuilder::scrollback`] bytes of output are kept for replay. After the exit the
//!   socket lingers for [`SpritesSimBuilder::linger`] before the server closes it. A session
//!   whose last socket dropped runs on for `max_run_after_disconnect` (10 s non-TTY, forever
//!   with TTY or `0`), then is killed. Finished sessions leave the list at once and stay
//!   attachable for [`SpritesSimBuilder::finished_ttl`]. The server pings every
//!   [`SpritesSimBuilder::ping_interval`]. A command killed by signal N exits `128 + N`.
//! - **Checkpoints** (§8, §18.13): a copy of the sprite's disk, ids `v1`, `v2`, …; restore
//!   kills every session and puts the disk back.
//!
//! ## Not simulated
//!
//! HTTP exec (`POST …/exec`), control mode (`cc`), services, policies, proxying, port
//! notifications, `fs/copy|chmod|chown|watch`, the NDJSON list stream, upgrade/restart/check,
//! token exchange, hibernation to `cold` (processes are never lost to idleness), and the
//! concurrent-sprite limit. Commands are not confined: an absolute path in a command's
//! arguments is a host path, and commands run as the host user.

mod api;
mod checkpoints;
mod exec;
mod files;
mod pty;
mod session;
mod sprite;
mod state;
#[cfg(test)]
mod tests;

use crate::{Backing, FaultPlan, SimServer, Simulator};
use api::SpritesHandler;
use state::State;
use std::sync::Arc;
use std::time::Duration;

/// The organisation the token belongs to (`org_slug`, `organization`).
pub const ORG: &str = "sim-org";

/// The sprite user's home, the default working directory of exec and `fs/*` (PROTOCOL.md
/// §18.11).
pub const HOME: &str = "/home/sprite";

/// Settings of a [`SpritesSim`].
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub token: String,
    pub idle: Duration,
    pub linger: Duration,
    pub ping_interval: Duration,
    pub finished_ttl: Duration,
    pub scrollback: usize,
    pub create_limit: u32,
    pub create_window: Duration,
}

/// Builds a [`SpritesSim`]: port, faults, timings, limits and the token.
#[derive(Clone, Debug)]
pub struct SpritesSimBuilder {
    port: u16,
    faults: FaultPlan,
    settings: Settings,
}

impl Default for SpritesSimBuilder {
    fn default() -> Self {
        SpritesSimBuilder {
            port: 0,
            faults: FaultPlan::new(),
            settings: Settings {
                token: crate::new_key("sprites_sim_", 48),
                idle: Duration::from_secs(30),
                linger: Duration::from_secs(5),
                ping_interval: Duration::from_secs(15),
                finished_ttl: Duration::from_secs(300),
                scrollback: 1 << 20,
                create_limit: 100,
                create_window: Duration::from_secs(60),
            },
        }
    }
}

impl SpritesSimBuilder {
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

    /// The bearer token accepted (default: a fresh random one for each builder).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.settings.token = token.into();
        self
    }

    /// How long a sprite stays `running` after its last activity before it is `warm`
    /// (default 30 s, PROTOCOL.md §4.5, §18.5).
    pub fn idle(mut self, idle: Duration) -> Self {
        self.settings.idle = idle;
        self
    }

    /// How long an exec socket stays open after the exit frame before the server closes it
    /// (default 5 s, PROTOCOL.md §5.2).
    pub fn linger(mut self, linger: Duration) -> Self {
        self.settings.linger = linger;
        self
    }

    /// How often the server pings an exec socket (default 15 s, PROTOCOL.md §18.10).
    pub fn ping_interval(mut self, every: Duration) -> Self {
        self.settings.ping_interval = every.max(Duration::from_millis(1));
        self
    }

    /// How long a finished session stays attachable (default 5 minutes, PROTOCOL.md §18.7).
    pub fn finished_ttl(mut self, ttl: Duration) -> Self {
        self.settings.finished_ttl = ttl;
        self
    }

    /// How many bytes of a session's output are kept for replay (default 1 MiB, PROTOCOL.md
    /// §18.6).
    pub fn scrollback(mut self, bytes: usize) -> Self {
        self.settings.scrollback = bytes.max(1);
        self
    }

    /// How many creates are allowed per [`create_window`](Self::create_window) before 429
    /// (default 100; Fly publishes no number, PROTOCOL.md §11).
    pub fn create_limit(mut self, n: u32) -> Self {
        self.settings.create_limit = n.max(1);
        self
    }

    /// The window of [`create_limit`](Self::create_limit) (default 60 s).
    pub fn create_window(mut self, window: Duration) -> Self {
        self.settings.create_window = window.max(Duration::from_millis(1));
        self
    }

    /// Starts the simulator on the current runtime.
    pub async fn start(self) -> std::io::Result<SpritesSim> {
        let state = Arc::new(State::new(self.settings, Backing::new()?));
        let server = SimServer::start(
            Arc::new(SpritesHandler(state.clone())),
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
        Ok(SpritesSim {
            server,
            state,
            ticker,
        })
    }
}

/// A running Sprites simulator; dropping it stops the server, kills every session and removes
/// the sprites' directories. See the [module docs](self).
pub struct SpritesSim {
    server: SimServer,
    state: Arc<State>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Drop for SpritesSim {
    fn drop(&mut self) {
        self.ticker.abort();
        self.state.shutdown();
    }
}

impl SpritesSim {
    /// A simulator on a free port with the defaults of [`SpritesSimBuilder`].
    pub async fn start() -> std::io::Result<SpritesSim> {
        SpritesSim::builder().start().await
    }

    /// A builder.
    pub fn builder() -> SpritesSimBuilder {
        SpritesSimBuilder::default()
    }

    /// The bearer token it accepts.
    pub fn token(&self) -> &str {
        &self.state.settings.token
    }

    /// The names of the sprites that exist.
    pub fn sprite_names(&self) -> Vec<String> {
        self.state.names()
    }

    /// The host directory behind sprite `name`'s `/`, while it exists.
    pub fn sprite_root(&self, name: &str) -> Option<std::path::PathBuf> {
        self.state.sprite(name).map(|s| s.root().to_owned())
    }

    /// The status sprite `name` would report now (`cold`, `running`, `warm`).
    pub fn sprite_status(&self, name: &str) -> Option<&'static str> {
        self.state
            .sprite(name)
            .map(|s| s.status(&self.state.settings))
    }
}

impl Simulator for SpritesSim {
    fn provider(&self) -> &'static str {
        "sprites"
    }

    fn url(&self) -> &str {
        self.server.url()
    }

    fn server(&self) -> &SimServer {
        &self.server
    }

    fn sandboxes(&self) -> usize {
        self.state.names().len()
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
            ("SPRITES_TOKEN", self.state.settings.token.clone()),
            ("SPRITES_API_URL", self.server.url().to_owned()),
        ]
    }
}

/// A mutex's guard, poisoned or not (a panicked handler must not wedge the simulator).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
