//! The one function that turns a Fly error response into a [`sandbox_sdk_core::Error`].
//!
//! Every body shape of PROTOCOL.md §2 goes through [`map_error`]: the main `{error, status}`
//! shape (with fly-go's optional `message`), the lease envelope `{status: "error", message}`,
//! empty bodies (some 400s) and non-JSON text. The `fly-request-id` header is kept on every error.

use crate::config::PROVIDER;
use crate::wire::ErrorBody;
use sandbox_sdk_core::http::truncate;
use sandbox_sdk_core::{Error, ErrorKind};
use std::time::Duration;

/// Longest provider text kept in an error message.
const MAX_MESSAGE: usize = 512;

/// What the mapping needs from a failed response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailedResponse<'a> {
    /// HTTP status.
    pub status: u16,
    /// Raw body (may be empty or not JSON).
    pub body: &'a [u8],
    /// `fly-request-id`, when sent.
    pub request_id: Option<&'a str>,
    /// `Retry-After`, when sent and parseable.
    pub retry_after: Option<Duration>,
    /// The operation that failed (`create`, `wait`, `exec`, ...).
    pub operation: Option<&'a str>,
    /// The machine the call was aimed at.
    pub sandbox_id: Option<&'a str>,
}

/// The documented rate for an action when a 429 carries no `Retry-After` (PROTOCOL.md §3):
/// Get Machine allows 5 req/s, every other action 1 req/s (app deletion: 100 per minute).
pub(crate) fn documented_retry_after(operation: Option<&str>) -> Duration {
    match operation {
        Some("get" | "info" | "connect") => Duration::from_millis(200),
        Some("delete_app") => Duration::from_millis(600),
        _ => Duration::from_secs(1),
    }
}

/// The provider's own text from any body shape, and its code when it sent one.
fn message_and_code(body: &[u8]) -> (String, Option<String>) {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return ("empty response body".to_owned(), None);
    }
    match serde_json::from_str::<ErrorBody>(trimmed) {
        Ok(parsed) => {
            let code = [parsed.status.as_ref(), parsed.code.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .find(|s| !s.is_empty() && *s != "error")
                .map(str::to_owned);
            let message = parsed
                .message
                .filter(|m| !m.is_empty())
                .or(parsed.error.filter(|m| !m.is_empty()))
                .unwrap_or_else(|| truncate(trimmed, MAX_MESSAGE));
            (truncate(&message, MAX_MESSAGE), code)
        }
        Err(_) => (truncate(trimmed, MAX_MESSAGE), None),
    }
}

/// Who holds the lease, from a 409 text like `machine ID … lease currently held by hello@fly.io, expires at …`.
pub(crate) fn lease_holder(message: &str) -> Option<&str> {
    let rest = &message[message.find("held by ")? + "held by ".len()..];
    let end = rest.find([',', ' ']).unwrap_or(rest.len());
    let holder = rest[..end].trim();
    (!holder.is_empty()).then_some(holder)
}

