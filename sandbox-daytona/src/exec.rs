//! Commands through the toolbox, as session commands (PROTOCOL.md §3.2).
//!
//! A foreground command runs in a session taken from the sandbox's pool (the provider's,
//! shared by every handle of the sandbox): made on first use, given back once the command
//! ended, deleted when a handle is dropped before its command ends (which kills it). It is
//! first sent synchronously: when it ends within the builder's
//! [`direct_window`](crate::DaytonaBuilder::direct_window), that one request brings back
//! stdout, stderr and the exit code (the answer's `stdout`/`stderr`/`exitCode`, §3.2, §4.3),
//! so a short command costs one request. A command still running when the window closes keeps
//! running; its id is read from the session, and it is followed to its end ([`Follower`]) live
//! over the log WebSocket, or by polling with [`LogFollow::Poll`]. With a zero window every
//! command is sent asynchronously and followed from its start.
//!
//! A background (or tagged) command gets a session of its own that is kept; its pid is
//! `{sessionId}/{commandId}`, usable with `attach` and `kill_process`.

use crate::builder::LogFollow;
use crate::error::PROVIDER;
use crate::follow::Follower;
use crate::sandbox::Toolbox;
use crate::wire::{CreateSessionBody, SessionDto, SessionExecAnswer, SessionExecBody};
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::http::{Method, encode_path_segment};
use sandbox_sdk_core::shell::{quote_argv, shell_quote, shell_script};
use sandbox_sdk_core::{
    Command, Error, ErrorKind, EventStream, ExitStatus, Process, ProcessControl, ProcessEvent,
    PtySize, Result,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Exit status reported for a command killed through [`ProcessControl::kill`] or
/// `kill_process` (the session's shell gets SIGKILL).
pub(crate) const SIGKILL: i32 = 9;

/// The statuses coreutils `timeout` ends with when it stopped the command: 124 after SIGTERM,
/// 137 when the grace (`-k 5`) ran out and it sent SIGKILL.
const TIMEOUT_STATUSES: [i32; 2] = [124, 137];

/// The most idle sessions a handle keeps for its next commands; more are deleted.
const MAX_IDLE_SESSIONS: usize = 4;

/// The shell line a [`Command`] becomes: a subshell of the session's shell (a fork, not a new
/// shell; `cd`, exports and `exit` stay inside it) running the quoted argv, or the core's
/// script (cwd and env applied with safe quoting), wrapped in coreutils `timeout` when the
/// command has a process timeout. It starts with the no-op `: sdk-cmd-{label}`, which makes the
/// line unique within its session so a command still running after the direct window can be
/// found by its text.
///
/// The daemon's session wrapper reads each stream line by line and ends every line with `\n`,
/// so a last line without one would gain a newline. To give back the exact bytes, the line ends
/// by printing the end mark on both streams after the command: `{END_MARK}:{status}` on stdout
/// and [`END_MARK`] on stderr, each with a newline, then exits with the command's status. The
/// follower strips exactly those suffixes, and once both are seen it knows the output is
/// complete and the exit status without asking the daemon. Output that lacks them (a killed
/// command, a command started elsewhere) is passed on unchanged.
pub(crate) fn command_line(command: &Command, label: u64) -> Result<String> {
    command.validate()?;
    let direct = command.cwd.is_none() && command.env.is_empty();
    let inner = if command.timeout.is_zero() {
        if let (true, [sh, c, script]) = (direct, command.argv.as_slice())
            && sh == "sh"
            && c == "-c"
        {
            // A shell line runs in a nested subshell: one process less than `sh -c` (a fork,
            // not an exec); the newline keeps a trailing comment from eating the `)`.
            format!("({script}\n)")
        } else if direct {
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
    Ok(format!(
        "(: sdk-cmd-{label}; {inner}; s=$?; printf '%s:%s\\n' {END_MARK} \"$s\"; printf '%s\\n' {END_MARK} >&2; exit $s)"
    ))
}

/// The line printed on stdout (with `:status`) and stderr after the command (see
/// [`command_line`]).
pub(crate) const END_MARK: &str = "__sandbox_sdk_end_of_output__";

/// The longest end-mark line: the mark, `:`, a status of up to 10 digits, the newline.
const MAX_MARK_LEN: usize = END_MARK.len() + 12;

/// Whether `tail` is the start of an end-mark line (`Some(false)`), a whole one ending in its
/// newline (`Some(true)`), or neither (`None`).
fn mark_prefix(tail: &[u8]) -> Option<bool> {
    let mark = END_MARK.as_bytes();
    if tail.len() <= mark.len() {
        return (tail == &mark[..tail.len()]).then_some(false);
    }
    if &tail[..mark.len()] != mark {
        return None;
    }
    match &tail[mark.len()..] {
        [b'\n'] => Some(true),
        [b':', rest @ ..] => {
            let (digits, whole) = match rest.split_last() {
                Some((b'\n', digits)) => (digits, true),
                _ => (rest, false),
            };
            let valid = digits.len() <= 10
                && digits.iter().all(u8::is_ascii_digit)
                && !(whole && digits.is_empty());
            valid.then_some(whole)
        }
        _ => None,
    }
}

/// Holds back the end of one stream while it could still be (the start of) the end mark, so
/// output is passed on as soon as it cannot be part of it.
#[derive(Default)]
pub(crate) struct Trailer {
    held: Vec<u8>,
}

impl Trailer {
    /// Appends `data`; returns what can be passed on now: everything but the longest tail
    /// that is a beginning of an end-mark line.
    pub(crate) fn push(&mut self, data: &[u8]) -> Option<Bytes> {
        self.held.extend_from_slice(data);
        let from = self.held.len().saturating_sub(MAX_MARK_LEN);
        let ready = (from..self.held.len())
            .find(|i| mark_prefix(&self.held[*i..]).is_some())
            .unwrap_or(self.held.len());
        (ready > 0).then(|| Bytes::from(self.held.drain(..ready).collect::<Vec<u8>>()))
    }

    /// `Some` once the stream ends in a whole end mark, with the status it carries (stdout's).
    pub(crate) fn complete(&self) -> Option<Option<i32>> {
        if mark_prefix(&self.held) != Some(true) {
            return None;
        }
        let text = std::str::from_utf8(&self.held).ok()?;
        Some(
            text.trim_end()
                .strip_prefix(END_MARK)
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(|status| status.parse().ok()),
        )
    }

    /// The rest of the stream: nothing when it is exactly an end mark.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        if self.complete().is_some() {
            self.held.clear();
            return None;
        }
        let held = std::mem::take(&mut self.held);
        (!held.is_empty()).then(|| Bytes::from(held))
    }
}

/// A command's process timeout and when it was sent, to tell a `timeout` stop from an exit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    limit: Duration,
    started: Instant,
}

