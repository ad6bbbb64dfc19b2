//! `acme-sandbox`: a `sandbox-sdk-core` adapter for the (fictional) Acme sandbox service, written
//! as a provider author outside the SDK's repository would write one, against the public API
//! only. Its `tests/` hold the Acme service itself (a loopback HTTP server backed by the SDK's
//! `local` provider) and the conformance suite: recorded from that service, replayed, and
//! tampered with.
//!
//! The Acme API (JSON unless said otherwise; every request carries `X-Api-Key`):
//!
//! | request | answer |
//! | --- | --- |
//! | `POST /api/v2/boxes` `{labels, ttl_seconds, client_token?}` | `201` a box `{id, status, labels}` |
//! | `GET /api/v2/boxes?client_token=&label=k:v&status=` | `{boxes: [box]}` |
//! | `GET`, `DELETE`, `PATCH {ttl_seconds}` `/api/v2/boxes/{id}` | a box, `204`, a box |
//! | `POST /api/v2/boxes/{id}/commands` `{argv, cwd?, env?, timeout_ms?}` | NDJSON, streamed: `{pid}`, then `{stdout}`/`{stderr}` lines, then `{exit: {code, signal}}` or `{error}` |
//! | `PUT`, `GET`, `DELETE /api/v2/boxes/{id}/files/{path}` | `{bytes}`, the raw bytes, `204` |
//! | `GET /api/v2/boxes/{id}/meta/{path}` | `{path, name, kind, size}` |
//! | `GET`, `PUT /api/v2/boxes/{id}/dirs/{path}` | `{entries: [meta]}`, `204` |
//! | `POST /api/v2/boxes/{id}/moves` `{from, to}` | `204` |
//!
//! Errors are `{error: {code, message}}` with the HTTP status saying what went wrong.

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::idempotency::{CreateLookup, create_once};
use sandbox_sdk_core::{
    Capabilities, Command, CreateSpec, Download, Error, ErrorKind, ExitStatus, FileInfo, FileKind,
    Level, ListFilter, ListOptions, Process, ProcessControl, ProcessEvent, Provider, PtySize,
    Sandbox, SandboxInfo, SandboxState, SandboxStream, Transfer, UploadBody,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The name the provider goes by.
pub const NAME: &str = "acme";

/// The header that carries the API key.
pub const API_KEY_HEADER: &str = "x-api-key";

/// What the Acme service can do.
pub fn capabilities() -> Capabilities {
    Capabilities {
        list: Level::Native,
        files_upload: Level::Native,
        streaming: Level::Native,
        set_timeout: Level::Native,
        ..Capabilities::NONE
    }
}

/// Builds an [`AcmeProvider`].
#[derive(Debug, Clone)]
pub struct AcmeBuilder {
    base_url: Option<String>,
    api_key: Option<String>,
    timeout: Duration,
    create_lookup: CreateLookup,
}

/// The Acme adapter.
#[derive(Debug, Clone)]
pub struct AcmeProvider {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
    timeout: Duration,
    create_lookup: CreateLookup,
}

impl AcmeProvider {
    /// A builder with a 30 s request timeout and a 30 s create look-up window.
    pub fn builder() -> AcmeBuilder {
        AcmeBuilder {
            base_url: None,
            api_key: None,
            timeout: Duration::from_secs(30),
            create_lookup: CreateLookup::new(Duration::from_secs(30)),
        }
    }
}

impl AcmeBuilder {
    /// The service's base URL (`https://api.acme.example`).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into().trim_end_matches('/').to_owned());
        self
    }

    /// The API key, sent as `X-Api-Key` on every request. A service run without authentication
    /// takes none.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// How long a request (other than a command's output stream) may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long and how often to look for the box an ambiguous create may have made.
    pub fn create_lookup(mut self, lookup: CreateLookup) -> Self {
        self.create_lookup = lookup;
        self
    }

    /// The adapter; fails without a base URL.
    pub fn build(self) -> sandbox_sdk_core::Result<AcmeProvider> {
        let base = self.base_url.ok_or_else(|| {
            Error::validation("acme: no base URL (AcmeBuilder::base_url)").with_provider(NAME)
        })?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(self.timeout)
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Transport,
                    format!("acme: cannot build the HTTP client: {e}"),
                )
                .with_provider(NAME)
            })?;
        Ok(AcmeProvider {
            http,
            base,
            api_key: self.api_key,
            timeout: self.timeout,
            create_lookup: self.create_lookup,
        })
    }
}

