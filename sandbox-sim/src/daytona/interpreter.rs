//! The daemon's stateful interpreter (`specs/code-interpreter/PROTOCOL.md` §2.1): contexts over
//! REST (`/process/interpreter/context`) and cells over a WebSocket
//! (`/process/interpreter/execute`). Each context is a context of the backing `local` sandbox,
//! so cells run in core's emulated kernel over a real `python3`.
//!
//! As the daemon does: the first text message is `{code, contextId?, envs?, timeout?}` (seconds;
//! 10 minutes when left out, `0` none, below 0 refused); frames are JSON
//! `{type, text, name, value, traceback}` with every field present, `type` one of `stdout`,
//! `stderr`, `error`, `control` (`completed` or `interrupted`); output is sent in pieces of at
//! most 1024 characters; the socket closes with 1000 when the cell is done, 4008 after its
//! timeout (the cell is interrupted), 1001 when the worker died, 1008 for a bad request. There
//! are no rich results: a cell's last expression and `display()` give nothing. Closing the socket
//! does not stop the cell, and the server sends no pings (it answers them). Only Python
//! contexts exist, as on Daytona; the default context (`default`) is never listed and cannot be
//! deleted.

use super::call::Call;
use super::record::{InterpreterContext as Context, InterpreterContexts as Contexts};
use crate::{SimResponse, SimUpgrade};
use futures::{SinkExt, StreamExt};
use sandbox_sdk_core::code::{CodeEvent, ContextSpec, Language, RunCode};
use sandbox_sdk_core::time::format_rfc3339;
use sandbox_sdk_core::{ErrorKind, Sandbox as _};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

/// The id of the context a cell without `contextId` runs in.
const DEFAULT: &str = "default";

/// A cell's timeout when the request names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The most characters in one output frame.
const PIECE: usize = 1024;

/// The close code of a cell that ran past its timeout.
const TIMEOUT_CLOSE: u16 = 4008;

fn shown(id: &str, context: &Context) -> Value {
    json!({
        "id": id,
        "cwd": context.cwd,
        "createdAt": format_rfc3339(context.created_at),
        "active": true,
        "language": "python",
    })
}

fn contexts_of(call: &Call) -> Option<Arc<Contexts>> {
    call.api.with(&call.sandbox_id, |r| r.interpreter.clone())
}

/// Starts a context of the backing sandbox in `cwd` (the working directory when `None`).
async fn start(call: &Call, cwd: Option<&str>) -> Result<Context, String> {
    let dir = call.backing.dir().to_string_lossy().into_owned();
    let cwd = cwd.map(str::to_owned).unwrap_or(dir);
    let spec = ContextSpec::new(Language::Python).cwd(&cwd);
    let made = call
        .backing
        .create_code_context(&spec)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Context {
        cwd,
        created_at: SystemTime::now(),
        local_id: made.id,
    })
}

#[derive(Deserialize, Default)]
struct NewContext {
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    language: Option<String>,
}

/// `POST /process/interpreter/context`.
pub(crate) async fn create(call: Call) -> SimResponse {
    let Some(contexts) = contexts_of(&call) else {
        return call.error(404, "sandbox not found");
    };
    let new: NewContext = if call.request.body.is_empty() {
        NewContext::default()
    } else {
        match call.request.json() {
            Ok(new) => new,
            Err(e) => return call.error(400, &format!("invalid request body: {e}")),
        }
    };
    if let Some(language) = new.language.as_deref().filter(|l| !l.is_empty())
        && !language.eq_ignore_ascii_case("python")
    {
        return call.error(400, &format!("unsupported language: {language}"));
    }
    let context = match start(&call, new.cwd.as_deref()).await {
        Ok(context) => context,
        Err(e) => return call.error(500, &format!("failed to create context: {e}")),
    };
    let id = crate::random_from(b"0123456789abcdef", 32);
    let body = shown(&id, &context);
    contexts.by_id.lock().await.insert(id, context);
    SimResponse::json(200, &body)
}

/// `GET /process/interpreter/context`: every context but the default one.
pub(crate) async fn list(call: Call) -> SimResponse {
    let Some(contexts) = contexts_of(&call) else {
        return call.error(404, "sandbox not found");
    };
    let all: Vec<Value> = contexts
        .by_id
        .lock()
        .await
        .iter()
        .filter(|(id, _)| id.as_str() != DEFAULT)
        .map(|(id, c)| shown(id, c))
        .collect();
    SimResponse::json(200, &json!({ "contexts": all }))
}

/// `DELETE /process/interpreter/context/{id}`.
pub(crate) async fn delete(call: Call, id: &str) -> SimResponse {
    if id == DEFAULT {
        return call.error(400, "cannot delete default context");
    }
    let Some(contexts) = contexts_of(&call) else {
        return call.error(404, "sandbox not found");
    };
    let Some(context) = contexts.by_id.lock().await.remove(id) else {
        return call.error(404, &format!("context not found: {id}"));
    };
    let _ = call.backing.remove_code_context(&context.local_id).await;
    SimResponse::json(
        200,
        &json!({ "message": format!("Context {id} deleted successfully") }),
    )
}

