//! Resolved settings ([`Config`], made by the builder), the constants they default to, and the
//! enums that choose how commands run and are followed.

use sandbox_sdk_core::idempotency::CreateLookup;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The provider name used in errors.
pub(crate) const PROVIDER: &str = "daytona";

/// The cloud API (`DAYTONA_API_URL` overrides it).
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";

/// The SDK version sent as `X-Daytona-SDK-Version`. The daemon keeps stdout and stderr apart
/// only for versions ≥ [`MIN_SDK_VERSION`] (PROTOCOL.md §9); this is the version of the
/// official TypeScript SDK whose behaviour this crate follows.
pub const DEFAULT_SDK_VERSION: &str = "0.218.0";

/// The lowest `X-Daytona-SDK-Version` for which the daemon answers logs and sync session execs
/// with stdout and stderr apart.
pub const MIN_SDK_VERSION: (u64, u64, u64) = (0, 167, 0);

/// How long a create that may have happened (timed out, connection lost after sending, 5xx
/// gateway answer) is looked up by its name before anything is sent again: 60 s, from 25 ms
/// apart doubling to 1 s. The API keeps a snapshot create's request open for up to 30 s while
/// the sandbox starts (PROTOCOL.md §2.1), and the sandbox row, with its name, exists from the
/// start of that wait; 60 s covers it with room for a slow API.
pub const DEFAULT_CREATE_LOOKUP_WINDOW: Duration = Duration::from_secs(60);

/// How long a foreground command is waited on in one synchronous request before it is followed
/// instead (see [`DaytonaBuilder::direct_window`](crate::DaytonaBuilder::direct_window)).
pub const DEFAULT_DIRECT_WINDOW: Duration = Duration::from_secs(1);

/// The longest silence between the chunks of a streamed upload's or download's body, or of a
/// polled log (see [`DaytonaBuilder::stream_idle_timeout`](crate::DaytonaBuilder::stream_idle_timeout)).
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the log WebSocket may be silent before a ping is sent.
pub const DEFAULT_PING_EVERY: Duration = Duration::from_secs(20);

/// How long a ping on the log WebSocket may go unanswered (no pong, no frame) before the stream
/// ends with a `Transport` error.
pub const DEFAULT_PING_ANSWER: Duration = Duration::from_secs(10);

/// The `X-Daytona-Source` value this SDK sends.
pub(crate) const SOURCE: &str = "sdk-rust";

/// The cloud SSH gateway, used when the API's `sshCommand` names no host.
pub(crate) const DEFAULT_SSH_HOST: &str = "ssh.app.daytona.io";

/// The label under which a create's idempotency key is kept, so a retried create finds the
/// sandbox the first attempt made.
pub const IDEMPOTENCY_LABEL: &str = "sandbox-sdk.idempotency-key";

/// The cap on small JSON answers (a command's status, a file's metadata, metrics, a session,
/// an address): bigger is a hostile or broken server.
pub(crate) const SMALL_ANSWER: usize = 1024 * 1024;

/// The cap on toolbox answers read whole unless an endpoint says otherwise (a command's
/// status, file metadata, metrics, an upload's answer).
pub(crate) const TOOLBOX_ANSWER: usize = 4 * 1024 * 1024;

/// The cap on toolbox answers that grow with what is in the sandbox: listings, search results,
/// a session's command list, and a finished command's output (`execute`, a synchronous session
/// command).
pub(crate) const LARGE_ANSWER: usize = 16 * 1024 * 1024;

/// The cap on a command's whole log read by `DaytonaSandbox::session_logs` (following a
/// command streams its log instead and holds one chunk at a time).
pub(crate) const LOG_ANSWER: usize = 64 * 1024 * 1024;

/// The largest log WebSocket message (and frame) accepted: the daemon sends pieces of up to
/// 1024 bytes (PROTOCOL.md §8.2), so anything near this is a hostile or broken server, refused
/// before it is held (tungstenite's own default is 64 MiB).
pub(crate) const LOG_MESSAGE_MAX: usize = 1024 * 1024;

