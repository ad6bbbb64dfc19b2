//! `process.Process`: processes as envd runs them (PROTOCOL.md §2.3). Every process is a real
//! background process of the sandbox's `local` sandbox; a pump reads its output once and fans
//! it out to the `Start` stream and any `Connect` streams, so a dropped stream never stops it.

use super::connect::user_of;
use super::connect::{self, RpcError, StreamTx, b64, unb64};
use super::{Sandbox, lock};
use crate::{SimRequest, SimResponse};
use sandbox_sdk_core::{Command, ErrorKind, ExitStatus, ProcessControl, ProcessEvent, Stdin};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// How long an ended process stays reachable by `Connect`.
const KEEP_ENDED: Duration = Duration::from_secs(30);

/// How a process ended, as its streams report it.
#[derive(Clone, Debug)]
enum End {
    /// The `end` event's fields.
    Exit(Value),
    /// An end-stream error instead of an `end` event.
    Error(RpcError),
}

#[derive(Clone, Debug)]
enum Msg {
    Data(Value),
    End(End),
}

#[derive(Default)]
struct Subscribers {
    senders: Vec<mpsc::UnboundedSender<Msg>>,
    end: Option<End>,
}

/// One process envd knows.
pub(crate) struct SimProcess {
    pid: u32,
    tag: Option<String>,
    config: Value,
    pty: bool,
    stdin: tokio::sync::Mutex<Option<Stdin>>,
    subscribers: Mutex<Subscribers>,
    control: Arc<dyn ProcessControl>,
}

impl SimProcess {
    fn ended(&self) -> bool {
        lock(&self.subscribers).end.is_some()
    }

    /// Output from now on, or how it ended.
    fn subscribe(&self) -> Result<mpsc::UnboundedReceiver<Msg>, End> {
        let mut subs = lock(&self.subscribers);
        if let Some(end) = &subs.end {
            return Err(end.clone());
        }
        let (tx, rx) = mpsc::unbounded_channel();
        subs.senders.push(tx);
        Ok(rx)
    }

    fn publish(&self, msg: Msg) {
        let mut subs = lock(&self.subscribers);
        if let Msg::End(end) = &msg {
            subs.end = Some(end.clone());
        }
        subs.senders.retain(|tx| tx.send(msg.clone()).is_ok());
        if subs.end.is_some() {
            subs.senders.clear();
        }
    }
}

/// Serves one `process.Process` call.
pub(crate) async fn handle(sb: &Arc<Sandbox>, request: SimRequest) -> SimResponse {
    let method = request.path.rsplit('/').next().unwrap_or("").to_owned();
    let streaming = matches!(method.as_str(), "Start" | "Connect" | "StreamInput");
    let result = match method.as_str() {
        "Start" => start(sb, &request).await,
        "Connect" => attach(sb, &request),
        "StreamInput" => stream_input(sb, &request).await,
        "List" => Ok(list(sb, &request)),
        "SendInput" => send_input(sb, &request).await,
        "CloseStdin" => close_stdin(sb, &request).await,
        "SendSignal" => send_signal(sb, &request).await,
        "Update" => update(sb, &request).await,
        _ => Err(RpcError::new(
            "unimplemented",
            format!("process.Process/{method} is not implemented"),
        )),
    };
    match result {
        Ok(response) => response,
        Err(e) if streaming => connect::stream_error(&request, &e),
        Err(e) => connect::unary_err(&e),
    }
}

fn selector(message: &Value) -> Result<(Option<u32>, Option<String>), RpcError> {
    let p = &message["process"];
    let pid = p["pid"]
        .as_u64()
        .or_else(|| p["pid"].as_str().and_then(|s| s.parse().ok()))
        .map(|n| n as u32);
    let tag = p["tag"].as_str().map(str::to_owned);
    if pid.is_none() && tag.is_none() {
        return Err(RpcError::invalid("process selector is required"));
    }
    Ok((pid, tag))
}

fn find(sb: &Sandbox, message: &Value) -> Result<Arc<SimProcess>, RpcError> {
    let (pid, tag) = selector(message)?;
    let processes = lock(&sb.processes);
    let found = match (pid, &tag) {
        (Some(pid), _) => processes.get(&pid).cloned(),
        (None, Some(tag)) => processes
            .values()
            .filter(|p| p.tag.as_deref() == Some(tag))
            .max_by_key(|p| p.pid)
            .cloned(),
        (None, None) => None,
    };
    found.ok_or_else(|| match (pid, tag) {
        (Some(pid), _) => RpcError::not_found(format!("process with pid {pid} not found")),
        (None, tag) => RpcError::not_found(format!(
            "process with tag {} not found",
            tag.unwrap_or_default()
        )),
    })
}