impl Timing {
    fn of(command: &Command) -> Option<Timing> {
        (!command.timeout.is_zero()).then(|| Timing {
            limit: command.timeout,
            started: Instant::now(),
        })
    }
}

/// The last event of a command that ended with `code`: its exit, or a `Timeout` error when
/// coreutils `timeout` stopped it (status 124 or 137 once its timeout has passed), as the other
/// adapters report a process timeout.
pub(crate) fn exit_event(code: i32, timing: Option<&Timing>) -> Result<ProcessEvent> {
    if let Some(t) = timing
        && TIMEOUT_STATUSES.contains(&code)
        && t.started.elapsed() >= t.limit
    {
        return Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "the process ran past its timeout of {}s and was stopped (exit status {code})",
                t.limit.as_secs_f64()
            ),
        )
        .with_provider(PROVIDER)
        .with_operation("exec"));
    }
    Ok(ProcessEvent::Exit(ExitStatus::code(code)))
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

/// Prefix of the pooled sessions of foreground commands.
pub(crate) const EXEC_PREFIX: &str = "sdk-exec-";

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

/// How many taken session names `new_session` steps over before giving up.
const MAX_NAME_TRIES: u32 = 64;

async fn create_session(tb: &Toolbox, sid: &str) -> Result<()> {
    tb.request(Method::Post, "/process/session", "exec")
        .json(&CreateSessionBody {
            session_id: sid.to_owned(),
        })
        .send_empty()
        .await
}

