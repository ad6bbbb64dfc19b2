//! envd, the daemon inside a sandbox: addressing (the shared host with routing headers, or
//! `{port}-{id}.{domain}`, PROTOCOL.md §3), its auth headers, Connect unary calls and server
//! streams (§4), and one method per RPC of `process.Process` (§5) and `filesystem.Filesystem`
//! (§6) and per `/files` call (§7).

use super::Api;
use super::connect::{ConnectStream, encode_envelope};
use crate::config::{
    ENVD_PORT, KEEPALIVE_SECS, LIST_DIR_MAX_BODY, NOT_A_STREAM_MAX_BODY, PROCESS_LIST_MAX_BODY,
    PROVIDER, SHARED_HOST_DOMAINS, UNARY_MAX_BODY,
};
use crate::error::{Failure, map_error, transport};
use crate::wire::{
    EntryResponse, ListDirRequest, ListDirResponse, ListResponse, MoveRequest, PathRequest,
    ProcessInput, Pty, PtySizeWire, Selector, SelectorRequest, SendInputRequest, SignalRequest,
    StartRequest, UpdateRequest, WatchRequest, WrittenEntry,
};
use base64::Engine as _;
use futures::StreamExt;
use sandbox_sdk_core::http::{HttpClient, Method, Multipart, Request, idle_bounded};
use sandbox_sdk_core::redact::scrub;
use sandbox_sdk_core::{Download, Error, ErrorKind, Result, UploadBody};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::time::Duration;

/// The envd base URL of a sandbox: the override when set, else the shared host for known
/// domains, else `https://{port}-{id}.{domain}` (PROTOCOL.md §3.1, §3.2).
pub fn envd_base_url(sandbox_url: Option<&str>, domain: &str, sandbox_id: &str) -> String {
    port_base_url(sandbox_url, domain, sandbox_id, ENVD_PORT)
}

/// The base URL of `port` on a sandbox, chosen as for envd; the routing headers name the port.
pub(crate) fn port_base_url(
    sandbox_url: Option<&str>,
    domain: &str,
    sandbox_id: &str,
    port: u16,
) -> String {
    match sandbox_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if SHARED_HOST_DOMAINS.contains(&domain) => format!("https://sandbox.{domain}"),
        None => format!("https://{port}-{sandbox_id}.{domain}"),
    }
}

/// The host of `port` on a sandbox, `{port}-{id}.{domain}` (signed URLs and preview links,
/// PROTOCOL.md §3.2).
pub(crate) fn port_host(port: u16, sandbox_id: &str, domain: &str) -> String {
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

/// The largest `Connect-Timeout-Ms` the Connect protocol allows: at most ten digits.
pub(crate) const MAX_TIMEOUT_MS: u128 = 9_999_999_999;

/// The `Connect-Timeout-Ms` value for `deadline`: whole milliseconds, at least 1 and at most
/// [`MAX_TIMEOUT_MS`] (about 115 days; a longer value would break the header's grammar,
/// PROTOCOL.md §3.3).
pub(crate) fn timeout_ms(deadline: Duration) -> String {
    deadline.as_millis().clamp(1, MAX_TIMEOUT_MS).to_string()
}

/// `Basic base64("<user>:")`.
fn basic_user(user: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:"))
    )
}

impl Envd {
    /// envd of sandbox `sandbox_id` in `domain`, sending `access_token` when there is one: the
    /// provider's envd client re-based for the sandbox, with its user, timeouts and idle bounds.
    pub fn new(
        api: &Api,
        domain: &str,
        sandbox_id: &str,
        access_token: Option<String>,
    ) -> Result<Envd> {
        let config = &api.config;
        let base = envd_base_url(config.sandbox_url.as_deref(), domain, sandbox_id);
        Ok(Envd {
            http: api.envd.with_base_url(&base)?,
            sandbox_id: sandbox_id.to_owned(),
            access_token,
            user: config.user.clone(),
            request_timeout: api.envd.timeout(),
            stream_idle: config.stream_idle_timeout,
            transfer_idle: config.transfer_idle_timeout,
        })
    }

