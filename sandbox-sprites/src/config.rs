//! Resolved settings ([`Settings`], made by [`crate::SpritesBuilder::build`]) and the adapter's
//! constants: defaults, limits and the names it puts on the wire.

use sandbox_sdk_core::idempotency::CreateLookup;
use std::fmt;
use std::time::Duration;

/// The provider name used in errors and capability tables.
pub const PROVIDER: &str = "sprites";

/// The Sprites API (PROTOCOL.md §2); WebSockets go to the same host (`wss://`).
pub const DEFAULT_API_URL: &str = "https://api.sprites.dev";

/// How long an ambiguous create (timed out, connection lost after sending, 5xx) is looked up by
/// its name before the error goes back. A sprite's name is its dedupe key (PROTOCOL.md §4.1)
/// and a create answers with the sprite made (still `cold`), so 30 s covers a slow control
/// plane.
pub const DEFAULT_CREATE_LOOKUP_WINDOW: Duration = Duration::from_secs(30);

/// The longest silence allowed on a command's WebSocket or a streamed answer before it is
/// treated as lost (PROTOCOL.md §5.6, §18.10): the server pings every 15 s and the official
/// SDKs give up after 45 s. A command's socket is then re-attached; a file read fails with
/// `Transport`.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(45);

/// How long a create may take (PROTOCOL.md §4.1: not published; both official SDKs allow 2
/// minutes).
pub const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(120);

/// How many re-attaches in a row may bring nothing (no output, no exit) before following a
/// command gives up with `Transport` (the command keeps running; `attach` follows it again).
pub const DEFAULT_MAX_REATTACHES: u32 = 5;

/// How long a foreground command outlives a dropped socket (`max_run_after_disconnect`,
/// PROTOCOL.md §5.5, trap 2): the server's own 10 s is shorter than the idle bound, so a
/// command whose socket died silently would be gone before the adapter could re-attach.
pub const DEFAULT_DETACH_GRACE: Duration = Duration::from_secs(120);

/// The port a sprite's public URL reaches (PROTOCOL.md §9: unconfirmed, 8080 is the common
/// assumption); [`crate::SpritesBuilder::url_port`] changes it.
pub const DEFAULT_URL_PORT: u16 = 8080;

/// The domain every sprite URL is directly under (PROTOCOL.md §9:
/// `https://<name>-<suffix>.sprites.app`); a URL anywhere else is not handed out.
pub(crate) const PREVIEW_DOMAIN: &str = "sprites.app";

/// The home directory of the sprite user, where commands start and relative paths resolve
/// (PROTOCOL.md §18.11).
pub const HOME: &str = "/home/sprite";

/// The largest JSON answer read for one sprite, session list, checkpoint or file listing.
pub const MAX_JSON: usize = 8 * 1024 * 1024;

/// The largest WebSocket message accepted on a command's socket (one output chunk).
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// The page size of listings: the documented maximum (PROTOCOL.md §4.2). sprites-py 0.7.2 asks
/// for 100, which the service takes; 50 is inside both, and a shorter page only means one more
/// `continuation_token` round trip.
pub(crate) const PAGE_LIMIT: u32 = 50;

/// How many sprites are read at once when a listing's partial entries must be completed
/// (PROTOCOL.md §4.2, §18.14).
pub(crate) const LIST_CONCURRENCY: usize = 8;

/// The signal [`sandbox_sdk_core::Sandbox::kill_process`] sends: SIGKILL, so a command that
/// ignores SIGTERM still ends ([`crate::SpritesSandbox::signal`] sends others).
pub(crate) const KILL_SIGNAL: &str = "SIGKILL";

/// How a create that names no sprite names it.
pub(crate) type NameSource = std::sync::Arc<dyn Fn() -> String + Send + Sync>;

/// Everything the adapter needs at run time, resolved and checked by the builder.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The API base URL (no trailing `/`).
    pub base_url: String,
    /// The bearer token (secret).
    pub token: String,
    pub request_timeout: Duration,
    pub create_timeout: Duration,
    pub stream_idle: Duration,
    pub max_reattaches: u32,
    pub detach_grace: Duration,
    pub create_lookup: CreateLookup,
    /// Public URLs for new sprites (`url_settings.auth = public`) instead of token-guarded ones.
    pub public_url: bool,
    pub url_port: u16,
    /// Block creates until capacity is free (`wait_for_capacity`).
    pub wait_for_capacity: bool,
    /// Names of creates that name no sprite; `None`: `sdk-` and 32 random hex digits.
    pub names: Option<NameSource>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("base_url", &self.base_url)
            .field("token", &"<redacted>")
            .field("request_timeout", &self.request_timeout)
            .field("stream_idle", &self.stream_idle)
            .field("detach_grace", &self.detach_grace)
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

/// `d` as a Go duration string, as `max_run_after_disconnect` takes it (`90s`; `0` = forever).
pub(crate) fn go_duration(d: Duration) -> String {
    format!("{}s", d.as_secs().max(1))
}
