//! The one function that turns an E2B answer into an [`Error`].
//!
//! E2B has five error dialects (PROTOCOL.md §8), all handled by [`map_error`]:
//!
//! | Producer | Status | Body |
//! |---|---|---|
//! | REST control plane | 4xx/5xx | `{"code":404,"message":"…"}` (+ `error_code`) |
//! | envd HTTP (and its auth gate) | 4xx/5xx | `{"code":401,"message":"…"}\n` |
//! | Connect unary | per code | `{"code":"not_found","message":"…"}` |
//! | Connect streaming | 200 | end-stream `{"error":{"code":"…","message":"…"}}` |
//! | Edge proxy | 502/409/429/403/404 | `{"sandboxId":"…","message":"…","code":502}` |
//!
//! Only the provider's `message` text is kept; nothing else from the body or headers (which may
//! hold tokens) reaches the error.
//!
//! Retryability follows the E2B Python SDK 2.63 (`e2b/retry.py`, PROTOCOL.md §2.2): a
//! `Should-Retry` response header decides when present (`true` retries, any other value never
//! does, 429 included); without it an HTTP 429, 502, 503 or 504 is retryable and any other HTTP
//! error is not, except where the answer itself says more (an edge-proxy "sandbox was not found"
//! 502 is `NotRunning` and final; a "still transitioning" 409 is worth another try).

use crate::config::PROVIDER;
use sandbox_sdk_core::{Error, ErrorKind};
use serde::Deserialize;
use std::time::Duration;

/// An error answer, as seen by the mapping function.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failure<'a> {
    /// HTTP status (200 for a Connect end-stream error).
    pub status: u16,
    /// The response body (or the end-stream JSON).
    pub body: &'a [u8],
    /// The `Retry-After` delay, when the response carried one.
    pub retry_after: Option<Duration>,
    /// The `Should-Retry` response header, when present: it alone decides retryability.
    pub should_retry: Option<&'a str>,
    /// The operation that failed.
    pub operation: &'a str,
    /// The sandbox the call was aimed at.
    pub sandbox_id: Option<&'a str>,
    /// A request id the service sent back, if any.
    pub request_id: Option<&'a str>,
}

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    code: Option<serde_json::Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<ConnectError>,
    #[serde(default, rename = "sandboxId")]
    sandbox_id: Option<String>,
    #[serde(default)]
    error_code: Option<String>,
}

#[derive(Deserialize)]
struct ConnectError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// What kind a Connect error code is.
pub(crate) fn connect_code_kind(code: &str) -> ErrorKind {
    match code {
        "canceled" => ErrorKind::Cancelled,
        "invalid_argument" | "out_of_range" => ErrorKind::Validation,
        "deadline_exceeded" => ErrorKind::Timeout,
        "not_found" => ErrorKind::NotFound,
        "already_exists" | "aborted" | "failed_precondition" => ErrorKind::Conflict,
        "permission_denied" | "unauthenticated" => ErrorKind::Unauthorized,
        "resource_exhausted" => ErrorKind::QuotaExceeded,
        "unimplemented" => ErrorKind::NotSupported,
        "unavailable" => ErrorKind::Transport,
        _ => ErrorKind::Provider,
    }
}

fn status_kind(status: u16) -> ErrorKind {
    match status {
        400 | 422 => ErrorKind::Validation,
        401 | 403 => ErrorKind::Unauthorized,
        404 => ErrorKind::NotFound,
        408 | 504 => ErrorKind::Timeout,
        409 => ErrorKind::Conflict,
        429 => ErrorKind::QuotaExceeded,
        499 => ErrorKind::Cancelled,
        501 => ErrorKind::NotSupported,
        _ => ErrorKind::Provider,
    }
}

/// Keeps a message short and on one line.
fn clean(message: &str) -> String {
    let line = message.trim().replace(['\n', '\r'], " ");
    if line.chars().count() > 300 {
        let cut: String = line.chars().take(300).collect();
        format!("{cut}…")
    } else {
        line
    }
}

