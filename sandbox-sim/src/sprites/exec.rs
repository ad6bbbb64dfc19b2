//! Exec (PROTOCOL.md §5, §18.6–§18.10): the WebSocket that spawns a session
//! (`/exec?cmd=…`) or attaches to one (`/exec/{id}`), the session list and the kill stream.

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::files;
use super::session::{EXIT, STDIN, STDIN_EOF, Session, SpawnSpec, parse_duration};
use super::sprite::Sprite;
use super::state::{NDJSON, error};
use super::{HOME, Settings, lock};
use crate::{SimRequest, SimResponse};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

/// The `PATH` of an exec that sends no `env`.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Whether the request asks for a WebSocket.
pub(crate) fn is_websocket(request: &SimRequest) -> bool {
    request
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
}

fn truthy(request: &SimRequest, name: &str) -> Option<bool> {
    request
        .query_param(name)
        .map(|v| matches!(v.as_str(), "true" | "1"))
}

/// What one connection does besides following the session.
struct Conn {
    stdin: bool,
    attach: bool,
    linger: Duration,
    ping: Duration,
}

/// The 101 answer, the connection served on the upgraded socket.
fn accept(
    request: &mut SimRequest,
    session: Arc<Session>,
    conn: Conn,
) -> Result<SimResponse, SimResponse> {
    let Some(key) = request.header("sec-websocket-key") else {
        return Err(error(400, "invalid_request", "not a websocket handshake"));
    };
    let accept = derive_accept_key(key.as_bytes());
    let Some(upgrade) = request.take_upgrade() else {
        return Err(error(400, "invalid_request", "not a websocket handshake"));
    };
    tokio::spawn(async move {
        let Some(connection) = upgrade.connection().await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(connection, Role::Server, None).await;
        serve(ws, session, conn).await;
    });
    Ok(SimResponse::empty(101)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", &accept))
}

/// `GET /v1/sprites/{name}/exec?…` with an upgrade: starts a session (PROTOCOL.md §5.1).
pub(crate) async fn spawn(
    settings: &Settings,
    sprite: Arc<Sprite>,
    mut request: SimRequest,
) -> SimResponse {
    let bad = |m: &str| error(400, "invalid_request", m);
    let tty = truthy(&request, "tty").unwrap_or(false);
    let stdin = truthy(&request, "stdin").unwrap_or(tty);
    let mut argv = request.query_all("cmd");
    let path = request.query_param("path").filter(|p| !p.is_empty());
    if argv.is_empty() {
        argv.push(path.clone().unwrap_or_else(|| "bash".to_owned()));
    }
    let program = path.unwrap_or_else(|| argv[0].clone());
    let dimension = |name: &str, default: u16| -> Result<u16, SimResponse> {
        match request.query_param(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<u16>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(&format!("invalid {name}: {v:?}"))),
        }
    };
    let size = match (dimension("cols", 80), dimension("rows", 24)) {
        (Ok(c), Ok(r)) => (c, r),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let max_after = match request.query_param("max_run_after_disconnect") {
        None => (!tty).then(|| Duration::from_secs(10)),
        Some(v) => match parse_duration(&v) {
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
            None => return bad(&format!("invalid max_run_after_disconnect: {v:?}")),
        },
    };
    let workdir = files::shown(None, &request.query_param("dir").unwrap_or_default());
    let cwd = match files::host_dir(&sprite, &workdir).await {
        Ok(dir) => dir,
        Err(e) => return bad(&format!("invalid dir: {e}")),
    };
    let given = request.query_all("env");
    let mut env = BTreeMap::new();
    if given.is_empty() {
        env.insert("PATH".to_owned(), DEFAULT_PATH.to_owned());
        env.insert(
            "HOME".to_owned(),
            sprite
                .root()
                .join(&HOME[1..])
                .to_string_lossy()
                .into_owned(),
        );
        env.insert("USER".to_owned(), "sprite".to_owned());
        env.extend(sprite.environment.clone());
    } else {
        for pair in given {
            match pair.split_once('=') {
                Some((k, v)) if !k.is_empty() => {
                    env.insert(k.to_owned(), v.to_owned());
                }
                _ => return bad(&format!("invalid env entry {pair:?}: expected KEY=VALUE")),
            }
        }
    }
    if tty {
        env.entry("TERM".to_owned())
            .or_insert_with(|| "xterm-256color".to_owned());
    }
    let spec = SpawnSpec {
        program,
        argv,
        cwd,
        workdir,
        env,
        stdin,
        tty: tty.then_some(size),
        max_after_disconnect: max_after,
        scrollback: settings.scrollback,
    };
    sprite.wake();
    let session = match Session::spawn(&spec) {
        Ok(session) => {
            lock(&sprite.sessions).push(session.clone());
            session
        }
        Err(e) => Session::failed(&spec, &format!("exec: {:?}: {e}", spec.program)),
    };
    let conn = Conn {
        stdin,
        attach: false,
        linger: settings.linger,
        ping: settings.ping_interval,
    };
    accept(&mut request, session, conn).unwrap_or_else(|e| e)
}

/// `GET /v1/sprites/{name}/exec/{id}` with an upgrade: attaches (PROTOCOL.md §5.5, §18.6,
/// §18.7); 404 for an unknown session or one finished longer ago than the attach window.
pub(crate) fn attach(
    settings: &Settings,
    sprite: &Sprite,
    id: &str,
    mut request: SimRequest,
) -> SimResponse {
    let Some(session) = sprite.session(id) else {
        return error(404, "not_found", &format!("session {id} not found"));
    };
    sprite.wake();
    let conn = Conn {
        stdin: truthy(&request, "stdin").unwrap_or(session.tty),
        attach: true,
        linger: settings.linger,
        ping: settings.ping_interval,
    };
    accept(&mut request, session, conn).unwrap_or_else(|e| e)
}

/// Serves one connection: replay (attach), `session_info`, live output, the exit, the linger.
async fn serve<S>(ws: WebSocketStream<S>, session: Arc<Session>, conn: Conn)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut incoming) = ws.split();
    let is_owner = session.attach();
    let mut changes = session.subscribe();
    let info = Message::Text(Utf8Bytes::from(session.info(is_owner).to_string()));
    let frame = |stream: u8, data: &Bytes| -> Message {
        if session.tty {
            Message::Binary(data.clone())
        } else {
            let mut framed = Vec::with_capacity(data.len() + 1);
            framed.push(stream);
            framed.extend_from_slice(data);
            Message::Binary(Bytes::from(framed))
        }
    };
    let mut cursor = 0u64;
    let mut ok = true;
    if conn.attach {
        let (replay, next, _) = session.chunks_from(0);
        for chunk in &replay {
            ok = ok && sink.feed(frame(chunk.stream, &chunk.data)).await.is_ok();
        }
        cursor = next;
    }
    ok = ok && sink.send(info).await.is_ok();
    let reader = session.reader_start(cursor);
    let start = tokio::time::Instant::now() + conn.ping;
    let mut ping = tokio::time::interval_at(start, conn.ping);
    let mut linger_until: Option<tokio::time::Instant> = None;
    while ok {
        let (chunks, next, exit) = session.chunks_from(cursor);
        for chunk in &chunks {
            ok = ok && sink.feed(frame(chunk.stream, &chunk.data)).await.is_ok();
        }
        cursor = next;
        session.reader_at(reader, cursor);
        if let (Some(code), None) = (exit, linger_until) {
            let exit = if session.tty {
                Message::Text(Utf8Bytes::from(
                    json!({ "type": "exit", "exit_code": code }).to_string(),
                ))
            } else {
                Message::Binary(Bytes::from(vec![EXIT, code]))
            };
            ok = ok && sink.feed(exit).await.is_ok();
            linger_until = Some(tokio::time::Instant::now() + conn.linger);
        }
        ok = ok && sink.flush().await.is_ok();
        if !ok {
            break;
        }
        let linger = async {
            match linger_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = changes.changed(), if linger_until.is_none() => {
                if changed.is_err() {
                    break;
                }
            }
            message = incoming.next() => match message {
                Some(Ok(Message::Binary(data))) => input(&session, &conn, data),
                Some(Ok(Message::Text(text))) => control(&session, text.as_str()),
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            _ = ping.tick() => {
                ok = sink.send(Message::Ping(Bytes::new())).await.is_ok();
            }
            _ = linger => {
                let _ = sink
                    .send(Message::Close(Some(CloseFrame {
                        code: CloseCode::Normal,
                        reason: Utf8Bytes::from_static(""),
                    })))
                    .await;
                break;
            }
        }
    }
    session.reader_end(reader);
    session.detach();
}

