//! What a non-2xx answer looks like to an adapter's error mapper, the default mapping, and the
//! translation of transport failures into [`Error`]s.

use crate::error::{Error, ErrorKind};
use bytes::Bytes;
use std::fmt;
use std::time::{Duration, SystemTime};

/// The longest text [`ErrorResponse::body_text`] returns, in bytes (before the ellipsis).
pub const BODY_TEXT_LIMIT: usize = 1024;

/// Response headers: lower-cased names, values as text (non-UTF-8 bytes replaced), in the order
/// received. Repeated headers appear once per value.
///
/// `Debug` shows the names and redacts the values of headers that may carry credentials
/// (see [`crate::redact::is_credential_name`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// An empty header list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one header; the name is lower-cased.
    pub fn push(&mut self, name: &str, value: impl Into<String>) {
        self.0.push((name.to_ascii_lowercase(), value.into()));
    }

    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name` (case-insensitive), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every `(name, value)` pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// How many header lines there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn from_reqwest(map: &reqwest::header::HeaderMap) -> Self {
        Headers(
            map.iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
        )
    }
}

impl From<Vec<(String, String)>> for Headers {
    fn from(pairs: Vec<(String, String)>) -> Self {
        let mut headers = Headers::new();
        for (n, v) in pairs {
            headers.push(&n, v);
        }
        headers
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(n, v)| {
                let shown = if crate::redact::is_credential_name(n) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (n.as_str(), shown)
            }))
            .finish()
    }
}

/// A non-2xx answer, as handed to the adapter's error mapper.
///
/// `Debug` shows the body's length, never its content, and redacts credential-like headers.
#[derive(Clone)]
pub struct ErrorResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers.
    pub headers: Headers,
    /// The response body (at most [`ERROR_BODY_LIMIT`] bytes are kept).
    pub body: Bytes,
    /// The operation that failed (`create`, `exec`, ...), or `METHOD /path` when none was set.
    pub operation: String,
    /// The sandbox the request was aimed at, when the adapter said.
    pub sandbox_id: Option<String>,
    /// The provider's request id, from the client's request-id header.
    pub request_id: Option<String>,
    /// The request method (`GET`, `POST`, ...).
    pub method: String,
    /// The request URL's path, without query string.
    pub path: String,
    /// The provider name the client was built for.
    pub provider: String,
}

/// How much of an error body is read and kept, in bytes; the rest is discarded.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

impl ErrorResponse {
    /// A response with `status` and `body`, no headers and empty context: for testing an
    /// adapter's error mapper. Chain [`ErrorResponse::with_header`] to add headers.
    ///
    /// ```
    /// use sandbox_sdk_core::http::{ErrorResponse, default_error_mapper};
    /// use sandbox_sdk_core::ErrorKind;
    /// let response = ErrorResponse::new(429, r#"{"message":"slow down"}"#).with_header("Retry-After", "3");
    /// let error = default_error_mapper(&response);
    /// assert_eq!(error.kind(), ErrorKind::QuotaExceeded);
    /// assert_eq!(error.retry_after(), Some(std::time::Duration::from_secs(3)));
    /// ```
    pub fn new(status: u16, body: impl Into<Bytes>) -> Self {
        ErrorResponse {
            status,
            headers: Headers::new(),
            body: body.into(),
            operation: String::new(),
            sandbox_id: None,
            request_id: None,
            method: String::new(),
            path: String::new(),
            provider: String::new(),
        }
    }

    /// Adds a response header (builder style, for tests).
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push(name, value);
        self
    }

    /// The first value of a response header (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// How long the provider asked us to wait: `Retry-After` as seconds (fractions allowed) or
    /// as an HTTP date (a date in the past gives zero). `None` when absent or unreadable.
    pub fn retry_after(&self) -> Option<Duration> {
        parse_retry_after(self.header("retry-after")?, SystemTime::now())
    }

    /// The body as text, invalid UTF-8 replaced, cut to [`BODY_TEXT_LIMIT`] bytes (on a character
    /// boundary) with `…` appended when cut.
    pub fn body_text(&self) -> String {
        truncate(&String::from_utf8_lossy(&self.body), BODY_TEXT_LIMIT)
    }

    /// The body parsed as JSON, when it is JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The provider's own message, when the body is a JSON object with a string `message`,
    /// `error`, `detail`, `error_description` or `title` field (or `error.message`), cut to 300
    /// bytes. Used by [`default_error_mapper`].
    pub fn provider_message(&self) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let object = value.as_object()?;
        let nested = object
            .get("error")
            .and_then(|e| e.as_object())
            .and_then(|e| e.get("message"))
            .and_then(|m| m.as_str());
        let found = ["message", "error", "detail", "error_description", "title"]
            .iter()
            .find_map(|k| object.get(*k).and_then(|v| v.as_str()))
            .or(nested)?;
        let trimmed = found.trim();
        (!trimmed.is_empty()).then(|| truncate(trimmed, 300))
    }
}

