//! Talking to envd, the daemon inside a sandbox: addressing (shared host with routing headers, or
//! `{port}-{id}.{domain}`), auth headers, Connect unary calls and server streams.

use crate::builder::{ENVD_PORT, SHARED_HOST_DOMAINS};
use crate::connect::{Frame, FrameDecoder, encode_envelope};
use crate::error::{Failure, bad_response, map_error, scrub, transport};
use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::http::{HttpClient, Method, Request, idle_bounded};
use sandbox_sdk_core::{ByteStream, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::time::Duration;

/// Keepalive interval asked of envd on streams, in seconds (what both official SDKs send):
/// `Keepalive-Ping-Interval: 50` makes envd send a `keepalive` event after 50 s without output
/// on `Start`, `Connect` and `WatchDir` (PROTOCOL.md §2.1; whole seconds only).
pub const KEEPALIVE_SECS: &str = "50";

/// How long an open process or watch stream may go without a single byte by default: envd's
/// keepalive every 50 s ([`KEEPALIVE_SECS`]) plus 15 s for the edge proxy and the network.
/// A silent stream is then ended with a `Transport` error instead of being waited on forever.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(65);

/// How long a `/files` upload or download may go without moving a byte by default. Transfers
/// have no total limit; only this silence (after the response head, which the request timeout
/// bounds) ends them, with a `Transport` error.
pub const DEFAULT_TRANSFER_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The envd base URL of a sandbox: the override when set, else the shared host for known
/// domains, else `https://{port}-{id}.{domain}`.
pub fn envd_base_url(sandbox_url: Option<&str>, domain: &str, sandbox_id: &str) -> String {
    match sandbox_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if SHARED_HOST_DOMAINS.contains(&domain) => format!("https://sandbox.{domain}"),
        None => format!("https://{ENVD_PORT}-{sandbox_id}.{domain}"),
    }
}

/// The host of `port` on a sandbox, `{port}-{id}.{domain}` (signed URLs and preview links).
pub fn port_host(port: u16, sandbox_id: &str, domain: &str) -> String {
    format!("{port}-{sandbox_id}.{domain}")
}

/// envd of one sandbox.
#[derive(Clone)]
pub(crate) struct Envd {
    pub http: HttpClient,
    pub sandbox_id: String,
    pub access_token: Option<String>,
    pub user: Option<String>,
    pub request_timeout: Option<Duration>,
    /// The longest silence of an open Connect stream.
    pub stream_idle: Duration,
    /// The longest silence of a `/files` transfer's body.
    pub transfer_idle: Duration,
}

impl fmt::Debug for Envd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envd")
            .field("base_url", &self.http.base_url())
            .field("sandbox_id", &self.sandbox_id)
            .field(
                "access_token",
                &self.access_token.as_ref().map(|_| "<redacted>"),
            )
            .field("user", &self.user)
            .finish()
    }
}

/// The cap on a unary envd answer (`Stat`, `MakeDir`, `Move`, `Remove`, signals, input,
/// resize, and the `/files` upload's list of written entries): each is one entry or `{}`, a
/// few hundred bytes, so 1 MiB is far past any honest answer.
pub const UNARY_MAX_BODY: usize = 1024 * 1024;

/// The cap on a `ListDir` answer: one JSON entry (~250 bytes) per file, so 64 MiB holds about
/// 250 000 entries, more than a deep listing of a large tree needs.
pub const LIST_DIR_MAX_BODY: usize = 64 * 1024 * 1024;

/// The cap on a `process.Process/List` answer (every process with its command line and
/// environment): core's default of 16 MiB.
pub const PROCESS_LIST_MAX_BODY: usize = sandbox_sdk_core::http::DEFAULT_MAX_BODY;

/// The cap on an answer to a stream request that is not a stream (an error page, a proxy's
/// message): only its first words are ever quoted.
const NOT_A_STREAM_MAX_BODY: usize = 64 * 1024;