/// A binary message from the client: stdin (PROTOCOL.md §5.2, §5.3).
fn input(session: &Session, conn: &Conn, data: Bytes) {
    if !conn.stdin {
        return;
    }
    if session.tty {
        session.write_stdin(data);
        return;
    }
    match data.first() {
        Some(&STDIN) => session.write_stdin(data.slice(1..)),
        Some(&STDIN_EOF) => session.close_stdin(),
        _ => {}
    }
}

/// A text message from the client: `resize` or `signal` (PROTOCOL.md §5.3).
fn control(session: &Session, text: &str) {
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        return;
    };
    match message.get("type").and_then(Value::as_str) {
        Some("resize") => {
            let dim = |k: &str| {
                message
                    .get(k)
                    .and_then(Value::as_u64)
                    .and_then(|n| u16::try_from(n).ok())
            };
            if let (Some(cols), Some(rows)) = (dim("cols"), dim("rows")) {
                session.resize(cols, rows);
            }
        }
        Some("signal") => {
            if let Some(signal) = message
                .get("signal")
                .and_then(Value::as_str)
                .and_then(super::session::parse_signal)
            {
                session.signal(signal);
            }
        }
        _ => {}
    }
}

/// `GET /v1/sprites/{name}/exec`: the running sessions (PROTOCOL.md §5.5, §18.7, §18.8).
pub(crate) fn list(sprite: &Sprite) -> SimResponse {
    let sessions: Vec<Value> = lock(&sprite.sessions)
        .iter()
        .filter(|s| s.is_running())
        .map(|s| s.to_json())
        .collect();
    SimResponse::json(200, &json!({ "sessions": sessions }))
}