/// A request body.
enum Body {
    Json(Value),
    Bytes(reqwest::Body),
}

impl AcmeProvider {
    /// Sends one request; an answer that is not a success is mapped to an error.
    async fn send(
        &self,
        op: &str,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Body>,
        timeout: Option<Duration>,
    ) -> sandbox_sdk_core::Result<reqwest::Response> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(key) = &self.api_key {
            request = request.header(API_KEY_HEADER, key);
        }
        if !query.is_empty() {
            request = request.query(query);
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        request = match body {
            Some(Body::Json(v)) => request.json(&v),
            Some(Body::Bytes(b)) => request
                .header("content-type", "application/octet-stream")
                .body(b),
            None => request,
        };
        let response = request.send().await.map_err(|e| transport(op, &e))?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(answer_error(op, response).await)
        }
    }

    /// Sends one request and reads its JSON answer (`null` for an empty one).
    async fn json(
        &self,
        op: &str,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Body>,
    ) -> sandbox_sdk_core::Result<Value> {
        let response = self.send(op, method, path, query, body, None).await?;
        let bytes = response.bytes().await.map_err(|e| transport(op, &e))?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(ErrorKind::Provider, format!("the answer is not JSON: {e}"))
                .with_provider(NAME)
                .with_operation(op)
        })
    }

    fn sandbox(&self, id: &str) -> AcmeSandbox {
        AcmeSandbox {
            provider: self.clone(),
            id: id.to_owned(),
        }
    }

    /// Sends the create and returns the new box's id.
    async fn send_create(&self, spec: &CreateSpec) -> sandbox_sdk_core::Result<String> {
        let mut body = json!({ "labels": spec.metadata });
        if let Some(ttl) = spec.timeout {
            body["ttl_seconds"] = json!(ttl.as_secs());
        }
        if let Some(key) = &spec.idempotency_key {
            body["client_token"] = json!(key);
        }
        let made = self
            .json(
                "create",
                reqwest::Method::POST,
                "/api/v2/boxes",
                &[],
                Some(Body::Json(body)),
            )
            .await?;
        id_of(&made, "create")
    }

    /// The box made under `client_token`, if any.
    async fn find_by_token(&self, client_token: &str) -> sandbox_sdk_core::Result<Option<String>> {
        let found = self
            .json(
                "create",
                reqwest::Method::GET,
                "/api/v2/boxes",
                &[("client_token", client_token)],
                None,
            )
            .await?;
        Ok(found["boxes"][0]["id"].as_str().map(str::to_owned))
    }
}

fn transport(op: &str, e: &reqwest::Error) -> Error {
    let kind = if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Transport
    };
    // A request that may have reached the service leaves its outcome unknown.
    Error::new(kind, format!("acme request failed: {}", error_chain(e)))
        .with_provider(NAME)
        .with_operation(op)
        .with_ambiguous(!e.is_connect())
}

/// The error and its causes, without the URL.
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The one mapping from an Acme error answer to an [`Error`].
async fn answer_error(op: &str, response: reqwest::Response) -> Error {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("HTTP {status}"));
    let kind = match status {
        401 | 403 => ErrorKind::Unauthorized,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        429 => ErrorKind::QuotaExceeded,
        400 | 422 => ErrorKind::Validation,
        _ => ErrorKind::Provider,
    };
    let mut error = Error::new(kind, message)
        .with_provider(NAME)
        .with_operation(op)
        .with_status(status)
        .with_ambiguous(matches!(status, 408 | 500 | 502 | 504));
    if let Some(after) = retry_after {
        error = error.with_retry_after(after);
    }
    error
}

fn id_of(made: &Value, op: &str) -> sandbox_sdk_core::Result<String> {
    made["id"].as_str().map(str::to_owned).ok_or_else(|| {
        Error::new(ErrorKind::Provider, "the answer names no box id")
            .with_provider(NAME)
            .with_operation(op)
    })
}

fn info_of(v: &Value) -> SandboxInfo {
    let state = match v["status"].as_str() {
        Some("running") => SandboxState::Running,
        Some("starting") => SandboxState::Creating,
        Some("deleted") => SandboxState::Destroyed,
        _ => SandboxState::Unknown,
    };
    let mut info = SandboxInfo::new(v["id"].as_str().unwrap_or_default(), NAME, state);
    info.raw_state = v["status"].as_str().map(str::to_owned);
    if let Some(labels) = v["labels"].as_object() {
        info.metadata = labels
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect();
    }
    info
}

