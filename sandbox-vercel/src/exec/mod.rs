//! Commands (PROTOCOL.md §6): start, follow, list, re-attach and kill.
//!
//! - A command is started with `POST …/cmd`. In the foreground it is sent with `wait` and
//!   `logs`, and the answer is the NDJSON stream of its output and exit (§6.2); in the
//!   background (detached) the answer is the command object at once, and its output is read
//!   from `/logs` when the caller reads the process.
//! - Either way the output is followed by [`follow::Follower`], which survives cut and silent
//!   streams (§11). A foreground start whose stream breaks before its first line (so before
//!   the command's id is known) is settled by listing the session's commands, never re-sent.
//! - The command id is the process id: `processes` lists the session's commands, `attach`
//!   follows one again from its first byte, `kill_process` sends SIGKILL.
//! - env and cwd travel natively; a relative cwd is resolved against the session's working
//!   directory. `user` may be `root` (sent as `sudo`) or the default `vercel-sandbox`. The
//!   process timeout is sent as `timeout` (the server kills the command, §6.1). There is no
//!   pty.
//! - A command with [`Command::stdin`] is started with `attachStdin` and its [`Process`] gets a
//!   [`sandbox_sdk_core::Stdin`] whose writes go out as ordered, offset-carrying stdin requests
//!   ([`stdin`], §6.6).
//! - A command's `tag` is not stored anywhere (Vercel commands carry none).

pub(crate) mod follow;
pub(crate) mod ndjson;
pub(crate) mod stdin;

use crate::api::Api;
use crate::config::{KILL_SIGNAL, PROVIDER};
use crate::error::protocol_error;
use crate::lifecycle::{Handle, SessionRef};
use crate::wire::{LogLine, RunBody, VercelCommand};
use async_trait::async_trait;
use follow::Follower;
use futures::StreamExt;
use ndjson::Lines;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, EventStream, Process, ProcessControl, ProcessEvent, ProcessInfo,
    PtySize, Result,
};
use std::sync::Arc;

/// The user commands run as when none is given (PROTOCOL.md §6.1).
const DEFAULT_USER: &str = "vercel-sandbox";

/// The body of `POST …/cmd` for `command`.
fn run_body(command: &Command, session: &SessionRef, wait: bool) -> Result<RunBody> {
    command.validate()?;
    let invalid = |m: String| {
        Err(Error::new(ErrorKind::NotSupported, m)
            .with_provider(PROVIDER)
            .with_operation("exec"))
    };
    if command.pty.is_some() {
        return invalid("vercel: commands have no pty (PROTOCOL.md §9)".into());
    }
    let sudo = match command.user.as_deref() {
        None | Some(DEFAULT_USER) => false,
        Some("root") => true,
        Some(other) => {
            return Err(Error::validation(format!(
                "vercel runs commands as {DEFAULT_USER} or as root (sudo), not as {other:?}"
            ))
            .with_provider(PROVIDER)
            .with_operation("exec"));
        }
    };
    let (program, args) = command
        .argv
        .split_first()
        .ok_or_else(|| Error::validation("empty command"))?;
    let timeout = (!command.timeout.is_zero())
        .then(|| (command.timeout.as_millis().min(u64::MAX as u128) as u64).max(100));
    Ok(RunBody {
        command: program.clone(),
        args: args.to_vec(),
        cwd: command
            .cwd
            .as_deref()
            .map(|cwd| sandbox_sdk_core::absolute_path(&session.cwd, cwd)),
        env: command.env.clone(),
        sudo,
        wait,
        logs: wait,
        timeout,
        attach_stdin: command.stdin,
    })
}

/// Kills one command by signal.
struct Control {
    api: Api,
    name: String,
    session: String,
    command: String,
}