/// Turns any E2B error answer into an [`Error`]: the one mapping function of this adapter.
pub(crate) fn map_error(f: Failure<'_>) -> Error {
    let parsed: Option<Body> = serde_json::from_slice(f.body).ok();
    let mut retryable = None;
    let (kind, message) = match parsed {
        // Connect end-stream error (on HTTP 200), or an error object nested the same way.
        Some(Body {
            error: Some(ConnectError { code, message }),
            ..
        }) => {
            let code = code.unwrap_or_else(|| "unknown".into());
            let kind = connect_code_kind(&code);
            if kind == ErrorKind::Transport {
                retryable = Some(true);
            }
            if kind == ErrorKind::Timeout {
                // On a stream this is the process's own deadline (`Connect-Timeout-Ms` on
                // Start): running it again would meet the same deadline.
                retryable = Some(false);
            }
            (
                kind,
                format!("{code}: {}", clean(message.as_deref().unwrap_or(""))),
            )
        }
        // Connect unary error: `code` is a string.
        Some(Body {
            code: Some(serde_json::Value::String(code)),
            message,
            ..
        }) => {
            let kind = connect_code_kind(&code);
            if kind == ErrorKind::Transport {
                retryable = Some(true);
            }
            (
                kind,
                format!("{code}: {}", clean(message.as_deref().unwrap_or(""))),
            )
        }
        // Edge proxy: carries `sandboxId`.
        Some(Body {
            sandbox_id: Some(_),
            message,
            ..
        }) => {
            let message = clean(message.as_deref().unwrap_or("edge proxy error"));
            let lower = message.to_ascii_lowercase();
            let kind = if lower.contains("was not found") || lower.contains("port is not open") {
                // Killed, expired, paused without auto-resume, or envd not listening: the
                // sandbox is not running (it may still exist), so not NotFound.
                retryable = Some(false);
                ErrorKind::NotRunning
            } else if f.status == 409 {
                // Pausing or resuming: worth another try in a moment.
                retryable = Some(true);
                ErrorKind::Conflict
            } else {
                status_kind(f.status)
            };
            (kind, message)
        }
        // REST control plane or envd HTTP: `code` is the HTTP status as a number.
        Some(Body {
            message: Some(message),
            error_code,
            ..
        }) => {
            let mut kind = status_kind(f.status);
            let mut text = clean(&message);
            if let Some(code) = error_code {
                text = format!("{text} ({code})");
            }
            if f.status == 507 {
                kind = ErrorKind::QuotaExceeded;
                retryable = Some(false);
            }
            if f.status == 409 && message.contains("state change in progress") {
                retryable = Some(true);
            }
            (kind, text)
        }
        _ => {
            let text = String::from_utf8_lossy(f.body);
            let text = clean(&text);
            let kind = status_kind(f.status);
            let message = if text.is_empty() || text.starts_with('<') {
                format!("HTTP {}", f.status)
            } else {
                text
            };
            (kind, message)
        }
    };
    let mut error = Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_operation(f.operation);
    if f.status != 200 {
        error = error.with_status(f.status);
    }
    if let Some(id) = f.sandbox_id {
        error = error.with_sandbox_id(id);
    }
    if let Some(id) = f.request_id {
        error = error.with_request_id(id);
    }
    if let Some(delay) = f.retry_after {
        error = error.with_retry_after(delay);
    }
    if let Some(r) = retryable_by_rules(f.status, f.should_retry, retryable) {
        error = error.with_retryable(r);
    }
    error
}

/// E2B's retry rules: `Should-Retry` decides when present (only `true` retries); else what the
/// answer's body said (`decided`); else, for an HTTP error, whether the status is 429, 502, 503
/// or 504. `None` (a Connect end-stream error with nothing decided) keeps the kind's default.
fn retryable_by_rules(
    status: u16,
    should_retry: Option<&str>,
    decided: Option<bool>,
) -> Option<bool> {
    if let Some(header) = should_retry {
        return Some(header.trim().eq_ignore_ascii_case("true"));
    }
    if decided.is_some() || status == 200 {
        return decided;
    }
    Some(matches!(status, 429 | 502 | 503 | 504))
}