impl fmt::Debug for ErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErrorResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .field("operation", &self.operation)
            .field("sandbox_id", &self.sandbox_id)
            .field("request_id", &self.request_id)
            .field("method", &self.method)
            .field("path", &self.path)
            .field("provider", &self.provider)
            .finish()
    }
}

/// The kind a status maps to when the adapter has no better idea: 400/422 `Validation`,
/// 401/403 `Unauthorized`, 404 `NotFound`, 408 `Timeout`, 409/412 `Conflict`, 429
/// `QuotaExceeded`, anything else (5xx included) `Provider`.
pub fn default_error_kind(status: u16) -> ErrorKind {
    match status {
        400 | 422 => ErrorKind::Validation,
        401 | 403 => ErrorKind::Unauthorized,
        404 => ErrorKind::NotFound,
        408 => ErrorKind::Timeout,
        409 | 412 => ErrorKind::Conflict,
        429 => ErrorKind::QuotaExceeded,
        _ => ErrorKind::Provider,
    }
}

/// The mapping used when an adapter sets no `error_mapper`: [`default_error_kind`], a message of
/// `METHOD /path returned HTTP status` plus the provider's own message when the body has one,
/// and status, request id and `Retry-After`.
pub fn default_error_mapper(response: &ErrorResponse) -> Error {
    let mut message = format!(
        "{} {} returned HTTP {}",
        response.method, response.path, response.status
    );
    if let Some(reason) = reqwest::StatusCode::from_u16(response.status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        message.push(' ');
        message.push_str(reason);
    }
    if (300..400).contains(&response.status) {
        message.push_str(": redirects are not followed");
    }
    if let Some(text) = response.provider_message() {
        message.push_str(": ");
        message.push_str(&text);
    }
    let mut error = Error::new(default_error_kind(response.status), message)
        .with_status(response.status)
        .with_provider(response.provider.clone())
        .with_operation(response.operation.clone());
    if let Some(id) = &response.request_id {
        error = error.with_request_id(id.clone());
    }
    if let Some(id) = &response.sandbox_id {
        error = error.with_sandbox_id(id.clone());
    }
    if let Some(delay) = response.retry_after() {
        error = error.with_retry_after(delay);
    }
    error
}

/// Parses a `Retry-After` value relative to `now`.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && (0.0..1e12).contains(&secs))
            .then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Cuts `text` to at most `limit` bytes on a character boundary, appending `…` when cut
/// (for provider messages quoted in errors).
pub fn truncate(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Which part of the exchange failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Connecting, sending, or waiting for the response head.
    Request,
    /// Reading the response body.
    ResponseBody,
}

/// Where a failure happened, for messages: never a header value or a query string.
#[derive(Clone, Debug)]
pub(crate) struct CallSite {
    pub provider: String,
    pub method: &'static str,
    pub path: String,
    pub operation: Option<String>,
    pub sandbox_id: Option<String>,
}

impl CallSite {
    pub fn operation_or_route(&self) -> String {
        self.operation
            .clone()
            .unwrap_or_else(|| format!("{} {}", self.method, self.path))
    }

    /// Adds provider, operation and sandbox id to `error` where missing.
    pub fn context(&self, error: Error) -> Error {
        error.or_context(
            &self.provider,
            &self.operation_or_route(),
            self.sandbox_id.as_deref(),
        )
    }

