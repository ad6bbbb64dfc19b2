//! Commands through the toolbox, as session commands (PROTOCOL.md §6.2), and over SSH
//! ([`ssh`]).
//!
//! A foreground command runs in a session taken from the sandbox's pool (the provider's,
//! shared by every handle of the sandbox): made on first use, given back once the command
//! ended, deleted when a handle is dropped before its command ends (which kills it). It is
//! first sent synchronously: when it ends within the builder's
//! [`direct_window`](crate::DaytonaBuilder::direct_window), that one request brings back
//! stdout, stderr and the exit code (the answer's `stdout`/`stderr`/`exitCode`, §6.2, §9),
//! so a short command costs one request. A command still running when the window closes keeps
//! running; its id is read from the session, and it is followed to its end ([`follow`]) live
//! over the log WebSocket, or by polling with [`LogFollow::Poll`]. With a zero window every
//! command is sent asynchronously and followed from its start.
//!
//! A background (or tagged) command gets a session of its own that is kept; its pid is
//! `{sessionId}/{commandId}`, usable with `attach` and `kill_process`.
//!
//! A call dropped while it runs leaves nothing behind: the start runs in a task of its own,
//! which finishes the requests already sent, deletes the session of a command it had sent (so
//! the command is killed) or gives an unused one back to the pool, and drops a handle nobody
//! will read (whose session is then deleted the same way).

mod demux;
mod follow;
pub(crate) mod logs;
mod marks;
pub(crate) mod session;
pub(crate) mod ssh;

use self::follow::Follower;
use self::marks::{Timing, Trailers, command_line, exit_event};
use self::session::{
    CommandState, EXEC_PREFIX, SessionControl, SessionGuard, Sessions, split_pid, tag_session,
};
use crate::config::{LogFollow, PROVIDER};
use crate::wire::SessionExecAnswer;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, EventStream, Process, ProcessEvent, ProcessInfo, Result,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Splits a whole non-follow logs answer into stdout and stderr (see [`demux::session_logs`]).
pub(crate) use self::demux::session_logs;

/// The sender the started handle goes back through; closed once the caller stopped waiting.
type Caller = oneshot::Sender<Result<Process>>;

/// Starts `command` and returns its handle. A failure goes through the toolbox's state check
/// ([`Toolbox::explain`](crate::api::toolbox::Toolbox::explain)), so a sandbox that is not
/// running is `NotRunning`.
///
/// The start runs in a task of its own, so dropping this future cleans up instead of leaving
/// a session (and maybe a running command) behind: see the module docs.
pub(crate) async fn start(sessions: Arc<Sessions>, command: &Command) -> Result<Process> {
    check(command)?;
    let (mut caller, answer) = oneshot::channel();
    let command = command.clone();
    tokio::spawn(async move {
        let started = match start_checked(&sessions, &command, &mut caller).await {
            Err(e) => Err(sessions.tb.explain(e).await),
            ok => ok,
        };
        // A caller that is gone drops the handle here: its guard deletes the session of a
        // command still running.
        let _ = caller.send(started);
    });
    answer.await.unwrap_or_else(|_| {
        Err(Error::new(
            ErrorKind::Provider,
            "starting the command ended without an answer",
        )
        .with_provider(PROVIDER)
        .with_operation("exec"))
    })
}

/// Refuses what toolbox sessions cannot do, before anything is sent.
fn check(command: &Command) -> Result<()> {
    if command.stdin {
        return Err(Error::not_supported(PROVIDER, "stdin"));
    }
    if command.pty.is_some() {
        return Err(Error::not_supported(PROVIDER, "pty"));
    }
    if command.user.is_some() {
        return Err(Error::not_supported(PROVIDER, "exec as another user"));
    }
    Ok(())
}

/// The error of a start whose caller stopped waiting.
fn abandoned(sandbox_id: &str) -> Error {
    Error::new(
        ErrorKind::Cancelled,
        "the caller stopped waiting for the command",
    )
    .or_context(PROVIDER, "exec", Some(sandbox_id))
}