fn file_of(v: &Value) -> FileInfo {
    FileInfo {
        path: v["path"].as_str().unwrap_or_default().to_owned(),
        name: v["name"].as_str().unwrap_or_default().to_owned(),
        kind: match v["kind"].as_str() {
            Some("file") => FileKind::File,
            Some("dir") => FileKind::Dir,
            Some("symlink") => FileKind::Symlink,
            _ => FileKind::Other,
        },
        size: v["size"].as_u64().unwrap_or(0),
        mode: None,
        modified: None,
    }
}

/// A sandbox path as URL path segments: each segment percent-encoded, the slashes kept.
fn path_segments(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            segment
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[async_trait]
impl Provider for AcmeProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn create(&self, spec: &CreateSpec) -> sandbox_sdk_core::Result<Box<dyn Sandbox>> {
        let token = spec.idempotency_key.as_deref();
        let id = create_once(
            token,
            &self.create_lookup,
            || self.send_create(spec),
            || self.find_by_token(token.unwrap_or_default()),
        )
        .await?;
        Ok(Box::new(self.sandbox(&id)))
    }

    async fn connect(&self, id: &str) -> sandbox_sdk_core::Result<Box<dyn Sandbox>> {
        let found = self
            .json(
                "connect",
                reqwest::Method::GET,
                &format!("/api/v2/boxes/{}", path_segments(id)),
                &[],
                None,
            )
            .await
            .map_err(|e| e.with_sandbox_id(id))?;
        Ok(Box::new(self.sandbox(&id_of(&found, "connect")?)))
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let filter = filter.clone();
        futures::stream::once(async move {
            let labels: Vec<String> = filter
                .metadata
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            let mut query: Vec<(&str, &str)> =
                labels.iter().map(|l| ("label", l.as_str())).collect();
            if filter.states == [SandboxState::Running] {
                query.push(("status", "running"));
            }
            let listed = self
                .json("list", reqwest::Method::GET, "/api/v2/boxes", &query, None)
                .await?;
            // The service filters; the filter is applied again for any state it cannot.
            let boxes: Vec<SandboxInfo> = listed["boxes"]
                .as_array()
                .map(|all| {
                    all.iter()
                        .map(info_of)
                        .filter(|i| filter.matches(i))
                        .collect()
                })
                .unwrap_or_default();
            Ok::<_, Error>(futures::stream::iter(boxes.into_iter().map(Ok)))
        })
        .map(|page| match page {
            Ok(items) => items.boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten()
        .boxed()
    }
}

/// One Acme box.
#[derive(Debug)]
pub struct AcmeSandbox {
    provider: AcmeProvider,
    id: String,
}

impl AcmeSandbox {
    fn path(&self, rest: &str) -> String {
        format!("/api/v2/boxes/{}{rest}", path_segments(&self.id))
    }

    async fn call(
        &self,
        op: &str,
        method: reqwest::Method,
        rest: &str,
        body: Option<Body>,
    ) -> sandbox_sdk_core::Result<Value> {
        self.provider
            .json(op, method, &self.path(rest), &[], body)
            .await
            .map_err(|e| e.with_sandbox_id(&self.id))
    }
}

/// Acme commands can be neither killed nor resized once started.
struct NoControl;

#[async_trait]
impl ProcessControl for NoControl {
    async fn kill(&self) -> sandbox_sdk_core::Result<()> {
        Err(Error::not_supported(NAME, "kill_process"))
    }
    async fn resize(&self, _size: PtySize) -> sandbox_sdk_core::Result<()> {
        Err(Error::not_supported(NAME, "pty"))
    }
}

/// One line of a command's NDJSON output as an event (`None` for a line that carries none).
fn event_of(line: &Value) -> Option<sandbox_sdk_core::Result<ProcessEvent>> {
    if let Some(text) = line["stdout"].as_str() {
        return Some(Ok(ProcessEvent::Stdout(Bytes::from(text.to_owned()))));
    }
    if let Some(text) = line["stderr"].as_str() {
        return Some(Ok(ProcessEvent::Stderr(Bytes::from(text.to_owned()))));
    }
    if let Some(exit) = line.get("exit") {
        let status = match (exit["code"].as_i64(), exit["signal"].as_i64()) {
            (Some(code), _) => ExitStatus::code(code as i32),
            (None, Some(signal)) => ExitStatus::signal(signal as i32),
            (None, None) => ExitStatus::signal(9),
        };
        return Some(Ok(ProcessEvent::Exit(status)));
    }
    if let Some(error) = line.get("error") {
        let kind = match error["kind"].as_str() {
            Some("timeout") => ErrorKind::Timeout,
            _ => ErrorKind::Provider,
        };
        let message = error["message"].as_str().unwrap_or("the command failed");
        return Some(Err(Error::new(kind, message)
            .with_provider(NAME)
            .with_operation("exec")));
    }
    None
}

/// Splits a byte stream into NDJSON lines, parsed as they arrive.
fn ndjson(
    bytes: impl futures::Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
) -> futures::stream::BoxStream<'static, sandbox_sdk_core::Result<Value>> {
    let state = (bytes.boxed(), Vec::<u8>::new(), false);
    futures::stream::unfold(state, |(mut bytes, mut buffer, mut done)| async move {
        loop {
            if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let parsed = serde_json::from_slice::<Value>(&line).map_err(|e| {
                    Error::new(ErrorKind::Provider, format!("a bad output line: {e}"))
                        .with_provider(NAME)
                        .with_operation("exec")
                });
                return Some((parsed, (bytes, buffer, done)));
            }
            if done {
                return None;
            }
            match bytes.next().await {
                Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    done = true;
                    buffer.clear();
                    return Some((Err(transport("exec", &e)), (bytes, buffer, done)));
                }
                None => {
                    done = true;
                    if !buffer.is_empty() {
                        buffer.push(b'\n');
                    }
                }
            }
        }
    })
    .boxed()
}

