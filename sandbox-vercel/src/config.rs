//! Resolved settings ([`Settings`], made by [`crate::VercelBuilder::build`]) and the adapter's
//! constants: defaults, limits and the names it puts on the wire.

use sandbox_sdk_core::idempotency::CreateLookup;
use std::fmt;
use std::time::Duration;

/// The provider name used in errors and capability tables.
pub const PROVIDER: &str = "vercel";

/// The REST API the reference documents (PROTOCOL.md §2); the official SDKs use
/// `https://vercel.com/api`, which serves the same paths.
pub const DEFAULT_API_URL: &str = "https://api.vercel.com";

/// How long an ambiguous create (timed out, connection lost after sending, 5xx) is looked up by
/// its name before the error goes back: Vercel answers a create with the session already made
/// (PROTOCOL.md §4.1), so a sandbox that exists shows at once; 30 s covers a slow control plane.
pub const DEFAULT_CREATE_LOOKUP_WINDOW: Duration = Duration::from_secs(30);

/// The longest silence allowed on a streamed answer (command output, logs, file reads) before
/// the adapter treats it as lost: a command's stream is then checked and reconnected
/// (PROTOCOL.md §11), a file read fails with `Transport`. Vercel sends no keepalives.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How many reconnects in a row may bring nothing (no output, no exit) before following a
/// command gives up with `Transport` (the command itself keeps running; `attach` follows it
/// again). A stream that went silent while the command still runs does not count.
pub const DEFAULT_MAX_RECONNECTS: u32 = 5;

/// The domain every preview URL is directly under (PROTOCOL.md §8:
/// `https://<route.subdomain>.vercel.run`); a route anywhere else is not handed out.
pub(crate) const PREVIEW_DOMAIN: &str = "vercel.run";

/// The longest NDJSON line the adapter reads (PROTOCOL.md §6.2): one `data` chunk of output
/// or a `command` object. A longer line is a `Provider` error, not memory exhausted.
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// The largest JSON answer read for one sandbox, session, command or snapshot.
pub const MAX_JSON: usize = 1024 * 1024;

/// The largest JSON answer read for one listing page (at most 50 sandboxes, PROTOCOL.md §4.4)
/// or a session's command list (not paginated, §6.4).
pub const MAX_LIST_JSON: usize = 8 * 1024 * 1024;

/// The most output the adapter collects from one of its own file scripts (stat, list, remove,
/// rename over a command): a listing of about 200,000 entries.
pub const SCRIPT_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;

/// Tags a sandbox may carry (PROTOCOL.md §3): the spec's metadata plus the create fingerprint
/// must fit.
pub const MAX_TAGS: usize = 5;

/// Ports a sandbox may expose (PROTOCOL.md §12).
pub const MAX_PORTS: usize = 15;

/// Header carrying Vercel's request id.
pub(crate) const REQUEST_ID_HEADER: &str = "x-vercel-id";

/// The page size of listings (the API's maximum, PROTOCOL.md §4.4).
pub(crate) const PAGE_LIMIT: u32 = 50;

/// The signal [`sandbox_sdk_core::Sandbox::kill_process`] sends: SIGKILL, so a command that
/// ignores SIGTERM still ends (PROTOCOL.md §6.4; [`crate::VercelSandbox::signal`] sends others).
pub(crate) const KILL_SIGNAL: i32 = 9;

/// Everything the adapter needs at run time, resolved and checked by the builder.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The API base URL (no trailing `/`).
    pub base_url: String,
    /// The bearer token (secret).
    pub token: String,
    /// `teamId` sent on every request (PROTOCOL.md §2).
    pub team_id: String,
    /// The project sandboxes live in.
    pub project_id: String,
    /// Ports every new sandbox exposes (routes, PROTOCOL.md §8).
    pub ports: Vec<u16>,
    /// Default region for new sandboxes.
    pub region: Option<String>,
    pub request_timeout: Duration,
    pub stream_idle: Duration,
    pub max_reconnects: u32,
    pub stop_timeout: Duration,
    pub create_lookup: CreateLookup,
    /// The tar mtime of written files; `None` = the time of the write.
    pub file_mtime: Option<u64>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("base_url", &self.base_url)
            .field("token", &"<redacted>")
            .field("team_id", &self.team_id)
            .field("project_id", &self.project_id)
            .field("ports", &self.ports)
            .field("region", &self.region)
            .field("request_timeout", &self.request_timeout)
            .field("stream_idle", &self.stream_idle)
            .finish_non_exhaustive()
    }
}

/// The team and project an OIDC token (a JWT) names in its payload: `owner_id` and
/// `project_id` (PROTOCOL.md §2). `None` for a token that is not a JWT or whose payload does
/// not decode; the signature is not checked (the server does that).
pub(crate) fn oidc_claims(token: &str) -> Option<(Option<String>, Option<String>)> {
    use base64::Engine as _;
    let mut parts = token.trim().split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || payload.is_empty() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let text = |key: &str| {
        claims
            .get(key)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Some((text("owner_id"), text("project_id")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn jwt(payload: &str) -> String {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", enc(r#"{"alg":"RS256"}"#), enc(payload))
    }

    #[test]
    fn oidc_tokens_name_their_team_and_project() {
        let token = jwt(r#"{"owner_id":"team_abc","project_id":"prj_xyz","exp":1}"#);
        assert_eq!(
            oidc_claims(&token),
            Some((Some("team_abc".into()), Some("prj_xyz".into())))
        );
        assert_eq!(
            oidc_claims(&jwt(r#"{"sub":"x"}"#)),
            Some((None, None)),
            "a JWT without the claims"
        );
        for opaque in ["vercel_token_123", "a.b", "a.!!!.c", "a.b.c.d", ""] {
            assert_eq!(oidc_claims(opaque), None, "{opaque}");
        }
    }
}
