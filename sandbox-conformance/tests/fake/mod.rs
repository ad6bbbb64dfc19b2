//! A small fake HTTP provider, written the way a third-party author would write an adapter for
//! the kit: a JSON REST API (`FakeService`, served on loopback and backed by the `local`
//! provider) and its adapter (`FakeProvider`), which talks to it with reqwest.
//!
//! The adapter can be built with deliberate bugs, to show what the suite catches.

#![allow(dead_code)]

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sandbox_conformance::cassette::TOKEN;
use sandbox_conformance::{RecordTarget, SharedService, Suite};
use sandbox_sdk_core::idempotency::create_once;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{
    Capabilities, Command, CreateSpec, Download, Error, ErrorKind, FileInfo, FileKind, Level,
    ListFilter, ListOptions, Process, SandboxInfo, SandboxState, SandboxStream, Transfer,
    UploadBody,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The credential of the live fake service used for recording (scrubbed from cassettes).
pub const LIVE_TOKEN: &str = "fake-live-token-0123456789abcdef";

/// The fake adapter's cassettes.
pub fn cassettes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cassettes/fake")
}

/// Builds the adapter (with `bugs`) against a base URL, authenticating with the replay token.
pub fn factory(
    bugs: Bugs,
) -> impl Fn(&str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static {
    move |base| Ok(Arc::new(FakeProvider::new(base, TOKEN).with_bugs(bugs)) as Arc<dyn Provider>)
}

/// The one fake service every recording in this test binary talks to.
static SERVICE: SharedService = SharedService::new();

/// Records from the shared fake service into `out`.
pub fn record_target(out: &Path) -> RecordTarget {
    record_target_with(out, Bugs::default())
}

/// Records an adapter built with `bugs` from the shared fake service into `out`.
pub fn record_target_with(out: &Path, bugs: Bugs) -> RecordTarget {
    let base = SERVICE
        .url(|| serve(LIVE_TOKEN))
        .unwrap_or_else(|e| panic!("{e}"));
    RecordTarget::one_host(
        move |url| {
            Ok(Arc::new(FakeProvider::new(url, LIVE_TOKEN).with_bugs(bugs)) as Arc<dyn Provider>)
        },
        &base,
        out,
    )
    .expect("the fake adapter builds")
    .secret(LIVE_TOKEN)
    .source("the fake service of sandbox-conformance/tests/fake, on loopback")
}

/// The fake adapter's suite: replay, or recording when `SANDBOX_CONFORMANCE_RECORD` is set.
pub fn suite() -> Suite {
    if sandbox_conformance::recording() {
        return Suite::record(record_target(&cassettes()));
    }
    Suite::replay(factory(Bugs::default()), cassettes())
}

/// The name the fake provider goes by.
pub const NAME: &str = "fake";

/// Deliberate bugs the adapter can be built with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs {
    /// Re-sends a failed create (without any idempotency key) once.
    pub retry_create_blindly: bool,
    /// Sends every `info()` request twice.
    pub double_info: bool,
    /// Sends exec requests to `/run` instead of `/exec`.
    pub wrong_exec_path: bool,
    /// Creates without looking the idempotency key up (before sending, or after an ambiguous
    /// failure), leaving the retry layer to send the create again at once.
    pub no_create_lookup: bool,
    /// Sends no credentials at all.
    pub no_credentials: bool,
}

/// The adapter.
#[derive(Debug, Clone)]
pub struct FakeProvider {
    http: reqwest::Client,
    base: String,
    token: String,
    bugs: Bugs,
}

impl FakeProvider {
    /// An adapter for the service at `base` authenticating with `token`.
    pub fn new(base: &str, token: &str) -> FakeProvider {
        FakeProvider {
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(sandbox_conformance::REPLAY_REQUEST_TIMEOUT)
                .build()
                .unwrap_or_default(),
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            bugs: Bugs::default(),
        }
    }

    /// The same adapter with bugs.
    pub fn with_bugs(mut self, bugs: Bugs) -> FakeProvider {
        self.bugs = bugs;
        self
    }