/// Makes a session named `sdk-{kind}-N`. Names are numbered per handle (so replays are
/// deterministic); a name another handle holds right now answers 409, and the next number is
/// tried.
async fn new_session(tb: &Toolbox, kind: &str) -> Result<String> {
    let mut tries = 0;
    loop {
        let n = tb.next_session.fetch_add(1, Ordering::Relaxed);
        let sid = format!("sdk-{kind}-{n}");
        match create_session(tb, &sid).await {
            Ok(()) => return Ok(sid),
            Err(e) if e.kind() == ErrorKind::Conflict && tries < MAX_NAME_TRIES => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// An idle pooled session of this sandbox (`true`: taken from the pool), or a new one.
async fn acquire_session(tb: &Toolbox) -> Result<(String, bool)> {
    let idle = tb
        .inner
        .idle_sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(&tb.sandbox_id)
        .and_then(Vec::pop);
    match idle {
        Some(sid) => Ok((sid, true)),
        None => Ok((new_session(tb, "exec").await?, false)),
    }
}

/// Gives a session whose command ended back to the sandbox's pool, which every handle of the
/// sandbox from this provider shares (or deletes it when the pool is full). Idle sessions live
/// until the sandbox stops or is destroyed: at most [`MAX_IDLE_SESSIONS`] per sandbox.
pub(crate) fn release_session(tb: &Arc<Toolbox>, sid: String) {
    let mut pools = tb
        .inner
        .idle_sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let idle = pools.entry(tb.sandbox_id.clone()).or_default();
    if idle.len() < MAX_IDLE_SESSIONS {
        idle.push(sid);
        return;
    }
    drop(pools);
    spawn_delete(tb.clone(), sid);
}

/// Drops a destroyed sandbox's pool.
pub(crate) fn forget_sessions(inner: &crate::provider::Inner, sandbox_id: &str) {
    inner
        .idle_sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(sandbox_id);
}

/// Deletes a session in the background (from a `Drop`), when a runtime is there to do it.
pub(crate) fn spawn_delete(tb: Arc<Toolbox>, sid: String) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            delete_session(&tb, &sid).await.ok();
        });
    }
}

/// Starts `command` and returns its handle. A failure goes through the toolbox's state check
/// ([`Toolbox::explain`]), so a sandbox that is not running is `NotRunning`.
pub(crate) async fn start(tb: Arc<Toolbox>, command: &Command) -> Result<Process> {
    match start_checked(tb.clone(), command).await {
        Err(e) => Err(tb.explain(e).await),
        ok => ok,
    }
}

async fn start_checked(tb: Arc<Toolbox>, command: &Command) -> Result<Process> {
    if command.stdin {
        return Err(Error::not_supported(PROVIDER, "stdin"));
    }
    if command.pty.is_some() {
        return Err(Error::not_supported(PROVIDER, "pty"));
    }
    if command.user.is_some() {
        return Err(Error::not_supported(PROVIDER, "exec as another user"));
    }
    let line = command_line(command, tb.next_command.fetch_add(1, Ordering::Relaxed))?;
    let timing = Timing::of(command);
    if command.background || command.tag.is_some() {
        let sid = match &command.tag {
            Some(tag) => {
                let sid = tag_session(tag)?;
                create_session(&tb, &sid).await?;
                sid
            }
            None => new_session(&tb, "bg").await?,
        };
        let cid = match send_async(&tb, &sid, &line, command).await {
            Ok(cid) => cid,
            Err(e) => {
                delete_session(&tb, &sid).await.ok();
                return Err(e);
            }
        };
        let owned = !command.background;
        return Ok(process(tb, sid, cid, owned, timing));
    }
    let (mut sid, mut pooled) = acquire_session(&tb).await?;
    let window = tb.inner.config.direct_window;
    let started = loop {
        let started = if window.is_zero() {
            send_async(&tb, &sid, &line, command)
                .await
                .map(Started::Running)
        } else {
            send_direct(&tb, &sid, &line, window).await
        };
        match started {
            // A pooled session the daemon no longer has: stopping the sandbox (by anyone) ends
            // every session. The daemon looks the session up before running anything, so the
            // command did not run; a new session takes it.
            Err(e) if pooled && e.kind() == ErrorKind::NotFound => {
                sid = new_session(&tb, "exec").await?;
                pooled = false;
            }
            other => break other,
        }
    };
    match started {
        Ok(Started::Running(cid)) => Ok(process(tb, sid, cid, true, timing)),
        Ok(Started::Done(answer)) => {
            let pid = format!("{sid}/{}", answer.cmd_id);
            release_session(&tb, sid.clone());
            Ok(finished(tb, sid, pid, answer, timing))
        }
        Err(e) => {
            // The session may hold a command in an unknown state: not reused.
            delete_session(&tb, &sid).await.ok();
            Err(e)
        }
    }
}

