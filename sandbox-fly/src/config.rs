//! Resolved settings ([`Settings`], made by [`crate::FlyBuilder::build`]) and the adapter's
//! constants: defaults, limits and the names it puts on the wire.

use sandbox_sdk_core::idempotency::CreateLookup;
use std::fmt;
use std::time::Duration;

/// The provider name used in errors and capability tables.
pub const PROVIDER: &str = "fly";

/// The public Machines API.
pub const DEFAULT_API_URL: &str = "https://api.machines.dev";

/// The image used when neither the builder nor the create spec names one.
pub const DEFAULT_IMAGE: &str = "ubuntu:24.04";

/// The longest `/exec` call the adapter makes: Fly fails execs that run past about 30 s with
/// `deadline_exceeded` (PROTOCOL.md §8). Commands that may run longer use the
/// background-and-poll emulation instead.
pub const EXEC_DEADLINE: Duration = Duration::from_secs(30);

/// How long an ambiguous create (timed out, connection lost after sending, 408/5xx) is looked up
/// by its idempotency key before the error goes back to the caller: Fly's create can time out
/// upstream with a 408 and still make the machine (PROTOCOL.md §1), and a launch takes seconds,
/// so the adapter keeps looking for a minute.
pub const DEFAULT_CREATE_LOOKUP_WINDOW: Duration = Duration::from_secs(60);

/// How long the `/exec` that starts an emulated command waits in the machine for it to end
/// (default of [`crate::FlyBuilder::launch_wait`]): a command done by then costs that one call,
/// and its answer comes as soon as it ends; one still running is left running and polled. One
/// second matches Fly's sustained exec rate (1 request/s per machine), so waiting longer in one
/// call would not let the next come any sooner.
pub const DEFAULT_LAUNCH_WAIT: Duration = Duration::from_secs(1);

/// Metadata label every machine made by this adapter carries (value `1`); lists filter on it.
pub const SANDBOX_LABEL: &str = "sandbox_sdk";

/// Metadata label carrying the caller's idempotency key; a retried create lists by it first.
pub const IDEMPOTENCY_LABEL: &str = "sandbox_sdk_idempotency_key";

/// Header carrying Fly's request id.
pub(crate) const REQUEST_ID_HEADER: &str = "fly-request-id";

/// Header carrying the lease nonce on lease refresh/release and on mutations of a leased machine.
pub(crate) const LEASE_NONCE_HEADER: &str = "fly-machine-lease-nonce";

/// Header that pins a request through Fly Proxy to one machine.
pub(crate) const FORCE_INSTANCE_HEADER: &str = "fly-force-instance-id";

/// The longest single `/wait` the service accepts (PROTOCOL.md §7): 1–60 s.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);

/// How many times one call that Fly paces per machine or app (`/exec`, list, `/wait`) is sent
/// when Fly answers 429 (rate limited: nothing happened). Each retry waits the answer's
/// `Retry-After`, or the documented rate when it has none, at most [`MAX_RATE_LIMIT_WAIT`].
pub(crate) const RATE_LIMIT_ATTEMPTS: u32 = 6;

/// The longest wait before sending a call answered 429 again.
pub(crate) const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(10);

/// The largest exec request body the adapter sends (an upload chunk in base64 plus the script).
pub(crate) const MAX_EXEC_BODY: usize = 1024 * 1024;

/// Raw bytes per upload call: 760 KiB become 1,037,656 bytes of base64, leaving 10,920 bytes of
/// the 1 MiB exec body the adapter allows itself for the script, the two paths and the JSON.
/// Every `/exec` costs a token of Fly's per-machine exec rate, so each moves as much as fits.
pub const UPLOAD_CHUNK: usize = 760 * 1024;

/// Raw bytes per download call: 736 KiB become 1,004,888 bytes of base64, 1,031,332 with the
/// line breaks escaped in the JSON answer, under the adapter's 1 MiB exec body.
pub const DOWNLOAD_CHUNK: u64 = 736 * 1024;

/// The most stdin the adapter sends with one command. `/exec` takes stdin as one JSON string
/// and Fly documents no size limit, so the adapter keeps it to 1 MiB; more is a `Validation` error.
pub const STDIN_LIMIT: usize = 1024 * 1024;

