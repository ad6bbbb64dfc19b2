//! Commands through the toolbox: each command runs as an asynchronous session command
//! (PROTOCOL.md §3.2), its output followed live over the log WebSocket (§4.2) and demultiplexed
//! by [`LogDemux`], or — with [`LogFollow::Poll`] — by polling the command and its JSON logs.
//! The exit code is the daemon's (`GET …/command/{cid}`).
//!
//! A foreground command gets a session of its own, deleted once the exit code is read (or when
//! the handle is dropped early, which kills the command). A background command's session is
//! kept; its pid is `{sessionId}/{commandId}`, usable with `attach` and `kill_process`.

use crate::builder::LogFollow;
use crate::demux::{LogDemux, LogStream};
use crate::error::{PROVIDER, map_error};
use crate::sandbox::Toolbox;
use crate::wire::{CreateSessionBody, SessionCommandDto, SessionExecAnswer, SessionExecBody};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sandbox_sdk_core::client::{quote_argv, shell_quote, shell_script};
use sandbox_sdk_core::http::{ErrorResponse, Headers, Method, encode_path_segment};
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, EventStream, ExitStatus, Process, ProcessControl, ProcessEvent,
    PtySize, Result,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Exit status reported for a command killed through [`ProcessControl::kill`] or
/// `kill_process` (the session's shell gets SIGKILL).
const SIGKILL: i32 = 9;

/// How often a ping is sent on the log WebSocket (the server sends none; PROTOCOL.md §4.2).
const PING_EVERY: Duration = Duration::from_secs(20);

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The shell line a [`Command`] becomes: `sh -c` over the core's script (cwd and env applied
/// with safe quoting), wrapped in coreutils `timeout` when the command has a process timeout.
///
/// The daemon's session wrapper reads each stream line by line and ends every line with `\n`,
/// so a last line without one would gain a newline. To give back the exact bytes, the line ends
/// by printing [`END_MARK`] and a newline on both streams (after the command, keeping its exit
/// status); the follower strips exactly that suffix. Output that lacks it (a killed command, a
/// command started elsewhere) is passed on unchanged.
pub(crate) fn command_line(command: &Command) -> Result<String> {
    command.validate()?;
    let direct = command.cwd.is_none() && command.env.is_empty();
    let inner = if command.timeout.is_zero() {
        if direct {
            quote_argv(&command.argv)?
        } else {
            // A subshell, so the script's `exec` replaces it and not the shell printing the mark.
            format!("({})", shell_script(command)?)
        }
    } else {
        let secs = command.timeout.as_millis().div_ceil(1000).max(1);
        let program = if direct {
            quote_argv(&command.argv)?
        } else {
            format!("sh -c {}", shell_quote(&shell_script(command)?)?)
        };
        format!("timeout -k 5 {secs} {program}")
    };
    let script =
        format!("{inner}; s=$?; printf '%s\\n' {END_MARK}; printf '%s\\n' {END_MARK} >&2; exit $s");
    Ok(format!("sh -c {}", shell_quote(&script)?))
}

/// The line printed on stdout and stderr after the command (see [`command_line`]).
pub(crate) const END_MARK: &str = "__sandbox_sdk_end_of_output__";

/// Holds back the end of one stream while it could still be the start of the end mark, so
/// output is passed on as soon as it cannot be part of it.
#[derive(Default)]
struct Trailer {
    held: Vec<u8>,
}

impl Trailer {
    fn mark() -> Vec<u8> {
        format!("{END_MARK}\n").into_bytes()
    }

    /// Appends `data`; returns what can be passed on now: everything but the longest tail
    /// that is a beginning of the end mark.
    fn push(&mut self, data: &[u8]) -> Option<Bytes> {
        self.held.extend_from_slice(data);
        let mark = Self::mark();
        let longest = (1..=mark.len().min(self.held.len()))
            .rev()
            .find(|k| self.held[self.held.len() - k..] == mark[..*k])
            .unwrap_or(0);
        let ready = self.held.len() - longest;
        (ready > 0).then(|| Bytes::from(self.held.drain(..ready).collect::<Vec<u8>>()))
    }