    async fn call(
        &self,
        op: &str,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<ReqBody>,
    ) -> sandbox_sdk_core::Result<reqwest::Response> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if !self.bugs.no_credentials {
            req = req.bearer_auth(&self.token);
        }
        if !query.is_empty() {
            req = req.query(query);
        }
        req = match body {
            Some(ReqBody::Json(v)) => req.json(&v),
            Some(ReqBody::Bytes(b)) => req
                .header("content-type", "application/octet-stream")
                .body(b),
            None => req,
        };
        let resp = req.send().await.map_err(|e| {
            let kind = if e.is_timeout() {
                ErrorKind::Timeout
            } else {
                ErrorKind::Transport
            };
            let ambiguous = !e.is_connect();
            Error::new(kind, format!("request failed: {}", e.without_url()))
                .with_provider(NAME)
                .with_operation(op)
                .with_ambiguous(ambiguous)
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(map_error(op, resp).await)
    }

    async fn json(
        &self,
        op: &str,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<ReqBody>,
    ) -> sandbox_sdk_core::Result<Value> {
        let resp = self.call(op, method, path, query, body).await?;
        let bytes = resp.bytes().await.map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("reading the answer: {}", e.without_url()),
            )
            .with_provider(NAME)
            .with_operation(op)
        })?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|_| {
            Error::new(ErrorKind::Provider, "the answer is not JSON")
                .with_provider(NAME)
                .with_operation(op)
        })
    }
}

enum ReqBody {
    Json(Value),
    Bytes(reqwest::Body),
}

/// The adapter's one error-mapping function.
async fn map_error(op: &str, resp: reqwest::Response) -> Error {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let message = resp
        .json::<Value>()
        .await
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("HTTP {status}"));
    let kind = match status {
        401 | 403 => ErrorKind::Unauthorized,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        429 => ErrorKind::QuotaExceeded,
        400 | 422 => ErrorKind::Validation,
        _ => ErrorKind::Provider,
    };
    let mut e = Error::new(kind, message)
        .with_provider(NAME)
        .with_operation(op)
        .with_status(status)
        .with_ambiguous(matches!(status, 408 | 500 | 502 | 504));
    if let Some(d) = retry_after {
        e = e.with_retry_after(d);
    }
    e
}

fn unsupported(op: &str) -> Error {
    Error::not_supported(NAME, op)
}

/// What the fake provider can do.
pub fn capabilities() -> Capabilities {
    Capabilities {
        list: Level::Native,
        files_upload: Level::Native,
        ..Capabilities::NONE
    }
}

fn info_from(v: &Value) -> SandboxInfo {
    let state = match v["state"].as_str() {
        Some("running") => SandboxState::Running,
        Some("paused") => SandboxState::Paused,
        _ => SandboxState::Unknown,
    };
    let mut info = SandboxInfo::new(v["id"].as_str().unwrap_or_default(), NAME, state);
    info.raw_state = v["state"].as_str().map(str::to_owned);
    if let Some(m) = v["metadata"].as_object() {
        info.metadata = m
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect();
    }
    info
}

impl FakeProvider {
    /// Sends one create (twice with the `retry_create_blindly` bug) and returns the new id.
    async fn send_create(&self, spec: &CreateSpec) -> sandbox_sdk_core::Result<String> {
        let mut body = json!({ "metadata": spec.metadata });
        if let Some(t) = spec.timeout {
            body["timeout_secs"] = json!(t.as_secs());
        }
        if let Some(key) = &spec.idempotency_key {
            body["idempotency_key"] = json!(key);
        }
        let mut result = self
            .json(
                "create",
                reqwest::Method::POST,
                "/v1/sandboxes",
                &[],
                Some(ReqBody::Json(body.clone())),
            )
            .await;
        if self.bugs.retry_create_blindly && result.as_ref().is_err_and(|e| e.is_retryable()) {
            result = self
                .json(
                    "create",
                    reqwest::Method::POST,
                    "/v1/sandboxes",
                    &[],
                    Some(ReqBody::Json(body)),
                )
                .await;
        }
        Ok(result?["id"].as_str().unwrap_or_default().to_owned())
    }

    /// The sandbox made under an idempotency key, if the service lists one.
    async fn find_by_key(&self, key: &str) -> sandbox_sdk_core::Result<Option<String>> {
        let v = self
            .json(
                "create",
                reqwest::Method::GET,
                "/v1/sandboxes",
                &[("idempotency_key", key)],
                None,
            )
            .await?;
        Ok(v["sandboxes"][0]["id"].as_str().map(str::to_owned))
    }
}