    /// Turns a reqwest failure into our error: timeouts `Timeout`, builder errors `Validation`,
    /// everything else (connect, reset, body cut short, TLS) `Transport`. The message names
    /// method, path and the innermost cause; the source keeps the reqwest error without its URL.
    pub fn transport_error(&self, stage: Stage, err: reqwest::Error) -> Error {
        let reading = matches!(stage, Stage::ResponseBody);
        // A streamed request body that failed with one of our errors (an upload reader's
        // io error wrapping a core error, a byte stream's error) keeps that error's kind: the
        // caller's own source failed, not the connection.
        if !reading && let Some(ours) = core_error_in(&err) {
            return self.context(
                Error::new(
                    ours.kind(),
                    format!(
                        "{} {}: request body failed: {}",
                        self.method,
                        self.path,
                        ours.message()
                    ),
                )
                .with_ambiguous(true),
            );
        }
        let (kind, phrase) = if err.is_timeout() {
            if reading {
                (
                    ErrorKind::Timeout,
                    "timed out while reading the response body",
                )
            } else {
                (ErrorKind::Timeout, "timed out")
            }
        } else if err.is_builder() {
            (ErrorKind::Validation, "could not be built")
        } else if err.is_connect() {
            (ErrorKind::Transport, "could not connect")
        } else if reading {
            (
                ErrorKind::Transport,
                "response body was cut short or failed",
            )
        } else if err.is_body() {
            (ErrorKind::Transport, "request body failed")
        } else if err.is_redirect() {
            (ErrorKind::Provider, "redirect failed")
        } else {
            (ErrorKind::Transport, "request failed")
        };
        let cause = innermost_cause(&err);
        let mut message = format!("{} {}: {phrase}", self.method, self.path);
        if let Some(cause) = cause {
            message.push_str(": ");
            message.push_str(&cause);
        }
        // Only a failure to connect (or to build the request) proves nothing reached the server.
        let ambiguous = !err.is_connect() && !err.is_builder();
        self.context(
            Error::new(kind, message)
                .with_ambiguous(ambiguous)
                .with_source(err.without_url()),
        )
    }
}

/// The first of our errors in `err`'s source chain, looking inside io errors too.
fn core_error_in(err: &reqwest::Error) -> Option<&Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = current {
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours);
        }
        if let Some(ours) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<Error>())
        {
            return Some(ours);
        }
        current = e.source();
    }
    None
}

/// The text of the deepest error in the source chain (an io error, a hyper or rustls error),
/// which names the cause without any URL or header.
fn innermost_cause(err: &reqwest::Error) -> Option<String> {
    let mut current: &(dyn std::error::Error + 'static) = std::error::Error::source(err)?;
    while let Some(next) = current.source() {
        current = next;
    }
    let text = current.to_string();
    // Defensive: a cause that mentions a URL could carry a signed query string.
    if text.contains("://") || text.is_empty() {
        return None;
    }
    Some(truncate(&text, 200))
}

/// Redacts double-quoted strings in a serde message (`invalid type: string "…"`) so a value
/// from the body, which may be a token, is not repeated.
pub(crate) fn redact_serde_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    for c in message.chars() {
        if c == '"' {
            if inside {
                out.push_str("…\"");
            } else {
                out.push('"');
            }
            inside = !inside;
        } else if !inside {
            out.push(c);
        }
    }
    if inside {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_fractions_and_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after(" 1.5 ", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
        assert_eq!(parse_retry_after("", now), None);
        assert_eq!(parse_retry_after("NaN", now), None);
        assert_eq!(parse_retry_after("99999999999999999999999", now), None);
    }

    #[test]
    fn default_kinds() {
        let cases = [
            (400, ErrorKind::Validation),
            (422, ErrorKind::Validation),
            (401, ErrorKind::Unauthorized),
            (403, ErrorKind::Unauthorized),
            (404, ErrorKind::NotFound),
            (408, ErrorKind::Timeout),
            (409, ErrorKind::Conflict),
            (412, ErrorKind::Conflict),
            (429, ErrorKind::QuotaExceeded),
            (500, ErrorKind::Provider),
            (503, ErrorKind::Provider),
            (418, ErrorKind::Provider),
            (302, ErrorKind::Provider),
        ];
        for (status, kind) in cases {
            assert_eq!(default_error_kind(status), kind, "{status}");
        }
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
    }

    #[test]
    fn serde_messages_lose_quoted_values() {
        assert_eq!(
            redact_serde_message(
                "invalid type: string \"tok-123\", expected u32 at line 1 column 9"
            ),
            "invalid type: string \"…\", expected u32 at line 1 column 9"
        );
        assert_eq!(
            redact_serde_message("missing field `id` at line 1 column 2"),
            "missing field `id` at line 1 column 2"
        );
    }

    #[test]
    fn provider_message_is_picked_from_common_fields() {
        let response = |body: &str| ErrorResponse {
            status: 400,
            headers: Headers::new(),
            body: Bytes::from(body.to_owned()),
            operation: "create".into(),
            sandbox_id: None,
            request_id: None,
            method: "POST".into(),
            path: "/sandboxes".into(),
            provider: "test".into(),
        };
        assert_eq!(
            response(r#"{"message":"bad template"}"#).provider_message(),
            Some("bad template".into())
        );
        assert_eq!(
            response(r#"{"error":{"message":"nope"}}"#).provider_message(),
            Some("nope".into())
        );
        assert_eq!(response("<html>").provider_message(), None);
        let e = default_error_mapper(&response(r#"{"message":"bad template"}"#));
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert_eq!(
            e.message(),
            "POST /sandboxes returned HTTP 400 Bad Request: bad template"
        );
    }
}