/// The most bytes of each of stdout and stderr one poll returns (before base64).
pub(crate) const POLL_CHUNK: u64 = 256 * 1024;

/// The largest `/exec` answer read for one of the adapter's own scripts other than the listings:
/// they print at most a download block (about 1 MiB as escaped base64) or a poll's two
/// 256 KiB polls (about 0.7 MiB), so 2 MiB is twice what a machine running them honestly can
/// answer.
pub const SCRIPT_ANSWER_LIMIT: usize = 2 * MAX_EXEC_BODY;

/// The largest `/exec` answer read for a listing (files or processes), whose size grows with what
/// the machine holds: 16 MiB, some 200,000 file entries.
pub(crate) const LISTING_ANSWER_LIMIT: usize = 16 * 1024 * 1024;

/// The largest `/exec` answer read for a command run directly, whose whole stdout and stderr
/// come in the one answer: 16 MiB. A command that prints more fails with the transport's size
/// error; run it without a timeout (polled output) or write its output to a file.
pub const DIRECT_ANSWER_LIMIT: usize = 16 * 1024 * 1024;

/// Server-side exec timeout when a call sets none (Fly's own default is not documented).
pub(crate) const EXEC_DEFAULT_SECS: u64 = 30;

/// Everything the adapter needs at run time, resolved and checked by the builder.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The Machines API root (`…/v1`).
    pub api_root: String,
    /// The `Authorization` header value (secret).
    pub authorization: String,
    pub app: String,
    pub region: Option<String>,
    pub image: String,
    pub cpu_kind: Option<String>,
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    pub keep_alive: bool,
    pub service_ports: Vec<u16>,
    pub mounts: Vec<(String, String)>,
    pub public_host: Option<String>,
    pub request_timeout: Duration,
    pub start_timeout: Duration,
    pub direct_exec_limit: Duration,
    pub prefer_direct_exec: bool,
    pub poll_interval: Duration,
    pub launch_wait: Duration,
    pub upload_chunk: usize,
    pub download_chunk: u64,
    pub create_lookup: CreateLookup,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("api_root", &self.api_root)
            .field("authorization", &"<redacted>")
            .field("app", &self.app)
            .field("region", &self.region)
            .field("image", &self.image)
            .field("request_timeout", &self.request_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("launch_wait", &self.launch_wait)
            .finish_non_exhaustive()
    }
}

/// The `Authorization` header value for `token`: macaroons use the `FlyV1` scheme, other tokens
/// `Bearer` (PROTOCOL.md §1).
pub(crate) fn authorization(token: &str) -> String {
    let token = token.trim();
    if token.starts_with("FlyV1 ") || token.starts_with("Bearer ") {
        token.to_owned()
    } else if token.starts_with("fm1") || token.starts_with("fm2_") {
        format!("FlyV1 {token}")
    } else {
        format!("Bearer {token}")
    }
}

/// The Machines API root (`…/v1`) for a base URL or bare host; `None` when it is empty.
pub(crate) fn api_root(base_url: &str) -> Option<String> {
    let raw = base_url.trim().trim_end_matches('/');
    if raw.is_empty() {
        return None;
    }
    let with_scheme = if raw.contains("://") {
        raw.to_owned()
    } else {
        format!("https://{raw}")
    };
    let base = with_scheme.strip_suffix("/v1").unwrap_or(&with_scheme);
    Some(format!("{base}/v1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_scheme_follows_the_token_kind() {
        assert_eq!(authorization("abc"), "Bearer abc");
        assert_eq!(authorization("fm2_xyz"), "FlyV1 fm2_xyz");
        assert_eq!(authorization("FlyV1 fm2_xyz"), "FlyV1 fm2_xyz");
    }

    #[test]
    fn api_roots_get_a_scheme_and_one_v1() {
        assert_eq!(
            api_root("_api.internal:4280").as_deref(),
            Some("https://_api.internal:4280/v1")
        );
        assert_eq!(
            api_root("http://127.0.0.1:9/v1/").as_deref(),
            Some("http://127.0.0.1:9/v1")
        );
        assert_eq!(api_root(" / "), None);
    }
}
