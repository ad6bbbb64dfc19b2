//! The toolbox (`/toolbox/{sandboxId}/…`): the proxy's checks (credentials, a started
//! sandbox), one-shot execution, sessions and their commands' logs, metrics; files are in
//! [`super::files`], the log WebSocket in [`super::follow`].

// A refusal is its whole HTTP answer, made once per request: boxing it buys nothing.
#![allow(clippy::result_large_err)]

use super::api::{Api, json_answer};
use super::call::{Call, error};
use super::logs::{self, Shape};
use super::session::{Session, SessionCommand};
use crate::{SimRequest, SimResponse};
use http::Method;
use sandbox_sdk_core::time::format_rfc3339;
use sandbox_sdk_core::{Command as LocalCommand, ProcessEvent, Sandbox};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncWriteExt;

/// How often a synchronous session exec looks for its command's exit code during its first
/// [`EXIT_POLL_FAST_FOR`]; after that the pause doubles up to [`EXIT_POLL_MAX`]. (The v0.190
/// daemon looked every 50 ms; looking sooner keeps the simulator from adding latency of its
/// own to short commands.)
const EXIT_POLL: Duration = Duration::from_millis(1);

/// How long the exit code is looked for every [`EXIT_POLL`].
const EXIT_POLL_FAST_FOR: Duration = Duration::from_millis(100);

/// The longest pause between two looks for the exit code.
const EXIT_POLL_MAX: Duration = Duration::from_millis(20);

/// The operation name of a toolbox request (`s`: the segments after the sandbox id).
pub(crate) fn operation(method: &Method, s: &[&str]) -> &'static str {
    let m = method.as_str();
    match s {
        ["process", "execute"] => "exec",
        ["process", "session"] if m == "POST" => "session.create",
        ["process", "session", _, "exec"] => "exec",
        ["process", "session", _] if m == "DELETE" => "kill",
        ["process", "session", _, "command", _, "logs"] => "exec.output",
        ["process", "session", _, "command", _, "input"] => "stdin",
        ["process", "interpreter", "execute"] => "run_code",
        ["process", "interpreter", ..] => "code_contexts",
        ["process", "session", ..] => "exec.status",
        ["files"] if m == "GET" => "files.list",
        ["files"] if m == "DELETE" => "files.remove",
        ["files", "info"] => "files.stat",
        ["files", "download" | "bulk-download"] => "files.read",
        ["files", "bulk-upload" | "upload-v2"] => "files.write",
        ["files", "folder"] => "files.mkdir",
        ["files", "move"] => "files.move",
        ["system", "metrics"] => "metrics",
        _ => "other",
    }
}

/// Admits a toolbox request (`/toolbox/{sandboxId}/…`) from its head: the proxy's credential
/// checks (the API key, or the sandbox's preview token as `X-Daytona-Preview-Token` or
/// `?DAYTONA_SANDBOX_AUTH_KEY=`), then the body cap (file uploads and a command's stdin up to
/// [`crate::MAX_REQUEST_BODY`], JSON elsewhere). A preview token for a sandbox that does not
/// exist is let through, to the 404 [`handle`] answers.
pub(crate) fn admit(api: &Api, request: &SimRequest) -> Result<usize, SimResponse> {
    let segments = request.segments();
    let s: Vec<&str> = segments[2..].iter().map(String::as_str).collect();
    let bearer = request
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let preview = request
        .header("x-daytona-preview-token")
        .map(str::to_owned)
        .or_else(|| request.query_param("DAYTONA_SANDBOX_AUTH_KEY"));
    if bearer != Some(api.config.api_key.as_str()) {
        let Some(preview) = preview else {
            let message = match bearer {
                Some(_) => "authentication failed: Bearer token is invalid",
                None => "missing authentication: no bearer token, preview token or auth key",
            };
            return Err(proxy_error(request, 401, message));
        };
        if api.with(&segments[1], |r| r.preview_token == preview) == Some(false) {
            return Err(proxy_error(
                request,
                401,
                "authentication failed: preview token is invalid",
            ));
        }
    }
    Ok(match s.as_slice() {
        ["files", "bulk-upload" | "upload-v2"]
        | ["process", "session", _, "command", _, "input"] => crate::MAX_REQUEST_BODY,
        _ => crate::MAX_JSON_BODY,
    })
}

