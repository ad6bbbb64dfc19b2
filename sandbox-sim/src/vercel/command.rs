//! Commands (PROTOCOL.md §6): real processes of the session's `local` sandbox, their output
//! kept as `{"stream", "data"}` lines for the session's life, and the NDJSON streams that
//! replay and follow it.

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::state::{Session, error, lock, now_ms};
use super::{CWD, Settings};
use crate::SimResponse;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use sandbox_sdk_core::{ErrorKind, ExitStatus, ProcessEvent};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The NDJSON content type, exactly as the JS SDK checks it.
pub(crate) const NDJSON: &str = "application/x-ndjson";

/// One stream's pending bytes: an incomplete UTF-8 sequence held back until the rest arrives.
#[derive(Default)]
struct Utf8Tail(Vec<u8>);

impl Utf8Tail {
    /// The text of `pending + chunk` up to the last complete character (invalid bytes
    /// replaced), keeping an incomplete final sequence for the next chunk.
    fn push(&mut self, chunk: &[u8]) -> String {
        self.0.extend_from_slice(chunk);
        let cut = match std::str::from_utf8(&self.0) {
            Ok(_) => self.0.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.0.len(),
        };
        let rest = self.0.split_off(cut);
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0 = rest;
        text
    }

    fn flush(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0.clear();
        text
    }
}

#[derive(Default)]
struct Out {
    /// `(is stderr, text)` in arrival order.
    lines: Vec<(bool, String)>,
    exit: Option<i32>,
    duration: Option<u64>,
    tails: [Utf8Tail; 2],
}

/// One command of a session.
pub(crate) struct Cmd {
    pub id: String,
    name: String,
    args: Vec<String>,
    cwd: String,
    session: String,
    started_at: u64,
    /// The process group (the local process's pid), for signals; 0 for one that never started.
    pgid: i32,
    out: Mutex<Out>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Cmd {
    pub fn to_json(&self) -> Value {
        let out = lock(&self.out);
        let mut c = json!({
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "cwd": self.cwd,
            "sessionId": self.session,
            "exitCode": out.exit,
            "startedAt": self.started_at,
        });
        if let Some(d) = out.duration {
            c["durationMs"] = json!(d);
        }
        c
    }

    pub fn exited(&self) -> bool {
        lock(&self.out).exit.is_some()
    }

    /// Sends `signal` to the command's process group while it runs.
    pub fn signal(&self, signal: i32) {
        if self.pgid <= 0 || self.exited() {
            return;
        }
        if let Ok(sig) = nix::sys::signal::Signal::try_from(signal) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid), sig);
        }
    }

    fn push(&self, stderr: bool, chunk: &[u8]) {
        {
            let mut out = lock(&self.out);
            let text = out.tails[usize::from(stderr)].push(chunk);
            if !text.is_empty() {
                out.lines.push((stderr, text));
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    fn finish(&self, code: i32, began: Instant) {
        {
            let mut out = lock(&self.out);
            for stderr in [false, true] {
                let text = out.tails[usize::from(stderr)].flush();
                if !text.is_empty() {
                    out.lines.push((stderr, text));
                }
            }
            out.exit = Some(code);
            out.duration = Some(began.elapsed().as_millis() as u64);
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Waits until the command exits.
    pub async fn wait(&self) {
        let mut rx = self.changed.subscribe();
        while !self.exited() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// The NDJSON stream of this command: `head` first (the `{"command"}` line of a waited
    /// start), then, with `logs`, every output line from the first, following until the exit,
    /// then with `tail` the finished `{"command"}` line. Cut after `cut` when set.
    pub fn ndjson(
        self: &Arc<Self>,
        head: bool,
        logs: bool,
        tail: bool,
        cut: Option<Duration>,
    ) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
        enum Step {
            Head,
            Lines(usize),
            Done,
        }
        let rx = self.changed.subscribe();
        let start = if head { Step::Head } else { Step::Lines(0) };
        let stream = futures::stream::unfold(
            (self.clone(), rx, start),
            move |(cmd, mut rx, step)| async move {
                let line = |v: Value| Bytes::from(format!("{v}\n"));
                match step {
                    Step::Done => None,
                    Step::Head => {
                        let first = line(json!({ "command": cmd.to_json() }));
                        Some((Ok(first), (cmd, rx, Step::Lines(0))))
                    }
                    Step::Lines(mut i) => loop {
                        rx.mark_unchanged();
                        let next = {
                            let out = lock(&cmd.out);
                            if logs && i < out.lines.len() {
                                let (stderr, text) = &out.lines[i];
                                let stream = if *stderr { "stderr" } else { "stdout" };
                                Some(Some(json!({ "stream": stream, "data": text })))
                            } else if out.exit.is_some() {
                                Some(None)
                            } else {
                                None
                            }
                        };
                        match next {
                            Some(Some(v)) => {
                                i += 1;
                                return Some((Ok(line(v)), (cmd, rx, Step::Lines(i))));
                            }
                            Some(None) if tail => {
                                let last = line(json!({ "command": cmd.to_json() }));
                                return Some((Ok(last), (cmd, rx, Step::Done)));
                            }
                            Some(None) => return None,
                            None => {
                                if rx.changed().await.is_err() {
                                    let closed = json!({ "stream": "error", "data": {
                                        "code": "sandbox_stream_closed",
                                        "message": "Sandbox stream was closed and is not accepting commands.",
                                    }});
                                    return Some((Ok(line(closed)), (cmd, rx, Step::Done)));
                                }
                            }
                        }
                    },
                }
            },
        );
        match cut {
            Some(after) => cut_at(stream.boxed(), after),
            None => stream.boxed(),
        }
    }
}

/// `body` until `after` has passed, then a reset (Vercel's edge cutting a long response).
pub(crate) fn cut_at(
    body: BoxStream<'static, Result<Bytes, std::io::Error>>,
    after: Duration,
) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    let deadline = Instant::now() + after;
    futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(item)) => Some((item, Some(body))),
            Ok(None) => None,
            Err(_) => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "terminated by the edge",
                )),
                None,
            )),
        }
    })
    .boxed()
}

