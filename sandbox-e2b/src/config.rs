//! Resolved settings ([`Config`], produced by the builder), the constants they default to, the
//! limits the adapter holds answers to, and the small enums of E2B's options.

use sandbox_sdk_core::idempotency::CreateLookup;
use std::fmt;
use std::time::Duration;

/// The provider's name.
pub const PROVIDER: &str = "e2b";

/// The domain used when neither the builder nor `E2B_DOMAIN` names one.
pub const DEFAULT_DOMAIN: &str = "e2b.app";

/// The port envd listens on inside every sandbox (PROTOCOL.md §3.1).
pub const ENVD_PORT: u16 = 49983;

/// Domains whose envd is reached through the shared host `sandbox.{domain}` with routing headers
/// (the list the official SDKs carry, PROTOCOL.md §3.2); any other domain gets
/// `{port}-{id}.{domain}`.
pub(crate) const SHARED_HOST_DOMAINS: &[&str] = &[
    "e2b.app",
    "e2b.dev",
    "e2b.pro",
    "e2b-staging.dev",
    "e2b-tango.dev",
    "e2b-juliett.dev",
    "foxtrot-2.e2b.dev",
];

/// Timeout of each request when the builder sets none: 60 s.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest pause between two checks of a template build when the builder sets none: 5 s.
pub(crate) const DEFAULT_TEMPLATE_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long a template build is waited for when the builder sets no limit: 30 min.
pub(crate) const DEFAULT_TEMPLATE_BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How long an ambiguous create's idempotency key is looked up by default: 30 s.
///
/// E2B makes a sandbox in well under a second, and a few seconds when it is busy; the
/// sandbox is listable once the create has finished on the server. 30 s covers a create the
/// server was still finishing when the client gave up (the client's default request timeout is
/// 60 s, so a create that slow has already failed once), and is short enough that a lost create
/// is reported in bounded time. `Idempotency-Key` is a second line of defence when the window
/// passes and the create is sent again.
pub const DEFAULT_CREATE_LOOKUP_WINDOW: Duration = Duration::from_secs(30);

/// Keepalive interval asked of envd on streams, in seconds (what both official SDKs send):
/// `Keepalive-Ping-Interval: 50` makes envd send a `keepalive` event after 50 s without output
/// on `Start`, `Connect` and `WatchDir` (PROTOCOL.md §3.3; whole seconds only).
pub const KEEPALIVE_SECS: &str = "50";

/// How long an open process or watch stream may go without a single byte by default: envd's
/// keepalive every 50 s ([`KEEPALIVE_SECS`]) plus 15 s for the edge proxy and the network.
/// A silent stream is then ended with a `Transport` error instead of being waited on forever.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(65);