fn shell_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

async fn start(sb: &Arc<Sandbox>, request: &SimRequest) -> Result<SimResponse, RpcError> {
    let message = connect::request_message(request)?;
    let user = user_of(request)?;
    let config = &message["process"];
    let cmd = config["cmd"]
        .as_str()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| RpcError::invalid("process.cmd is required"))?;
    let args: Vec<String> = config["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let envs: BTreeMap<String, String> =
        serde_json::from_value(config["envs"].clone()).unwrap_or_default();
    let cwd = match config["cwd"].as_str().filter(|c| !c.is_empty()) {
        Some(c) => {
            let host = sb
                .resolve(c)
                .1
                .map_err(|e| RpcError::invalid(format!("cwd '{c}': {e}")))?;
            if !host.is_dir() {
                return Err(RpcError::invalid(format!("cwd '{c}' does not exist")));
            }
            host
        }
        None => sb.home().to_owned(),
    };
    let pty = message["pty"]["size"].as_object().map(|size| {
        let n = |k: &str| size.get(k).and_then(Value::as_u64).unwrap_or(0);
        (n("cols"), n("rows"))
    });
    let stdin = message["stdin"].as_bool().unwrap_or(true) || pty.is_some();
    let tag = message["tag"].as_str().map(str::to_owned);
    let mut argv = vec![cmd.to_owned()];
    argv.extend(args.iter().cloned());
    let mut command = match pty {
        Some((cols, rows)) => {
            let line: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
            Command::new("script").args([
                "-q".to_owned(),
                "-f".to_owned(),
                "-e".to_owned(),
                "-c".to_owned(),
                format!("stty cols {cols} rows {rows}; exec {}", line.join(" ")),
                "/dev/null".to_owned(),
            ])
        }
        None => Command::new(cmd).args(args.iter().cloned()),
    };
    command = command
        .cwd(cwd.to_string_lossy())
        .env("HOME", sb.home().to_string_lossy())
        .env("USER", &user)
        .background();
    for (k, v) in &envs {
        command = command.env(k, v);
    }
    if stdin {
        command = command.stdin();
    }
    if let Some(t) = &tag {
        command = command.tag(t);
    }
    if let Some(limit) = connect::deadline(request) {
        command = command.timeout(limit);
    }
    let mut process = sandbox_sdk_core::Sandbox::exec(&sb.local, &command)
        .await
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => RpcError::new(
                "internal",
                format!("error starting process: fork/exec {cmd}: no such file or directory"),
            ),
            _ => RpcError::new("internal", format!("error starting process: {e}")),
        })?;
    let pid: u32 = process.pid().parse().unwrap_or(0);
    let proc = Arc::new(SimProcess {
        pid,
        tag,
        config: config.clone(),
        pty: pty.is_some(),
        stdin: tokio::sync::Mutex::new(process.take_stdin()),
        subscribers: Mutex::new(Subscribers::default()),
        control: process.control(),
    });
    let Ok(rx) = proc.subscribe() else {
        return Err(RpcError::new("internal", "process ended before it started"));
    };
    lock(&sb.processes).insert(pid, proc.clone());
    tokio::spawn(pump(process, proc.clone(), Arc::downgrade(sb)));
    let (response, tx) = connect::stream(request);
    tokio::spawn(forward(
        tx,
        pid,
        Ok(rx),
        connect::keepalive_interval(request),
        None,
    ));
    Ok(response)
}

/// Reads a process's events once and publishes them; forgets it 30 s after its end.
async fn pump(mut process: sandbox_sdk_core::Process, proc: Arc<SimProcess>, sb: Weak<Sandbox>) {
    let end = loop {
        match process.next_event().await {
            Some(Ok(ProcessEvent::Stdout(b))) => {
                let key = if proc.pty { "pty" } else { "stdout" };
                proc.publish(Msg::Data(json!({ key: b64(&b) })));
            }
            Some(Ok(ProcessEvent::Stderr(b))) => {
                proc.publish(Msg::Data(json!({ "stderr": b64(&b) })));
            }
            Some(Ok(ProcessEvent::Exit(status))) => break End::Exit(end_event(&status)),
            Some(Err(e)) if e.kind() == ErrorKind::Timeout => {
                break End::Error(RpcError::new(
                    "deadline_exceeded",
                    "context deadline exceeded",
                ));
            }
            Some(Err(e)) => break End::Error(RpcError::new("unknown", e.to_string())),
            None => break End::Error(RpcError::new("internal", "process output ended")),
        }
    };
    proc.publish(Msg::End(end));
    *proc.stdin.lock().await = None;
    tokio::time::sleep(KEEP_ENDED).await;
    if let Some(sb) = sb.upgrade() {
        let mut processes = lock(&sb.processes);
        if processes
            .get(&proc.pid)
            .is_some_and(|p| Arc::ptr_eq(p, &proc))
        {
            processes.remove(&proc.pid);
        }
    }
}

