//! The Acme sandbox service: the HTTP API `acme_sandbox` talks to (see its crate docs), served
//! on loopback and backed by the SDK's embedded `local` provider, so the conformance suite can
//! record from a live service.

#![allow(dead_code)]

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::{
    Command, CreateSpec, Error, ErrorKind, FileInfo, FileKind, ListFilter, ListOptions,
    ProcessEvent, Provider, SandboxExt, SandboxInfo, SandboxState,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The API key the live service accepts (scrubbed from every recorded cassette).
pub const LIVE_KEY: &str = "acme-live-key-7b3e91c04d5a";

type Reply = hyper::Response<UnsyncBoxBody<Bytes, Infallible>>;

#[derive(Default)]
struct State {
    local: LocalProvider,
    /// The box made under each client token.
    tokens: Mutex<BTreeMap<String, String>>,
}

/// Serves the Acme API on a free loopback port (in tasks of the current runtime) and returns
/// its base URL. Every request must carry `X-Api-Key: {key}`.
pub async fn serve(key: &'static str) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let state = Arc::new(State::default());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(request, &state, key).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(url)
}

fn json_reply(status: u16, body: Value) -> Reply {
    let mut reply = hyper::Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *reply.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    reply.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    reply
}

fn empty(status: u16) -> Reply {
    let mut reply = hyper::Response::new(Full::new(Bytes::new()).boxed_unsync());
    *reply.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    reply
}

fn failure(status: u16, code: &str, message: &str) -> Reply {
    json_reply(
        status,
        json!({ "error": { "code": code, "message": message } }),
    )
}

fn error_reply(e: &Error) -> Reply {
    let (status, code) = match e.kind() {
        ErrorKind::NotFound => (404, "not_found"),
        ErrorKind::Validation => (400, "invalid"),
        ErrorKind::Conflict | ErrorKind::NotRunning => (409, "conflict"),
        ErrorKind::NotSupported => (501, "not_implemented"),
        _ => (500, "internal"),
    };
    failure(status, code, e.message())
}

fn box_json(info: &SandboxInfo) -> Value {
    let status = match info.state {
        SandboxState::Running => "running",
        SandboxState::Creating => "starting",
        SandboxState::Destroyed => "deleted",
        _ => "unknown",
    };
    json!({ "id": info.id, "status": status, "labels": info.metadata })
}

fn meta_json(f: &FileInfo) -> Value {
    let kind = match f.kind {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        FileKind::Symlink => "symlink",
        FileKind::Other => "other",
    };
    json!({ "path": f.path, "name": f.name, "kind": kind, "size": f.size })
}

fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = segment
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(&k.replace('+', " ")), decode(&v.replace('+', " ")))
        })
        .collect()
}

async fn handle(request: hyper::Request<hyper::body::Incoming>, state: &State, key: &str) -> Reply {
    let authorized = request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        == Some(key);
    if !authorized {
        return failure(401, "unauthorized", "missing or wrong API key");
    }
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let query = query_pairs(request.uri().query());
    let body = match request.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return failure(400, "invalid", "unreadable body"),
    };
    let json_body = || serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("POST", ["api", "v2", "boxes"]) => create(state, &json_body()).await,
        ("GET", ["api", "v2", "boxes"]) => list(state, &query).await,
        (_, ["api", "v2", "boxes", id, rest @ ..]) => {
            let sandbox = match state.local.connect(&decode(id)).await {
                Ok(sb) => sb,
                Err(e) => return error_reply(&e),
            };
            let file = || {
                rest[1..]
                    .iter()
                    .map(|s| decode(s))
                    .collect::<Vec<_>>()
                    .join("/")
            };
            let result: Result<Reply, Error> = async {
                Ok(match (method.as_str(), rest) {
                    ("GET", []) => json_reply(200, box_json(&sandbox.info().await?)),
                    ("PATCH", []) => {
                        // Acme keeps the time to live; the local backing has none to set.
                        json_body()["ttl_seconds"].as_u64().ok_or_else(|| {
                            Error::validation("ttl_seconds must be a whole number")
                        })?;
                        json_reply(200, box_json(&sandbox.info().await?))
                    }
                    ("DELETE", []) => {
                        sandbox.destroy().await?;
                        empty(204)
                    }
                    ("POST", ["commands"]) => run(sandbox, &json_body()).await?,
                    ("PUT", ["files", ..]) => {
                        let written = sandbox.write_file(&file(), body.clone()).await?;
                        json_reply(200, json!({ "bytes": written.bytes }))
                    }
                    ("GET", ["files", ..]) => {
                        let data = sandbox.read_file(&file()).await?;
                        let mut reply = hyper::Response::new(Full::new(data).boxed_unsync());
                        reply.headers_mut().insert(
                            "content-type",
                            hyper::header::HeaderValue::from_static("application/octet-stream"),
                        );
                        reply
                    }
                    ("DELETE", ["files", ..]) => {
                        sandbox.remove(&file()).await?;
                        empty(204)
                    }
                    ("GET", ["meta", ..]) => {
                        json_reply(200, meta_json(&sandbox.stat(&file()).await?))
                    }
                    ("GET", ["dirs", ..]) => {
                        let entries = sandbox.list_files(&file(), ListOptions::default()).await?;
                        json_reply(
                            200,
                            json!({ "entries": entries.iter().map(meta_json).collect::<Vec<_>>() }),
                        )
                    }
                    ("PUT", ["dirs", ..]) => {
                        sandbox.mkdir(&file()).await?;
                        empty(204)
                    }
                    ("POST", ["moves"]) => {
                        let v = json_body();
                        let (from, to) = (v["from"].as_str(), v["to"].as_str());
                        let (Some(from), Some(to)) = (from, to) else {
                            return Err(Error::validation("a move needs from and to"));
                        };
                        sandbox.rename(from, to).await?;
                        empty(204)
                    }
                    _ => failure(404, "not_found", &format!("no route {method} {path}")),
                })
            }
            .await;
            result.unwrap_or_else(|e| error_reply(&e))
        }
        _ => failure(404, "not_found", &format!("no route {method} {path}")),
    }
}