    /// The rest of the stream: nothing when it is exactly the end mark.
    fn finish(&mut self) -> Option<Bytes> {
        let held = std::mem::take(&mut self.held);
        (!held.is_empty() && held != Self::mark()).then(|| Bytes::from(held))
    }
}

pub(crate) fn session_path(sid: &str) -> String {
    format!("/process/session/{}", encode_path_segment(sid))
}

pub(crate) fn command_path(sid: &str, cid: &str) -> String {
    format!("{}/command/{}", session_path(sid), encode_path_segment(cid))
}

/// The session a tagged command runs in: `sdk-tag-{tag}`. A tag still in use (its session not
/// deleted) makes the daemon answer 409, reported as `Conflict`.
pub(crate) fn tag_session(tag: &str) -> Result<String> {
    let valid = !tag.is_empty()
        && tag.len() <= 64
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        return Err(Error::validation(format!(
            "tag {tag:?} must be 1-64 letters, digits, '-', '_' or '.'"
        ))
        .with_provider(PROVIDER));
    }
    Ok(format!("{TAG_PREFIX}{tag}"))
}

/// Prefix of the sessions of tagged commands.
pub(crate) const TAG_PREFIX: &str = "sdk-tag-";

/// Splits a pid `{sessionId}/{commandId}`.
pub(crate) fn split_pid(pid: &str) -> Result<(&str, &str)> {
    match pid.split_once('/') {
        Some((s, c)) if !s.is_empty() && !c.is_empty() && !c.contains('/') => Ok((s, c)),
        _ => Err(Error::validation(format!(
            "{pid:?} is not a Daytona process id (expected SESSION/COMMAND)"
        ))
        .with_provider(PROVIDER)),
    }
}

/// How many taken session names `start` steps over before giving up.
const MAX_NAME_TRIES: u32 = 64;

async fn create_session(tb: &Toolbox, sid: &str) -> Result<()> {
    tb.request(Method::Post, "/process/session", "exec")
        .json(&CreateSessionBody {
            session_id: sid.to_owned(),
        })
        .send_empty()
        .await
}