/// Go's `os/exec` wording of how a process ended.
fn end_event(status: &ExitStatus) -> Value {
    match (status.code, status.signal) {
        (Some(0), _) => json!({"exited": true, "status": "exit status 0"}),
        (Some(code), _) => {
            let text = format!("exit status {code}");
            json!({"exitCode": code, "exited": true, "status": text, "error": text})
        }
        (None, signal) => {
            let text = format!("signal: {}", signal_name(signal.unwrap_or(0)));
            json!({"exitCode": -1, "status": text, "error": text})
        }
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        1 => "hangup".into(),
        2 => "interrupt".into(),
        3 => "quit".into(),
        6 => "aborted".into(),
        9 => "killed".into(),
        11 => "segmentation fault".into(),
        13 => "broken pipe".into(),
        15 => "terminated".into(),
        n => format!("signal {n}"),
    }
}

/// Feeds one stream: `start`, then data and keepalives, then the end (or the deadline).
async fn forward(
    tx: StreamTx,
    pid: u32,
    source: Result<mpsc::UnboundedReceiver<Msg>, End>,
    keepalive: Duration,
    deadline: Option<Duration>,
) {
    if !tx.send(&json!({"event": {"start": {"pid": pid}}})).await {
        return;
    }
    let mut rx = match source {
        Ok(rx) => rx,
        Err(end) => return finish(tx, Some(end)).await,
    };
    let deadline = deadline.map(|d| tokio::time::Instant::now() + d);
    loop {
        let until_deadline = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(Msg::Data(data)) => {
                    if !tx.send(&json!({"event": {"data": data}})).await {
                        return;
                    }
                }
                Some(Msg::End(end)) => return finish(tx, Some(end)).await,
                None => return finish(tx, None).await,
            },
            _ = tokio::time::sleep(keepalive) => {
                if !tx.send(&json!({"event": {"keepalive": {}}})).await {
                    return;
                }
            }
            _ = until_deadline => {
                let e = RpcError::new("deadline_exceeded", "context deadline exceeded");
                return tx.end(Some(&e)).await;
            }
            _ = tx.closed() => return,
        }
    }
}

async fn finish(tx: StreamTx, end: Option<End>) {
    match end {
        Some(End::Exit(fields)) => {
            if tx.send(&json!({"event": {"end": fields}})).await {
                tx.end(None).await;
            }
        }
        Some(End::Error(e)) => tx.end(Some(&e)).await,
        None => {
            tx.end(Some(&RpcError::new("internal", "process stream ended")))
                .await
        }
    }
}

/// `Connect`: `start` at once, then only output from now on; an ended process replays its end.
fn attach(sb: &Sandbox, request: &SimRequest) -> Result<SimResponse, RpcError> {
    let message = connect::request_message(request)?;
    let proc = find(sb, &message)?;
    let (response, tx) = connect::stream(request);
    let source = proc.subscribe();
    let keepalive = connect::keepalive_interval(request);
    tokio::spawn(forward(
        tx,
        proc.pid,
        source,
        keepalive,
        connect::deadline(request),
    ));
    Ok(response)
}

fn list(sb: &Sandbox, request: &SimRequest) -> SimResponse {
    let processes: Vec<Value> = lock(&sb.processes)
        .values()
        .filter(|p| !p.ended())
        .map(|p| {
            let mut v = json!({"config": p.config, "pid": p.pid});
            if let Some(tag) = &p.tag {
                v["tag"] = json!(tag);
            }
            v
        })
        .collect();
    connect::unary_ok(request, &json!({ "processes": processes }))
}

async fn write_input(proc: &SimProcess, input: &Value) -> Result<(), RpcError> {
    let data = match (input["stdin"].as_str(), input["pty"].as_str()) {
        (Some(s), _) | (None, Some(s)) => unb64(s)?,
        (None, None) => return Ok(()),
    };
    let mut stdin = proc.stdin.lock().await;
    let Some(writer) = stdin.as_mut() else {
        return Err(RpcError::new(
            "failed_precondition",
            format!("stdin is not enabled for process with pid {}", proc.pid),
        ));
    };
    let written = async {
        writer.write_all(&data).await?;
        writer.flush().await
    };
    written
        .await
        .map_err(|e| RpcError::new("internal", format!("error writing to stdin: {e}")))
}

