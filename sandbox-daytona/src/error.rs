//! The one function that turns a Daytona answer into an [`Error`], for both error body shapes
//! (API: `{statusCode, error, message, path, timestamp}`; daemon/proxy: `{statusCode, message,
//! code, source, …}`), rate limits with `Retry-After-{throttler}` headers, and the proxy's
//! empty-body 502 (PROTOCOL.md §5).

use crate::config::PROVIDER;
use crate::wire::ErrorBody;
use sandbox_sdk_core::http::{ErrorResponse, truncate};
use sandbox_sdk_core::{Error, ErrorKind};
use std::time::Duration;

/// Whether an error is the API's "Sandbox state change in progress" answer (409, or 400 before
/// API change #4307), which the adapter waits out instead of failing at once.
pub(crate) fn is_state_change_in_progress(error: &Error) -> bool {
    error.kind() == ErrorKind::Conflict
        && error
            .message()
            .to_ascii_lowercase()
            .contains("state change in progress")
}

/// Whether an error is the proxy's empty-body 502 (upstream gone or idle-timed out).
pub(crate) fn is_empty_bad_gateway(error: &Error) -> bool {
    error.status() == Some(502) && error.kind() == ErrorKind::Transport
}

/// Maps any non-2xx Daytona answer to an [`Error`]. The only place statuses become kinds.
pub(crate) fn map_error(response: &ErrorResponse) -> Error {
    let body: Option<ErrorBody> = response.json();
    let message = body.as_ref().and_then(ErrorBody::message_text);
    let code = body
        .as_ref()
        .and_then(|b| b.code.clone())
        .unwrap_or_default();
    let lower = message.as_deref().unwrap_or("").to_ascii_lowercase();
    let status = response.status;

    let kind = match (status, code.as_str()) {
        (_, "FILE_NOT_FOUND" | "NOT_FOUND") => ErrorKind::NotFound,
        (_, "PROCESS_EXECUTION_TIMEOUT" | "REQUEST_TIMEOUT") => ErrorKind::Timeout,
        (_, "FILE_ACCESS_DENIED") => ErrorKind::Unauthorized,
        (_, "SESSION_ENDED" | "COMMAND_ALREADY_COMPLETED" | "GONE") => ErrorKind::Conflict,
        // A preview request without a valid credential is redirected to the login page.
        (300..=399, _) => ErrorKind::Unauthorized,
        (401 | 403, _) => ErrorKind::Unauthorized,
        (404, _) => ErrorKind::NotFound,
        (408, _) => ErrorKind::Timeout,
        (409 | 410 | 412, _) => ErrorKind::Conflict,
        (429, _) => ErrorKind::QuotaExceeded,
        // The proxy reports an upstream 404 as 400 "bad request: 404 Not Found" (issue #3854).
        (400, _) if lower.contains("404 not found") => ErrorKind::NotFound,
        (400, _) if lower.contains("state change in progress") => ErrorKind::Conflict,
        (400, _)
            if lower.contains("not in valid state")
                || lower.contains("not in a stoppable state")
                || lower.contains("is not stopped")
                || lower.contains("must be in started state")
                || lower.contains("errored state") =>
        {
            ErrorKind::Conflict
        }
        // The toolbox proxy for a sandbox that is not running: "bad request: no IP address
        // found. Is the Sandbox started?" (BAD_REQUEST from DAYTONA_PROXY).
        (400, _)
            if lower.contains("is the sandbox started")
                || lower.contains("no ip address found") =>
        {
            ErrorKind::NotRunning
        }
        (400, _) if lower.contains("failed to start") => ErrorKind::Provider,
        (400 | 422, _) => ErrorKind::Validation,
        // An empty 502 is the proxy losing its upstream: the sandbox stopped, or an idle timeout.
        (502, _) if response.body.iter().all(u8::is_ascii_whitespace) => ErrorKind::Transport,
        _ => ErrorKind::Provider,
    };

    let mut text = format!(
        "{} {} returned HTTP {status}",
        response.method, response.path
    );
    if (300..=399).contains(&status) {
        text.push_str(
            ": redirected to the login page (the preview token is missing, wrong or expired)",
        );
    }
    match &message {
        Some(m) => {
            text.push_str(": ");
            text.push_str(&truncate(m, 300));
        }
        None if response.body.iter().all(u8::is_ascii_whitespace) => {
            text.push_str(" with an empty body");
        }
        None => {}
    }
    if !code.is_empty() {
        text.push_str(&format!(" [{code}]"));
    }

    let mut error = Error::new(kind, text)
        .with_status(status)
        .with_provider(PROVIDER)
        .with_operation(response.operation.clone());
    if let Some(id) = &response.sandbox_id {
        error = error.with_sandbox_id(id.clone());
    }
    if let Some(id) = &response.request_id {
        error = error.with_request_id(id.clone());
    }
    if let Some(delay) = retry_after(response) {
        error = error.with_retry_after(delay);
    }
    if is_state_change_in_progress(&error) {
        error = error.with_retryable(true);
    }
    error
}