/// The state a machine was in when a wait gave up, from a 408 text like
/// `machine failed to reach desired state, started, currently stopped`.
pub(crate) fn reached_state(message: &str) -> Option<&str> {
    let rest = &message[message.find("currently ")? + "currently ".len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Maps one failed response to an error: the kind from the status (refined by the body), the
/// provider's text, and the context (operation, machine, status, request id, retry-after).
pub(crate) fn map_error(resp: FailedResponse<'_>) -> Error {
    let (text, code) = message_and_code(resp.body);
    let lower = text.to_ascii_lowercase();
    let code_str = code.as_deref().unwrap_or("");
    let (kind, message) = match resp.status {
        400 => (ErrorKind::Validation, text),
        401 | 403 => (ErrorKind::Unauthorized, text),
        404 => (ErrorKind::NotFound, text),
        408 => match resp.operation {
            Some("wait") => {
                let state = reached_state(&text).unwrap_or("unknown");
                (
                    ErrorKind::Timeout,
                    format!("machine did not reach the requested state; it is {state} ({text})"),
                )
            }
            Some("exec") => (
                ErrorKind::Timeout,
                format!("command ran past the exec deadline ({text})"),
            ),
            _ => (ErrorKind::Timeout, text),
        },
        409 => match lease_holder(&text) {
            Some(holder) => (
                ErrorKind::Conflict,
                format!("machine is leased by {holder}: {text}"),
            ),
            None => (ErrorKind::Conflict, text),
        },
        // `/exec` on a machine that is not started answers 412 (the only precondition exec
        // has); every other 412 (start from a state that cannot start, a volume in use, a stale
        // metadata version: PROTOCOL.md §2) is a conflict with the machine's current state.
        412 if resp.operation == Some("exec") => (
            ErrorKind::NotRunning,
            format!("machine is not running, so it cannot run commands ({text})"),
        ),
        412 => (ErrorKind::Conflict, text),
        422 if code_str == "name_taken" => (ErrorKind::Conflict, text),
        422 if lower.contains("limit") => (ErrorKind::QuotaExceeded, text),
        422 => (ErrorKind::Validation, text),
        429 => (ErrorKind::QuotaExceeded, text),
        _ if lower.contains("resource_exhausted") || lower.contains("rate limit exceeded") => {
            (ErrorKind::QuotaExceeded, text)
        }
        _ if matches!(
            code_str,
            "insufficient_capacity" | "volume_placement_capacity"
        ) =>
        {
            (ErrorKind::QuotaExceeded, text)
        }
        _ => (ErrorKind::Provider, text),
    };
    let message = match &code {
        Some(code) if !message.contains(code.as_str()) => format!("{message} [{code}]"),
        _ => message,
    };
    let mut error = Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_status(resp.status);
    if let Some(op) = resp.operation {
        error = error.with_operation(op);
    }
    if let Some(id) = resp.sandbox_id {
        error = error.with_sandbox_id(id);
    }
    if let Some(id) = resp.request_id {
        error = error.with_request_id(id);
    }
    if kind == ErrorKind::QuotaExceeded {
        let delay = resp
            .retry_after
            .unwrap_or_else(|| documented_retry_after(resp.operation));
        error = error.with_retry_after(delay);
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, body: &str) -> FailedResponse<'_> {
        FailedResponse {
            status,
            body: body.as_bytes(),
            request_id: Some("01JJRPZ859TZM6BZ1A9RN4AZ5N-fra"),
            retry_after: None,
            operation: Some("update"),
            sandbox_id: Some("1857156b526dd8"),
        }
    }

    #[test]
    fn main_shape_keeps_text_code_and_request_id() {
        let e = map_error(resp(
            422,
            r#"{"error":"app name already taken","status":"name_taken"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(e.message().contains("app name already taken"));
        assert!(e.message().contains("name_taken"));
        assert_eq!(e.request_id(), Some("01JJRPZ859TZM6BZ1A9RN4AZ5N-fra"));
        assert_eq!(e.status(), Some(422));
        assert_eq!(e.sandbox_id(), Some("1857156b526dd8"));
        assert_eq!(e.provider(), Some("fly"));
    }

    #[test]
    fn message_is_preferred_over_error() {
        let e = map_error(resp(400, r#"{"error":"short","message":"the long story"}"#));
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert_eq!(e.message(), "the long story");
    }

    #[test]
    fn lease_envelope_conflict_names_the_holder() {
        let e = map_error(resp(
            409,
            r#"{"status":"error","message":"machine ID 1857156b526dd8 lease currently held by hello@fly.io, expires at 2024-02-22T02:42:58Z"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(
            e.message().starts_with("machine is leased by hello@fly.io"),
            "{}",
            e.message()
        );
        assert!(!e.message().contains("[error]"));
        assert_eq!(e.request_id(), Some("01JJRPZ859TZM6BZ1A9RN4AZ5N-fra"));
    }

    #[test]
    fn empty_400_is_validation_with_a_clear_message() {
        let e = map_error(resp(400, ""));
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert_eq!(e.message(), "empty response body");
        assert_eq!(e.request_id(), Some("01JJRPZ859TZM6BZ1A9RN4AZ5N-fra"));
    }

    #[test]
    fn non_json_text_is_kept_and_truncated() {
        let e = map_error(resp(502, "<html>bad gateway</html>"));
        assert_eq!(e.kind(), ErrorKind::Provider);
        assert!(e.is_retryable());
        assert_eq!(e.message(), "<html>bad gateway</html>");
        let long = "x".repeat(2000);
        let e = map_error(resp(500, &long));
        assert!(e.message().len() < 600);
    }

    #[test]
    fn precondition_failed_is_conflict() {
        let e = map_error(resp(
            412,
            r#"{"error":"unable to start machine from current state"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(e.message().contains("unable to start"));
    }

    #[test]
    fn exec_on_a_stopped_machine_is_not_running_and_other_412s_stay_conflicts() {
        let mut r = resp(412, r#"{"error":"machine is not started"}"#);
        r.operation = Some("exec");
        let e = map_error(r);
        assert_eq!(e.kind(), ErrorKind::NotRunning);
        assert!(e.message().contains("machine is not started"), "{e}");
        assert_eq!(e.status(), Some(412));
        assert_eq!(e.request_id(), Some("01JJRPZ859TZM6BZ1A9RN4AZ5N-fra"));
        for op in ["start", "update", "metadata"] {
            let mut r = resp(
                412,
                r#"{"error":"unable to start machine from current state"}"#,
            );
            r.operation = Some(op);
            assert_eq!(map_error(r).kind(), ErrorKind::Conflict, "{op}");
        }
    }

    #[test]
    fn rate_limit_uses_retry_after_or_the_documented_rate() {
        let mut r = resp(429, "");
        r.retry_after = Some(Duration::from_secs(7));
        let e = map_error(r);
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        let e = map_error(resp(429, r#"{"error":"rate limited"}"#));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
        let mut r = resp(429, "");
        r.operation = Some("get");
        assert_eq!(map_error(r).retry_after(), Some(Duration::from_millis(200)));
        let e = map_error(resp(
            500,
            r#"{"error":"resource_exhausted: rate limit exceeded"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
    }

    #[test]
    fn wait_timeout_names_the_state_reached() {
        let mut r = resp(
            408,
            r#"{"error":"machine failed to reach desired state, started, currently stopped"}"#,
        );
        r.operation = Some("wait");
        let e = map_error(r);
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.message().contains("it is stopped"), "{}", e.message());
    }

    /// A create that timed out upstream may still have made the machine (PROTOCOL.md §1): the
    /// transport marks the 408 ambiguous and the adapter looks the key up for its window before
    /// returning it; past that, with no machine found, sending again is right.
    #[test]
    fn create_timeout_is_a_retryable_timeout() {
        let mut r = resp(408, "");
        r.operation = Some("create");
        let e = map_error(r);
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_retryable());
    }

    #[test]
    fn statuses_map_to_kinds() {
        for (status, kind) in [
            (401, ErrorKind::Unauthorized),
            (403, ErrorKind::Unauthorized),
            (404, ErrorKind::NotFound),
            (409, ErrorKind::Conflict),
            (422, ErrorKind::Validation),
            (503, ErrorKind::Provider),
        ] {
            assert_eq!(map_error(resp(status, "{}")).kind(), kind, "{status}");
        }
    }

    #[test]
    fn parsers_find_holder_and_state() {
        assert_eq!(lease_holder("lease currently held by a@b.c"), Some("a@b.c"));
        assert_eq!(lease_holder("no lease"), None);
        assert_eq!(reached_state("currently replaced"), Some("replaced"));
        assert_eq!(reached_state("currently "), None);
    }
}