/// The largest `Connect-Timeout-Ms` the Connect protocol allows: at most ten digits.
pub(crate) const MAX_TIMEOUT_MS: u128 = 9_999_999_999;

/// The `Connect-Timeout-Ms` value for `deadline`: whole milliseconds, at least 1 and at most
/// [`MAX_TIMEOUT_MS`] (about 115 days; a longer value would break the header's grammar).
pub(crate) fn timeout_ms(deadline: Duration) -> String {
    deadline.as_millis().clamp(1, MAX_TIMEOUT_MS).to_string()
}

/// `Basic base64("<user>:")`.
pub fn basic_user(user: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:"))
    )
}

impl Envd {
    /// A request with routing and token headers.
    pub fn request(&self, method: Method, path: &str, operation: &str) -> Request {
        let mut req = self
            .http
            .request(method, path)
            .operation(operation)
            .sandbox_id(&self.sandbox_id)
            .header("E2b-Sandbox-Id", &self.sandbox_id)
            .header("E2b-Sandbox-Port", &ENVD_PORT.to_string());
        if let Some(token) = &self.access_token {
            req = req.sensitive_header("X-Access-Token", token);
        }
        req
    }

    /// A Connect request for `rpc` (`process.Process/List`), as `user` when given.
    fn rpc_request(&self, rpc: &str, operation: &str, user: Option<&str>) -> Request {
        let mut req = self
            .request(Method::Post, &format!("/{rpc}"), operation)
            .header("Connect-Protocol-Version", "1");
        if let Some(user) = user.or(self.user.as_deref()) {
            req = req.sensitive_header("Authorization", &basic_user(user));
        }
        req
    }

    /// A unary Connect call: JSON in, JSON out (at most [`UNARY_MAX_BODY`]); errors through the
    /// one mapping function.
    pub async fn unary<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        rpc: &str,
        operation: &str,
        body: &Req,
    ) -> Result<Resp> {
        self.unary_capped(rpc, operation, body, UNARY_MAX_BODY)
            .await
    }

    /// A unary Connect call whose answer may be up to `max_body` bytes (over it: a `Provider`
    /// error before the body is held).
    pub async fn unary_capped<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        rpc: &str,
        operation: &str,
        body: &Req,
        max_body: usize,
    ) -> Result<Resp> {
        self.rpc_request(rpc, operation, None)
            .json(body)
            .timeout_opt(self.request_timeout)
            .max_body(max_body)
            .send_json()
            .await
    }

    /// The credentials this client sends that a server could echo into a 2xx body the adapter
    /// quotes (a Connect end-stream error, a non-stream answer): the envd access token.
    /// (Error answers are scrubbed by core's transport.)
    pub fn secrets(&self) -> Vec<String> {
        self.access_token.iter().cloned().collect()
    }

    /// Bounds the opening of a server stream by `limit`, else the client's request timeout
    /// (none when neither is set). `open` covers the response head and, where the protocol
    /// sends one, the first `start` event; what is read after it has no total limit (streams
    /// may legitimately live for hours), only the idle bound of [`ConnectStream`]. Running out
    /// is a `Timeout` error naming `operation`, with `what` (`"the process did not start"`) as
    /// its message.
    pub async fn establish<T>(
        &self,
        limit: Option<Duration>,
        operation: &str,
        what: &str,
        open: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        match limit.or(self.request_timeout) {
            None => open.await,
            Some(limit) => match tokio::time::timeout(limit, open).await {
                Ok(result) => result,
                Err(_) => Err(sandbox_sdk_core::Error::new(
                    sandbox_sdk_core::ErrorKind::Timeout,
                    format!("{what} within {}ms", limit.as_millis()),
                )
                .with_provider(crate::PROVIDER)
                .with_operation(operation)
                .with_sandbox_id(&self.sandbox_id)),
            },
        }
    }

    /// Opens a server stream: one enveloped request, a stream of envelopes back.
    /// `deadline` becomes `Connect-Timeout-Ms` when given (never a hidden default). The request
    /// itself has no timeout: its opening is bounded by [`Envd::establish`] (which honours a
    /// command's own request timeout), and the open stream by `stream_idle` between chunks.
    pub async fn server_stream<Req: Serialize>(
        &self,
        rpc: &str,
        operation: &str,
        body: &Req,
        user: Option<&str>,
        deadline: Option<Duration>,
    ) -> Result<ConnectStream> {
        let json = serde_json::to_vec(body).map_err(|_| {
            transport(
                operation,
                Some(&self.sandbox_id),
                "could not encode the request",
            )
        })?;
        let mut req = self
            .rpc_request(rpc, operation, user)
            .body(encode_envelope(&json), "application/connect+json")
            .header("Keepalive-Ping-Interval", KEEPALIVE_SECS)
            // Only an answer that is not a stream is read whole; the stream itself is read
            // frame by frame (each frame capped by the decoder).
            .max_body(NOT_A_STREAM_MAX_BODY)
            .no_timeout();
        if let Some(deadline) = deadline {
            req = req.header("Connect-Timeout-Ms", &timeout_ms(deadline));
        }
        let response = req.send().await?;
        let content_type = response
            .header("content-type")
            .unwrap_or_default()
            .to_ascii_lowercase();
        if !content_type.starts_with("application/connect+json") {
            // Not a stream at all: read it whole and report what it says.
            let status = response.status();
            let body = response.bytes().await?;
            let body = scrub(&body, &self.secrets());
            return Err(map_error(Failure {
                status: if status == 200 { 500 } else { status },
                body: &body,
                retry_after: None,
                should_retry: None,
                operation,
                sandbox_id: Some(&self.sandbox_id),
                request_id: None,
            }));
        }
        let operation_name = operation.to_owned();
        let sandbox_id = self.sandbox_id.clone();
        let body = idle_bounded(response.bytes_stream(), self.stream_idle)
            .map(move |chunk| {
                chunk.map_err(|e| {
                    e.with_provider(crate::PROVIDER)
                        .with_operation(&operation_name)
                        .with_sandbox_id(&sandbox_id)
                })
            })
            .boxed();
        Ok(ConnectStream::new(body, operation, &self.sandbox_id).with_secrets(self.secrets()))
    }
}