/// The longest wait any `Retry-After` or `Retry-After-{throttler}` header asks for.
fn retry_after(response: &ErrorResponse) -> Option<Duration> {
    let named = response
        .headers
        .iter()
        .filter(|(name, _)| name.starts_with("retry-after-"))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs >= 0.0 && *secs < 1e9)
        .map(Duration::from_secs_f64);
    named.chain(response.retry_after()).max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sandbox_sdk_core::http::Headers;

    fn response(status: u16, headers: &[(&str, &str)], body: &str) -> ErrorResponse {
        let mut h = Headers::new();
        for (n, v) in headers {
            h.push(n, *v);
        }
        ErrorResponse {
            status,
            headers: h,
            body: Bytes::from(body.to_owned()),
            operation: "op".into(),
            sandbox_id: Some("sb1".into()),
            request_id: None,
            method: "POST".into(),
            path: "/sandbox/sb1/stop".into(),
            provider: PROVIDER.into(),
        }
    }

    #[test]
    fn api_shape_409_state_change_is_a_retryable_conflict() {
        let e = map_error(&response(
            409,
            &[],
            r#"{"path":"/api/sandbox/sb1/stop","timestamp":"2026-08-20T10:00:01.000Z","statusCode":409,"error":"Conflict","message":"Sandbox state change in progress"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(is_state_change_in_progress(&e));
        assert!(e.is_retryable());
        assert_eq!(e.sandbox_id(), Some("sb1"));
        // The pre-#4307 400 form.
        let e = map_error(&response(
            400,
            &[],
            r#"{"statusCode":400,"message":"Sandbox state change in progress"}"#,
        ));
        assert!(is_state_change_in_progress(&e));
    }

    #[test]
    fn other_409s_are_plain_conflicts() {
        let e = map_error(&response(
            409,
            &[],
            r#"{"statusCode":409,"message":"Sandbox with name x already exists"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(!e.is_retryable());
    }

    #[test]
    fn daemon_shape_uses_the_code() {
        let e = map_error(&response(
            404,
            &[],
            r#"{"statusCode":404,"message":"session not found","code":"NOT_FOUND","timestamp":"t","path":"/process/session/s1","method":"GET"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("session not found"));
        assert!(e.message().contains("[NOT_FOUND]"));
        let e = map_error(&response(
            400,
            &[],
            r#"{"statusCode":400,"message":"no such file","code":"FILE_NOT_FOUND"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = map_error(&response(
            408,
            &[],
            r#"{"statusCode":408,"message":"command execution timeout","code":"REQUEST_TIMEOUT"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Timeout);
        let e = map_error(&response(
            410,
            &[],
            r#"{"statusCode":410,"message":"command already completed","code":"GONE"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
    }

    #[test]
    fn proxy_reports_upstream_404_as_400() {
        let e = map_error(&response(
            400,
            &[],
            r#"{"statusCode":400,"message":"bad request: 404 Not Found","code":"BAD_REQUEST","source":"DAYTONA_PROXY"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn rate_limit_reads_named_retry_after_headers() {
        let e = map_error(&response(
            429,
            &[
                ("X-RateLimit-Remaining-sandbox-create", "0"),
                ("Retry-After-sandbox-create", "17"),
            ],
            r#"{"statusCode":429,"message":"Rate limit exceeded","error":"Too Many Requests"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(17)));
        assert!(e.is_retryable());
        let e = map_error(&response(
            429,
            &[("Retry-After-authenticated", "3"), ("Retry-After", "5")],
            "",
        ));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(5)));
    }

    #[test]
    fn empty_502_is_transport_and_nonempty_5xx_is_provider() {
        let e = map_error(&response(502, &[], ""));
        assert_eq!(e.kind(), ErrorKind::Transport);
        assert!(is_empty_bad_gateway(&e));
        assert!(e.message().contains("empty body"));
        let e = map_error(&response(
            500,
            &[],
            r#"{"statusCode":500,"message":"An unexpected error occurred."}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Provider);
        assert!(e.is_retryable());
    }

    #[test]
    fn auth_and_validation() {
        let e = map_error(&response(
            401,
            &[],
            r#"{"statusCode":401,"message":"authentication failed: Bearer token is invalid"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        let e = map_error(&response(
            403,
            &[],
            r#"{"statusCode":403,"message":"Organization is suspended"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        let e = map_error(&response(
            400,
            &[],
            r#"{"statusCode":400,"message":["cpu must not be less than 1"]}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Validation);
        let e = map_error(&response(
            400,
            &[],
            r#"{"statusCode":400,"message":"Sandbox is not in a stoppable state"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Conflict);
        let e = map_error(&response(
            400,
            &[],
            r#"{"statusCode":400,"message":"Sandbox failed to start: image pull failed"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::Provider);
    }

    #[test]
    fn the_proxys_400_for_a_sandbox_that_is_not_started_is_not_running() {
        let e = map_error(&response(
            400,
            &[],
            r#"{"statusCode":400,"message":"bad request: no IP address found. Is the Sandbox started?","code":"BAD_REQUEST","source":"DAYTONA_PROXY"}"#,
        ));
        assert_eq!(e.kind(), ErrorKind::NotRunning);
        assert_eq!(e.status(), Some(400));
    }

    #[test]
    fn a_preview_login_redirect_is_unauthorized() {
        let e = map_error(&response(
            307,
            &[("location", "https://login.example/authorize?x=1")],
            "",
        ));
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        assert!(e.message().contains("login"));
        assert!(!e.message().contains("authorize?x=1"));
    }

    #[test]
    fn a_non_json_body_is_not_echoed() {
        let e = map_error(&response(500, &[], "<html>secret-ish page</html>"));
        assert!(!e.message().contains("secret-ish"));
    }
}
