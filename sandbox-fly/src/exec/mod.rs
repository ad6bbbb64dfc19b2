//! Exec on a Fly Machine: what [`FlySandbox`](crate::FlySandbox)'s `exec`, `processes`,
//! `attach` and `kill_process` call. A command goes one of two ways ([`choice`]):
//!
//! - **Direct** ([`direct`]): one buffered `POST …/exec` with an argv, a server-side timeout and
//!   the whole stdin. Used for commands whose timeout fits [`crate::EXEC_DEADLINE`] (or all
//!   foreground commands with [`crate::FlyBuilder::prefer_direct_exec`]). Output arrives at the
//!   end.
//! - **Background and poll** (emulated streaming): the command is started detached inside the
//!   machine with stdout and stderr going to files ([`launch`], the scripts in `exec/scripts.rs`);
//!   the adapter polls them by offset and streams what is new as `Stdout`/`Stderr` events, then
//!   the exit code the recording subshell wrote ([`follow`], each answer read by [`poll`]). Used
//!   for commands without a timeout or longer than the exec deadline, and for background
//!   commands, which can be listed ([`listing`]), reattached and killed ([`process`]).
//!
//! Stdin is collected whole before it is sent ([`stdin`]). `/exec` takes no environment or
//! working directory: a command arrives here with both folded into `sh -c` by core's
//! [`fold_env_cwd`] (here, or before it in the client layer), and its argv is sent as it is.

mod choice;
mod direct;
mod follow;
mod launch;
mod listing;
mod poll;
mod process;
mod scripts;
mod stdin;

use self::choice::Route;
use crate::api::{Api, script_output};
use crate::config::PROVIDER;
use sandbox_sdk_core::emulate::fold_env_cwd;
use sandbox_sdk_core::{Command, Error, ErrorKind, Output, Process, Result};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use self::follow::attach;
pub(crate) use self::listing::{parse_processes, processes};
pub(crate) use self::poll::parse_poll;
pub(crate) use self::process::kill;

/// Starts `command` on `machine`, direct or polled as [`choice::route`] says. A polled command
/// without a tag takes its process id from `seq`, the handle's counter.
pub(crate) async fn start(
    api: &Api,
    machine: &str,
    command: &Command,
    seq: &AtomicU64,
) -> Result<Process> {
    let command = &*checked(command, machine)?;
    match choice::route(&api.settings, command) {
        Route::Direct { secs } => direct::start_direct(api, machine, command, secs).await,
        Route::Polled => {
            let seq = seq.fetch_add(1, Ordering::Relaxed);
            launch::start_polled(api, machine, command, seq).await
        }
    }
}

/// Runs `command` through one buffered `/exec` (no live output), with the command's timeout
/// capped at the exec deadline (the deadline when unset).
pub(crate) async fn buffered(api: &Api, machine: &str, command: &Command) -> Result<Output> {
    let command = checked(command, machine)?;
    let secs = choice::direct_secs(&api.settings, &command);
    let resp = direct::exec_direct(api, machine, command.argv.clone(), secs, None).await?;
    Ok(script_output(resp).output)
}

/// `command` checked, with its env and cwd folded into `sh -c` by core's one folding
/// ([`fold_env_cwd`]): `/exec` takes neither (PROTOCOL.md §8). Through the client layer
/// the command comes folded already and passes unchanged.
fn checked<'c>(command: &'c Command, machine: &str) -> Result<Cow<'c, Command>> {
    let context = |e: Error| e.or_context(PROVIDER, "exec", Some(machine));
    command.validate().map_err(context)?;
    if command.pty.is_some() {
        return Err(Error::not_supported(PROVIDER, "pty").with_sandbox_id(machine));
    }
    if command.user.is_some() {
        return Err(Error::new(
            ErrorKind::NotSupported,
            "fly exec runs as the machine's default user; Command::user is not supported",
        )
        .with_provider(PROVIDER)
        .with_operation("exec")
        .with_sandbox_id(machine));
    }
    fold_env_cwd(command).map_err(context)
}