enum Started {
    /// Still running: its command id.
    Running(String),
    /// Ended within the direct window: the daemon's whole answer.
    Done(SessionExecAnswer),
}

/// `runAsync: true`: the command id.
async fn send_async(tb: &Toolbox, sid: &str, line: &str, command: &Command) -> Result<String> {
    let answer = tb
        .request(Method::Post, &format!("{}/exec", session_path(sid)), "exec")
        .json(&SessionExecBody {
            command: line.to_owned(),
            run_async: true,
        })
        .timeout_opt(command.request_timeout)
        .send_json::<SessionExecAnswer>()
        .await?;
    if answer.cmd_id.is_empty() {
        return Err(
            Error::new(ErrorKind::Provider, "the daemon returned no command id").or_context(
                PROVIDER,
                "exec",
                Some(&tb.sandbox_id),
            ),
        );
    }
    Ok(answer.cmd_id)
}

/// Sends the command synchronously and waits up to `window` for its answer. A command still
/// running then is left running (the daemon keeps it whether or not anyone waits), and its id
/// is read from the session by its unique line.
async fn send_direct(tb: &Toolbox, sid: &str, line: &str, window: Duration) -> Result<Started> {
    let request = tb
        .request(Method::Post, &format!("{}/exec", session_path(sid)), "exec")
        .json(&SessionExecBody {
            command: line.to_owned(),
            run_async: false,
        })
        // The window bounds the wait; the daemon's sync exec has no timeout of its own (§3.2).
        .no_timeout()
        // The answer carries the command's whole output.
        .max_body(crate::sandbox::LARGE_ANSWER);
    if let Ok(answer) = tokio::time::timeout(window, request.send_json::<SessionExecAnswer>()).await
    {
        return answer.map(Started::Done);
    }
    let session: SessionDto = tb
        .request(Method::Get, &session_path(sid), "exec")
        .max_body(crate::sandbox::LARGE_ANSWER)
        .send_json()
        .await?;
    session
        .commands
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.command == line)
        .map(|c| Started::Running(c.id))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Provider,
                format!(
                    "the command was sent but its session {sid} does not list it after {window:?}"
                ),
            )
            .or_context(PROVIDER, "exec", Some(&tb.sandbox_id))
        })
}