#[async_trait]
impl ProcessControl for Control {
    async fn kill(&self) -> Result<()> {
        self.api
            .kill_command(&self.name, &self.session, &self.command, KILL_SIGNAL)
            .await
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

/// The process of command `command`, with its stdin writer when it was started with
/// `attachStdin` (`stdin`, PROTOCOL.md §6.6).
fn process(
    handle: &Handle,
    session: &str,
    command: &str,
    follower: Follower,
    stdin: bool,
) -> Process {
    let control = Arc::new(Control {
        api: handle.api.clone(),
        name: handle.name.clone(),
        session: session.to_owned(),
        command: command.to_owned(),
    });
    if !stdin {
        return Process::new(command, follower.into_events(), None, control);
    }
    let (writer, pump) = stdin::pump(
        handle.api.clone(),
        handle.name.clone(),
        session.to_owned(),
        command.to_owned(),
    );
    Process::new(
        command,
        with_pump(follower.into_events(), pump),
        Some(writer),
        control,
    )
}

/// `events`, telling `pump` once they end (an exit, an error or the end) and waiting until it
/// has sent what was already written, so no stdin task outlives the process.
fn with_pump(events: EventStream, pump: stdin::Pump) -> EventStream {
    futures::stream::unfold(Some((events, Some(pump))), |state| async move {
        let (mut events, mut pump) = state?;
        let event = events.next().await;
        let ended = !matches!(event, Some(Ok(ref e)) if !matches!(e, ProcessEvent::Exit(_)));
        if ended && let Some(p) = pump.take() {
            p.finish().await;
        }
        let event = event?;
        Some((event, Some((events, pump))))
    })
    .boxed()
}

/// Starts `command` and follows it.
pub(crate) async fn exec(handle: &Handle, command: &Command) -> Result<Process> {
    let session = handle.session("exec")?;
    let api = &handle.api;
    if command.background {
        let body = run_body(command, &session, false)?;
        let started = api.start_command(&handle.name, &session.id, &body).await?;
        let id = started.command.id;
        let follower = Follower::attached(
            api.clone(),
            handle.name.clone(),
            session.id.clone(),
            id.clone(),
        );
        return Ok(process(handle, &session.id, &id, follower, command.stdin));
    }
    let body = run_body(command, &session, true)?;
    let sent_at = std::time::SystemTime::now();
    let lost = |e: Error| settle_lost_start(handle, &session, &body, sent_at, e);
    let stream = match api.run_streamed(&handle.name, &session.id, &body).await {
        Ok(stream) => stream,
        Err(e) if e.is_ambiguous() => return lost(e).await,
        Err(e) => return Err(e),
    };
    let mut lines = Lines::new(stream);
    // The first line is the command as it started (§6.2): its id is the pid.
    let first = match lines.next_line().await {
        Some(Ok(line)) => line,
        Some(Err(e)) if matches!(e.kind(), ErrorKind::Transport | ErrorKind::Timeout) => {
            return lost(e.with_ambiguous(true)).await;
        }
        Some(Err(e)) => return Err(e),
        None => {
            let e = protocol_error(
                "exec",
                &handle.name,
                "the command stream ended before the command started",
            )
            .with_ambiguous(true);
            return lost(e).await;
        }
    };
    let started: LogLine = serde_json::from_slice(&first).map_err(|_| {
        protocol_error(
            "exec",
            &handle.name,
            "the command stream did not start with the command",
        )
    })?;
    let Some(VercelCommand { id, .. }) = started.command else {
        return Err(protocol_error(
            "exec",
            &handle.name,
            "the command stream did not start with the command",
        ));
    };
    let follower = Follower::on_start_stream(
        api.clone(),
        handle.name.clone(),
        session.id.clone(),
        id.clone(),
        lines,
    );
    Ok(process(handle, &session.id, &id, follower, command.stdin))
}

/// How far a lost command's `startedAt` may be from this machine's clock when it was sent
/// (clock skew, queueing) and still be taken for it.
const LOST_START_SKEW: std::time::Duration = std::time::Duration::from_secs(60);

/// A foreground start whose answer broke before its first line (or before its head, when the
/// failure was ambiguous): the command may be running without its id known. Settled by
/// listing the session's commands (PROTOCOL.md §13.2), never by sending it again: exactly one
/// command with this program, arguments and cwd, started around `sent_at`, is followed from
/// `/logs`; none or several leave the original (ambiguous) error.
async fn settle_lost_start(
    handle: &Handle,
    session: &SessionRef,
    body: &RunBody,
    sent_at: std::time::SystemTime,
    error: Error,
) -> Result<Process> {
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    };
    let skew = LOST_START_SKEW.as_millis() as u64;
    let (from, to) = (
        ms(sent_at).saturating_sub(skew),
        ms(std::time::SystemTime::now()) + skew,
    );
    let Ok(list) = handle.api.list_commands(&handle.name, &session.id).await else {
        return Err(error);
    };
    let mut found = list.commands.into_iter().filter(|c| {
        c.name.as_deref() == Some(body.command.as_str())
            && c.args == body.args
            && body
                .cwd
                .as_ref()
                .is_none_or(|cwd| c.cwd.as_ref() == Some(cwd))
            && c.started_at.is_some_and(|at| (from..=to).contains(&at))
    });
    match (found.next(), found.next()) {
        (Some(only), None) => {
            tracing::debug!(command = %only.id, "vercel: a command whose start answer broke was found by listing");
            let follower = Follower::attached(
                handle.api.clone(),
                handle.name.clone(),
                session.id.clone(),
                only.id.clone(),
            );
            Ok(process(
                handle,
                &session.id,
                &only.id,
                follower,
                body.attach_stdin,
            ))
        }
        _ => Err(error),
    }
}

/// The session's commands.
pub(crate) async fn processes(handle: &Handle) -> Result<Vec<ProcessInfo>> {
    let session = handle.session("processes")?;
    let list = handle.api.list_commands(&handle.name, &session.id).await?;
    Ok(list
        .commands
        .into_iter()
        .map(|c| ProcessInfo {
            running: c.exit_code.is_none(),
            argv: c.name.into_iter().chain(c.args).collect(),
            cwd: c.cwd,
            pid: c.id,
            tag: None,
        })
        .collect())
}

/// Follows command `pid` again, its output from the first byte.
pub(crate) async fn attach(handle: &Handle, pid: &str) -> Result<Process> {
    let session = handle.session("attach")?;
    let follower = Follower::attached(
        handle.api.clone(),
        handle.name.clone(),
        session.id.clone(),
        pid.to_owned(),
    );
    Ok(process(handle, &session.id, pid, follower, false))
}

/// Sends `signal` to command `pid`.
pub(crate) async fn signal(handle: &Handle, pid: &str, signal: i32) -> Result<()> {
    let session = handle.session("kill_process")?;
    handle
        .api
        .kill_command(&handle.name, &session.id, pid, signal)
        .await
}
