//! Commands (PROTOCOL.md §5): start, follow, list, re-attach and kill, all over the exec
//! WebSocket and its session calls.
//!
//! - A command is spawned with `GET …/exec?cmd=…&path=…&stdin=…&dir=…` upgraded to a
//!   WebSocket (§5.1). The first message is `session_info` (§18.6), whose session id (the PID)
//!   is the process id. Output arrives as stream-id frames and the exit as a one-byte frame
//!   (§5.2), followed by [`follow::Follower`], which re-attaches at `/exec/{id}` when the socket
//!   breaks or goes silent and drops the replayed output it already delivered (§5.5, §18.6).
//! - env: the API's `env` replaces the whole environment, PATH included (§5.1, trap 3), so
//!   per-command variables are set with `env NAME=VALUE program …` instead, on top of the
//!   sprite's own environment. Either way they travel in the URL's query and show in the
//!   session list (trap 15): not private. They are never logged, and are scrubbed from a
//!   refused upgrade's answer before it is quoted. cwd travels as `dir`; a relative one resolves against the sprite
//!   user's home (§18.11). Commands run as the sprite user: `user` may be unset or `sprite`.
//! - A foreground command outlives a dropped socket for the builder's detach grace, so a
//!   re-attach finds it (trap 2); a background one runs until it ends
//!   (`max_run_after_disconnect=0`).
//! - stdin is opened only when asked (`stdin=true`, trap 1); closing it sends the EOF frame.
//! - A process timeout is kept here: when it passes the session is killed (SIGKILL) and the
//!   process ends with a `Timeout` error.
//! - A pty (`Command::pty`) asks for a TTY session (§5.3): `tty=true` with the size, raw
//!   terminal bytes both ways (stdout and stderr merged, as a terminal merges them), `resize`
//!   messages from [`Process::resize`], the exit from the `exit` message.
//! - Commands carry no tag.

pub(crate) mod follow;

use crate::api::exec::{Frame, Target, open};
use crate::config::{HOME, KILL_SIGNAL, PROVIDER, go_duration};
use crate::error::protocol_error;
use crate::lifecycle::Handle;
use async_trait::async_trait;
use follow::Follower;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, Process, ProcessControl, ProcessInfo, PtySize, Result, Stdin,
};
use std::sync::Arc;

/// The user commands run as (§18.11).
const USER: &str = "sprite";