/// Answers an admitted toolbox request ([`admit`] checked its credentials).
pub(crate) async fn handle(api: Arc<Api>, mut request: SimRequest) -> SimResponse {
    let segments = request.segments();
    let sandbox_id = segments[1].clone();
    let s: Vec<&str> = segments[2..].iter().map(String::as_str).collect();
    let found = api.with(&sandbox_id, |r| {
        if r.state == "started" {
            r.touch();
        }
        (r.state, r.backing.clone(), r.disk.clone(), r.id.clone())
    });
    let (backing, disk, id) = match found {
        None => return proxy_error(&request, 404, "sandbox not found"),
        // The daemon of a sandbox that is not running (a snapshot or a fork leaves it running)
        // is unreachable: the proxy's empty 502.
        Some((state, ..)) if !matches!(state, "started" | "snapshotting" | "forking") => {
            return SimResponse::empty(502);
        }
        Some((_, backing, disk, id)) => (backing, disk, id),
    };
    let method = request.method.as_str().to_owned();
    if s.starts_with(&["process", "session"])
        && s.len() == 6
        && s[5] == "logs"
        && method == "GET"
        && let Some(upgrade) = request.take_upgrade()
        && is_websocket(&request)
    {
        let call = Call {
            api,
            request,
            sandbox_id: id,
            backing,
            disk,
        };
        let (sid, cid) = (s[2].to_owned(), s[4].to_owned());
        return super::follow::upgrade(call, upgrade, &sid, &cid);
    }
    if s == ["process", "interpreter", "execute"]
        && method == "GET"
        && let Some(upgrade) = request.take_upgrade()
        && is_websocket(&request)
    {
        let call = Call {
            api,
            request,
            sandbox_id: id,
            backing,
            disk,
        };
        return super::interpreter::upgrade(call, upgrade);
    }
    let call = Call {
        api,
        request,
        sandbox_id: id,
        backing,
        disk,
    };
    match (method.as_str(), s.as_slice()) {
        ("POST", ["process", "interpreter", "context"]) => super::interpreter::create(call).await,
        ("GET", ["process", "interpreter", "context"]) => super::interpreter::list(call).await,
        ("DELETE", ["process", "interpreter", "context", id]) => {
            let id = id.to_string();
            super::interpreter::delete(call, &id).await
        }
        ("POST", ["process", "execute"]) => execute(call).await,
        ("POST", ["process", "session"]) => create_session(call).await,
        ("GET", ["process", "session"]) => list_sessions(call),
        ("GET", ["process", "session", sid]) => get_session(call, sid),
        ("DELETE", ["process", "session", sid]) => delete_session(call, sid),
        ("POST", ["process", "session", sid, "exec"]) => session_exec(call, sid).await,
        ("GET", ["process", "session", sid, "command", cid]) => command_status(call, sid, cid),
        ("GET", ["process", "session", sid, "command", cid, "logs"]) => {
            command_logs(call, sid, cid)
        }
        ("POST", ["process", "session", sid, "command", cid, "input"]) => {
            command_input(call, sid, cid).await
        }
        ("GET", ["system", "metrics"]) => metrics(call).await,
        ("GET", ["work-dir" | "user-home-dir"]) => {
            let dir = call.backing.dir().to_string_lossy().into_owned();
            json_answer(200, &json!({ "dir": dir }))
        }
        (_, ["files", ..]) => super::files::handle(call, &s[1..]).await,
        _ => {
            let path = call.request.path.clone();
            call.error(404, &format!("404 page not found: {path}"))
        }
    }
}

fn is_websocket(request: &SimRequest) -> bool {
    request
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
}

fn proxy_error(request: &SimRequest, status: u16, message: &str) -> SimResponse {
    let mut answer = error(status, &request.method, &request.path, message);
    if let super::super::SimBody::Full(body) = &answer.body
        && let Ok(mut value) = serde_json::from_slice::<Value>(body)
    {
        value["source"] = json!("DAYTONA_PROXY");
        value["path"] = json!(request.path);
        answer = json_answer(status, &value);
    }
    answer
}

