//! A loopback server that speaks Daytona's protocol (PROTOCOL.md) faithfully enough to show the
//! adapter's slow paths: a toy daemon that runs commands as real local processes.
//!
//! Sessions whose commands write a marked log (`01 01 01` / `02 02 02` before each line, read
//! line by line like the daemon's session wrapper); sync session exec answering `cmdId`,
//! `output`, `stdout`, `stderr`, `exitCode`; async exec with `GET …/command/{cid}` and
//! non-follow JSON logs (the whole log on every poll: the endpoint takes no offset); the log
//! WebSocket sending the log in ≤ 1024-byte binary frames and closing 1000 only once the command
//! ended and ~1 s (50 × 20 ms) passed with no new data (§4.2); `POST /process/execute` (merged
//! output); and sandboxes that finish every transition at once (`creating` → `started`,
//! `stopping` → `stopped`, `destroying` → 404 on the next look).

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Cmd {
    command: String,
    log: Vec<u8>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<i32>,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, String>,
    commands: HashMap<String, Arc<Mutex<Cmd>>>,
    sessions: HashMap<String, Vec<String>>,
    next: u64,
}

static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Starts the server on a free loopback port, in this runtime; returns its address.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(Mutex::new(State::default()));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).ok();
            let state = state.clone();
            tokio::spawn(async move { connection(stream, state).await });
        }
    });
    Ok(addr)
}

/// Requests (and WebSocket upgrades) served so far, by every server in this process.
pub fn requests() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