/// How long a `/files` upload or download may go without moving a byte by default. Transfers
/// have no total limit; only this silence (after the response head, which the request timeout
/// bounds) ends them, with a `Transport` error.
pub const DEFAULT_TRANSFER_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The cap on a control-plane answer that describes one object (a created or connected
/// sandbox, one sandbox's details, a volume, a fork's children, a snapshot, a template step):
/// such answers are a few KiB, so 1 MiB is far past any honest one, and a hostile or broken
/// answer is refused before it is held. Lists, metrics and logs keep core's default
/// ([`sandbox_sdk_core::http::DEFAULT_MAX_BODY`], 16 MiB per page).
pub(crate) const ONE_OBJECT_MAX_BODY: usize = 1024 * 1024;

/// The cap on a unary envd answer (`Stat`, `MakeDir`, `Move`, `Remove`, signals, input,
/// resize, and the `/files` upload's list of written entries): each is one entry or `{}`, a
/// few hundred bytes, so 1 MiB is far past any honest answer.
pub(crate) const UNARY_MAX_BODY: usize = 1024 * 1024;

/// The cap on a `ListDir` answer: one JSON entry (~250 bytes) per file, so 64 MiB holds about
/// 250 000 entries, more than a deep listing of a large tree needs.
pub(crate) const LIST_DIR_MAX_BODY: usize = 64 * 1024 * 1024;

/// The cap on a `process.Process/List` answer (every process with its command line and
/// environment): core's default of 16 MiB.
pub(crate) const PROCESS_LIST_MAX_BODY: usize = sandbox_sdk_core::http::DEFAULT_MAX_BODY;

/// The cap on an answer to a stream request that is not a stream (an error page, a proxy's
/// message): only its first words are ever quoted.
pub(crate) const NOT_A_STREAM_MAX_BODY: usize = 64 * 1024;

/// The metadata key under which `CreateSpec::idempotency_key` is stored on a sandbox.
pub const IDEMPOTENCY_LABEL: &str = "sandbox-sdk-idempotency-key";
/// The metadata key under which `CreateSpec::name` is stored (E2B sandboxes have no name).
pub const NAME_METADATA_KEY: &str = "sandbox-sdk-name";
/// The template used when the spec names none.
pub const DEFAULT_TEMPLATE: &str = "base";

/// The time to live a new sandbox gets when none is asked for: `NewSandboxV2`'s `timeout`
/// default, which the SDKs rely on (PROTOCOL.md §2.3).
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// Environment variables read by `E2bBuilder::from_env`.
pub mod env {
    /// The API key (`e2b_…`). Required.
    pub const API_KEY: &str = "E2B_API_KEY";
    /// The domain (default `e2b.app`): control plane `https://api.{domain}`, envd on the
    /// sandbox hosts of that domain.
    pub const DOMAIN: &str = "E2B_DOMAIN";
    /// Overrides the control-plane base URL.
    pub const API_URL: &str = "E2B_API_URL";
    /// Overrides the envd base URL of every sandbox: one server, told apart by the
    /// `E2b-Sandbox-Id` routing header.
    pub const SANDBOX_URL: &str = "E2B_SANDBOX_URL";
}

/// How `E2bSandbox::pause_with` pauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PauseMode {
    /// Keep memory and running processes (E2B's default).
    #[default]
    Memory,
    /// Keep only the filesystem; processes restart on resume.
    FilesystemOnly,
}

/// The settings one provider and all its sandboxes run with, every default resolved. Made by
/// the builder only; `Debug` never shows the API key.
#[derive(Clone)]
pub(crate) struct Config {
    /// Sent as `X-API-Key` to the control plane only.
    pub api_key: String,
    /// The domain of the control plane and of the sandbox hosts.
    pub domain: String,
    /// The control-plane base URL.
    pub api_url: String,
    /// One envd base URL for every sandbox, when set (tests, self-hosting).
    pub sandbox_url: Option<String>,
    /// The Linux user for commands and files when a command names none.
    pub user: Option<String>,
    /// Timeout of each request, and of opening a stream or a transfer.
    pub request_timeout: Duration,
    /// The longest pause between two checks of a template build.
    pub template_poll_interval: Duration,
    /// How long a template build is waited for.
    pub template_build_timeout: Duration,
    /// How an ambiguous create's idempotency key is looked up.
    pub create_lookup: CreateLookup,
    /// The longest silence of an open Connect stream.
    pub stream_idle_timeout: Duration,
    /// The longest silence of a `/files` transfer's body.
    pub transfer_idle_timeout: Duration,
    /// PEM certificate authorities trusted besides the system roots.
    pub root_certificates: Vec<Vec<u8>>,
    /// Whether gzip is asked for (and decoded) on control-plane, unary envd and download answers.
    #[cfg(feature = "gzip")]
    pub gzip: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("api_key", &"<redacted>")
            .field("domain", &self.domain)
            .field("api_url", &self.api_url)
            .field("sandbox_url", &self.sandbox_url)
            .field("user", &self.user)
            .field("request_timeout", &self.request_timeout)
            .field("create_lookup", &self.create_lookup)
            .finish()
    }
}

impl Config {
    /// The envd base URL the shared envd client starts from: the override when set, else the
    /// shared host of the domain (each sandbox then re-bases it, PROTOCOL.md §3.2).
    pub fn envd_base(&self) -> String {
        match &self.sandbox_url {
            Some(url) => url.clone(),
            None => format!("https://sandbox.{}", self.domain),
        }
    }
}