/// Where foreground commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecTransport {
    /// Through the toolbox API (session commands). The default.
    #[default]
    Toolbox,
    /// Over SSH through Daytona's gateway (russh, auth method `none` with a cached access
    /// token as user): byte-exact live output, stdin, pty and resize. Background commands
    /// still use toolbox sessions.
    ///
    /// **The gateway's host key must be verified.** Daytona publishes no fingerprint, so pin
    /// it with [`DaytonaBuilder::ssh_host_key`](crate::DaytonaBuilder::ssh_host_key); without a
    /// pin every SSH connection is refused (`Unauthorized`, naming the key the gateway showed)
    /// before the access token is sent, unless the caller opts into trusting the first key
    /// seen with
    /// [`DaytonaBuilder::ssh_trust_host_key_on_first_use`](crate::DaytonaBuilder::ssh_trust_host_key_on_first_use).
    Ssh,
}

/// How a command's output is followed while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFollow {
    /// Live, over the log WebSocket the service uses (PROTOCOL.md §8.2): output arrives as the
    /// command writes it. The default.
    #[default]
    WebSocket,
    /// By polling the command's status and its JSON logs every poll interval, for networks
    /// that cannot carry WebSocket upgrades (and HTTP-only replay). Output then arrives in
    /// polled pieces and processes report emulated streaming.
    Poll,
}

/// The settings a provider runs with, resolved by the builder.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Whether the credential is an API key (a JWT also sends the organization id).
    pub api_key: bool,
    pub organization_id: Option<String>,
    pub api_url: String,
    pub toolbox_url: Option<String>,
    pub target: Option<String>,
    pub sdk_version: String,
    pub request_timeout: Duration,
    pub poll_interval: Duration,
    pub start_timeout: Duration,
    pub state_change_timeout: Duration,
    pub log_follow: LogFollow,
    pub exec_transport: ExecTransport,
    pub ssh_host_key: Option<String>,
    pub ssh_trust_first_use: bool,
    pub ssh_gateway: Option<(String, u16)>,
    pub create_lookup: CreateLookup,
    pub direct_window: Duration,
    pub idle_timeout: Duration,
    /// Ping the log WebSocket after this much silence, and end it when nothing answers within
    /// the second.
    pub log_ping: (Duration, Duration),
}

/// `now + wait`, saturating far in the future instead of panicking on a huge `wait` (callers
/// pass `Duration::MAX` to mean "no deadline").
pub(crate) fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

/// The pauses of a state wait that ends at `deadline`: the caller checks at once, then pauses
/// 25 ms doubling up to `max` (the poll interval), the last pause ending at the deadline.
pub(crate) fn backoff_until(max: Duration, deadline: Instant) -> sandbox_sdk_core::wait::Backoff {
    sandbox_sdk_core::wait::Backoff::new(max)
        .within(deadline.saturating_duration_since(Instant::now()))
}

/// `SystemTime::now() + wait`, or `None` when that is not representable.
pub(crate) fn system_time_after(wait: Duration) -> Option<SystemTime> {
    SystemTime::now().checked_add(wait)
}

/// About thirty years: "never" for a deadline.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

/// Parses `MAJOR.MINOR.PATCH` (a pre-release or build suffix is ignored).
pub(crate) fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    let core = text.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let v = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    parts.next().is_none().then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("0.218.0"), Some((0, 218, 0)));
        assert_eq!(parse_version("v1.2.3-dev"), Some((1, 2, 3)));
        assert_eq!(parse_version("1.2"), None);
        assert!(parse_version(DEFAULT_SDK_VERSION).unwrap() >= MIN_SDK_VERSION);
    }

    #[test]
    fn a_huge_wait_is_a_far_deadline_not_a_panic() {
        assert!(deadline_after(Duration::MAX) > Instant::now());
    }
}