async fn execute(call: Call) -> SimResponse {
    let body: Value = match call.request.json() {
        Ok(b) => b,
        Err(e) => return call.coded(400, "INVALID_REQUEST_BODY", &e),
    };
    let Some(command) = body
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
    else {
        return call.coded(400, "INVALID_REQUEST_BODY", "command is required");
    };
    let timeout = body
        .get("timeout")
        .and_then(Value::as_u64)
        .filter(|t| *t > 0);
    let mut local = LocalCommand::new("bash").stdin();
    if let Some(cwd) = body
        .get("cwd")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    {
        local = local.cwd(cwd);
    }
    if let Some(envs) = body.get("envs").and_then(Value::as_object) {
        for (k, v) in envs {
            local = local.env(k.clone(), v.as_str().unwrap_or_default());
        }
    }
    let mut process = match call.backing.exec(&local).await {
        Ok(p) => p,
        Err(e) => return json_answer(200, &json!({ "exitCode": -1, "result": e.message() })),
    };
    let pid = process.pid().to_owned();
    call.api
        .with(&call.sandbox_id, |r| r.executing.push(pid.clone()));
    // The command text goes to the shell on stdin, stderr merged into stdout.
    if let Some(mut stdin) = process.take_stdin() {
        let script = format!("exec 2>&1\n{command}\n");
        let _ = stdin.write_all(script.as_bytes()).await;
        let _ = stdin.shutdown().await;
    }
    let collect = async {
        let mut result = Vec::new();
        let mut code = -1;
        while let Some(event) = process.next_event().await {
            match event {
                Ok(ProcessEvent::Stdout(b) | ProcessEvent::Stderr(b)) => {
                    result.extend_from_slice(&b)
                }
                Ok(ProcessEvent::Exit(status)) => {
                    code = status
                        .code
                        .unwrap_or_else(|| 128 + status.signal.unwrap_or(0));
                }
                Err(_) => break,
            }
        }
        (code, result)
    };
    let outcome = match timeout {
        Some(secs) => tokio::time::timeout(Duration::from_secs(secs), collect)
            .await
            .ok(),
        None => Some(collect.await),
    };
    call.api
        .with(&call.sandbox_id, |r| r.executing.retain(|p| *p != pid));
    match outcome {
        Some((code, result)) => json_answer(
            200,
            &json!({ "exitCode": code, "result": logs::text(&result) }),
        ),
        None => {
            // Dropping the foreground process killed its whole group.
            call.coded(408, "REQUEST_TIMEOUT", "command execution timeout")
        }
    }
}

async fn create_session(call: Call) -> SimResponse {
    let body: Value = match call.request.json() {
        Ok(b) => b,
        Err(e) => return call.coded(400, "INVALID_REQUEST_BODY", &e),
    };
    let Some(sid) = body
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return call.coded(400, "INVALID_REQUEST_BODY", "sessionId is required");
    };
    if sid == "entrypoint" {
        return call.error(400, "session id entrypoint is reserved");
    }
    if call.session(sid).is_some() {
        return call.error(409, "session already exists");
    }
    let dir = call
        .backing
        .dir()
        .parent()
        .unwrap_or(call.backing.dir())
        .join("daytona-sessions")
        .join(super::random_hex(16));
    let session = match Session::start(&call.backing, sid, dir).await {
        Ok(s) => s,
        Err(e) => return call.error(500, &e.to_string()),
    };
    let added = call.api.with(&call.sandbox_id, |r| {
        if r.sessions.contains_key(sid) {
            return false;
        }
        r.sessions.insert(sid.to_owned(), session.clone());
        true
    });
    if added != Some(true) {
        let pid = session.end();
        let _ = call.backing.kill_process(&pid).await;
        return call.error(409, "session already exists");
    }
    SimResponse::empty(201)
}

fn command_json(command: &SessionCommand) -> Value {
    let mut out = json!({ "id": command.id, "command": command.command });
    if let Some(code) = command.exit_code() {
        out["exitCode"] = json!(code);
    }
    out
}

fn session_json(session: &Session) -> Value {
    let commands: Vec<Value> = session.commands().iter().map(|c| command_json(c)).collect();
    json!({ "sessionId": session.id, "commands": commands })
}