async fn start_checked(
    sessions: &Arc<Sessions>,
    command: &Command,
    caller: &mut Caller,
) -> Result<Process> {
    let tb = &sessions.tb;
    let line = command_line(command, sessions.next_label())?;
    let timing = Timing::of(command);
    if command.background || command.tag.is_some() {
        let sid = match &command.tag {
            Some(tag) => {
                let sid = tag_session(tag)?;
                sessions.create(&sid).await?;
                sid
            }
            None => sessions.create_new("bg").await?,
        };
        let sent = if caller.is_closed() {
            Err(abandoned(&tb.sandbox_id))
        } else {
            send_async(sessions, &sid, &line, command).await
        };
        let cid = match sent {
            Ok(cid) => cid,
            Err(e) => {
                sessions.delete(&sid).await.ok();
                return Err(e);
            }
        };
        let owned = !command.background;
        return Ok(process(sessions.clone(), sid, cid, owned, timing));
    }
    let (mut sid, mut pooled) = sessions.acquire().await?;
    if caller.is_closed() {
        sessions.release(sid);
        return Err(abandoned(&tb.sandbox_id));
    }
    let window = tb.api.config.direct_window;
    let started = loop {
        let started = if window.is_zero() {
            send_async(sessions, &sid, &line, command)
                .await
                .map(Started::Running)
        } else {
            send_direct(sessions, &sid, &line, window, caller).await
        };
        match started {
            // A pooled session the daemon no longer has: stopping the sandbox (by anyone) ends
            // every session. The daemon looks the session up before running anything, so the
            // command did not run; a new session takes it.
            Err(e) if pooled && e.kind() == ErrorKind::NotFound => {
                sid = sessions.create_new("exec").await?;
                pooled = false;
            }
            other => break other,
        }
    };
    match started {
        Ok(Started::Running(cid)) => Ok(process(sessions.clone(), sid, cid, true, timing)),
        Ok(Started::Done(answer)) => {
            let pid = format!("{sid}/{}", answer.cmd_id);
            sessions.release(sid.clone());
            Ok(finished(sessions.clone(), sid, pid, answer, timing))
        }
        Err(e) => {
            // The session may hold a command in an unknown state (or one its caller abandoned):
            // deleting it kills that command, and it is not reused.
            sessions.delete(&sid).await.ok();
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
async fn send_async(
    sessions: &Sessions,
    sid: &str,
    line: &str,
    command: &Command,
) -> Result<String> {
    let tb = &sessions.tb;
    let answer = tb
        .session_exec_async(sid, line, command.request_timeout, "exec")
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
/// is read from the session by its unique line. A loaded daemon may not list the command yet:
/// the session is looked at again, backing off from 25 ms to the poll interval, for up to the
/// request timeout, while the sync answer may still arrive. A caller that stops waiting ends
/// the wait with a `Cancelled` error (the session is then deleted, killing the command).
async fn send_direct(
    sessions: &Sessions,
    sid: &str,
    line: &str,
    window: Duration,
    caller: &mut Caller,
) -> Result<Started> {
    let tb = &sessions.tb;
    // The window bounds the wait; the daemon's sync exec has no timeout of its own (§6.2).
    let exec = tb.session_exec_sync(sid, line, "exec");
    tokio::pin!(exec);
    tokio::select! {
        answer = &mut exec => return answer.map(Started::Done),
        _ = tokio::time::sleep(window) => {}
        _ = caller.closed() => return Err(abandoned(&tb.sandbox_id)),
    }
    let config = &tb.api.config;
    let give_up = tokio::time::Instant::now() + config.request_timeout;
    let mut pause = Duration::from_millis(25);
    loop {
        let session = tb.get_session(sid, "exec").await?;
        let listed = session
            .commands
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.command == line);
        if let Some(command) = listed {
            return Ok(Started::Running(command.id));
        }
        if tokio::time::Instant::now() >= give_up {
            return Err(Error::new(
                ErrorKind::Provider,
                format!(
                    "the command was sent but its session {sid} does not list it after {:?}",
                    window + config.request_timeout
                ),
            )
            .or_context(PROVIDER, "exec", Some(&tb.sandbox_id)));
        }
        tokio::select! {
            answer = &mut exec => return answer.map(Started::Done),
            _ = tokio::time::sleep(pause) => {}
            _ = caller.closed() => return Err(abandoned(&tb.sandbox_id)),
        }
        pause = (pause * 2).min(config.poll_interval.max(Duration::from_millis(25)));
    }
}

/// The handle of a command that already ended: its output and exit, from the sync answer.
fn finished(
    sessions: Arc<Sessions>,
    sid: String,
    pid: String,
    answer: SessionExecAnswer,
    timing: Option<Timing>,
) -> Process {
    let (stdout, stderr) = match (answer.stdout, answer.stderr) {
        (None, None) => demux::split_log(answer.output.unwrap_or_default().as_bytes()),
        (out, err) => (
            out.unwrap_or_default().into_bytes(),
            err.unwrap_or_default().into_bytes(),
        ),
    };
    let mut tails = Trailers::default();
    let out_ready = tails.stdout(&stdout);
    let err_ready = tails.stderr(&stderr);
    let marked = tails.status();
    let (out_rest, err_rest) = tails.finish();
    let out: [Option<Bytes>; 2] = [out_ready, out_rest];
    let err = [err_ready, err_rest];
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
        .or_context(PROVIDER, "exec", Some(&sessions.tb.sandbox_id))),
    });
    let control = Arc::new(SessionControl {
        sessions,
        sid,
        state: Arc::new(CommandState::ended()),
    });
    let events: EventStream = futures::stream::iter(events).boxed();
    Process::new(pid, events, None, control).with_emulated_streaming()
}

