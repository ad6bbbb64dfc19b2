//! Measures the adapter against a loopback server that speaks Daytona's protocol (a toy daemon
//! that runs commands as real local processes), for issue 10's numbers:
//!
//! ```text
//! cargo run --release -p sandbox-daytona --example loopback_bench -- server 127.0.0.1:7788 &
//! cargo run --release -p sandbox-daytona --example loopback_bench -- client http://127.0.0.1:7788
//! ```
//!
//! The server follows PROTOCOL.md: sessions whose commands write a marked log (`01 01 01` /
//! `02 02 02` before each line), sync session exec answering `cmdId`, `output`, `stdout`,
//! `stderr`, `exitCode`; async exec with `GET …/command/{cid}` and non-follow JSON logs; the
//! log WebSocket sending the log in ≤ 1024-byte frames and closing 1000 once the command ended
//! and ~1 s (50 × 20 ms) passed with no new data; `POST /process/execute` (merged output); and
//! sandboxes that finish every transition at once (`creating` → `started`, `stopping` →
//! `stopped`, `destroying` → 404 on the next look). `GET /stats` counts requests.
//!
//! The client prints, for `run("echo hi")` with default settings and with `LogFollow::Poll`, the
//! median and p95 latency and requests per run beside a single `execute` request; create, stop
//! and destroy latency; and the peak RSS growth of following a command that prints 32 MiB in
//! poll mode (events counted, not kept).

use futures::{SinkExt, StreamExt};
use sandbox_daytona::{DaytonaBuilder, LogFollow};
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent, Provider, Sandbox, SandboxExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("server") => server(args.get(2).map_or("127.0.0.1:7788", String::as_str)).await,
        Some("client") => client(args.get(2).map_or("http://127.0.0.1:7788", String::as_str)).await,
        _ => eprintln!("usage: loopback_bench server ADDR | client URL"),
    }
}

// ---------------------------------------------------------------- server

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

async fn server(addr: &str) {
    let listener = TcpListener::bind(addr).await.unwrap();
    let state = Arc::new(Mutex::new(State::default()));
    eprintln!("loopback daytona on {addr}");
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).ok();
        let state = state.clone();
        tokio::spawn(async move { connection(stream, state).await });
    }
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

// ---------------------------------------------------------------- client

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn requests(base: &str) -> u64 {
    let stream = TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let (r, mut w) = stream.into_split();
    w.write_all(b"GET /stats HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut reader = BufReader::new(r);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await.unwrap();
    serde_json::from_slice::<Value>(&body).unwrap()["requests"]
        .as_u64()
        .unwrap()
}

fn stats(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "median {:.3} ms, p95 {:.3} ms",
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() * 95 / 100])
    )
}

fn builder(base: &str) -> DaytonaBuilder {
    DaytonaBuilder::new()
        .api_key("dtn_loopback")
        .api_url(format!("{base}/api"))
        .toolbox_url(format!("{base}/toolbox"))
}

async fn client(base: &str) {
    let n: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let rss_start = peak_rss_kib();
    // Interleaved, so a busy machine slows every path alike: in each round one run per follow
    // mode and one execute request of each reference line.
    let official = "sh -c \"echo 'ZWNobyBoaQ==' | base64 -d | sh\"";
    // The very line `run` sends for `echo hi`, as one execute request: the same work in the
    // sandbox, so only the protocol differs.
    let same = "(: sdk-cmd-1; (echo hi\n); s=$?; printf '%s:%s\\n' __sandbox_sdk_end_of_output__ \"$s\"; printf '%s\\n' __sandbox_sdk_end_of_output__ >&2; exit $s)";
    let ws = builder(base)
        .build()
        .unwrap()
        .get("sb-bench")
        .await
        .unwrap();
    let poll = builder(base)
        .log_follow(LogFollow::Poll)
        .build()
        .unwrap()
        .get("sb-bench")
        .await
        .unwrap();
    let cmd = Command::shell("echo hi");
    // Warm up (the first run makes the session).
    for sandbox in [&ws, &poll] {
        assert_eq!(sandbox.run(&cmd).await.unwrap().stdout_lossy(), "hi\n");
    }
    let mut samples: [Vec<Duration>; 5] = Default::default();
    let mut counts = [0u64; 5];
    for _ in 0..n {
        for (i, sandbox) in [&ws, &poll].into_iter().enumerate() {
            let before = requests(base).await;
            let t = Instant::now();
            let out = sandbox.run(&cmd).await.unwrap();
            samples[i].push(t.elapsed());
            counts[i] += requests(base).await - before - 1;
            assert_eq!(out.stdout_lossy(), "hi\n");
        }
        for (i, line) in [(2, "echo hi"), (3, official), (4, same)] {
            let before = requests(base).await;
            let t = Instant::now();
            let out = ws
                .execute(line, None, &BTreeMap::new(), None)
                .await
                .unwrap();
            samples[i].push(t.elapsed());
            counts[i] += requests(base).await - before - 1;
            assert!(out.result.starts_with("hi\n"), "{:?}", out.result);
        }
    }
    for (i, label) in [
        "run(echo hi), default (WebSocket)",
        "run(echo hi), LogFollow::Poll",
        "one execute request of `echo hi` (reference)",
        "one execute request of the official SDKs' line (reference)",
        "one execute request of the line run sends (reference)",
    ]
    .into_iter()
    .enumerate()
    {
        println!(
            "{label}: {}, {:.2} requests each",
            stats(samples[i].clone()),
            counts[i] as f64 / n as f64
        );
    }
    let provider = builder(base).build().unwrap();

    let lifecycle_runs = 20;
    let (mut create, mut stop, mut destroy) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..lifecycle_runs {
        let t = Instant::now();
        let sb = provider.create(&CreateSpec::new()).await.unwrap();
        create.push(t.elapsed());
        let t = Instant::now();
        sb.stop().await.unwrap();
        stop.push(t.elapsed());
        let t = Instant::now();
        sb.destroy().await.unwrap();
        destroy.push(t.elapsed());
    }
    println!("create on an instant server: {}", stats(create));
    println!("stop on an instant server: {}", stats(stop));
    println!("destroy on an instant server: {}", stats(destroy));

    let provider = builder(base).log_follow(LogFollow::Poll).build().unwrap();
    let sandbox = provider.get("sb-bench").await.unwrap();
    let rss_before = peak_rss_kib();
    let t = Instant::now();
    // 32 MiB in 1 KiB lines.
    let mut process = sandbox
        .exec(&Command::shell(
            "head -c 33554432 /dev/zero | tr '\\0' a | fold -w 1023; sleep 1",
        ))
        .await
        .unwrap();
    let mut bytes = 0usize;
    while let Some(event) = process.next_event().await {
        match event.unwrap() {
            ProcessEvent::Stdout(b) | ProcessEvent::Stderr(b) => bytes += b.len(),
            _ => {}
        }
    }
    let rss_after = peak_rss_kib();
    println!(
        "32 MiB of output followed by polling: {bytes} bytes in {:.2} s, peak RSS {} MiB -> {} MiB (growth {:.1} MiB; process start {} MiB)",
        t.elapsed().as_secs_f64(),
        rss_before / 1024,
        rss_after / 1024,
        (rss_after - rss_before) as f64 / 1024.0,
        rss_start / 1024
    );
}