#[async_trait]
impl Provider for FakeProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn create(&self, spec: &CreateSpec) -> sandbox_sdk_core::Result<Box<dyn Sandbox>> {
        let key = spec.idempotency_key.as_deref();
        if self.bugs.no_create_lookup {
            let id = self.send_create(spec).await?;
            return Ok(Box::new(FakeSandbox {
                provider: self.clone(),
                id,
            }));
        }
        let id = create_once(
            key,
            &sandbox_conformance::REPLAY_CREATE_LOOKUP,
            || self.send_create(spec),
            || self.find_by_key(key.unwrap_or_default()),
        )
        .await?;
        Ok(Box::new(FakeSandbox {
            provider: self.clone(),
            id,
        }))
    }

    async fn connect(&self, id: &str) -> sandbox_sdk_core::Result<Box<dyn Sandbox>> {
        let v = self
            .json(
                "connect",
                reqwest::Method::GET,
                &format!("/v1/sandboxes/{id}"),
                &[],
                None,
            )
            .await
            .map_err(|e| e.with_sandbox_id(id))?;
        Ok(Box::new(FakeSandbox {
            provider: self.clone(),
            id: v["id"].as_str().unwrap_or(id).to_owned(),
        }))
    }

    fn list(&self, filter: &ListFilter) -> SandboxStream<'_> {
        let filter = filter.clone();
        futures::stream::once(async move {
            let v = self
                .json("list", reqwest::Method::GET, "/v1/sandboxes", &[], None)
                .await?;
            let items: Vec<SandboxInfo> = v["sandboxes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(info_from)
                        .filter(|i| filter.matches(i))
                        .collect()
                })
                .unwrap_or_default();
            Ok::<_, Error>(futures::stream::iter(items.into_iter().map(Ok)))
        })
        .map(|r| match r {
            Ok(s) => s.boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten()
        .boxed()
    }

    async fn destroy(&self, id: &str) -> sandbox_sdk_core::Result<()> {
        self.json(
            "destroy",
            reqwest::Method::DELETE,
            &format!("/v1/sandboxes/{id}"),
            &[],
            None,
        )
        .await
        .map(drop)
        .map_err(|e| e.with_sandbox_id(id))
    }

    async fn find_by_idempotency_key(
        &self,
        key: &str,
    ) -> sandbox_sdk_core::Result<Option<SandboxInfo>> {
        let v = self
            .json(
                "find_by_idempotency_key",
                reqwest::Method::GET,
                "/v1/sandboxes",
                &[("idempotency_key", key)],
                None,
            )
            .await?;
        Ok(v["sandboxes"]
            .as_array()
            .and_then(|a| a.first())
            .map(info_from))
    }

    async fn usage(
        &self,
        sandbox: &SandboxInfo,
        _to: std::time::SystemTime,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::fleet::Usage> {
        Err(unsupported("usage").with_sandbox_id(&sandbox.id))
    }

    async fn prepare(
        &self,
        _spec: &sandbox_sdk_core::fleet::PrepareSpec,
    ) -> sandbox_sdk_core::Result<sandbox_sdk_core::fleet::Prepared> {
        Err(unsupported("prepare"))
    }
}

/// One sandbox of the fake provider.
#[derive(Debug)]
pub struct FakeSandbox {
    provider: FakeProvider,
    id: String,
}

impl FakeSandbox {
    fn path(&self, rest: &str) -> String {
        format!("/v1/sandboxes/{}{rest}", self.id)
    }
}

fn file_info(v: &Value) -> FileInfo {
    FileInfo {
        path: v["path"].as_str().unwrap_or_default().to_owned(),
        name: v["name"].as_str().unwrap_or_default().to_owned(),
        kind: match v["kind"].as_str() {
            Some("dir") => FileKind::Dir,
            Some("file") => FileKind::File,
            Some("symlink") => FileKind::Symlink,
            _ => FileKind::Other,
        },
        size: v["size"].as_u64().unwrap_or(0),
        mode: None,
        modified: None,
    }
}

struct NoControl;

#[async_trait]
impl sandbox_sdk_core::ProcessControl for NoControl {
    async fn kill(&self) -> sandbox_sdk_core::Result<()> {
        Err(unsupported("kill_process"))
    }
    async fn resize(&self, _size: sandbox_sdk_core::PtySize) -> sandbox_sdk_core::Result<()> {
        Err(unsupported("pty"))
    }
}

#[async_trait]
impl Sandbox for FakeSandbox {
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
        if self.provider.bugs.double_info {
            let _ = self
                .provider
                .json("info", reqwest::Method::GET, &self.path(""), &[], None)
                .await;
        }
        let v = self
            .provider
            .json("info", reqwest::Method::GET, &self.path(""), &[], None)
            .await?;
        Ok(info_from(&v))
    }

    async fn exec(&self, command: &Command) -> sandbox_sdk_core::Result<Process> {
        command.validate()?;
        if command.stdin {
            return Err(unsupported("stdin"));
        }
        if command.pty.is_some() {
            return Err(unsupported("pty"));
        }
        if command.background {
            return Err(unsupported("background"));
        }
        let mut body = json!({ "argv": command.argv });
        if let Some(cwd) = &command.cwd {
            body["cwd"] = json!(cwd);
        }
        if !command.env.is_empty() {
            body["env"] = json!(command.env);
        }
        if !command.timeout.is_zero() {
            body["timeout_secs"] = json!(command.timeout.as_secs().max(1));
        }
        let path = if self.provider.bugs.wrong_exec_path {
            "/run"
        } else {
            "/exec"
        };
        let v = self
            .provider
            .json(
                "exec",
                reqwest::Method::POST,
                &self.path(path),
                &[],
                Some(ReqBody::Json(body)),
            )
            .await?;
        let mut events = Vec::new();
        if let Some(s) = v["stdout"].as_str().filter(|s| !s.is_empty()) {
            events.push(Ok(sandbox_sdk_core::ProcessEvent::Stdout(Bytes::from(
                s.to_owned(),
            ))));
        }
        if let Some(s) = v["stderr"].as_str().filter(|s| !s.is_empty()) {
            events.push(Ok(sandbox_sdk_core::ProcessEvent::Stderr(Bytes::from(
                s.to_owned(),
            ))));
        }
        let status = match (v["exit_code"].as_i64(), v["signal"].as_i64()) {
            (Some(code), _) => sandbox_sdk_core::ExitStatus::code(code as i32),
            (None, Some(sig)) => sandbox_sdk_core::ExitStatus::signal(sig as i32),
            (None, None) => sandbox_sdk_core::ExitStatus {
                code: None,
                signal: None,
                emulated: false,
            },
        };
        events.push(Ok(sandbox_sdk_core::ProcessEvent::Exit(status)));
        Ok(Process::new(
            v["pid"].as_str().unwrap_or("0"),
            futures::stream::iter(events).boxed(),
            None,
            Arc::new(NoControl),
        )
        .with_emulated_streaming())
    }

    // processes, attach, kill_process, watch, stop, pause, resume, set_timeout, preview_link,
    // ssh_access, fork, snapshot and metrics: the trait's NotSupported defaults (the capability
    // map declares them unsupported, and the suite's probes prove they send nothing).

    async fn upload(&self, path: &str, body: UploadBody) -> sandbox_sdk_core::Result<Transfer> {
        let stream = tokio_util::io::ReaderStream::new(body);
        let v = self
            .provider
            .json(
                "upload",
                reqwest::Method::PUT,
                &self.path("/files"),
                &[("path", path)],
                Some(ReqBody::Bytes(reqwest::Body::wrap_stream(stream))),
            )
            .await?;
        Ok(Transfer {
            bytes: v["bytes"].as_u64().unwrap_or(0),
            emulated: false,
        })
    }

    async fn write_file(&self, path: &str, data: Bytes) -> sandbox_sdk_core::Result<Transfer> {
        let v = self
            .provider
            .json(
                "write_file",
                reqwest::Method::PUT,
                &self.path("/files"),
                &[("path", path)],
                Some(ReqBody::Bytes(reqwest::Body::from(data))),
            )
            .await?;
        Ok(Transfer {
            bytes: v["bytes"].as_u64().unwrap_or(0),
            emulated: false,
        })
    }

    async fn download(&self, path: &str) -> sandbox_sdk_core::Result<Download> {
        let resp = self
            .provider
            .call(
                "download",
                reqwest::Method::GET,
                &self.path("/files"),
                &[("path", path)],
                None,
            )
            .await?;
        let stream = resp.bytes_stream().map(|r| {
            r.map_err(|e| {
                Error::new(
                    ErrorKind::Transport,
                    format!("download interrupted: {}", e.without_url()),
                )
                .with_provider(NAME)
                .with_operation("download")
            })
        });
        Ok(Download::new(stream.boxed()))
    }

    async fn list_files(
        &self,
        path: &str,
        _options: ListOptions,
    ) -> sandbox_sdk_core::Result<Vec<FileInfo>> {
        let v = self
            .provider
            .json(
                "list_files",
                reqwest::Method::GET,
                &self.path("/dir"),
                &[("path", path)],
                None,
            )
            .await?;
        Ok(v["entries"]
            .as_array()
            .map(|a| a.iter().map(file_info).collect())
            .unwrap_or_default())
    }

    async fn stat(&self, path: &str) -> sandbox_sdk_core::Result<FileInfo> {
        let v = self
            .provider
            .json(
                "stat",
                reqwest::Method::GET,
                &self.path("/stat"),
                &[("path", path)],
                None,
            )
            .await?;
        Ok(file_info(&v))
    }

    async fn mkdir(&self, path: &str) -> sandbox_sdk_core::Result<()> {
        self.provider
            .json(
                "mkdir",
                reqwest::Method::POST,
                &self.path("/dir"),
                &[("path", path)],
                None,
            )
            .await
            .map(drop)
    }

    async fn remove(&self, path: &str) -> sandbox_sdk_core::Result<()> {
        self.provider
            .json(
                "remove",
                reqwest::Method::DELETE,
                &self.path("/files"),
                &[("path", path)],
                None,
            )
            .await
            .map(drop)
    }

    async fn rename(&self, from: &str, to: &str) -> sandbox_sdk_core::Result<()> {
        self.provider
            .json(
                "rename",
                reqwest::Method::POST,
                &self.path("/rename"),
                &[],
                Some(ReqBody::Json(json!({ "from": from, "to": to }))),
            )
            .await
            .map(drop)
    }

    async fn destroy(&self) -> sandbox_sdk_core::Result<()> {
        self.provider
            .json(
                "destroy",
                reqwest::Method::DELETE,
                &self.path(""),
                &[],
                None,
            )
            .await
            .map(drop)
    }
}