/// A transport-level failure (connection, framing, malformed JSON) during `operation`.
pub(crate) fn transport(
    operation: &str,
    sandbox_id: Option<&str>,
    message: impl Into<String>,
) -> Error {
    let mut e = Error::new(ErrorKind::Transport, message)
        .with_provider(PROVIDER)
        .with_operation(operation);
    if let Some(id) = sandbox_id {
        e = e.with_sandbox_id(id);
    }
    e
}

/// An answer whose body is not the JSON the operation expects.
pub(crate) fn bad_response(operation: &str, sandbox_id: Option<&str>, what: &str) -> Error {
    let mut e = Error::new(
        ErrorKind::Provider,
        format!("unexpected response body: {what}"),
    )
    .with_provider(PROVIDER)
    .with_operation(operation);
    if let Some(id) = sandbox_id {
        e = e.with_sandbox_id(id);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(status: u16, body: &str) -> Error {
        map_error(Failure {
            status,
            body: body.as_bytes(),
            retry_after: None,
            should_retry: None,
            operation: "op",
            sandbox_id: Some("isb"),
            request_id: None,
        })
    }

    #[test]
    fn rest_errors_map_by_status() {
        let e = map(
            404,
            r#"{"code":404,"message":"Sandbox \"isb\" doesn't exist or you don't have access to it"}"#,
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.status(), Some(404));
        assert!(e.message().contains("doesn't exist"));
        assert_eq!(
            map(401, r#"{"code":401,"message":"Invalid API key"}"#).kind(),
            ErrorKind::Unauthorized
        );
        assert_eq!(
            map(400, r#"{"code":400,"message":"bad"}"#).kind(),
            ErrorKind::Validation
        );
        let e = map(
            503,
            r#"{"code":503,"error_code":"sandbox_capacity_unavailable","message":"no capacity"}"#,
        );
        assert_eq!(e.kind(), ErrorKind::Provider);
        assert!(e.is_retryable());
        assert!(e.message().contains("sandbox_capacity_unavailable"));
    }

    #[test]
    fn rate_limit_is_quota_exceeded_with_retry_after() {
        let e = map_error(Failure {
            status: 429,
            body: br#"{"code":429,"message":"Rate limit exceeded"}"#,
            retry_after: Some(Duration::from_secs(7)),
            should_retry: None,
            operation: "create",
            sandbox_id: None,
            request_id: None,
        });
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert!(e.is_retryable());
    }

    #[test]
    fn envd_http_errors_with_trailing_newline() {
        let e = map(
            401,
            "{\"code\":401,\"message\":\"unauthorized access, please provide a valid access token or method signing if supported\"}\n",
        );
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        let e = map(
            404,
            "{\"code\":404,\"message\":\"path '/x' does not exist\"}\n",
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = map(
            507,
            "{\"code\":507,\"message\":\"not enough disk space available\"}\n",
        );
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
        assert!(!e.is_retryable());
    }

    #[test]
    fn connect_unary_errors_use_the_code_string() {
        let e = map(
            404,
            r#"{"code":"not_found","message":"file not found: stat /home/user/missing: no such file or directory"}"#,
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().starts_with("not_found: file not found"));
        assert_eq!(
            map(
                401,
                r#"{"code":"unauthenticated","message":"invalid username: 'bob'"}"#
            )
            .kind(),
            ErrorKind::Unauthorized
        );
        assert_eq!(
            map(409, r#"{"code":"already_exists","message":"x"}"#).kind(),
            ErrorKind::Conflict
        );
    }

    #[test]
    fn connect_end_stream_errors_on_200() {
        let e = map(
            200,
            r#"{"error":{"code":"invalid_argument","message":"cwd '/nope' does not exist"}}"#,
        );
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert_eq!(e.status(), None);
        assert!(e.message().contains("cwd '/nope' does not exist"));
        let e = map(
            200,
            r#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#,
        );
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(!e.is_retryable(), "a process deadline is not retried");
        let e = map(200, r#"{"error": {"code": "unavailable", "message": "x"}}"#);
        assert_eq!(e.kind(), ErrorKind::Transport);
        assert!(e.is_retryable());
    }

    #[test]
    fn edge_proxy_sandbox_not_found_is_not_running() {
        let e = map(
            502,
            r#"{"sandboxId":"isb","message":"The sandbox was not found","code":502}"#,
        );
        assert_eq!(e.kind(), ErrorKind::NotRunning);
        assert!(!e.is_retryable());
        let e = map(
            409,
            r#"{"sandboxId":"isb","message":"The sandbox is still transitioning. Try again in a moment.","code":409}"#,
        );
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(e.is_retryable());
        let e = map(
            429,
            r#"{"sandboxId":"isb","message":"The sandbox has too many concurrent incoming connections (limit: 5)","code":429,"connectionLimit":5}"#,
        );
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
        let e = map(
            403,
            r#"{"sandboxId":"isb","message":"Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing","code":403}"#,
        );
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
    }

    #[test]
    fn non_json_bodies_map_by_status() {
        assert_eq!(
            map(502, "<html>bad gateway</html>").kind(),
            ErrorKind::Provider
        );
        assert_eq!(map(502, "<html>bad gateway</html>").message(), "HTTP 502");
        assert_eq!(map(404, "").kind(), ErrorKind::NotFound);
        assert_eq!(map(504, "gateway timeout").kind(), ErrorKind::Timeout);
    }

    fn map_with_header(status: u16, body: &str, should_retry: Option<&str>) -> Error {
        map_error(Failure {
            status,
            body: body.as_bytes(),
            retry_after: None,
            should_retry,
            operation: "op",
            sandbox_id: None,
            request_id: None,
        })
    }

    #[test]
    fn should_retry_header_decides_when_present() {
        let rest = r#"{"code":500,"message":"boom"}"#;
        // `true` (any case) retries even a status that is otherwise final...
        assert!(map_with_header(500, rest, Some("true")).is_retryable());
        assert!(map_with_header(400, r#"{"code":400,"message":"x"}"#, Some("TRUE")).is_retryable());
        // ...and anything else never retries, 429 and 503 included.
        for value in ["false", "", "yes", "1"] {
            let e = map_with_header(
                429,
                r#"{"code":429,"message":"Rate limit exceeded"}"#,
                Some(value),
            );
            assert!(!e.is_retryable(), "Should-Retry: {value:?}");
        }
        assert!(
            !map_with_header(503, r#"{"code":503,"message":"x"}"#, Some("false")).is_retryable()
        );
        // It wins over what the body says (a transitioning sandbox is otherwise retried).
        let transitioning = r#"{"sandboxId":"isb","message":"The sandbox is still transitioning. Try again in a moment.","code":409}"#;
        assert!(map_with_header(409, transitioning, None).is_retryable());
        assert!(!map_with_header(409, transitioning, Some("false")).is_retryable());
    }

    #[test]
    fn without_the_header_only_429_502_503_504_are_retryable() {
        for status in [429, 502, 503, 504] {
            let body = format!(r#"{{"code":{status},"message":"x"}}"#);
            assert!(
                map_with_header(status, &body, None).is_retryable(),
                "{status}"
            );
            assert!(
                map_with_header(status, "", None).is_retryable(),
                "{status}, empty body"
            );
        }
        for status in [400, 401, 403, 404, 408, 409, 500, 501, 507] {
            let body = format!(r#"{{"code":{status},"message":"x"}}"#);
            assert!(
                !map_with_header(status, &body, None).is_retryable(),
                "{status}"
            );
        }
        // A Connect unary `unavailable` is a 503: retried.
        assert!(
            map_with_header(503, r#"{"code":"unavailable","message":"x"}"#, None).is_retryable()
        );
        // The edge proxy's "sandbox was not found" 502 is final: the sandbox is gone.
        let gone = r#"{"sandboxId":"isb","message":"The sandbox was not found","code":502}"#;
        assert!(!map_with_header(502, gone, None).is_retryable());
    }

    #[test]
    fn context_is_attached() {
        let e = map(404, r#"{"code":404,"message":"gone"}"#);
        assert_eq!(e.provider(), Some("e2b"));
        assert_eq!(e.operation(), Some("op"));
        assert_eq!(e.sandbox_id(), Some("isb"));
    }
}