#[async_trait]
impl Sandbox for AcmeSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn provider(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn info(&self) -> sandbox_sdk_core::Result<SandboxInfo> {
        Ok(info_of(
            &self.call("info", reqwest::Method::GET, "", None).await?,
        ))
    }

    async fn exec(&self, command: &Command) -> sandbox_sdk_core::Result<Process> {
        command.validate()?;
        for (asked, what) in [
            (command.stdin, "stdin"),
            (command.pty.is_some(), "pty"),
            (command.background, "background"),
        ] {
            if asked {
                return Err(Error::not_supported(NAME, what));
            }
        }
        let mut body = json!({ "argv": command.argv });
        if let Some(cwd) = &command.cwd {
            body["cwd"] = json!(cwd);
        }
        if !command.env.is_empty() {
            body["env"] = json!(command.env);
        }
        if !command.timeout.is_zero() {
            body["timeout_ms"] = json!(command.timeout.as_millis() as u64);
        }
        // The output streams for as long as the command runs: bound it by the command's own
        // timeout (plus the request timeout), not by the request timeout alone.
        let window = if command.timeout.is_zero() {
            Duration::from_secs(24 * 60 * 60)
        } else {
            command.timeout + self.provider.timeout
        };
        let response = self
            .provider
            .send(
                "exec",
                reqwest::Method::POST,
                &self.path("/commands"),
                &[],
                Some(Body::Json(body)),
                Some(window),
            )
            .await
            .map_err(|e| e.with_sandbox_id(&self.id))?;
        let mut lines = ndjson(response.bytes_stream());
        let first = lines.next().await.unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Transport,
                "the command's output ended before its pid",
            )
            .with_provider(NAME)
            .with_operation("exec"))
        })?;
        let pid = match &first["pid"] {
            Value::String(p) => p.clone(),
            Value::Number(n) => n.to_string(),
            _ => {
                return Err(Error::new(
                    ErrorKind::Provider,
                    "the command's first output line names no pid",
                )
                .with_provider(NAME)
                .with_operation("exec"));
            }
        };
        let events = lines
            .filter_map(|line| async move {
                match line {
                    Ok(v) => event_of(&v),
                    Err(e) => Some(Err(e)),
                }
            })
            .boxed();
        Ok(Process::new(pid, events, None, Arc::new(NoControl)))
    }

    async fn upload(&self, path: &str, body: UploadBody) -> sandbox_sdk_core::Result<Transfer> {
        let stream = tokio_util::io::ReaderStream::new(body);
        let written = self
            .call(
                "upload",
                reqwest::Method::PUT,
                &format!("/files/{}", path_segments(path)),
                Some(Body::Bytes(reqwest::Body::wrap_stream(stream))),
            )
            .await?;
        Ok(Transfer {
            bytes: written["bytes"].as_u64().unwrap_or(0),
            emulated: false,
        })
    }

    async fn write_file(&self, path: &str, data: Bytes) -> sandbox_sdk_core::Result<Transfer> {
        let written = self
            .call(
                "write_file",
                reqwest::Method::PUT,
                &format!("/files/{}", path_segments(path)),
                Some(Body::Bytes(reqwest::Body::from(data))),
            )
            .await?;
        Ok(Transfer {
            bytes: written["bytes"].as_u64().unwrap_or(0),
            emulated: false,
        })
    }

    async fn download(&self, path: &str) -> sandbox_sdk_core::Result<Download> {
        let response = self
            .provider
            .send(
                "download",
                reqwest::Method::GET,
                &self.path(&format!("/files/{}", path_segments(path))),
                &[],
                None,
                None,
            )
            .await
            .map_err(|e| e.with_sandbox_id(&self.id))?;
        let chunks = response
            .bytes_stream()
            .map(|chunk| chunk.map_err(|e| transport("download", &e)));
        Ok(Download::new(chunks.boxed()))
    }

    async fn list_files(
        &self,
        path: &str,
        _options: ListOptions,
    ) -> sandbox_sdk_core::Result<Vec<FileInfo>> {
        let listed = self
            .call(
                "list_files",
                reqwest::Method::GET,
                &format!("/dirs/{}", path_segments(path)),
                None,
            )
            .await?;
        Ok(listed["entries"]
            .as_array()
            .map(|all| all.iter().map(file_of).collect())
            .unwrap_or_default())
    }

    async fn stat(&self, path: &str) -> sandbox_sdk_core::Result<FileInfo> {
        Ok(file_of(
            &self
                .call(
                    "stat",
                    reqwest::Method::GET,
                    &format!("/meta/{}", path_segments(path)),
                    None,
                )
                .await?,
        ))
    }

    async fn mkdir(&self, path: &str) -> sandbox_sdk_core::Result<()> {
        self.call(
            "mkdir",
            reqwest::Method::PUT,
            &format!("/dirs/{}", path_segments(path)),
            None,
        )
        .await
        .map(drop)
    }

    async fn remove(&self, path: &str) -> sandbox_sdk_core::Result<()> {
        self.call(
            "remove",
            reqwest::Method::DELETE,
            &format!("/files/{}", path_segments(path)),
            None,
        )
        .await
        .map(drop)
    }

    async fn rename(&self, from: &str, to: &str) -> sandbox_sdk_core::Result<()> {
        self.call(
            "rename",
            reqwest::Method::POST,
            "/moves",
            Some(Body::Json(json!({ "from": from, "to": to }))),
        )
        .await
        .map(drop)
    }

    async fn destroy(&self) -> sandbox_sdk_core::Result<()> {
        self.call("destroy", reqwest::Method::DELETE, "", None)
            .await
            .map(drop)
    }

    async fn set_timeout(&self, timeout: Duration) -> sandbox_sdk_core::Result<()> {
        self.call(
            "set_timeout",
            reqwest::Method::PATCH,
            "",
            Some(Body::Json(json!({ "ttl_seconds": timeout.as_secs() }))),
        )
        .await
        .map(drop)
    }

    // Background processes, kill, watch, stop/pause/resume, preview links, SSH, fork, snapshots
    // and metrics: Acme has none, the capability map says so, and the trait's defaults answer
    // NotSupported without sending anything.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_keep_their_slashes_and_encode_the_rest() {
        assert_eq!(
            path_segments("conformance/bin/data.bin"),
            "conformance/bin/data.bin"
        );
        assert_eq!(path_segments("a b/c?d"), "a%20b/c%3Fd");
    }

    #[test]
    fn output_lines_become_events() {
        let exit = event_of(&json!({"exit": {"code": 3}}))
            .expect("an event")
            .expect("ok");
        assert!(matches!(exit, ProcessEvent::Exit(s) if s.code == Some(3)));
        let error = event_of(&json!({"error": {"kind": "timeout", "message": "ran 1s"}}))
            .expect("an event")
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Timeout);
        assert!(event_of(&json!({"pid": 4})).is_none());
    }

    #[test]
    fn building_without_a_base_url_says_so() {
        let error = AcmeProvider::builder().build().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Validation);
        assert!(error.to_string().contains("no base URL"), "{error}");
    }
}