/// The handle of a command that already ended: its output and exit, from the sync answer.
fn finished(
    tb: Arc<Toolbox>,
    sid: String,
    pid: String,
    answer: SessionExecAnswer,
    timing: Option<Timing>,
) -> Process {
    let (stdout, stderr) = match (answer.stdout, answer.stderr) {
        (None, None) => crate::demux::split_log(answer.output.unwrap_or_default().as_bytes()),
        (out, err) => (
            out.unwrap_or_default().into_bytes(),
            err.unwrap_or_default().into_bytes(),
        ),
    };
    let (mut out_tail, mut err_tail) = (Trailer::default(), Trailer::default());
    let out_ready = out_tail.push(&stdout);
    let marked = out_tail.complete().flatten();
    let out = [out_ready, out_tail.finish()];
    let err = [err_tail.push(&stderr), err_tail.finish()];
    let mut events: Vec<Result<ProcessEvent>> = Vec::new();
    events.extend(
        out.into_iter()
            .flatten()
            .map(|b| Ok(ProcessEvent::Stdout(b))),
    );
    events.extend(
        err.into_iter()
            .flatten()
            .map(|b| Ok(ProcessEvent::Stderr(b))),
    );
    let code = answer.exit_code.or(marked);
    events.push(match code {
        Some(code) => exit_event(code, timing.as_ref()),
        None => Err(Error::new(
            ErrorKind::Provider,
            "the daemon answered the command without an exit code",
        )
        .or_context(PROVIDER, "exec", Some(&tb.sandbox_id))),
    });
    let control = Arc::new(SessionControl {
        tb,
        sid,
        state: Arc::new(CommandState::ended()),
    });
    let events: EventStream = futures::stream::iter(events).boxed();
    Process::new(pid, events, None, control).with_emulated_streaming()
}

