//! The one function that turns a Vercel error answer into a [`sandbox_sdk_core::Error`]
//! (PROTOCOL.md §13.1): the status gives the kind, the `{"error": {"code", "message"}}` body
//! refines it and gives the text, and the context (operation, sandbox, request id,
//! `Retry-After`) is kept. The HTTP kit has already scrubbed the token from the body.

use crate::config::PROVIDER;
use crate::wire::ErrorBody;
use sandbox_sdk_core::http::truncate;
use sandbox_sdk_core::{Error, ErrorKind};
use std::time::{Duration, SystemTime};

/// Longest provider text kept in an error message.
const MAX_MESSAGE: usize = 512;

/// The longest wait taken from a 429 body's `limit.reset` when no `Retry-After` came.
const MAX_RESET_WAIT: Duration = Duration::from_secs(60);

/// What the mapping needs from a failed answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailedResponse<'a> {
    pub status: u16,
    pub body: &'a [u8],
    pub request_id: Option<&'a str>,
    pub retry_after: Option<Duration>,
    pub operation: Option<&'a str>,
    pub sandbox_id: Option<&'a str>,
}

/// The provider's text and code from any body: the standard envelope, other JSON, plain text
/// or nothing; and the wait a 429 body's `limit.reset` asks for.
fn parse(body: &[u8]) -> (String, Option<String>, Option<Duration>) {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return ("empty response body".to_owned(), None, None);
    }
    match serde_json::from_str::<ErrorBody>(trimmed) {
        Ok(parsed) => {
            let reset = parsed
                .error
                .limit
                .and_then(|l| l.reset)
                .map(|reset| SystemTime::UNIX_EPOCH + Duration::from_secs(reset))
                .map(|at| {
                    at.duration_since(SystemTime::now())
                        .unwrap_or_default()
                        .min(MAX_RESET_WAIT)
                });
            let code = parsed.error.code.filter(|c| !c.is_empty());
            let message = parsed
                .error
                .message
                .filter(|m| !m.is_empty())
                .or_else(|| code.clone())
                .unwrap_or_else(|| trimmed.to_owned());
            (truncate(&message, MAX_MESSAGE), code, reset)
        }
        Err(_) => (truncate(trimmed, MAX_MESSAGE), None, None),
    }
}

/// The code of a stdin request to a command that takes no input: started without
/// `attachStdin`, exited, or its stdin closed (PROTOCOL.md §6.6).
pub(crate) const STDIN_UNAVAILABLE: &str = "command_stdin_unavailable";

/// Whether a 400 says the name is taken (PROTOCOL.md §4.2: Vercel answers a duplicate name with
/// `400 bad_request` "A sandbox with the name '…' already exists for this project").
fn is_duplicate_name(code: Option<&str>, message: &str) -> bool {
    matches!(
        code,
        None | Some("bad_request" | "conflict" | "already_exists")
    ) && message.contains("already exists")
}

/// Maps one failed answer to an error.
///
/// | status | kind |
/// | --- | --- |
/// | 400 duplicate name (§4.2) | `Conflict` |
/// | 400 `command_stdin_unavailable` (the command takes no more input; §6.6) | `Conflict` |
/// | 422 `sandbox_stopping`, `sandbox_snapshotting` (the session is going down; §16) | `NotRunning` |
/// | other 400, 422 | `Validation` |
/// | 401, 403 | `Unauthorized` |
/// | 404 | `NotFound` |
/// | 409 | `Conflict` |
/// | 410 (`sandbox_stopped`, `snapshot_not_found`) | `NotRunning` |
/// | 429 | `QuotaExceeded` with `Retry-After` (or the body's `limit.reset`) |
/// | 5xx and anything else | `Provider` |
pub(crate) fn map_error(resp: FailedResponse<'_>) -> Error {
    let (text, code, reset) = parse(resp.body);
    let kind = match resp.status {
        400 if is_duplicate_name(code.as_deref(), &text) => ErrorKind::Conflict,
        400 if code.as_deref() == Some(STDIN_UNAVAILABLE) => ErrorKind::Conflict,
        422 if matches!(
            code.as_deref(),
            Some("sandbox_stopping" | "sandbox_snapshotting")
        ) =>
        {
            ErrorKind::NotRunning
        }
        400 | 422 => ErrorKind::Validation,
        401 | 403 => ErrorKind::Unauthorized,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        410 => ErrorKind::NotRunning,
        429 => ErrorKind::QuotaExceeded,
        _ => ErrorKind::Provider,
    };
    let message = match &code {
        Some(code) if !text.contains(code.as_str()) => format!("{text} [{code}]"),
        _ => text,
    };
    let mut error = Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_status(resp.status);
    if kind == ErrorKind::Conflict {
        error = error.with_retryable(false);
    }
    if let Some(op) = resp.operation {
        error = error.with_operation(op);
    }
    if let Some(id) = resp.sandbox_id {
        error = error.with_sandbox_id(id);
    }
    if let Some(id) = resp.request_id {
        error = error.with_request_id(id);
    }
    if kind == ErrorKind::QuotaExceeded
        && let Some(wait) = resp.retry_after.or(reset)
    {
        error = error.with_retry_after(wait);
    }
    error
}