async fn connection(stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf = [0u8; 4096];
    let Ok(n) = stream.peek(&mut buf).await else {
        return;
    };
    if String::from_utf8_lossy(&buf[..n])
        .to_ascii_lowercase()
        .contains("upgrade: websocket")
    {
        return follow(stream, state).await;
    }
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut lines = head.lines();
        let first = lines.next().unwrap_or("");
        let mut parts = first.split(' ');
        let method = parts.next().unwrap_or("").to_owned();
        let target = parts.next().unwrap_or("").to_owned();
        let mut length = 0usize;
        for l in lines {
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        let path = target.split('?').next().unwrap_or("").to_owned();
        let (status, answer) = route(&method, &path, &body, &state).await;
        let reason = match status {
            200 => "OK",
            201 => "Created",
            202 => "Accepted",
            204 => "No Content",
            _ => "Error",
        };
        let mut out = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        )
        .into_bytes();
        out.extend_from_slice(&answer);
        if write.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn dto(id: &str, state: &str) -> Value {
    json!({"id": id, "organizationId": "o", "name": id, "target": "us", "snapshot": "s",
        "user": "daytona", "env": {}, "cpu": 1, "gpu": 0, "memory": 1, "disk": 3, "public": false,
        "networkBlockAll": false, "labels": {}, "volumes": [], "state": state,
        "desiredState": state, "toolboxProxyUrl": "unused", "kvm": false})
}

fn json_bytes(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

async fn route(method: &str, path: &str, body: &[u8], state: &Arc<Mutex<State>>) -> (u16, Vec<u8>) {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    match (method, seg.as_slice()) {
        ("GET", ["stats"]) => (
            200,
            json_bytes(json!({"requests": REQUESTS.load(Ordering::Relaxed)})),
        ),
        ("POST", ["api", "sandbox"]) => {
            let mut s = state.lock().unwrap();
            s.next += 1;
            let id = format!("sb{}", s.next);
            s.sandboxes.insert(id.clone(), "started".into());
            (200, json_bytes(dto(&id, "creating")))
        }
        ("GET", ["api", "sandbox", id]) => match state.lock().unwrap().sandboxes.get(*id) {
            Some(st) if st == "destroyed" => (
                404,
                json_bytes(json!({"statusCode": 404, "message": "not found"})),
            ),
            Some(st) => (200, json_bytes(dto(id, st))),
            None => (200, json_bytes(dto(id, "started"))),
        },
        ("POST", ["api", "sandbox", id, op]) => {
            let (now, next) = match *op {
                "stop" => ("stopping", "stopped"),
                "start" => ("starting", "started"),
                _ => ("started", "started"),
            };
            state
                .lock()
                .unwrap()
                .sandboxes
                .insert(id.to_string(), next.into());
            (200, json_bytes(dto(id, now)))
        }
        ("DELETE", ["api", "sandbox", id]) => {
            state
                .lock()
                .unwrap()
                .sandboxes
                .insert(id.to_string(), "destroyed".into());
            (200, json_bytes(dto(id, "destroying")))
        }
        ("POST", ["toolbox", _, "process", "execute"]) => {
            let line = req["command"].as_str().unwrap_or("").to_owned();
            let out = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{line} 2>&1"))
                .output()
                .await
                .unwrap();
            (
                200,
                json_bytes(
                    json!({"exitCode": out.status.code().unwrap_or(-1), "result": String::from_utf8_lossy(&out.stdout)}),
                ),
            )
        }
        ("POST", ["toolbox", _, "process", "session"]) => {
            let sid = req["sessionId"].as_str().unwrap_or("").to_owned();
            let mut s = state.lock().unwrap();
            if s.sessions.contains_key(&sid) {
                return (
                    409,
                    json_bytes(
                        json!({"statusCode": 409, "message": "session already exists", "code": "CONFLICT"}),
                    ),
                );
            }
            s.sessions.insert(sid, Vec::new());
            (201, Vec::new())
        }
        ("DELETE", ["toolbox", _, "process", "session", sid]) => {
            state.lock().unwrap().sessions.remove(*sid);
            (204, Vec::new())
        }
        ("GET", ["toolbox", _, "process", "session", sid]) => {
            let s = state.lock().unwrap();
            let commands: Vec<Value> = s
                .sessions
                .get(*sid)
                .into_iter()
                .flatten()
                .map(|cid| {
                    let c = s.commands[cid].lock().unwrap();
                    json!({"id": cid, "command": c.command, "exitCode": c.exit})
                })
                .collect();
            (
                200,
                json_bytes(json!({"sessionId": sid, "commands": commands})),
            )
        }
        ("POST", ["toolbox", _, "process", "session", sid, "exec"]) => {
            let line = req["command"].as_str().unwrap_or("").to_owned();
            let run_async = req["runAsync"].as_bool().unwrap_or(false);
            let cmd = Arc::new(Mutex::new(Cmd {
                command: line.clone(),
                ..Default::default()
            }));
            let cid = {
                let mut s = state.lock().unwrap();
                s.next += 1;
                let cid = format!("cmd-{}", s.next);
                s.commands.insert(cid.clone(), cmd.clone());
                s.sessions
                    .entry(sid.to_string())
                    .or_default()
                    .push(cid.clone());
                cid
            };
            let task = tokio::spawn(run_command(line, cmd.clone()));
            if run_async {
                return (202, json_bytes(json!({"cmdId": cid})));
            }
            task.await.unwrap();
            let c = cmd.lock().unwrap();
            (
                200,
                json_bytes(
                    json!({"cmdId": cid, "output": String::from_utf8_lossy(&c.log),
                "stdout": String::from_utf8_lossy(&c.stdout), "stderr": String::from_utf8_lossy(&c.stderr),
                "exitCode": c.exit}),
                ),
            )
        }
        ("GET", ["toolbox", _, "process", "session", _, "command", cid]) => {
            match state.lock().unwrap().commands.get(*cid) {
                Some(c) => {
                    let c = c.lock().unwrap();
                    (
                        200,
                        json_bytes(json!({"id": cid, "command": c.command, "exitCode": c.exit})),
                    )
                }
                None => (
                    404,
                    json_bytes(
                        json!({"statusCode": 404, "message": "command not found", "code": "NOT_FOUND"}),
                    ),
                ),
            }
        }
        (
            "GET",
            [
                "toolbox",
                _,
                "process",
                "session",
                _,
                "command",
                cid,
                "logs",
            ],
        ) => {
            let c = state.lock().unwrap().commands.get(*cid).cloned();
            match c {
                Some(c) => {
                    let c = c.lock().unwrap();
                    (
                        200,
                        json_bytes(json!({"output": String::from_utf8_lossy(&c.log),
                        "stdout": String::from_utf8_lossy(&c.stdout), "stderr": String::from_utf8_lossy(&c.stderr)})),
                    )
                }
                None => (
                    404,
                    json_bytes(json!({"statusCode": 404, "message": "command not found"})),
                ),
            }
        }
        _ => (
            404,
            json_bytes(json!({"statusCode": 404, "message": format!("no route {method} {path}")})),
        ),
    }
}

/// Runs `line` like the daemon's session wrapper: each stream read line by line into one marked
/// log (a last partial line gains a newline), the exit code written after both are drained.
async fn run_command(line: String, cmd: Arc<Mutex<Cmd>>) {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pump = |reader: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                marker: u8,
                cmd: Arc<Mutex<Cmd>>| async move {
        let mut lines = BufReader::new(reader);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = lines.read_until(b'\n', &mut line).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let mut c = cmd.lock().unwrap();
            c.log.extend_from_slice(&[marker; 3]);
            c.log.extend_from_slice(&line);
            if marker == 1 {
                c.stdout.extend_from_slice(&line);
            } else {
                c.stderr.extend_from_slice(&line);
            }
        }
    };
    let out = pump(Box::new(child.stdout.take().unwrap()), 1, cmd.clone());
    let err = pump(Box::new(child.stderr.take().unwrap()), 2, cmd.clone());
    tokio::join!(out, err);
    let status = child.wait().await.unwrap();
    cmd.lock().unwrap().exit = Some(status.code().unwrap_or(137));
}

/// The follow WebSocket: the log in ≤ 1024-byte binary frames as it grows, read every 20 ms;
/// Close 1000 once the command ended and 50 reads in a row found nothing new.
// The handshake callback's signature is fixed by tungstenite.
#[allow(clippy::result_large_err)]
async fn follow(stream: TcpStream, state: Arc<Mutex<State>>) {
    let cid = Arc::new(Mutex::new(String::new()));
    let seen = cid.clone();
    let callback =
        move |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
              resp: tokio_tungstenite::tungstenite::handshake::server::Response| {
            let path = req.uri().path().to_owned();
            let parts: Vec<&str> = path.split('/').collect();
            *seen.lock().unwrap() = parts
                .get(parts.len().wrapping_sub(2))
                .unwrap_or(&"")
                .to_string();
            Ok(resp)
        };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    let cid = cid.lock().unwrap().clone();
    let Some(cmd) = state.lock().unwrap().commands.get(&cid).cloned() else {
        return;
    };
    let mut sent = 0;
    let mut idle = 0;
    loop {
        let (chunk, ended) = {
            let c = cmd.lock().unwrap();
            (c.log[sent..].to_vec(), c.exit.is_some())
        };
        if chunk.is_empty() {
            idle += 1;
            if ended && idle >= 50 {
                break;
            }
        } else {
            idle = 0;
            for frame in chunk.chunks(1024) {
                if ws
                    .send(tokio_tungstenite::tungstenite::Message::Binary(
                        frame.to_vec().into(),
                    ))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            sent += chunk.len();
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            m = ws.next() => if m.is_none() { return; },
        }
    }
    let _ = ws.close(None).await;
}