async fn create(state: &State, v: &Value) -> Reply {
    let mut spec = CreateSpec::new();
    if let Some(labels) = v["labels"].as_object() {
        for (k, label) in labels {
            spec = spec.metadata(k.clone(), label.as_str().unwrap_or_default());
        }
    }
    let made = match state.local.create(&spec).await {
        Ok(sb) => sb.info().await,
        Err(e) => Err(e),
    };
    match made {
        Ok(info) => {
            if let Some(token) = v["client_token"].as_str() {
                lock(&state.tokens).insert(token.to_owned(), info.id.clone());
            }
            json_reply(201, box_json(&info))
        }
        Err(e) => error_reply(&e),
    }
}

async fn list(state: &State, query: &[(String, String)]) -> Reply {
    let all: Result<Vec<SandboxInfo>, Error> = state
        .local
        .list(&ListFilter::new())
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect();
    let all = match all {
        Ok(all) => all,
        Err(e) => return error_reply(&e),
    };
    let tokens = lock(&state.tokens).clone();
    let boxes: Vec<Value> = all
        .iter()
        .filter(|info| {
            query.iter().all(|(name, value)| match name.as_str() {
                "client_token" => tokens.get(value) == Some(&info.id),
                "label" => value
                    .split_once(':')
                    .is_some_and(|(k, v)| info.metadata.get(k).map(String::as_str) == Some(v)),
                "status" => box_json(info)["status"] == value.as_str(),
                _ => true,
            })
        })
        .map(box_json)
        .collect();
    json_reply(200, json!({ "boxes": boxes }))
}

/// Runs a command and streams its output as NDJSON lines while it runs.
async fn run(sandbox: Box<dyn sandbox_sdk_core::Sandbox>, v: &Value) -> Result<Reply, Error> {
    let argv: Vec<String> = v["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut command = Command {
        argv,
        ..Command::default()
    };
    if let Some(cwd) = v["cwd"].as_str() {
        command = command.cwd(cwd);
    }
    if let Some(env) = v["env"].as_object() {
        for (k, value) in env {
            command = command.env(k.clone(), value.as_str().unwrap_or_default());
        }
    }
    if let Some(ms) = v["timeout_ms"].as_u64() {
        command = command.timeout(Duration::from_millis(ms));
    }
    let mut process = sandbox.exec(&command).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Value>(16);
    let pid = process.pid().to_owned();
    tokio::spawn(async move {
        let _ = tx.send(json!({ "pid": pid })).await;
        while let Some(event) = process.next_event().await {
            let line = match event {
                Ok(ProcessEvent::Stdout(b)) => json!({ "stdout": String::from_utf8_lossy(&b) }),
                Ok(ProcessEvent::Stderr(b)) => json!({ "stderr": String::from_utf8_lossy(&b) }),
                Ok(ProcessEvent::Exit(status)) => {
                    json!({ "exit": { "code": status.code, "signal": status.signal } })
                }
                Err(e) => {
                    let kind = if e.kind() == ErrorKind::Timeout {
                        "timeout"
                    } else {
                        "failed"
                    };
                    json!({ "error": { "kind": kind, "message": e.message() } })
                }
            };
            if tx.send(line).await.is_err() {
                break;
            }
        }
        drop(sandbox);
    });
    let lines = tokio_stream(rx).map(|line| {
        let mut text = line.to_string();
        text.push('\n');
        Ok::<_, Infallible>(Frame::data(Bytes::from(text)))
    });
    let mut reply = hyper::Response::new(BodyExt::boxed_unsync(StreamBody::new(lines)));
    reply.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(reply)
}

/// A receiver as a stream.
fn tokio_stream<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> futures::stream::BoxStream<'static, T> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) }).boxed()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