    /// A request with routing and token headers.
    fn request(&self, method: Method, path: &str, operation: &str) -> Request {
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
    async fn unary<Req: Serialize, Resp: DeserializeOwned>(
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
    async fn unary_capped<Req: Serialize, Resp: DeserializeOwned>(
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
    fn secrets(&self) -> Vec<String> {
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
                Err(_) => Err(Error::new(
                    ErrorKind::Timeout,
                    format!("{what} within {}ms", limit.as_millis()),
                )
                .with_provider(PROVIDER)
                .with_operation(operation)
                .with_sandbox_id(&self.sandbox_id)),
            },
        }
    }

    /// Opens a server stream: one enveloped request, a stream of envelopes back.
    /// `deadline` becomes `Connect-Timeout-Ms` when given (never a hidden default). The request
    /// itself has no timeout: its opening is bounded by [`Envd::establish`] (which honours a
    /// command's own request timeout), and the open stream by `stream_idle` between chunks.
    async fn server_stream<Req: Serialize>(
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
                    e.with_provider(PROVIDER)
                        .with_operation(&operation_name)
                        .with_sandbox_id(&sandbox_id)
                })
            })
            .boxed();
        Ok(ConnectStream::new(body, operation, &self.sandbox_id).with_secrets(self.secrets()))
    }

    // ---- process.Process (PROTOCOL.md §5) ----

    /// `process.Process/Start`: a server stream for `request`, as `user` when given, with
    /// `deadline` as `Connect-Timeout-Ms` (which envd applies to the process's life, §5.3).
    pub async fn start(
        &self,
        request: &StartRequest,
        user: Option<&str>,
        deadline: Option<Duration>,
    ) -> Result<ConnectStream> {
        self.server_stream("process.Process/Start", "exec", request, user, deadline)
            .await
    }

    /// `process.Process/Connect`: the output of a running process from now on, then its end.
    pub async fn connect_process(&self, process: Selector) -> Result<ConnectStream> {
        self.server_stream(
            "process.Process/Connect",
            "attach",
            &SelectorRequest { process },
            None,
            None,
        )
        .await
    }

    /// `process.Process/List`: every running process.
    pub async fn list_processes(&self) -> Result<ListResponse> {
        self.unary_capped(
            "process.Process/List",
            "processes",
            &serde_json::json!({}),
            PROCESS_LIST_MAX_BODY,
        )
        .await
    }

    /// `process.Process/SendSignal` (`SIGNAL_SIGKILL` or `SIGNAL_SIGTERM`).
    pub async fn send_signal(&self, process: Selector, signal: &'static str) -> Result<()> {
        let _: serde_json::Value = self
            .unary(
                "process.Process/SendSignal",
                "kill_process",
                &SignalRequest { process, signal },
            )
            .await?;
        Ok(())
    }

    /// `process.Process/SendInput`: one chunk for the stdin or the pty of process `pid`.
    pub async fn send_input(&self, pid: u32, input: ProcessInput) -> Result<()> {
        let _: serde_json::Value = self
            .unary(
                "process.Process/SendInput",
                "stdin",
                &SendInputRequest {
                    process: Selector::Pid(pid),
                    input,
                },
            )
            .await?;
        Ok(())
    }

    /// `process.Process/CloseStdin` of process `pid`.
    pub async fn close_stdin(&self, pid: u32) -> Result<()> {
        let _: serde_json::Value = self
            .unary(
                "process.Process/CloseStdin",
                "stdin",
                &SelectorRequest {
                    process: Selector::Pid(pid),
                },
            )
            .await?;
        Ok(())
    }

    /// `process.Process/Update`: resizes the pty of process `pid`.
    pub async fn resize_pty(&self, pid: u32, size: PtySizeWire) -> Result<()> {
        let _: serde_json::Value = self
            .unary(
                "process.Process/Update",
                "resize",
                &UpdateRequest {
                    process: Selector::Pid(pid),
                    pty: Pty { size },
                },
            )
            .await?;
        Ok(())
    }

    // ---- filesystem.Filesystem (PROTOCOL.md §6) ----

    /// `filesystem.Filesystem/Stat` of `path`, on behalf of `operation`.
    pub async fn stat(&self, path: &str, operation: &str) -> Result<EntryResponse> {
        self.unary(
            "filesystem.Filesystem/Stat",
            operation,
            &PathRequest { path: path.into() },
        )
        .await
    }

    /// `filesystem.Filesystem/ListDir` of `path`, `depth` levels deep.
    pub async fn list_dir(&self, path: &str, depth: u32) -> Result<ListDirResponse> {
        self.unary_capped(
            "filesystem.Filesystem/ListDir",
            "list_files",
            &ListDirRequest {
                path: path.into(),
                depth,
            },
            LIST_DIR_MAX_BODY,
        )
        .await
    }

    /// `filesystem.Filesystem/MakeDir` of `path`.
    pub async fn make_dir(&self, path: &str) -> Result<EntryResponse> {
        self.unary(
            "filesystem.Filesystem/MakeDir",
            "mkdir",
            &PathRequest { path: path.into() },
        )
        .await
    }

    /// `filesystem.Filesystem/Remove` of `path` (Go's `os.RemoveAll`: `{}` for a missing path).
    pub async fn remove(&self, path: &str) -> Result<()> {
        let _: serde_json::Value = self
            .unary(
                "filesystem.Filesystem/Remove",
                "remove",
                &PathRequest { path: path.into() },
            )
            .await?;
        Ok(())
    }

    /// `filesystem.Filesystem/Move` from `source` to `destination`.
    pub async fn move_entry(&self, source: &str, destination: &str) -> Result<EntryResponse> {
        self.unary(
            "filesystem.Filesystem/Move",
            "rename",
            &MoveRequest {
                source: source.into(),
                destination: destination.into(),
            },
        )
        .await
    }

    /// `filesystem.Filesystem/WatchDir`: a server stream of the changes under `path`.
    pub async fn watch_dir(&self, path: &str, recursive: bool) -> Result<ConnectStream> {
        self.server_stream(
            "filesystem.Filesystem/WatchDir",
            "watch",
            &WatchRequest {
                path: path.into(),
                recursive,
            },
            None,
            None,
        )
        .await
    }

    // ---- /files (PROTOCOL.md §7) ----

    /// A `/files` request for `path`, as the configured user when there is one.
    fn files_request(&self, method: Method, path: &str, operation: &str) -> Request {
        let mut req = self
            .request(method, "/files", operation)
            .query("path", path);
        if let Some(user) = &self.user {
            req = req.query("username", user);
        }
        req
    }

    /// `POST /files` from a reader, streamed in constant memory through the transport's reader
    /// path (256 KiB reads): a raw `application/octet-stream` body when `raw` (envd >= 0.5.7),
    /// else one streamed multipart part. No total limit: the response head must come within the
    /// request timeout of the last byte sent, and the answer's body within `transfer_idle`.
    pub async fn upload(&self, path: &str, reader: UploadBody, raw: bool) -> Result<()> {
        let request = self
            .files_request(Method::Post, path, "upload")
            .idle_timeout(self.transfer_idle);
        let request = if raw {
            request.body_stream(reader, "application/octet-stream")
        } else {
            request.multipart(Multipart::new().stream(
                "file",
                path,
                "application/octet-stream",
                reader,
                None,
            ))
        };
        let _written: Vec<WrittenEntry> = request.max_body(UNARY_MAX_BODY).send_json().await?;
        Ok(())
    }

    /// `POST /files?path=…` as multipart (what both SDKs send by default): part `file`,
    /// filename = the full destination path.
    pub async fn write_file(&self, path: &str, data: bytes::Bytes) -> Result<()> {
        let form = Multipart::new().bytes("file", path, "application/octet-stream", data);
        let _written: Vec<WrittenEntry> = self
            .files_request(Method::Post, path, "write_file")
            .multipart(form)
            .max_body(UNARY_MAX_BODY)
            .send_json()
            .await?;
        Ok(())
    }

    /// `POST /files` without `path`: `form` holds one part per file, each named by its path.
    pub async fn write_files(&self, form: Multipart) -> Result<()> {
        let mut req = self.request(Method::Post, "/files", "write_file");
        if let Some(user) = &self.user {
            req = req.query("username", user);
        }
        let _written: Vec<WrittenEntry> = req
            .multipart(form)
            .max_body(UNARY_MAX_BODY)
            .send_json()
            .await?;
        Ok(())
    }

    /// `GET /files`, streamed as it is read: the response head must arrive within the request
    /// timeout, then each chunk within `transfer_idle` of the previous one; no total limit.
    pub async fn download(&self, path: &str) -> Result<Download> {
        let response = self
            .files_request(Method::Get, path, "download")
            .idle_timeout(self.transfer_idle)
            .send()
            .await?;
        Ok(Download::new(response.bytes_stream()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
