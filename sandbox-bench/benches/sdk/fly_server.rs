//! A loopback stand-in for the Fly Machines API (`specs/fly/PROTOCOL.md`), faithful where the
//! adapter's slow paths are:
//!
//! - `POST /v1/apps/APP/machines` answers at once with a machine in state `created`, which turns
//!   `started` only after the server's start delay (§5: a create answers before the machine
//!   runs); `GET …/machines/ID/wait?state=started&timeout=S` blocks until then (§7), or answers
//!   408 when the timeout passes first; `GET …/machines/ID` shows the state at that moment.
//! - `POST …/machines/ID/exec` runs the body's argv for real with this host's tools (as Fly runs
//!   it in the machine: no shell around it, stdin from the body, killed at its `timeout`) and
//!   answers `{stdout, stderr, exit_code}` only when the command ended (§8).
//! - Exec is rate limited per machine as §3 says for every action: a token bucket of 3 refilled
//!   at 1 per second; over it, 429 `{"error":"rate limit exceeded"}`. A machine created with
//!   the metadata label `bench_rate_limit=off` has no limit (for the latency rows, whose loops
//!   would otherwise measure the limit).
//! - `DELETE …/machines/ID` forgets the machine. Anything else is a 404.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Sustained exec calls per second per machine (PROTOCOL.md §3).
pub const EXEC_RATE: f64 = 1.0;
/// Exec calls a machine may make at once (PROTOCOL.md §3).
pub const EXEC_BURST: f64 = 3.0;

struct Machine {
    started_at: Instant,
    limited: bool,
    tokens: f64,
    refilled: Instant,
    metadata: serde_json::Value,
}

impl Machine {
    fn state(&self) -> &'static str {
        if Instant::now() >= self.started_at {
            "started"
        } else {
            "created"
        }
    }

    /// Takes one exec token, refilling first; false when the bucket is empty.
    fn take_token(&mut self) -> bool {
        if !self.limited {
            return true;
        }
        let now = Instant::now();
        let refill = now.duration_since(self.refilled).as_secs_f64() * EXEC_RATE;
        self.tokens = (self.tokens + refill).min(EXEC_BURST);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct State {
    start_delay: Duration,
    next_id: u64,
    machines: HashMap<String, Machine>,
}

type Shared = Arc<Mutex<State>>;

/// Starts the server on `127.0.0.1` on a free port; machines take `start_delay` to start.
pub async fn start(start_delay: Duration) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state: Shared = Arc::new(Mutex::new(State {
        start_delay,
        next_id: 0,
        machines: HashMap::new(),
    }));
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                if let Err(e) = connection(socket, state).await {
                    eprintln!("fly bench server: connection failed: {e}");
                }
            });
        }
    });
    Ok(addr)
}

fn header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// Serves requests on one connection until the client closes it.
async fn connection(mut socket: TcpStream, state: Shared) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let end = loop {
            if let Some(end) = header_end(&buf) {
                break end;
            }
            if socket.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let length = content_length(&head);
        while buf.len() < length {
            if socket.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        }
        let body: Vec<u8> = buf.drain(..length).collect();
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or("").to_owned();
        let target = words.next().unwrap_or("").to_owned();
        let (status, answer) = route(&state, &method, &target, &body).await;
        let reason = match status {
            200 => "OK",
            404 => "Not Found",
            408 => "Request Timeout",
            429 => "Too Many Requests",
            _ => "Error",
        };
        let text = answer.to_string();
        let response = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        socket.write_all(response.as_bytes()).await?;
    }
}

fn error(status: u16, message: &str) -> (u16, serde_json::Value) {
    (status, serde_json::json!({ "error": message }))
}

fn machine_json(id: &str, m: &Machine) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "name": format!("bench-{id}"),
        "state": m.state(),
        "region": "ord",
        "instance_id": "01HEPA330HZ37A78TK080NAK1M",
        "config": {"image": "ubuntu:24.04", "metadata": m.metadata},
        "created_at": "2026-12-01T00:00:00Z",
    })
}

async fn route(
    state: &Shared,
    method: &str,
    target: &str,
    body: &[u8],
) -> (u16, serde_json::Value) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        ("POST", ["v1", "apps", _, "machines"]) => {
            let request: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            let metadata = request["config"]["metadata"].clone();
            let limited = metadata["bench_rate_limit"] != "off";
            let mut s = state.lock().unwrap();
            s.next_id += 1;
            let id = format!("{:014x}", 0x1857_1560_0000_u64 + s.next_id);
            let now = Instant::now();
            let machine = Machine {
                started_at: now + s.start_delay,
                limited,
                tokens: EXEC_BURST,
                refilled: now,
                metadata,
            };
            let mut answer = machine_json(&id, &machine);
            answer["state"] = "created".into();
            s.machines.insert(id, machine);
            (200, answer)
        }
        ("GET", ["v1", "apps", _, "machines", id]) => {
            let s = state.lock().unwrap();
            match s.machines.get(*id) {
                Some(m) => (200, machine_json(id, m)),
                None => error(404, "machine not found"),
            }
        }
        ("DELETE", ["v1", "apps", _, "machines", id]) => {
            state.lock().unwrap().machines.remove(*id);
            (200, serde_json::json!({"ok": true}))
        }
        ("GET", ["v1", "apps", _, "machines", id, "wait"]) => {
            let timeout = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("timeout="))
                .and_then(|t| t.parse().ok())
                .unwrap_or(60);
            let started_at = match state.lock().unwrap().machines.get(*id) {
                Some(m) => m.started_at,
                None => return error(404, "machine not found"),
            };
            let deadline = Instant::now() + Duration::from_secs(timeout);
            if started_at > deadline {
                tokio::time::sleep_until(deadline).await;
                return error(
                    408,
                    "deadline_exceeded: timeout waiting for machine to be started",
                );
            }
            tokio::time::sleep_until(started_at).await;
            (
                200,
                serde_json::json!({"ok": true, "state": "started", "version": "01HEPA330HZ37A78TK080NAK1M"}),
            )
        }
        ("POST", ["v1", "apps", _, "machines", id, "exec"]) => {
            {
                let mut s = state.lock().unwrap();
                let Some(m) = s.machines.get_mut(*id) else {
                    return error(404, "machine not found");
                };
                if m.state() != "started" {
                    return error(412, "machine is not started");
                }
                if !m.take_token() {
                    return error(429, "rate limit exceeded");
                }
            }
            match exec(body).await {
                Ok(answer) => (200, answer),
                Err(e) => error(400, &e.to_string()),
            }
        }
        _ => error(404, "not found"),
    }
}

/// Runs an exec body's argv with its stdin, killed at its timeout.
async fn exec(body: &[u8]) -> std::io::Result<serde_json::Value> {
    let request: serde_json::Value = serde_json::from_slice(body)?;
    let argv: Vec<String> = serde_json::from_value(request["command"].clone())?;
    let timeout = Duration::from_secs(request["timeout"].as_u64().unwrap_or(30));
    let Some((program, args)) = argv.split_first() else {
        return Err(std::io::Error::other("empty command"));
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = request["stdin"].as_str().unwrap_or("").to_owned();
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(input.as_bytes()).await;
    });
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(out) => out?,
        Err(_) => return Ok(serde_json::json!({"stdout": "", "stderr": "", "exit_code": -1})),
    };
    let _ = feed.await;
    Ok(serde_json::json!({
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
        "exit_code": out.status.code().unwrap_or(-1),
    }))
}