/// A Connect server stream being read: message payloads until the end-stream envelope.
pub struct ConnectStream {
    body: ByteStream,
    decoder: FrameDecoder,
    operation: String,
    sandbox_id: String,
    finished: bool,
    /// Credential values scrubbed from an end-stream error before it is quoted.
    secrets: Vec<String>,
}

impl fmt::Debug for ConnectStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectStream")
            .field("operation", &self.operation)
            .field("finished", &self.finished)
            .finish()
    }
}

impl ConnectStream {
    /// Reads envelopes from `body`.
    pub fn new(body: ByteStream, operation: &str, sandbox_id: &str) -> Self {
        ConnectStream {
            body,
            decoder: FrameDecoder::new(),
            operation: operation.to_owned(),
            sandbox_id: sandbox_id.to_owned(),
            finished: false,
            secrets: Vec::new(),
        }
    }

    /// Scrubs these credential values (the envd access token) from end-stream errors, so a
    /// daemon that quotes them cannot get them into an error message.
    pub fn with_secrets(mut self, secrets: Vec<String>) -> Self {
        self.secrets = secrets;
        self
    }

    /// The next message payload; `None` after a clean end-stream, an error for an end-stream
    /// error, a malformed stream or a body cut short.
    pub async fn next_message(&mut self) -> Option<Result<Bytes>> {
        loop {
            if self.finished {
                return None;
            }
            match self.decoder.next_frame() {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(transport(
                        &self.operation,
                        Some(&self.sandbox_id),
                        format!("malformed Connect stream: {e}"),
                    )));
                }
                Ok(Some(Frame::Message(payload))) => return Some(Ok(payload)),
                Ok(Some(Frame::End(payload))) => {
                    self.finished = true;
                    return self.end_stream(&payload).err().map(Err);
                }
                Ok(None) => {}
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.decoder.push(&chunk),
                Some(Err(e)) => {
                    self.finished = true;
                    return Some(Err(e));
                }
                None => {
                    self.finished = true;
                    return match self.decoder.finish() {
                        Ok(()) => None,
                        Err(e) => Some(Err(transport(
                            &self.operation,
                            Some(&self.sandbox_id),
                            format!("Connect stream cut short: {e}"),
                        ))),
                    };
                }
            }
        }
    }

    /// The next message decoded as `T`.
    pub async fn next_json<T: DeserializeOwned>(&mut self) -> Option<Result<T>> {
        let payload = match self.next_message().await? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(serde_json::from_slice(&payload).map_err(|_| {
            self.finished = true;
            bad_response(
                &self.operation,
                Some(&self.sandbox_id),
                "a stream message is not the expected JSON",
            )
        }))
    }

    /// Checks the end-stream JSON: `{}` (or trailers) is success, `{"error":…}` an error.
    fn end_stream(&self, payload: &[u8]) -> Result<()> {
        let value: serde_json::Value = serde_json::from_slice(payload).map_err(|_| {
            bad_response(
                &self.operation,
                Some(&self.sandbox_id),
                "end-of-stream message is not JSON",
            )
        })?;
        if value.get("error").is_some() {
            return Err(map_error(Failure {
                status: 200,
                body: &scrub(payload, &self.secrets),
                retry_after: None,
                should_retry: None,
                operation: &self.operation,
                sandbox_id: Some(&self.sandbox_id),
                request_id: None,
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use sandbox_sdk_core::ErrorKind;

    fn stream_of(chunks: Vec<&'static [u8]>) -> ConnectStream {
        let body = stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from_static(c)))).boxed();
        ConnectStream::new(body, "exec", "isb")
    }

    #[test]
    fn addressing_follows_the_domain_list_and_override() {
        assert_eq!(
            envd_base_url(None, "e2b.app", "isb"),
            "https://sandbox.e2b.app"
        );
        assert_eq!(
            envd_base_url(None, "example.test", "isb"),
            "https://49983-isb.example.test"
        );
        assert_eq!(
            envd_base_url(Some("http://127.0.0.1:5/"), "e2b.app", "isb"),
            "http://127.0.0.1:5"
        );
        assert_eq!(basic_user("root"), "Basic cm9vdDo=");
    }

    #[test]
    fn timeout_header_has_at_most_ten_digits() {
        assert_eq!(timeout_ms(Duration::from_secs(60)), "60000");
        assert_eq!(timeout_ms(Duration::from_micros(10)), "1");
        assert_eq!(timeout_ms(Duration::MAX), "9999999999");
        assert_eq!(timeout_ms(Duration::from_secs(400 * 86_400)), "9999999999");
    }

    #[tokio::test]
    async fn end_stream_error_before_any_message() {
        let mut s = stream_of(vec![
            b"\x02\x00\x00\x00\x4c{\"error\":{\"code\":\"invalid_argument\",\"message\":\"cwd '/nope' does not exist\"}}",
        ]);
        let e = s.next_message().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(s.next_message().await.is_none());
    }

    #[tokio::test]
    async fn messages_then_clean_end() {
        let mut s = stream_of(vec![b"\x00\x00\x00\x00\x02{}\x02\x00", b"\x00\x00\x02{}"]);
        assert_eq!(&s.next_message().await.unwrap().unwrap()[..], b"{}");
        assert!(s.next_message().await.is_none());
    }

    #[tokio::test]
    async fn body_cut_short_is_transport() {
        let mut s = stream_of(vec![b"\x00\x00\x00\x00\x02{}"]);
        assert!(s.next_message().await.unwrap().is_ok());
        let e = s.next_message().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Transport);
    }

    #[tokio::test]
    async fn garbage_is_an_error() {
        let mut s = stream_of(vec![b"\x80garbage"]);
        let e = s.next_message().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Transport);
        assert!(s.next_message().await.is_none());
    }
}