/// The query of a spawn (§5.1) for `command`, with `grace` as `max_run_after_disconnect`.
fn spawn_query(command: &Command, grace: &str) -> Result<Vec<(&'static str, String)>> {
    command.validate()?;
    let refuse = |kind: ErrorKind, m: String| {
        Err(Error::new(kind, m)
            .with_provider(PROVIDER)
            .with_operation("exec"))
    };
    if let Some(user) = command.user.as_deref().filter(|u| *u != USER) {
        return refuse(
            ErrorKind::Validation,
            format!("sprites run commands as the {USER} user, not as {user:?}"),
        );
    }
    let mut argv: Vec<String> = Vec::new();
    if !command.env.is_empty() {
        if command.argv[0].contains('=') {
            return refuse(
                ErrorKind::Validation,
                format!(
                    "sprites: a program named {:?} cannot take per-command env (it is set with env(1))",
                    command.argv[0]
                ),
            );
        }
        argv.push("env".into());
        argv.extend(command.env.iter().map(|(k, v)| format!("{k}={v}")));
    }
    argv.extend(command.argv.iter().cloned());
    let mut query: Vec<(&'static str, String)> =
        argv.iter().map(|arg| ("cmd", arg.clone())).collect();
    query.push(("path", argv[0].clone()));
    query.push(("stdin", command.stdin.to_string()));
    match command.pty {
        Some(size) => {
            query.push(("tty", "true".into()));
            query.push(("cols", size.cols.to_string()));
            query.push(("rows", size.rows.to_string()));
        }
        None => query.push(("tty", "false".into())),
    }
    let dir = sandbox_sdk_core::absolute_path(HOME, command.cwd.as_deref().unwrap_or(HOME));
    query.push(("dir", dir));
    query.push(("max_run_after_disconnect", grace.to_owned()));
    Ok(query)
}

/// What of `command`'s env must not show in an error: each `NAME=VALUE` and each value (the
/// query carries them, PROTOCOL.md §5.1).
fn env_values(command: &Command) -> Vec<String> {
    command
        .env
        .iter()
        .flat_map(|(k, v)| [format!("{k}={v}"), v.clone()])
        .collect()
}

/// Kills one session by signal, and resizes its terminal through its follower.
struct Control {
    handle: Handle,
    session: Option<String>,
    /// To the follower, which owns the socket; `None` without a pty.
    resize: Option<tokio::sync::mpsc::Sender<PtySize>>,
}

#[async_trait]
impl ProcessControl for Control {
    async fn kill(&self) -> Result<()> {
        let Some(session) = &self.session else {
            return Err(Error::new(
                ErrorKind::NotSupported,
                "the server never named this command's session, so it cannot be killed by id",
            )
            .with_provider(PROVIDER));
        };
        kill(&self.handle, session, KILL_SIGNAL).await
    }

    async fn resize(&self, size: PtySize) -> Result<()> {
        let Some(resize) = &self.resize else {
            return Err(Error::new(
                ErrorKind::NotSupported,
                "this command has no pty to resize (start it with Command::pty)",
            )
            .with_provider(PROVIDER));
        };
        resize.send(size).await.map_err(|_| {
            Error::new(ErrorKind::NotRunning, "the command has ended").with_provider(PROVIDER)
        })
    }
}

fn process(
    handle: &Handle,
    session: Option<String>,
    mut follower: Follower,
    stdin: Option<Stdin>,
) -> Process {
    let control = Arc::new(Control {
        handle: handle.clone(),
        session: session.clone(),
        resize: follower.resizer(),
    });
    Process::new(
        session.unwrap_or_default(),
        follower.into_events(),
        stdin,
        control,
    )
}

/// Starts `command` and follows it.
pub(crate) async fn exec(handle: &Handle, command: &Command) -> Result<Process> {
    let settings = &handle.api.settings;
    let grace = if command.background {
        "0".to_owned()
    } else {
        go_duration(settings.detach_grace)
    };
    let query = spawn_query(command, &grace)?;
    let tty = command.pty.is_some();
    let hidden = env_values(command);
    let target = Target::Spawn {
        query: &query,
        tty,
        hidden: &hidden,
    };
    let mut socket = open(&handle.api, &handle.name, target, "exec").await?;
    // `session_info` comes first (§18.6); output that comes before it is kept. A server that
    // sends none within the request timeout leaves the session unnamed (no re-attach, no kill).
    let mut early = Vec::new();
    let wait = tokio::time::sleep(settings.request_timeout);
    tokio::pin!(wait);
    let session = loop {
        tokio::select! {
            frame = socket.next() => match frame {
                Ok(Frame::Session(id)) => break Some(id),
                Ok(Frame::Closed) => {
                    return Err(protocol_error(
                        "exec",
                        &handle.name,
                        "the exec socket closed before the command started",
                    ).with_ambiguous(true));
                }
                Ok(frame @ Frame::Exit(_)) => {
                    early.push(frame);
                    break None;
                }
                Ok(frame) => early.push(frame),
                Err(e) => return Err(e.with_operation("exec").with_sandbox_id(&handle.name)),
            },
            _ = &mut wait => break None,
        }
    };
    let (stdin, stdin_rx) = if command.stdin {
        let (stdin, rx, outcome) = Stdin::channel_with_outcome(16);
        (Some(stdin), Some((rx, outcome)))
    } else {
        (None, None)
    };
    let deadline = (!command.timeout.is_zero()).then(|| {
        (
            tokio::time::Instant::now() + command.timeout,
            command.timeout,
        )
    });
    let follower = Follower::new(handle.clone(), session.clone(), socket, command.stdin, tty)
        .early(early)
        .stdin(stdin_rx)
        .deadline(deadline);
    Ok(process(handle, session, follower, stdin))
}

/// The sprite's live sessions (§5.5): finished ones leave the list (§18.7).
pub(crate) async fn processes(handle: &Handle) -> Result<Vec<ProcessInfo>> {
    let list = handle.api.sessions(&handle.name, "processes").await?;
    Ok(list
        .sessions
        .into_iter()
        .map(|s| ProcessInfo {
            pid: s.id,
            tag: None,
            argv: s.command.split_whitespace().map(str::to_owned).collect(),
            cwd: s.workdir,
            running: true,
        })
        .collect())
}

/// Follows session `pid` again: the server's replay of its recent output (§5.5, the last
/// 1 MiB, §18.6), then live output and the exit. The session list says whether it has a
/// terminal, which decides how its frames read (§5.3); a session no longer listed (finished,
/// §18.7) is taken to have none.
pub(crate) async fn attach(handle: &Handle, pid: &str) -> Result<Process> {
    let listed = handle.api.sessions(&handle.name, "attach").await?;
    let tty = listed.sessions.iter().any(|s| s.id == pid && s.tty);
    let target = Target::Attach {
        id: pid,
        stdin: false,
        tty,
    };
    let socket = open(&handle.api, &handle.name, target, "attach").await?;
    let follower =
        Follower::new(handle.clone(), Some(pid.to_owned()), socket, false, tty).replaying();
    Ok(process(handle, Some(pid.to_owned()), follower, None))
}

/// Sends `signal` (a name such as `SIGTERM`) to session `pid` and its process group (§5.5).
pub(crate) async fn kill(handle: &Handle, pid: &str, signal: &str) -> Result<()> {
    handle.api.kill(&handle.name, pid, signal).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &[(&str, String)]) -> Vec<String> {
        query.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    #[test]
    fn a_command_becomes_the_spawn_query() {
        let cmd = Command::new("ls").arg("-la").cwd("work").env("A", "1 2");
        assert_eq!(
            pairs(&spawn_query(&cmd, "120s").unwrap()),
            [
                "cmd=env",
                "cmd=A=1 2",
                "cmd=ls",
                "cmd=-la",
                "path=env",
                "stdin=false",
                "tty=false",
                "dir=/home/sprite/work",
                "max_run_after_disconnect=120s"
            ]
        );
        let q = spawn_query(&Command::new("cat").stdin().cwd("/tmp"), "0").unwrap();
        assert!(pairs(&q).contains(&"stdin=true".to_owned()));
        assert!(pairs(&q).contains(&"dir=/tmp".to_owned()));
    }

    #[test]
    fn a_pty_asks_for_a_terminal_and_what_sprites_cannot_do_is_refused() {
        let pty = Command::new("bash").pty(PtySize {
            cols: 100,
            rows: 30,
        });
        let q = pairs(&spawn_query(&pty, "0").unwrap());
        for want in ["tty=true", "cols=100", "rows=30"] {
            assert!(q.contains(&want.to_owned()), "{q:?}");
        }
        let root = Command::new("id").user("root");
        assert_eq!(
            spawn_query(&root, "0").unwrap_err().kind(),
            ErrorKind::Validation
        );
        let odd = Command::new("a=b").env("X", "1");
        assert_eq!(
            spawn_query(&odd, "0").unwrap_err().kind(),
            ErrorKind::Validation
        );
        assert!(spawn_query(&Command::new("id").user("sprite"), "0").is_ok());
    }
}