/// `GET /process/interpreter/execute` with an upgrade: answers 101 and runs the cell the first
/// message asks for on the upgraded connection.
pub(crate) fn upgrade(call: Call, upgrade: SimUpgrade) -> SimResponse {
    let Some(key) = call.request.header("sec-websocket-key") else {
        return call.error(
            400,
            "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header is missing",
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let protocol = call
        .request
        .header("sec-websocket-protocol")
        .and_then(|list| list.split(',').map(str::trim).next().map(str::to_owned));
    let rt = call.api.rt.clone();
    rt.spawn(async move {
        let Some(connection) = upgrade.connection().await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(connection, Role::Server, None).await;
        serve(ws, call).await;
    });
    let mut answer = SimResponse::empty(101)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", &accept);
    if let Some(p) = protocol {
        answer = answer.header("sec-websocket-protocol", &p);
    }
    answer
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Execute {
    #[serde(default)]
    code: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    envs: BTreeMap<String, String>,
    #[serde(default)]
    timeout: Option<i64>,
}

/// A close frame; its reason is cut to fit a control frame (123 bytes).
fn close(code: u16, reason: &str) -> Message {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: Utf8Bytes::from(reason[..end].to_owned()),
    }))
}

fn frame(kind: &str, text: &str, name: &str, value: &str, traceback: &str) -> Message {
    let body =
        json!({"type": kind, "text": text, "name": name, "value": value, "traceback": traceback});
    Message::text(body.to_string())
}

/// The context a cell names, the default one started on first use.
async fn context_for(call: &Call, id: Option<&str>) -> Result<Context, (u16, String)> {
    let contexts = contexts_of(call).ok_or((1011, "sandbox not found".to_owned()))?;
    let mut by_id = contexts.by_id.lock().await;
    let id = id.filter(|i| !i.is_empty()).unwrap_or(DEFAULT);
    if let Some(found) = by_id.get(id) {
        return Ok(found.clone());
    }
    if id != DEFAULT {
        return Err((1008, format!("context not found: {id}")));
    }
    let context = start(call, None)
        .await
        .map_err(|e| (1011, format!("failed to get default context: {e}")))?;
    by_id.insert(DEFAULT.to_owned(), context.clone());
    Ok(context)
}

async fn serve<S>(ws: WebSocketStream<S>, call: Call)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut incoming) = ws.split();
    let first = loop {
        match incoming.next().await {
            Some(Ok(Message::Text(text))) => break text.to_string(),
            Some(Ok(Message::Binary(bytes))) => break String::from_utf8_lossy(&bytes).into_owned(),
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
            Some(Ok(_)) => continue,
        }
    };
    let request: Execute = match serde_json::from_str(&first) {
        Ok(request) => request,
        Err(e) => {
            let _ = sink
                .send(close(1002, &format!("invalid request: {e}")))
                .await;
            return;
        }
    };
    if request.code.trim().is_empty() {
        let _ = sink.send(close(1008, "code is required")).await;
        return;
    }
    let timeout = match request.timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) if t < 0 => {
            let _ = sink.send(close(1008, "timeout must be non-negative")).await;
            return;
        }
        Some(t) => Duration::from_secs(t as u64),
    };
    let context = match context_for(&call, request.context_id.as_deref()).await {
        Ok(context) => context,
        Err((code, reason)) => {
            let _ = sink.send(close(code, &reason)).await;
            return;
        }
    };
    let mut cell = RunCode::python(request.code)
        .context(&context.local_id)
        .timeout(timeout);
    for (key, value) in request.envs {
        cell = cell.env(key, value);
    }
    let started = match call.backing.run_code(&cell).await {
        // The daemon starts a dead worker again, silently, with empty globals.
        Err(e) if e.kind() == ErrorKind::ContextLost => {
            match call.backing.restart_code_context(&context.local_id).await {
                Ok(()) => call.backing.run_code(&cell).await,
                Err(e) => Err(e),
            }
        }
        other => other,
    };
    let mut run = match started {
        Ok(run) => run,
        Err(e) => {
            let _ = sink.send(close(1011, &e.to_string())).await;
            return;
        }
    };
    // Pings are answered while the cell runs; a client that leaves does not stop it.
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = incoming.next().await {} });
    let mut open = true;
    let (control, code, reason) = loop {
        let event = match run.next().await {
            None => break ("completed", 1000, ""),
            Some(Ok(event)) => event,
            Some(Err(e)) if e.kind() == ErrorKind::Timeout => {
                break ("interrupted", TIMEOUT_CLOSE, "execution timeout");
            }
            Some(Err(_)) => break ("", 1001, "worker process ended"),
        };
        let messages: Vec<Message> = match event {
            CodeEvent::Stdout(text) => pieces(&text)
                .map(|p| frame("stdout", p, "", "", ""))
                .collect(),
            CodeEvent::Stderr(text) => pieces(&text)
                .map(|p| frame("stderr", p, "", "", ""))
                .collect(),
            CodeEvent::Error(error) => {
                vec![frame(
                    "error",
                    "",
                    &error.name,
                    &error.value,
                    &error.traceback,
                )]
            }
            // The daemon has no results, counts or truncation marks.
            CodeEvent::Result(_) | CodeEvent::ExecutionCount(_) | CodeEvent::Truncated { .. } => {
                Vec::new()
            }
        };
        for message in messages {
            if open && sink.send(message).await.is_err() {
                open = false;
            }
        }
    };
    if open {
        if !control.is_empty() {
            let _ = sink.send(frame("control", control, "", "", "")).await;
        }
        let _ = sink.send(close(code, reason)).await;
    }
    reader.abort();
}

/// `text` in pieces of at most [`PIECE`] characters.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len();
        if let Some((i, _)) = rest.char_indices().nth(PIECE) {
            end = i;
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}