/// `POST …/cmd` (PROTOCOL.md §6.1): starts the command; detached answers `{command}`, `wait`
/// streams it.
pub(crate) async fn start(
    settings: &Settings,
    session: &Arc<Session>,
    body: &Map<String, Value>,
) -> SimResponse {
    let bad = |m: &str| error(400, "bad_request", m);
    let Some(program) = body
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    else {
        return bad("`command` is required and must be a non-empty string.");
    };
    let args: Vec<String> = match body.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Some(_) => return bad("`args` must be an array of strings."),
    };
    let env: BTreeMap<String, String> = match body.get("env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => match serde_json::from_value(v.clone()) {
            Ok(env) => env,
            Err(_) => return bad("`env` must be an object of strings."),
        },
    };
    let flag = |k: &str| body.get(k).and_then(Value::as_bool).unwrap_or(false);
    let (wait, logs) = (flag("wait"), flag("logs"));
    let timeout = match body.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) if ms >= 100 => Some(Duration::from_millis(ms)),
            _ => return bad("`timeout` must be an integer of at least 100 (milliseconds)."),
        },
    };
    let cwd = body
        .get("cwd")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .unwrap_or(CWD);
    if let Err(refused) = session.ready().await {
        return refused;
    }
    let (shown, host) = session.disk.resolve(CWD, cwd);
    if !host.is_dir() {
        return bad(&format!("The working directory {shown} does not exist."));
    }
    let mut command = sandbox_sdk_core::Command::new(program)
        .args(args.iter().cloned())
        .cwd(host.to_string_lossy())
        .env("HOME", session.disk.work().to_string_lossy())
        .background();
    for (k, v) in session.env.iter().chain(env.iter()) {
        command = command.env(k, v);
    }
    let began = Instant::now();
    let started = sandbox_sdk_core::Sandbox::exec(&session.disk.local, &command).await;
    let (process, pgid) = match started {
        Ok(p) => {
            let pgid = p.pid().parse().unwrap_or(0);
            (Some(p), pgid)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => (None, 0),
        Err(e) => return error(500, "internal_server_error", &e.to_string()),
    };
    let cmd = Arc::new(Cmd {
        id: format!(
            "cmd_{}",
            crate::random_from(b"abcdefghijklmnopqrstuvwxyz0123456789", 24)
        ),
        name: program.to_owned(),
        args,
        cwd: shown,
        session: session.id.clone(),
        started_at: now_ms(),
        pgid,
        out: Mutex::default(),
        changed: tokio::sync::watch::channel(0).0,
    });
    lock(&session.commands).push(cmd.clone());
    match process {
        None => {
            // As a shell reports a program it cannot find.
            cmd.push(true, format!("{program}: command not found\n").as_bytes());
            cmd.finish(127, began);
        }
        Some(process) => {
            tokio::spawn(pump(process, cmd.clone(), began));
            if let Some(limit) = timeout {
                let weak = Arc::downgrade(&cmd);
                tokio::spawn(async move {
                    tokio::time::sleep(limit).await;
                    if let Some(cmd) = weak.upgrade() {
                        cmd.signal(9);
                    }
                });
            }
        }
    }
    if wait {
        SimResponse::stream(200, NDJSON, cmd.ndjson(true, logs, true, settings.edge_cut))
    } else {
        SimResponse::json(200, &json!({ "command": cmd.to_json() }))
    }
}