/// A protocol problem in an answer that was a success on the HTTP level.
pub(crate) fn protocol_error(
    operation: &str,
    sandbox_id: &str,
    message: impl Into<String>,
) -> Error {
    Error::new(ErrorKind::Provider, message)
        .with_provider(PROVIDER)
        .with_operation(operation)
        .with_sandbox_id(sandbox_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, body: &str) -> FailedResponse<'_> {
        FailedResponse {
            status,
            body: body.as_bytes(),
            request_id: Some("iad1::abcde-1764561600000-0123456789ab"),
            retry_after: None,
            operation: Some("create"),
            sandbox_id: Some("my-box"),
        }
    }

    #[test]
    fn statuses_map_to_kinds() {
        for (status, kind) in [
            (400, ErrorKind::Validation),
            (401, ErrorKind::Unauthorized),
            (403, ErrorKind::Unauthorized),
            (404, ErrorKind::NotFound),
            (409, ErrorKind::Conflict),
            (410, ErrorKind::NotRunning),
            (422, ErrorKind::Validation),
            (429, ErrorKind::QuotaExceeded),
            (500, ErrorKind::Provider),
            (503, ErrorKind::Provider),
        ] {
            let e = map_error(resp(status, r#"{"error":{"code":"x","message":"m"}}"#));
            assert_eq!(e.kind(), kind, "{status}");
            assert_eq!(e.status(), Some(status));
            assert_eq!(e.provider(), Some("vercel"));
        }
        assert!(map_error(resp(503, "")).is_retryable());
        assert!(!map_error(resp(409, "")).is_retryable());
    }

    #[test]
    fn stdin_unavailable_is_a_conflict() {
        let e = map_error(resp(
            400,
            r#"{"error":{"code":"command_stdin_unavailable","message":"The command is not reading stdin."}}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert_eq!(e.status(), Some(400));
        assert!(e.message().contains("command_stdin_unavailable"), "{e}");
    }

    #[test]
    fn a_duplicate_name_is_a_conflict_not_a_validation_error() {
        let e = map_error(resp(
            400,
            r#"{"error":{"code":"bad_request","message":"A sandbox with the name 'my-box' already exists for this project. Use GET /sandboxes/:name to resume it or delete it first."}}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(!e.is_retryable());
        assert!(e.message().contains("already exists"), "{e}");
        assert_eq!(
            e.request_id(),
            Some("iad1::abcde-1764561600000-0123456789ab")
        );
        assert_eq!(e.sandbox_id(), Some("my-box"));
        let e = map_error(resp(
            400,
            r#"{"error":{"code":"bad_request","message":"invalid port"}}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(e.message().contains("invalid port [bad_request]"), "{e}");
    }

    #[test]
    fn sessions_going_down_are_not_running() {
        for code in ["sandbox_stopping", "sandbox_snapshotting"] {
            let body = format!(r#"{{"error":{{"code":"{code}","message":"m"}}}}"#);
            let e = map_error(resp(422, &body));
            assert_eq!(e.kind(), ErrorKind::NotRunning, "{code}");
        }
    }

    #[test]
    fn gone_sessions_and_snapshots_are_not_running() {
        let e = map_error(resp(
            410,
            r#"{"error":{"code":"snapshot_not_found","message":"Cannot resume sandbox: no snapshot available."}}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::NotRunning);
        assert!(e.message().contains("snapshot_not_found"), "{e}");
    }

    #[test]
    fn rate_limits_carry_retry_after_or_the_bodys_reset() {
        let mut r = resp(
            429,
            r#"{"error":{"code":"rate_limited","message":"slow down"}}"#,
        );
        r.retry_after = Some(Duration::from_secs(7));
        let e = map_error(r);
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert!(e.is_retryable());
        let reset = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600;
        let body = format!(
            r#"{{"error":{{"code":"rate_limited","message":"m","limit":{{"remaining":0,"reset":{reset},"total":10}}}}}}"#
        );
        let e = map_error(resp(429, &body));
        assert_eq!(e.retry_after(), Some(MAX_RESET_WAIT));
    }

    #[test]
    fn other_bodies_are_kept_short() {
        let e = map_error(resp(502, "<html>bad gateway</html>"));
        assert_eq!(e.message(), "<html>bad gateway</html>");
        assert_eq!(map_error(resp(500, "")).message(), "empty response body");
        let long = "x".repeat(5000);
        assert!(map_error(resp(500, &long)).message().len() < 600);
    }
}