async fn send_input(sb: &Sandbox, request: &SimRequest) -> Result<SimResponse, RpcError> {
    let message = connect::request_message(request)?;
    let proc = find(sb, &message)?;
    write_input(&proc, &message["input"]).await?;
    Ok(connect::unary_ok(request, &json!({})))
}

/// `StreamInput`: `start{process}` first, then `data{input}` and `keepalive` messages.
async fn stream_input(sb: &Sandbox, request: &SimRequest) -> Result<SimResponse, RpcError> {
    let mut proc = None;
    for raw in connect::envelopes(request)? {
        let message: Value = serde_json::from_slice(&raw)
            .map_err(|e| RpcError::invalid(format!("unmarshal message: {e}")))?;
        if let Some(start) = message.get("start") {
            proc = Some(find(sb, start)?);
        } else if let Some(data) = message.get("data") {
            let p = proc.as_ref().ok_or_else(|| {
                RpcError::new("failed_precondition", "first message must be start")
            })?;
            write_input(p, &data["input"]).await?;
        }
    }
    let (response, tx) = connect::stream(request);
    tokio::spawn(async move {
        if tx.send(&json!({})).await {
            tx.end(None).await;
        }
    });
    Ok(response)
}

async fn close_stdin(sb: &Sandbox, request: &SimRequest) -> Result<SimResponse, RpcError> {
    let message = connect::request_message(request)?;
    let proc = find(sb, &message)?;
    if proc.pty {
        return Err(RpcError::new(
            "failed_precondition",
            "cannot close stdin of a PTY process; send 0x04 instead",
        ));
    }
    if let Some(mut writer) = proc.stdin.lock().await.take() {
        let _ = writer.shutdown().await;
    }
    Ok(connect::unary_ok(request, &json!({})))
}

async fn send_signal(sb: &Sandbox, request: &SimRequest) -> Result<SimResponse, RpcError> {
    let message = connect::request_message(request)?;
    let proc = find(sb, &message)?;
    let signal = match &message["signal"] {
        Value::String(s) if s == "SIGNAL_SIGKILL" => 9,
        Value::String(s) if s == "SIGNAL_SIGTERM" => 15,
        Value::Number(n) if matches!(n.as_u64(), Some(9) | Some(15)) => n.as_u64().unwrap_or(9),
        other => return Err(RpcError::invalid(format!("invalid signal: {other}"))),
    };
    if !proc.ended() {
        if signal == 9 {
            proc.control
                .kill()
                .await
                .map_err(|e| RpcError::new("internal", format!("error sending signal: {e}")))?;
        } else {
            use nix::sys::signal::{Signal, killpg};
            let _ = killpg(nix::unistd::Pid::from_raw(proc.pid as i32), Signal::SIGTERM);
        }
    }
    Ok(connect::unary_ok(request, &json!({})))
}

/// `Update`: resizes a PTY by setting the size of the terminal its command runs on.
async fn update(sb: &Sandbox, request: &SimRequest) -> Result<SimResponse, RpcError> {
    let message = connect::request_message(request)?;
    let proc = find(sb, &message)?;
    let Some(size) = message["pty"]["size"].as_object() else {
        return Ok(connect::unary_ok(request, &json!({})));
    };
    if !proc.pty {
        return Err(RpcError::invalid("process has no PTY"));
    }
    let n = |k: &str| size.get(k).and_then(Value::as_u64).unwrap_or(0);
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", proc.pid))
        .unwrap_or_default();
    let tty = children
        .split_whitespace()
        .find_map(|child| std::fs::read_link(format!("/proc/{child}/fd/0")).ok())
        .filter(|t| t.starts_with("/dev/pts"))
        .ok_or_else(|| RpcError::new("internal", "cannot find the process's terminal"))?;
    let status = tokio::process::Command::new("stty")
        .arg("-F")
        .arg(&tty)
        .args([
            "cols",
            &n("cols").to_string(),
            "rows",
            &n("rows").to_string(),
        ])
        .status()
        .await
        .map_err(|e| RpcError::new("internal", format!("error resizing the terminal: {e}")))?;
    if !status.success() {
        return Err(RpcError::new("internal", "error resizing the terminal"));
    }
    Ok(connect::unary_ok(request, &json!({})))
}

/// Kills every running process of a sandbox (its kill, or a pause without memory).
pub(crate) fn end_all(sb: &Sandbox) {
    let processes: Vec<Arc<SimProcess>> = lock(&sb.processes).values().cloned().collect();
    for proc in processes.into_iter().filter(|p| !p.ended()) {
        let control = proc.control.clone();
        tokio::spawn(async move {
            let _ = control.kill().await;
        });
    }
}