/// `POST /v1/sprites/{name}/exec/{id}/kill`: `signal` and `timeout` from the query or a JSON
/// body (PROTOCOL.md §5.5, §18.9); an NDJSON stream of what happened, ending in `complete`.
pub(crate) fn kill(sprite: &Sprite, id: &str, request: &SimRequest) -> SimResponse {
    let Some(session) = sprite.session(id) else {
        return error(404, "not_found", &format!("session {id} not found"));
    };
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let signal_text = request
        .query_param("signal")
        .or_else(|| {
            body.get("signal")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "SIGTERM".to_owned());
    let Some(signal) = super::session::parse_signal(&signal_text) else {
        return error(
            400,
            "invalid_request",
            &format!("unknown signal {signal_text:?}"),
        );
    };
    let timeout_text = request.query_param("timeout").or_else(|| {
        body.get("timeout").and_then(|t| match t {
            Value::Number(n) => Some(n.to_string()),
            Value::String(s) => Some(s.clone()),
            _ => None,
        })
    });
    let timeout = match timeout_text {
        None => Duration::from_secs(10),
        Some(t) => match parse_duration(&t) {
            Some(d) => d,
            None => return error(400, "invalid_request", &format!("invalid timeout {t:?}")),
        },
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let send = move |v: Value| {
        let _ = tx.send(Bytes::from(format!("{v}\n")));
    };
    tokio::spawn(async move {
        let pid = session.id;
        if !session.is_running() {
            send(json!({ "type": "exited", "message": format!("process {pid} already exited") }));
        } else {
            let name = signal.as_str();
            session.signal(signal);
            send(json!({
                "type": "signal",
                "message": format!("sent {name} to process group {pid}"),
                "signal": name,
                "pid": pid,
            }));
            if tokio::time::timeout(timeout, session.wait()).await.is_ok() {
                send(json!({ "type": "exited", "message": format!("process {pid} exited") }));
            } else {
                send(json!({
                    "type": "timeout",
                    "message": format!("process {pid} still running after {timeout:?}, sending SIGKILL"),
                }));
                session.signal(nix::sys::signal::Signal::SIGKILL);
                session.wait().await;
                send(json!({ "type": "killed", "message": format!("process {pid} killed") }));
            }
        }
        send(json!({ "type": "complete", "exit_code": session.wait().await }));
    });
    let lines = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok(line), rx))
    });
    SimResponse::stream(200, NDJSON, lines.boxed())
}