/// A handle following an existing command. `owned`: a foreground command whose session goes
/// back to the pool when it ends and is deleted (killing it) when the handle goes first.
fn process(
    sessions: Arc<Sessions>,
    sid: String,
    cid: String,
    owned: bool,
    timing: Option<Timing>,
) -> Process {
    let state = Arc::new(CommandState::default());
    let control = Arc::new(SessionControl {
        sessions: sessions.clone(),
        sid: sid.clone(),
        state: state.clone(),
    });
    let pid = format!("{sid}/{cid}");
    let tb = sessions.tb.clone();
    let poll = tb.api.config.log_follow == LogFollow::Poll;
    let guard = SessionGuard {
        sessions,
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

/// Every toolbox session's commands as processes (a tagged session's tag is its name without
/// [`session::TAG_PREFIX`]).
pub(crate) async fn processes(sessions: &Sessions) -> Result<Vec<ProcessInfo>> {
    let tb = &sessions.tb;
    let all = tb.explained(tb.list_sessions().await).await?;
    Ok(all
        .into_iter()
        .flat_map(|s| {
            let sid = s.session_id;
            let tag = sid.strip_prefix(session::TAG_PREFIX).map(str::to_owned);
            s.commands
                .unwrap_or_default()
                .into_iter()
                .map(move |c| ProcessInfo {
                    pid: format!("{sid}/{}", c.id),
                    tag: tag.clone(),
                    argv: vec![c.command],
                    cwd: None,
                    running: c.exit_code.is_none(),
                })
        })
        .collect())
}

/// Reattaches by pid (`{session}/{command}`) or by tag (the last command of the tag's
/// session). The log is followed from its start.
pub(crate) async fn attach(sessions: &Arc<Sessions>, pid: &str) -> Result<Process> {
    let tb = &sessions.tb;
    let (sid, cid) = if pid.contains('/') {
        let (sid, cid) = split_pid(pid)?;
        // Fail early, with NotFound, for a pid that does not exist.
        tb.explained(tb.command(sid, cid, "session_command").await)
            .await?;
        (sid.to_owned(), cid.to_owned())
    } else {
        let sid = tag_session(pid)?;
        let session = tb.explained(tb.get_session(&sid, "attach").await).await?;
        let last = session.commands.unwrap_or_default().pop().ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("no command runs under tag {pid}"),
            )
            .or_context(PROVIDER, "attach", Some(&tb.sandbox_id))
        })?;
        (sid, last.id)
    };
    Ok(process(sessions.clone(), sid, cid, false, None))
}

/// Kills by pid or tag: deletes the command's session (the daemon kills its shell). A command
/// run over SSH (pid `ssh/…`) is killed through its channel while its handle lives.
pub(crate) async fn kill(sessions: &Sessions, pid: &str) -> Result<()> {
    let tb = &sessions.tb;
    if pid.starts_with(ssh::PID_PREFIX) {
        return ssh::kill(pid, &tb.sandbox_id).await;
    }
    let sid = if pid.contains('/') {
        let (sid, cid) = split_pid(pid)?;
        // A foreground session serves one command after another: once this command has
        // ended, its session may run another, which deleting it would kill.
        if sid.starts_with(EXEC_PREFIX) {
            let command = tb
                .explained(tb.command(sid, cid, "session_command").await)
                .await?;
            if command.exit_code.is_some() {
                return Ok(());
            }
        }
        sid.to_owned()
    } else {
        tag_session(pid)?
    };
    sessions.delete(&sid).await
}