// ---------------------------------------------------------------------------------------------
// The service: the fake provider's API on loopback, backed by the `local` provider.
// ---------------------------------------------------------------------------------------------

/// The fake service's state: the sandboxes (the `local` provider's) and the idempotency key
/// each was created under.
#[derive(Default)]
struct Service {
    local: LocalProvider,
    keys: std::sync::Mutex<BTreeMap<String, String>>,
}

/// Serves the fake service on a loopback port (in tasks of the current runtime) and returns its
/// base URL. Requests must carry `Authorization: Bearer {token}`.
pub async fn serve(token: &'static str) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let state = Arc::new(Service::default());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(req, &state, token).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(url)
}

type Resp = hyper::Response<Full<Bytes>>;

fn reply(status: u16, body: Value) -> Resp {
    let mut r = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn error_reply(e: &Error) -> Resp {
    let status = match e.kind() {
        ErrorKind::NotFound => 404,
        ErrorKind::Validation => 400,
        ErrorKind::Conflict => 409,
        ErrorKind::NotSupported => 501,
        ErrorKind::NotRunning => 409,
        _ => 500,
    };
    reply(status, json!({ "message": e.message() }))
}

fn sandbox_json(info: &SandboxInfo) -> Value {
    json!({ "id": info.id, "state": info.state.as_str(), "metadata": info.metadata })
}

fn file_json(f: &FileInfo) -> Value {
    let kind = match f.kind {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        FileKind::Symlink => "symlink",
        FileKind::Other => "other",
    };
    json!({ "path": f.path, "name": f.name, "kind": kind, "size": f.size })
}

async fn handle(req: hyper::Request<hyper::body::Incoming>, state: &Service, token: &str) -> Resp {
    let local = &state.local;
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {token}"));
    if !authorized {
        return reply(401, json!({ "message": "missing or wrong API token" }));
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query: BTreeMap<String, String> = req.uri().query().map(url_pairs).unwrap_or_default();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(400, json!({ "message": "unreadable body" })),
    };
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let json_body = || serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    match (method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "sandboxes"]) => {
            let v = json_body();
            let mut spec = CreateSpec::new();
            if let Some(m) = v["metadata"].as_object() {
                for (k, val) in m {
                    spec = spec.metadata(k.clone(), val.as_str().unwrap_or_default());
                }
            }
            match local.create(&spec).await {
                Ok(sb) => match sb.info().await {
                    Ok(info) => {
                        if let Some(key) = v["idempotency_key"].as_str() {
                            lock(&state.keys).insert(key.to_owned(), info.id.clone());
                        }
                        reply(201, sandbox_json(&info))
                    }
                    Err(e) => error_reply(&e),
                },
                Err(e) => error_reply(&e),
            }
        }
        ("GET", ["v1", "sandboxes"]) => {
            let made_under = query
                .get("idempotency_key")
                .map(|key| lock(&state.keys).get(key).cloned());
            match local
                .list(&ListFilter::new())
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(all) => {
                    let listed = all.iter().filter(|info| match &made_under {
                        Some(id) => id.as_deref() == Some(info.id.as_str()),
                        None => true,
                    });
                    reply(
                        200,
                        json!({ "sandboxes": listed.map(sandbox_json).collect::<Vec<_>>() }),
                    )
                }
                Err(e) => error_reply(&e),
            }
        }
        (m, ["v1", "sandboxes", id, rest @ ..]) => {
            let sb = match local.connect(id).await {
                Ok(sb) => sb,
                Err(e) => return error_reply(&e),
            };
            let path = query.get("path").cloned().unwrap_or_default();
            let result: Result<Resp, Error> = async {
                Ok(match (m, rest) {
                    ("GET", []) => reply(200, sandbox_json(&sb.info().await?)),
                    ("DELETE", []) => {
                        sb.destroy().await?;
                        reply(200, json!({}))
                    }
                    ("POST", ["exec"]) => {
                        let v = json_body();
                        let argv: Vec<String> = v["argv"].as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default();
                        let mut cmd = Command { argv, ..Command::default() };
                        if let Some(cwd) = v["cwd"].as_str() {
                            cmd = cmd.cwd(cwd);
                        }
                        if let Some(env) = v["env"].as_object() {
                            for (k, val) in env {
                                cmd = cmd.env(k.clone(), val.as_str().unwrap_or_default());
                            }
                        }
                        if let Some(t) = v["timeout_secs"].as_u64() {
                            cmd = cmd.timeout(Duration::from_secs(t));
                        }
                        match sb.run(&cmd).await {
                            Ok(out) => reply(200, json!({
                                "stdout": out.stdout_lossy(),
                                "stderr": out.stderr_lossy(),
                                "exit_code": out.status.code,
                                "signal": out.status.signal,
                            })),
                            Err(e) if e.kind() == ErrorKind::Timeout => reply(200, json!({ "stdout": "", "stderr": "", "exit_code": null, "signal": 9 })),
                            Err(e) => return Err(e),
                        }
                    }
                    ("PUT", ["files"]) => {
                        let t = sb.write_file(&path, body.clone()).await?;
                        reply(200, json!({ "bytes": t.bytes }))
                    }
                    ("GET", ["files"]) => {
                        let data = sb.read_file(&path).await?;
                        let mut r = hyper::Response::new(Full::new(data));
                        r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/octet-stream"));
                        r
                    }
                    ("DELETE", ["files"]) => {
                        sb.remove(&path).await?;
                        reply(200, json!({}))
                    }
                    ("GET", ["stat"]) => reply(200, file_json(&sb.stat(&path).await?)),
                    ("GET", ["dir"]) => {
                        let entries = sb.list_files(&path, ListOptions::default()).await?;
                        reply(200, json!({ "entries": entries.iter().map(file_json).collect::<Vec<_>>() }))
                    }
                    ("POST", ["dir"]) => {
                        sb.mkdir(&path).await?;
                        reply(200, json!({}))
                    }
                    ("POST", ["rename"]) => {
                        let v = json_body();
                        sb.rename(v["from"].as_str().unwrap_or_default(), v["to"].as_str().unwrap_or_default()).await?;
                        reply(200, json!({}))
                    }
                    _ => reply(404, json!({ "message": format!("no route {m} {}", rest.join("/")) })),
                })
            }
            .await;
            result.unwrap_or_else(|e| error_reply(&e))
        }
        _ => reply(
            404,
            json!({ "message": format!("no route {method} {path}") }),
        ),
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn url_pairs(query: &str) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}
