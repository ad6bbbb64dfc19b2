//! Commands (PROTOCOL.md §6): start, follow, list, re-attach and kill.
//!
//! - A command is started with `POST …/cmd`. In the foreground it is sent with `wait` and
//!   `logs`, and the answer is the NDJSON stream of its output and exit (§6.2); in the
//!   background (detached) the answer is the command object at once, and its output is read
//!   from `/logs` when the caller reads the process.
//! - Either way the output is followed by [`follow::Follower`], which survives cut and silent
//!   streams (§11).
//! - The command id is the process id: `processes` lists the session's commands, `attach`
//!   follows one again from its first byte, `kill_process` sends SIGKILL.
//! - env and cwd travel natively; a relative cwd is resolved against the session's working
//!   directory. `user` may be `root` (sent as `sudo`) or the default `vercel-sandbox`. The
//!   process timeout is sent as `timeout` (the server kills the command, §6.1). There is no
//!   stdin and no pty.
//! - A command's `tag` is not stored anywhere (Vercel commands carry none).

pub(crate) mod follow;
pub(crate) mod ndjson;

use crate::api::Api;
use crate::config::{KILL_SIGNAL, PROVIDER};
use crate::error::protocol_error;
use crate::lifecycle::{Handle, SessionRef};
use crate::wire::{LogLine, RunBody, VercelCommand};
use async_trait::async_trait;
use follow::Follower;
use ndjson::Lines;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, Process, ProcessControl, ProcessInfo, PtySize, Result,
};
use std::sync::Arc;

/// The user commands run as when none is given (PROTOCOL.md §6.1).
const DEFAULT_USER: &str = "vercel-sandbox";

/// `path` against the session's working directory.
pub(crate) fn resolve(session: &SessionRef, path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        let base = session.cwd.trim_end_matches('/');
        let rest = path.trim_start_matches("./");
        if rest.is_empty() || rest == "." {
            base.to_owned()
        } else {
            format!("{base}/{rest}")
        }
    }
}

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
    if command.stdin {
        return invalid("vercel: commands take no stdin (PROTOCOL.md §6)".into());
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
        cwd: command.cwd.as_deref().map(|cwd| resolve(session, cwd)),
        env: command.env.clone(),
        sudo,
        wait,
        logs: wait,
        timeout,
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

fn process(handle: &Handle, session: &str, command: &str, follower: Follower) -> Process {
    let control = Arc::new(Control {
        api: handle.api.clone(),
        name: handle.name.clone(),
        session: session.to_owned(),
        command: command.to_owned(),
    });
    Process::new(command, follower.into_events(), None, control)
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
        return Ok(process(handle, &session.id, &id, follower));
    }
    let body = run_body(command, &session, true)?;
    let stream = api.run_streamed(&handle.name, &session.id, &body).await?;
    let mut lines = Lines::new(stream);
    // The first line is the command as it started (§6.2): its id is the pid.
    let first = match lines.next_line().await {
        Some(line) => line?,
        None => {
            return Err(protocol_error(
                "exec",
                &handle.name,
                "the command stream ended before the command started",
            )
            .with_ambiguous(true));
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
    Ok(process(handle, &session.id, &id, follower))
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
    Ok(process(handle, &session.id, pid, follower))
}

/// Sends `signal` to command `pid`.
pub(crate) async fn signal(handle: &Handle, pid: &str, signal: i32) -> Result<()> {
    let session = handle.session("kill_process")?;
    handle
        .api
        .kill_command(&handle.name, &session.id, pid, signal)
        .await
}