/// A handle following an existing command. `owned`: a foreground command whose session goes
/// back to the pool when it ends and is deleted (killing it) when the handle goes first.
pub(crate) fn process(
    tb: Arc<Toolbox>,
    sid: String,
    cid: String,
    owned: bool,
    timing: Option<Timing>,
) -> Process {
    let state = Arc::new(CommandState::default());
    let control = Arc::new(SessionControl {
        tb: tb.clone(),
        sid: sid.clone(),
        state: state.clone(),
    });
    let pid = format!("{sid}/{cid}");
    let poll = tb.inner.config.log_follow == LogFollow::Poll;
    let guard = SessionGuard {
        tb: tb.clone(),
        sid: sid.clone(),
        armed: owned,
    };
    let follower = Follower::new(tb, sid, cid, state, guard, poll, timing);
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

/// Whether a command is running, was killed through its handle, or ended; only one of the
/// last two ever happens, so a kill never deletes a session already back in the pool.
#[derive(Debug, Default)]
pub(crate) struct CommandState(AtomicU8);

const RUNNING: u8 = 0;
const KILLED: u8 = 1;
const ENDED: u8 = 2;

impl CommandState {
    fn ended() -> Self {
        CommandState(AtomicU8::new(ENDED))
    }

    /// Marks the command killed; `false` when it had already ended.
    fn kill(&self) -> bool {
        self.0
            .compare_exchange(RUNNING, KILLED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            || self.killed()
    }

    pub(crate) fn killed(&self) -> bool {
        self.0.load(Ordering::SeqCst) == KILLED
    }

    /// Marks the command ended; `false` when it was killed first.
    pub(crate) fn finish(&self) -> bool {
        self.0
            .compare_exchange(RUNNING, ENDED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            || self.0.load(Ordering::SeqCst) == ENDED
    }
}

/// Kills by deleting the command's session (the daemon kills the session's shell).
pub(crate) struct SessionControl {
    tb: Arc<Toolbox>,
    sid: String,
    state: Arc<CommandState>,
}

#[async_trait::async_trait]
impl ProcessControl for SessionControl {
    async fn kill(&self) -> Result<()> {
        if !self.state.kill() {
            // It ended; its session may already run another command.
            return Ok(());
        }
        delete_session(&self.tb, &self.sid).await
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

/// A foreground command's session: deleted when its handle is dropped before the end (which
/// kills the command), given back to the pool once the command ended.
pub(crate) struct SessionGuard {
    tb: Arc<Toolbox>,
    sid: String,
    armed: bool,
}

impl SessionGuard {
    /// The command ended: its session serves the next command.
    pub(crate) fn release(&mut self) {
        if std::mem::take(&mut self.armed) {
            release_session(&self.tb, self.sid.clone());
        }
    }

    /// The session is gone (killed): nothing to do.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.armed {
            spawn_delete(self.tb.clone(), std::mem::take(&mut self.sid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_quote_and_fold_cwd_env_and_timeout() {
        assert_eq!(
            command_line(&Command::shell("exit 3"), 7).unwrap(),
            format!(
                "(: sdk-cmd-7; (exit 3\n); s=$?; printf '%s:%s\\n' {END_MARK} \"$s\"; printf '%s\\n' {END_MARK} >&2; exit $s)"
            )
        );
        assert!(command_line(&Command::new("x").arg("a\0"), 1).is_err());
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
            // A shell line runs in a subshell: a trailing comment must not eat its `)`.
            ("echo out # a comment", "out\n", "", 0),
            ("cd /; exit 5", "", "", 5),
        ] {
            let result = run_line(&command_line(&Command::shell(script), 1).unwrap(), &dir);
            assert_eq!(result.status.code(), Some(code), "{script}");
            for (i, (stream, want)) in [(&result.stdout, out), (&result.stderr, err)]
                .into_iter()
                .enumerate()
            {
                // What the daemon's line wrapper would log, then what the follower gives back.
                let mut trailer = Trailer::default();
                let mut got = Vec::new();
                for chunk in stream.chunks(3) {
                    got.extend(trailer.push(chunk).unwrap_or_default());
                }
                // Both streams end on a whole mark; stdout's carries the exit status.
                let want_status = if i == 0 { Some(code) } else { None };
                assert_eq!(trailer.complete(), Some(want_status), "{script}");
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
        assert_eq!(trailer.complete(), None);
        got.extend(trailer.finish().unwrap_or_default());
        assert_eq!(got, b"partial output of a killed command");
        // A mark the command printed itself, followed by more output, is output.
        let mut trailer = Trailer::default();
        let mut got = Vec::new();
        for piece in [format!("{END_MARK}:3\n").as_bytes(), b"more\n"] {
            got.extend(trailer.push(piece).unwrap_or_default());
        }
        got.extend(trailer.finish().unwrap_or_default());
        assert_eq!(got, format!("{END_MARK}:3\nmore\n").into_bytes());
    }

    #[test]
    fn mark_prefixes_are_recognised_exactly() {
        let m = END_MARK;
        for (tail, want) in [
            (String::new(), Some(false)),
            (m[..5].to_owned(), Some(false)),
            (m.to_string(), Some(false)),
            (format!("{m}:"), Some(false)),
            (format!("{m}:12"), Some(false)),
            (format!("{m}\n"), Some(true)),
            (format!("{m}:12\n"), Some(true)),
            (format!("{m}:\n"), None),
            (format!("{m}x"), None),
            (format!("{m}:1x"), None),
            (format!("{m}:12345678901"), None),
            ("x".to_owned(), None),
        ] {
            assert_eq!(mark_prefix(tail.as_bytes()), want, "{tail:?}");
        }
    }

    #[test]
    fn a_timeout_stop_is_a_timeout_error_and_a_plain_124_is_an_exit() {
        let long_ago = Timing {
            limit: Duration::from_millis(1),
            started: Instant::now() - Duration::from_secs(1),
        };
        let e = exit_event(124, Some(&long_ago)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(exit_event(137, Some(&long_ago)).is_err());
        assert!(
            matches!(exit_event(3, Some(&long_ago)), Ok(ProcessEvent::Exit(s)) if s.code == Some(3))
        );
        // Exit 124 before the timeout could have passed, or without a timeout, is the command's.
        let just_now = Timing {
            limit: Duration::from_secs(60),
            started: Instant::now(),
        };
        assert!(exit_event(124, Some(&just_now)).is_ok());
        assert!(exit_event(124, None).is_ok());
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
            let out = run_line(&command_line(&cmd, 1).unwrap(), &dir);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("it's a $HOME \"test\"|conformance-cwd{END_MARK}:0\n"),
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
    fn tags_name_their_session() {
        assert_eq!(
            tag_session("conformance-bg").unwrap(),
            "sdk-tag-conformance-bg"
        );
        assert!(tag_session("a/b").is_err());
        assert!(tag_session("").is_err());
    }
}