/// Reads a process's events once into its command.
async fn pump(mut process: sandbox_sdk_core::Process, cmd: Arc<Cmd>, began: Instant) {
    let code = loop {
        match process.next_event().await {
            Some(Ok(ProcessEvent::Stdout(b))) => cmd.push(false, &b),
            Some(Ok(ProcessEvent::Stderr(b))) => cmd.push(true, &b),
            Some(Ok(ProcessEvent::Exit(status))) => break exit_code(&status),
            Some(Err(_)) | None => break 137,
        }
    };
    cmd.finish(code, began);
}

/// The exit code Vercel reports: the code, or `128 + signal` for a killed command.
fn exit_code(status: &ExitStatus) -> i32 {
    match (status.code, status.signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 137,
    }
}

/// The command `id` of `session`, or the 404.
pub(crate) fn find(session: &Session, id: &str) -> Result<Arc<Cmd>, SimResponse> {
    lock(&session.commands)
        .iter()
        .find(|c| c.id == id)
        .cloned()
        .ok_or_else(|| error(404, "not_found", &format!("Command {id} not found")))
}

/// `GET …/cmd/{id}[?wait=true]` (PROTOCOL.md §6.4).
pub(crate) async fn get(settings: &Settings, cmd: Arc<Cmd>, wait: bool) -> SimResponse {
    if wait {
        let waited = async {
            cmd.wait().await;
        };
        match settings.edge_cut {
            Some(after) => {
                if tokio::time::timeout(after, waited).await.is_err() {
                    let reset = futures::stream::once(async {
                        Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "terminated by the edge",
                        ))
                    });
                    return SimResponse::stream(200, "application/json", reset.boxed());
                }
            }
            None => waited.await,
        }
    }
    SimResponse::json(200, &json!({ "command": cmd.to_json() }))
}

/// `POST …/cmd/{id}/kill` `{"signal"}` (PROTOCOL.md §6.4; SIGTERM when none is given).
pub(crate) fn kill(cmd: &Cmd, body: &Map<String, Value>) -> SimResponse {
    let signal = match body.get("signal") {
        None | Some(Value::Null) => 15,
        Some(v) => match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) if nix::sys::signal::Signal::try_from(n).is_ok() => n,
            _ => {
                return error(
                    400,
                    "bad_request",
                    "`signal` must be a POSIX signal number.",
                );
            }
        },
    };
    cmd.signal(signal);
    SimResponse::json(200, &json!({ "command": cmd.to_json() }))
}