/// Starts `command` in a new session and returns its handle.
pub(crate) async fn start(tb: Arc<Toolbox>, command: &Command) -> Result<Process> {
    if command.stdin {
        return Err(Error::not_supported(PROVIDER, "stdin"));
    }
    if command.pty.is_some() {
        return Err(Error::not_supported(PROVIDER, "pty"));
    }
    if command.user.is_some() {
        return Err(Error::not_supported(PROVIDER, "exec as another user"));
    }
    let line = command_line(command)?;
    let sid = match &command.tag {
        Some(tag) => {
            let sid = tag_session(tag)?;
            create_session(&tb, &sid).await?;
            sid
        }
        None => {
            // Names are numbered per handle (so replays are deterministic); a name another
            // handle holds right now answers 409, and the next number is tried.
            let kind = if command.background { "bg" } else { "exec" };
            let mut tries = 0;
            loop {
                let n = tb.next_session.fetch_add(1, Ordering::Relaxed);
                let sid = format!("sdk-{kind}-{n}");
                match create_session(&tb, &sid).await {
                    Ok(()) => break sid,
                    Err(e) if e.kind() == ErrorKind::Conflict && tries < MAX_NAME_TRIES => {
                        tries += 1
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    };
    let answer = tb
        .request(
            Method::Post,
            &format!("{}/exec", session_path(&sid)),
            "exec",
        )
        .json(&SessionExecBody {
            command: line,
            run_async: true,
        })
        .timeout_opt(command.request_timeout)
        .send_json::<SessionExecAnswer>()
        .await;
    let answer =
        match answer {
            Ok(a) if !a.cmd_id.is_empty() => a,
            Ok(_) => {
                delete_session(&tb, &sid).await.ok();
                return Err(
                    Error::new(ErrorKind::Provider, "the daemon returned no command id")
                        .or_context(PROVIDER, "exec", Some(&tb.sandbox_id)),
                );
            }
            Err(e) => {
                delete_session(&tb, &sid).await.ok();
                return Err(e);
            }
        };
    Ok(process(tb, sid, answer.cmd_id, !command.background))
}

/// A handle following an existing command (for `attach`).
pub(crate) fn process(tb: Arc<Toolbox>, sid: String, cid: String, owned: bool) -> Process {
    let killed = Arc::new(AtomicBool::new(false));
    let control = Arc::new(SessionControl {
        tb: tb.clone(),
        sid: sid.clone(),
        killed: killed.clone(),
    });
    let pid = format!("{sid}/{cid}");
    let poll = tb.inner.config.log_follow == LogFollow::Poll;
    let follower = Follower {
        guard: SessionGuard {
            tb: tb.clone(),
            sid: sid.clone(),
            armed: owned,
        },
        tb,
        sid,
        cid,
        killed,
        pending: VecDeque::new(),
        step: if poll { Step::Poll } else { Step::Connect },
        demux: LogDemux::new(),
        seen_stdout: 0,
        seen_stderr: 0,
        out_tail: Trailer::default(),
        err_tail: Trailer::default(),
        ws: None,
        exit_wait: None,
        poll_wait: None,
    };
    let events: EventStream = futures::stream::unfold(follower, |mut f| async move {
        f.next().await.map(|event| (event, f))
    })
    .boxed();
    let process = Process::new(pid, events, None, control);
    if poll {
        process.with_emulated_streaming()
    } else {
        process
    }
}

pub(crate) async fn delete_session(tb: &Toolbox, sid: &str) -> Result<()> {
    tb.request(Method::Delete, &session_path(sid), "kill_process")
        .send_empty()
        .await
}

/// Kills by deleting the command's session (the daemon kills the session's shell).
pub(crate) struct SessionControl {
    tb: Arc<Toolbox>,
    sid: String,
    killed: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl ProcessControl for SessionControl {
    async fn kill(&self) -> Result<()> {
        self.killed.store(true, Ordering::SeqCst);
        delete_session(&self.tb, &self.sid).await
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

/// Deletes a foreground command's session when its handle is dropped before the end.
struct SessionGuard {
    tb: Arc<Toolbox>,
    sid: String,
    armed: bool,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let tb = self.tb.clone();
            let sid = std::mem::take(&mut self.sid);
            handle.spawn(async move {
                delete_session(&tb, &sid).await.ok();
            });
        }
    }
}

enum Step {
    Connect,
    Stream,
    Poll,
    Exit,
    Done,
}

struct Follower {
    tb: Arc<Toolbox>,
    sid: String,
    cid: String,
    killed: Arc<AtomicBool>,
    pending: VecDeque<Result<ProcessEvent>>,
    step: Step,
    demux: LogDemux,
    seen_stdout: usize,
    seen_stderr: usize,
    out_tail: Trailer,
    err_tail: Trailer,
    ws: Option<Ws>,
    /// The pauses between looks at the exit code once the log stream ended.
    exit_wait: Option<Backoff>,
    /// The pauses between polls in [`LogFollow::Poll`] mode.
    poll_wait: Option<Backoff>,
    guard: SessionGuard,
}

impl Follower {
    async fn next(&mut self) -> Option<Result<ProcessEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if event.is_err() {
                    self.step = Step::Done;
                }
                return Some(event);
            }
            let result = match self.step {
                Step::Done => return None,
                Step::Connect => self.connect().await,
                Step::Stream => self.read_frame().await,
                Step::Poll => self.poll_once().await,
                Step::Exit => self.read_exit().await,
            };
            if let Err(e) = result {
                self.pending.push_back(Err(e.or_context(
                    PROVIDER,
                    "exec",
                    Some(&self.tb.sandbox_id),
                )));
            }
        }
    }

    fn push_pieces(&mut self, pieces: Vec<(LogStream, Bytes)>) {
        for (stream, bytes) in pieces {
            self.push_output(stream, &bytes);
        }
    }

    fn push_output(&mut self, stream: LogStream, bytes: &[u8]) {
        let ready = match stream {
            LogStream::Stdout => self.out_tail.push(bytes).map(ProcessEvent::Stdout),
            LogStream::Stderr => self.err_tail.push(bytes).map(ProcessEvent::Stderr),
        };
        if let Some(event) = ready {
            self.pending.push_back(Ok(event));
        }
    }

    /// Passes on the held-back ends of both streams, before the exit event.
    fn flush_tails(&mut self) {
        if let Some(rest) = self.out_tail.finish() {
            self.pending.push_back(Ok(ProcessEvent::Stdout(rest)));
        }
        if let Some(rest) = self.err_tail.finish() {
            self.pending.push_back(Ok(ProcessEvent::Stderr(rest)));
        }
    }

    async fn connect(&mut self) -> Result<()> {
        if self.killed.load(Ordering::SeqCst) {
            self.step = Step::Exit;
            return Ok(());
        }
        let path = format!("{}/logs", command_path(&self.sid, &self.cid));
        self.ws = Some(connect_logs(&self.tb, &path).await?);
        self.step = Step::Stream;
        Ok(())
    }

    async fn read_frame(&mut self) -> Result<()> {
        let Some(ws) = self.ws.as_mut() else {
            self.step = Step::Exit;
            return Ok(());
        };
        let message = loop {
            tokio::select! {
                message = ws.next() => break message,
                _ = tokio::time::sleep(PING_EVERY) => {
                    ws.send(Message::Ping(Bytes::new())).await.map_err(|e| ws_error("log stream ping failed", e))?;
                }
            }
        };
        match message {
            Some(Ok(Message::Binary(bytes))) => {
                let pieces = self.demux.feed(&bytes);
                self.push_pieces(pieces);
            }
            Some(Ok(Message::Text(text))) => {
                let pieces = self.demux.feed(text.as_bytes());
                self.push_pieces(pieces);
            }
            Some(Ok(Message::Close(frame))) => {
                let code = frame.as_ref().map(|f| u16::from(f.code));
                self.end_stream();
                if let Some(code) = code.filter(|c| *c != 1000 && *c != 1005)
                    && !self.killed.load(Ordering::SeqCst)
                {
                    return Err(Error::new(
                        ErrorKind::Transport,
                        format!("log stream closed with code {code}"),
                    ));
                }
            }
            Some(Ok(_)) => {}
            None => self.end_stream(),
            Some(Err(e)) => {
                if self.killed.load(Ordering::SeqCst) {
                    self.end_stream();
                } else {
                    return Err(ws_error("log stream failed", e));
                }
            }
        }
        Ok(())
    }

    fn end_stream(&mut self) {
        let pieces = self.demux.finish();
        self.push_pieces(pieces);
        self.ws = None;
        self.step = Step::Exit;
    }

    async fn fetch_command(&self) -> Result<Option<SessionCommandDto>> {
        let found = self
            .tb
            .request(Method::Get, &command_path(&self.sid, &self.cid), "exec")
            .send_json::<SessionCommandDto>()
            .await;
        match found {
            Ok(c) => Ok(Some(c)),
            // The session is gone: it was deleted (killed), by this handle or by `kill_process`.
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn finish_killed(&mut self) {
        self.flush_tails();
        self.guard.armed = false;
        self.pending
            .push_back(Ok(ProcessEvent::Exit(ExitStatus::signal(SIGKILL))));
        self.step = Step::Done;
    }

    async fn finish_exit(&mut self, code: i32) {
        if self.guard.armed {
            self.guard.armed = false;
            delete_session(&self.tb, &self.sid).await.ok();
        }
        self.pending
            .push_back(Ok(ProcessEvent::Exit(ExitStatus::code(code))));
        self.step = Step::Done;
    }

    /// After the log stream ended: read the exit code, polling briefly if the daemon has not
    /// written it yet.
    async fn read_exit(&mut self) -> Result<()> {
        if self.killed.load(Ordering::SeqCst) {
            self.finish_killed();
            return Ok(());
        }
        match self.fetch_command().await? {
            None => self.finish_killed(),
            Some(SessionCommandDto {
                exit_code: Some(code),
                ..
            }) => self.finish_exit(code).await,
            Some(_) => {
                let config = &self.tb.inner.config;
                let backoff = self.exit_wait.get_or_insert_with(|| {
                    crate::time::backoff_until(
                        config.poll_interval,
                        crate::time::instant_after(config.state_change_timeout),
                    )
                });
                if !backoff.pause().await {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        "the log stream ended but the command has no exit code",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Poll mode: one look at the command and its logs; new output is emitted, then the exit.
    async fn poll_once(&mut self) -> Result<()> {
        if self.killed.load(Ordering::SeqCst) {
            self.finish_killed();
            return Ok(());
        }
        let Some(command) = self.fetch_command().await? else {
            self.finish_killed();
            return Ok(());
        };
        let logs = self
            .tb
            .request(
                Method::Get,
                &format!("{}/logs", command_path(&self.sid, &self.cid)),
                "exec",
            )
            .send()
            .await?;
        let content_type = logs.header("content-type").map(str::to_owned);
        let body = logs.bytes().await?;
        let (stdout, stderr) = crate::demux::session_logs(content_type.as_deref(), &body)?;
        if stdout.len() > self.seen_stdout {
            let start = self.seen_stdout;
            self.seen_stdout = stdout.len();
            self.push_output(LogStream::Stdout, &stdout[start..]);
        }
        if stderr.len() > self.seen_stderr {
            let start = self.seen_stderr;
            self.seen_stderr = stderr.len();
            self.push_output(LogStream::Stderr, &stderr[start..]);
        }
        match command.exit_code {
            Some(code) => self.finish_exit(code).await,
            None => {
                // No deadline: a command may run for as long as it likes.
                let interval = self.tb.inner.config.poll_interval;
                self.poll_wait
                    .get_or_insert_with(|| Backoff::new(interval))
                    .pause()
                    .await;
            }
        }
        Ok(())
    }
}

fn ws_error(what: &str, e: tokio_tungstenite::tungstenite::Error) -> Error {
    let kind = match &e {
        tokio_tungstenite::tungstenite::Error::Url(_) => ErrorKind::Validation,
        _ => ErrorKind::Transport,
    };
    Error::new(kind, format!("{what}: {e}"))
}

/// The WebSocket URL for a toolbox path: the toolbox base with `http` → `ws`.
pub(crate) fn ws_url(toolbox_base: &str, path: &str) -> Result<String> {
    let rest = if let Some(rest) = toolbox_base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = toolbox_base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        return Err(Error::validation(format!(
            "toolbox URL {toolbox_base:?} is not http or https"
        )));
    };
    Ok(format!("{}{path}?follow=true", rest.trim_end_matches('/')))
}

/// Opens the follow WebSocket with the same headers as every toolbox request. A refused
/// upgrade goes through the adapter's error mapping and state check
/// ([`Toolbox::explain_bad_gateway`]) like any other toolbox answer.
async fn connect_logs(tb: &Toolbox, path: &str) -> Result<Ws> {
    let config = &tb.inner.config;
    let url = ws_url(&tb.base, path)?;
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| ws_error("invalid log stream URL", e))?;
    let headers = request.headers_mut();
    let mut put = |name: &'static str, value: &str| -> Result<()> {
        let value = value
            .parse()
            .map_err(|_| Error::validation(format!("invalid value for header {name}")))?;
        headers.insert(name, value);
        Ok(())
    };
    put("authorization", &format!("Bearer {}", tb.inner.secret))?;
    put("x-daytona-sdk-version", &config.sdk_version)?;
    put("x-daytona-source", crate::builder::SOURCE)?;
    put(
        "user-agent",
        &format!("{}/{}", crate::builder::SOURCE, config.sdk_version),
    )?;
    if config.api_key.is_none()
        && let Some(org) = &config.organization_id
    {
        put("x-daytona-organization-id", org)?;
    }
    let connect = tokio_tungstenite::connect_async(request);
    let (ws, _) = match tokio::time::timeout(config.request_timeout, connect).await {
        Err(_) => {
            return Err(Error::new(
                ErrorKind::Timeout,
                "log stream upgrade timed out",
            ));
        }
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            let mut h = Headers::new();
            for (name, value) in response.headers() {
                h.push(name.as_str(), String::from_utf8_lossy(value.as_bytes()));
            }
            let status = response.status().as_u16();
            let body = response.into_body().map(Bytes::from).unwrap_or_default();
            let error = map_error(&ErrorResponse {
                status,
                headers: h,
                body,
                operation: "exec".into(),
                sandbox_id: Some(tb.sandbox_id.clone()),
                request_id: None,
                method: "GET".into(),
                path: path.to_owned(),
                provider: PROVIDER.into(),
            });
            // The same state check as the HTTP path: an empty 502 from a stopped sandbox is
            // `NotRunning` whichever way the request went.
            return Err(tb.explain_bad_gateway(error).await);
        }
        Ok(Err(e)) => return Err(ws_error("log stream upgrade failed", e)),
        Ok(Ok(ok)) => ok,
    };
    Ok(ws)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_quote_and_fold_cwd_env_and_timeout() {
        assert_eq!(
            command_line(&Command::shell("exit 3")).unwrap(),
            format!(
                "sh -c ''\\''sh'\\'' '\\''-c'\\'' '\\''exit 3'\\''; s=$?; printf '\\''%s\\n'\\'' {END_MARK}; printf '\\''%s\\n'\\'' {END_MARK} >&2; exit $s'"
            )
        );
        assert!(command_line(&Command::new("x").arg("a\0")).is_err());
    }

    fn run_line(line: &str, dir: &std::path::Path) -> std::process::Output {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(line)
            .current_dir(dir)
            .output()
            .unwrap()
    }

    #[test]
    fn the_end_mark_restores_exact_output_and_keeps_the_exit_code() {
        let dir = std::env::temp_dir();
        for (script, out, err, code) in [
            ("printf out; printf err >&2; exit 3", "out", "err", 3),
            ("echo out; echo err >&2", "out\n", "err\n", 0),
            ("exit 0", "", "", 0),
        ] {
            let result = run_line(&command_line(&Command::shell(script)).unwrap(), &dir);
            assert_eq!(result.status.code(), Some(code), "{script}");
            for (stream, want) in [(&result.stdout, out), (&result.stderr, err)] {
                // What the daemon's line wrapper would log, then what the follower gives back.
                let mut trailer = Trailer::default();
                let mut got = Vec::new();
                for chunk in stream.chunks(3) {
                    got.extend(trailer.push(chunk).unwrap_or_default());
                }
                got.extend(trailer.finish().unwrap_or_default());
                assert_eq!(String::from_utf8(got).unwrap(), want, "{script}");
            }
        }
    }

    #[test]
    fn a_stream_without_the_end_mark_is_passed_on_whole() {
        let mut trailer = Trailer::default();
        let mut got = Vec::new();
        got.extend(
            trailer
                .push(b"partial output of a killed command")
                .unwrap_or_default(),
        );
        got.extend(trailer.finish().unwrap_or_default());
        assert_eq!(got, b"partial output of a killed command");
    }

    #[test]
    fn the_command_line_runs_in_a_real_shell() {
        // The daemon hands the line to the session's shell; `sh` here proves the quoting.
        let dir = std::env::temp_dir().join(format!("sandbox-daytona-line-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("conformance-cwd")).unwrap();
        for timeout in [Duration::ZERO, Duration::from_secs(5)] {
            let cmd = Command::shell("printf '%s|%s' \"$CONFORMANCE_VAR\" \"${PWD##*/}\"")
                .cwd("conformance-cwd")
                .env("CONFORMANCE_VAR", "it's a $HOME \"test\"")
                .timeout(timeout);
            let out = run_line(&command_line(&cmd).unwrap(), &dir);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("it's a $HOME \"test\"|conformance-cwd{END_MARK}\n"),
                "timeout {timeout:?}"
            );
            assert!(out.status.success());
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn pids_split_into_session_and_command() {
        assert_eq!(split_pid("s1/c1").unwrap(), ("s1", "c1"));
        for bad in ["", "s1", "/c", "s/", "a/b/c"] {
            assert!(split_pid(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ws_urls_swap_the_scheme() {
        assert_eq!(
            ws_url(
                "https://proxy.app.daytona.io/toolbox/sb",
                "/process/session/s/command/c/logs"
            )
            .unwrap(),
            "wss://proxy.app.daytona.io/toolbox/sb/process/session/s/command/c/logs?follow=true"
        );
        assert_eq!(
            ws_url("http://127.0.0.1:9/t/sb", "/x").unwrap(),
            "ws://127.0.0.1:9/t/sb/x?follow=true"
        );
        assert!(ws_url("ftp://x", "/x").is_err());
    }

    #[test]
    fn tags_name_their_session() {
        assert_eq!(
            tag_session("conformance-bg").unwrap(),
            "sdk-tag-conformance-bg"
        );
        assert!(tag_session("a/b").is_err());
        assert!(tag_session("").is_err());
    }
}