fn list_sessions(call: Call) -> SimResponse {
    let sessions = call
        .api
        .with(&call.sandbox_id, |r| {
            r.sessions.values().cloned().collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let list: Vec<Value> = sessions.iter().map(|s| session_json(s)).collect();
    json_answer(200, &Value::Array(list))
}

fn get_session(call: Call, sid: &str) -> SimResponse {
    match call.session(sid) {
        Some(s) => json_answer(200, &session_json(&s)),
        None => call.error(404, "session not found"),
    }
}

fn delete_session(call: Call, sid: &str) -> SimResponse {
    let removed = call
        .api
        .with(&call.sandbox_id, |r| r.sessions.remove(sid))
        .flatten();
    let Some(session) = removed else {
        return call.error(404, "session not found");
    };
    let pid = session.end();
    let backing = call.backing.clone();
    call.api.rt.spawn(async move {
        let _ = backing.kill_process(&pid).await;
    });
    SimResponse::empty(204)
}

async fn session_exec(call: Call, sid: &str) -> SimResponse {
    let body: Value = match call.request.json() {
        Ok(b) => b,
        Err(e) => return call.coded(400, "INVALID_REQUEST_BODY", &e),
    };
    let Some(command) = body.get("command").and_then(Value::as_str) else {
        return call.coded(400, "INVALID_REQUEST_BODY", "command is required");
    };
    if command.trim().is_empty() {
        return call.error(400, "command cannot be empty");
    }
    let run_async = [body.get("runAsync"), body.get("async")]
        .iter()
        .any(|v| v.and_then(|v| v.as_bool()) == Some(true));
    let Some(session) = call.session(sid) else {
        return call.error(404, "session not found");
    };
    if session.has_ended() {
        return call.coded(410, "SESSION_ENDED", "session ended");
    }
    let cmd = match session.run(command).await {
        Ok(c) => c,
        Err(e) => return call.error(400, &format!("failed to write command: {e}")),
    };
    if run_async {
        return json_answer(202, &json!({ "cmdId": cmd.id }));
    }
    // No server-side timeout: the answer comes when the exit code does.
    let mut pause = EXIT_POLL;
    let sent = std::time::Instant::now();
    let code = loop {
        if let Some(code) = cmd.exit_code() {
            break code;
        }
        if session.has_ended() {
            return call.coded(410, "SESSION_ENDED", "session ended");
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = session.ended() => {}
        }
        if sent.elapsed() >= EXIT_POLL_FAST_FOR {
            pause = (pause * 2).min(EXIT_POLL_MAX);
        }
    };
    let log = cmd.log();
    let mut answer = json!({ "cmdId": cmd.id, "exitCode": code });
    match Shape::of(&call.request) {
        Shape::Json => {
            let (out, err, _) = logs::split(&log);
            answer["output"] = json!(logs::text(&log));
            answer["stdout"] = json!(logs::text(&out));
            answer["stderr"] = json!(logs::text(&err));
        }
        Shape::Raw => answer["output"] = json!(logs::text(&log)),
        Shape::Combined => answer["output"] = json!(logs::text(&logs::split(&log).2)),
    }
    json_answer(200, &answer)
}

fn command_status(call: Call, sid: &str, cid: &str) -> SimResponse {
    let Some(session) = call.session(sid) else {
        return call.error(404, "session not found");
    };
    match session.command(cid) {
        Some(c) => json_answer(200, &command_json(&c)),
        None => call.error(404, "command not found"),
    }
}

fn command_logs(call: Call, sid: &str, cid: &str) -> SimResponse {
    let Some(session) = call.session(sid) else {
        return call.error(404, "session not found");
    };
    let Some(cmd) = session.command(cid) else {
        return call.error(404, "command not found");
    };
    let log = cmd.log();
    match Shape::of(&call.request) {
        Shape::Json => {
            let (out, err, _) = logs::split(&log);
            json_answer(
                200,
                &json!({
                    "output": logs::text(&log),
                    "stdout": logs::text(&out),
                    "stderr": logs::text(&err),
                }),
            )
        }
        Shape::Raw => SimResponse::bytes(200, Some("text/plain; charset=utf-8"), log.into()),
        Shape::Combined => SimResponse::bytes(
            200,
            Some("text/plain; charset=utf-8"),
            logs::split(&log).2.into(),
        ),
    }
}

async fn command_input(call: Call, sid: &str, cid: &str) -> SimResponse {
    let data = match call.request.json::<Value>() {
        Ok(b) => match b.get("data").and_then(Value::as_str) {
            Some(d) => d.to_owned(),
            None => return call.coded(400, "INVALID_REQUEST_BODY", "data is required"),
        },
        Err(e) => return call.coded(400, "INVALID_REQUEST_BODY", &e),
    };
    let Some(session) = call.session(sid) else {
        return call.error(404, "session not found");
    };
    let Some(cmd) = session.command(cid) else {
        return call.error(404, "command not found");
    };
    if cmd.exit_code().is_some() || session.has_ended() {
        return call.coded(
            410,
            "COMMAND_ALREADY_COMPLETED",
            "command has already completed",
        );
    }
    match session.write(data.as_bytes()).await {
        Ok(()) => SimResponse::empty(204),
        Err(e) => call.error(500, &format!("failed to write input: {e}")),
    }
}

async fn metrics(call: Call) -> SimResponse {
    let dir = call.backing.dir().to_owned();
    let disk_total = call
        .api
        .with(&call.sandbox_id, |r| r.disk_gb())
        .unwrap_or(3)
        * 1024
        * 1024
        * 1024;
    let used = tokio::task::spawn_blocking(move || tree_size(&dir))
        .await
        .unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> u64 {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let (total, available, cached) = (field("MemTotal:"), field("MemAvailable:"), field("Cached:"));
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let load: f64 = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0.0);
    let now = SystemTime::now();
    let unix = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    json_answer(
        200,
        &json!({
            "cpuCount": cpus,
            "cpuUsedPct": (load / cpus as f64 * 100.0).min(100.0),
            "memTotal": total,
            "memUsed": total.saturating_sub(available),
            "memCache": cached,
            "diskTotal": disk_total,
            "diskUsed": used,
            "diskFree": disk_total.saturating_sub(used),
            "timestamp": format_rfc3339(now),
            "timestampUnix": unix,
        }),
    )
}

/// Bytes in the files under `dir`.
fn tree_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
