//! Commands (PROTOCOL.md §6): starting real processes of the session's `local` sandbox,
//! feeding their output into their [`Cmd`] record, and the get, wait and kill endpoints.

// An endpoint's refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::lock;
use super::output::{Cmd, NDJSON};
use super::state::{Session, error};
use super::{CWD, Settings};
use crate::SimResponse;
use base64::Engine as _;
use futures::StreamExt;
use sandbox_sdk_core::{ErrorKind, ExitStatus, ProcessEvent};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

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
    let attach_stdin = match body.get("attachStdin") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad("`attachStdin` must be a boolean."),
    };
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
    let Ok(host) = host else {
        return bad(&format!("The working directory {shown} does not exist."));
    };
    if !host.is_dir() {
        return bad(&format!("The working directory {shown} does not exist."));
    }
    let mut command = sandbox_sdk_core::Command::new(program)
        .args(args.iter().cloned())
        .cwd(host.to_string_lossy())
        .env("HOME", session.disk.work().to_string_lossy())
        .background();
    if attach_stdin {
        command = command.stdin();
    }
    for (k, v) in session.env.iter().chain(env.iter()) {
        command = command.env(k, v);
    }
    let began = Instant::now();
    let started = sandbox_sdk_core::Sandbox::exec(&session.disk.local, &command).await;
    let (process, pgid, stdin) = match started {
        Ok(mut p) => {
            let pgid = p.pid().parse().unwrap_or(0);
            let stdin = p.take_stdin();
            (Some(p), pgid, stdin)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => (None, 0, None),
        Err(e) => return error(500, "internal_server_error", &e.to_string()),
    };
    let cmd = Arc::new(Cmd::new(
        program.to_owned(),
        args,
        shown,
        session.id.clone(),
        pgid,
        attach_stdin,
        stdin,
    ));
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

/// How long one stdin write may wait on a process that does not read before answering 504 with
/// the progress made (PROTOCOL.md §6.6).
const STDIN_WRITE_WAIT: Duration = Duration::from_secs(10);

/// The 400 of a command whose stdin takes no input: started without `attachStdin`, exited, or
/// closed (PROTOCOL.md §6.6).
fn stdin_unavailable(why: &str) -> SimResponse {
    error(400, "command_stdin_unavailable", why)
}

/// `{"command", "bytesWritten"}`, the answer of a stdin request.
fn stdin_answer(cmd: &Cmd, written: u64) -> SimResponse {
    SimResponse::json(
        200,
        &json!({ "command": cmd.to_json(), "bytesWritten": written }),
    )
}

/// `POST …/cmd/{id}/stdin` `{"data"?: base64, "offset"?: n, "close"?: bool}` (PROTOCOL.md §6.6):
/// writes the bytes past what the stream already took (a chunk whose `offset` is below
/// `bytesWritten` skips the overlap, so a resend is harmless; one above it is a 400), then
/// closes stdin with `close`. Answers `{command, bytesWritten}`. An empty request writes
/// nothing and reports the count.
pub(crate) async fn stdin(cmd: &Cmd, body: &[u8]) -> SimResponse {
    let body = match super::state::body_object(body) {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let bad = |m: &str| error(400, "bad_request", m);
    let data = match body.get("data") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => {
            match base64::engine::general_purpose::STANDARD.decode(text.as_bytes()) {
                Ok(bytes) => bytes,
                Err(_) => return bad("`data` must be base64."),
            }
        }
        Some(_) => return bad("`data` must be a base64 string."),
    };
    let offset = match body.get("offset") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) => Some(n),
            None => return bad("`offset` must be a non-negative integer."),
        },
    };
    let close = match body.get("close") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad("`close` must be a boolean."),
    };
    let mut pipe = cmd.stdin.lock().await;
    if !pipe.attached {
        return stdin_unavailable("The command was not started with stdin attached.");
    }
    // A resent close is answered as the first one was, even once the process has exited
    // after reading the end of its input.
    if close && pipe.closed && data.is_empty() {
        return stdin_answer(cmd, pipe.written);
    }
    if cmd.exited() {
        return stdin_unavailable("The command has exited and is not reading stdin.");
    }
    let start = offset.unwrap_or(pipe.written);
    if start > pipe.written {
        return SimResponse::json(
            400,
            &json!({ "error": {
                "code": "bad_request",
                "message": format!(
                    "`offset` {start} is past the {} bytes written to stdin.",
                    pipe.written
                ),
                "bytesWritten": pipe.written,
            }}),
        );
    }
    let skip = usize::try_from(pipe.written - start).unwrap_or(usize::MAX);
    let fresh = data.get(skip..).unwrap_or_default();
    if pipe.closed || pipe.writer.is_none() {
        // A resent close (or empty read) of a stream already closed takes nothing new.
        if pipe.closed && fresh.is_empty() {
            return stdin_answer(cmd, pipe.written);
        }
        return stdin_unavailable("The command's stdin is closed.");
    }
    let mut sent = 0;
    let deadline = Instant::now() + STDIN_WRITE_WAIT;
    while sent < fresh.len() {
        let Some(writer) = pipe.writer.as_mut() else {
            break;
        };
        match tokio::time::timeout_at(deadline, writer.write(&fresh[sent..])).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                // The process stopped reading (a broken pipe).
                pipe.writer = None;
                pipe.written += sent as u64;
                return stdin_unavailable("The command stopped reading stdin.");
            }
            Ok(Ok(n)) => sent += n,
            Err(_) => {
                pipe.written += sent as u64;
                return SimResponse::json(
                    504,
                    &json!({ "error": {
                        "code": "gateway_timeout",
                        "message": "The command is not reading stdin fast enough.",
                        "bytesWritten": pipe.written,
                    }}),
                );
            }
        }
    }
    pipe.written += sent as u64;
    if let Some(writer) = pipe.writer.as_mut()
        && sent > 0
    {
        let _ = writer.flush().await;
    }
    if close {
        if let Some(mut writer) = pipe.writer.take() {
            let _ = writer.shutdown().await;
        }
        pipe.closed = true;
    }
    stdin_answer(cmd, pipe.written)
}
