//! The one function that turns a Sprites error answer into a [`sandbox_sdk_core::Error`]
//! (PROTOCOL.md §10, §11, §7): the status gives the kind, any of the three body shapes gives the
//! text, and the context (operation, sprite, `Retry-After`) is kept. The HTTP kit has already
//! scrubbed the token from the body; a refused WebSocket upgrade is scrubbed by `api::exec`.

use crate::config::PROVIDER;
use crate::wire::ErrorBody;
use sandbox_sdk_core::http::{ErrorResponse, truncate};
use sandbox_sdk_core::{Error, ErrorKind};
use std::time::Duration;

/// Longest provider text kept in an error message.
pub(crate) const MAX_TEXT: usize = 512;

/// The longest wait taken from a 429 body's `retry_after_seconds`.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);

/// The text, machine code and retry wait of any error body (§10): `{"error": text}`,
/// `{"error": code, "message": text}`, `{"errors": [..]}`, files' `{"error", "code", "path"}`,
/// other JSON or plain text.
fn parse(body: &[u8]) -> (String, Option<String>, Option<Duration>) {
    let text = String::from_utf8_lossy(body);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return ("empty response body".to_owned(), None, None);
    }
    let Ok(parsed) = serde_json::from_str::<ErrorBody>(trimmed) else {
        return (truncate(trimmed, MAX_TEXT), None, None);
    };
    let wait = parsed
        .retry_after_seconds
        .map(|s| Duration::from_secs(s).min(MAX_RETRY_WAIT));
    let (message, code) = match (parsed.message, parsed.error, parsed.errors.is_empty()) {
        (Some(message), code, _) => (message, code.or(parsed.code)),
        (None, Some(error), _) => (error, parsed.code),
        (None, None, false) => (parsed.errors.join("; "), parsed.code),
        (None, None, true) => (trimmed.to_owned(), parsed.code),
    };
    (truncate(&message, MAX_TEXT), code, wait)
}

/// Whether a 400 or 409 says the name is taken (PROTOCOL.md §4.1, §18.1).
fn is_duplicate_name(message: &str) -> bool {
    message.contains("already exists")
}

/// Maps one failed answer to an error.
///
/// | status | kind |
/// | --- | --- |
/// | 400 saying `already exists` (§18.1) | `Conflict` |
/// | other 400, 422 | `Validation` (a file's `EISDIR`, `ENOTDIR`, ... included) |
/// | 401, 403 | `Unauthorized` |
/// | 404 | `NotFound` |
/// | 409 | `Conflict` |
/// | 429 | `QuotaExceeded`, waiting `retry_after_seconds` or `Retry-After` (§11) |
/// | 5xx and anything else | `Provider` |
pub(crate) fn map_error(resp: &ErrorResponse) -> Error {
    let (text, code, wait) = parse(&resp.body);
    let kind = match resp.status {
        400 if is_duplicate_name(&text) => ErrorKind::Conflict,
        400 | 422 => ErrorKind::Validation,
        401 | 403 => ErrorKind::Unauthorized,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        429 => ErrorKind::QuotaExceeded,
        _ => ErrorKind::Provider,
    };
    let message = match &code {
        Some(code) if !text.contains(code.as_str()) => format!("{text} [{code}]"),
        _ => text,
    };
    let mut error = Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_status(resp.status)
        .with_operation(&resp.operation);
    if kind == ErrorKind::Conflict {
        error = error.with_retryable(false);
    }
    if let Some(id) = &resp.sandbox_id {
        error = error.with_sandbox_id(id);
    }
    if let Some(id) = &resp.request_id {
        error = error.with_request_id(id);
    }
    if kind == ErrorKind::QuotaExceeded
        && let Some(wait) = wait.or_else(|| resp.retry_after())
    {
        error = error.with_retry_after(wait);
    }
    error
}

/// A protocol problem in an answer that was a success on the HTTP level.
pub(crate) fn protocol_error(operation: &str, sprite: &str, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Provider, message)
        .with_provider(PROVIDER)
        .with_operation(operation)
        .with_sandbox_id(sprite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(status: u16, body: &str) -> Error {
        map_error(&ErrorResponse::new(status, body.as_bytes().to_vec()))
    }

    #[test]
    fn every_body_shape_gives_its_text_and_the_status_its_kind() {
        let e = map(404, r#"{"error":"sprite not found"}"#);
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("sprite not found"));
        let e = map(400, r#"{"errors":["name is required","bad label"]}"#);
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(e.message().contains("name is required; bad label"));
        let e = map(
            400,
            r#"{"error":"invalid_request","message":"sprite \"a\" already exists"}"#,
        );
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(e.message().contains("[invalid_request]"), "{e}");
        assert_eq!(map(409, "taken").kind(), ErrorKind::Conflict);
        assert_eq!(map(401, "").kind(), ErrorKind::Unauthorized);
        assert_eq!(map(502, "<html>").kind(), ErrorKind::Provider);
        let e = map(
            400,
            r#"{"error":"is a directory","code":"EISDIR","path":"/x"}"#,
        );
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(e.message().contains("EISDIR"));
    }

    #[test]
    fn rate_limits_wait_as_the_body_says() {
        let e = map(
            429,
            r#"{"error":"sprite_creation_rate_limited","message":"slow down","retry_after_seconds":7}"#,
        );
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        let e = map_error(
            &ErrorResponse::new(429, bytes::Bytes::from_static(b"{}"))
                .with_header("retry-after", "3"),
        );
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
    }
}
