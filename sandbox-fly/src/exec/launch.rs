//! Launching a command in the background of the machine, to be followed by polling: the launch
//! script starts it detached under a free process id, its stdout and stderr going to files
//! (see `exec/scripts.rs`), waits a little in the machine for it to end and answers with the
//! first poll. With stdin, the input is uploaded to a file first and the launch reads it.

use super::follow::{Follow, Poller, polled_process};
use super::poll::{PollAnswer, poll_result};
use super::process::{
    IdSource, PolledControl, ProcessFiles, clean_flag, failure, process_dir, run_script,
    validate_pid,
};
use super::scripts;
use super::stdin::spawn_stdin_collector;
use crate::api::{Api, ScriptCall};
use crate::config::{POLL_CHUNK, PROVIDER};
use crate::files;
use futures::StreamExt;
use sandbox_sdk_core::emulate::files::EXIT_TAKEN;
use sandbox_sdk_core::{Command, Error, ErrorKind, Process, ProcessControl, Result, Stdin};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn meta_json(cmd: &Command) -> String {
    // A command with secret arguments (env values folded into its script) is listed by its
    // program only, as `Command::describe` shows it.
    let argv = if cmd.secret_args {
        &cmd.argv[..cmd.argv.len().min(1)]
    } else {
        &cmd.argv[..]
    };
    serde_json::json!({
        "argv": argv,
        "tag": cmd.tag,
        "cwd": cmd.cwd,
    })
    .to_string()
}

/// `wait` as the `sleep` operand of the launch script: whole seconds as an integer (any `sleep`
/// takes it), shorter or finer waits as a decimal with millisecond precision.
fn sleep_operand(wait: Duration) -> String {
    if wait.subsec_millis() == 0 {
        wait.as_secs().to_string()
    } else {
        format!("{:.3}", wait.as_secs_f64())
    }
}

/// How long the launch of `cmd` waits in the machine for it to end: the builder's
/// [`crate::FlyBuilder::launch_wait`] for a foreground command (cut to its timeout), nothing
/// for a background one, whose caller wants the handle at once.
fn launch_wait(api: &Api, cmd: &Command) -> Duration {
    if cmd.background {
        return Duration::ZERO;
    }
    let wait = api.settings.launch_wait;
    if cmd.timeout.is_zero() {
        wait
    } else {
        wait.min(cmd.timeout)
    }
}

/// Whether a launched command reads stdin from a file uploaded before the launch
/// (`DIR.in`, see [`process_dir`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StdinFile {
    /// No stdin: the command reads `/dev/null`.
    Absent,
    /// Uploaded: the command reads it.
    Uploaded,
}

/// One launch of a command, all but the ids it may take.
struct Launch<'a> {
    api: &'a Api,
    machine: &'a str,
    cmd: &'a Command,
    files: ProcessFiles,
    id: IdSource,
    stdin: StdinFile,
    /// How long the launch waits in the machine for the command to end.
    wait: Duration,
}

impl Launch<'_> {
    /// Launches the command detached under the first free id of `ids`, waits up to `wait` in
    /// the machine for it to end, and returns that id and the first poll (the whole result when
    /// it ended in time). An id whose files exist is skipped (exit 47), except that a tag
    /// ([`IdSource::Tag`]) may take over the id of a finished process.
    async fn under_first_free(&self, ids: &[String]) -> Result<(String, PollAnswer)> {
        let (api, machine, cmd, wait) = (self.api, self.machine, self.cmd, self.wait);
        let stdin_flag = match self.stdin {
            StdinFile::Absent => "0",
            StdinFile::Uploaded => "1",
        };
        let takeover_flag = match self.id {
            IdSource::Counter => "0",
            IdSource::Tag => "1",
        };
        let mut last = None;
        for pid in ids {
            let mut args: Vec<String> = vec![
                process_dir(pid),
                sleep_operand(wait),
                POLL_CHUNK.to_string(),
                clean_flag(self.files, self.id).to_owned(),
                stdin_flag.to_owned(),
                meta_json(cmd),
                takeover_flag.to_owned(),
            ];
            args.extend(cmd.argv.iter().cloned());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let script = scripts::run_script();
            let call = ScriptCall::new(&script, &args).waiting(wait.as_secs_f64().ceil() as u64);
            let resp = run_script(api, machine, call).await?;
            if resp.exit_code == Some(i64::from(EXIT_TAKEN)) {
                last = Some(failure(resp, "exec", machine, &format!("process id {pid}")));
                continue;
            }
            return Ok((pid.clone(), poll_result(resp, machine, pid)?));
        }
        Err(last.unwrap_or_else(|| {
            Error::new(ErrorKind::Conflict, "no free process id").with_provider(PROVIDER)
        }))
    }
}

/// The ids to try for a new process: its tag, or `p{seq}` (this handle's counter, so a
/// scenario's requests are the same on every run) then two random fallbacks for when another
/// handle already used that number on the machine.
fn candidate_ids(cmd: &Command, seq: u64) -> Result<Vec<String>> {
    match &cmd.tag {
        Some(tag) => {
            validate_pid(tag)?;
            Ok(vec![tag.clone()])
        }
        None => Ok(vec![
            format!("p{seq}"),
            format!("p{seq}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
            format!("p{seq}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
        ]),
    }
}

/// Starts `cmd` with the background-and-poll emulation. Without stdin it is launched now; with
/// stdin it is launched once the stdin writer is shut down (the input is uploaded to a file in
/// the machine first, in chunks, and the process id is fixed up front: a taken id is `Conflict`).
pub(super) async fn start_polled(
    api: &Api,
    machine: &str,
    cmd: &Command,
    seq: u64,
) -> Result<Process> {
    let ids = candidate_ids(cmd, seq)?;
    let id = match cmd.tag {
        Some(_) => IdSource::Tag,
        None => IdSource::Counter,
    };
    let files = if cmd.background {
        ProcessFiles::Keep
    } else {
        ProcessFiles::Remove
    };
    let deadline = (!cmd.timeout.is_zero()).then(|| (Instant::now() + cmd.timeout, cmd.timeout));
    let wait = launch_wait(api, cmd);
    let poller = |pid: &str| {
        let control = Arc::new(PolledControl {
            api: api.clone(),
            machine: machine.to_owned(),
            pid: pid.to_owned(),
        });
        let follow = Follow {
            files,
            id,
            interval: api.settings.poll_interval,
            deadline,
        };
        Poller::new(control, follow)
    };
    if !cmd.stdin {
        let launch = Launch {
            api,
            machine,
            cmd,
            files,
            id,
            stdin: StdinFile::Absent,
            wait,
        };
        let (pid, first) = launch.under_first_free(&ids).await?;
        let mut p = poller(&pid);
        p.launched_with(first, wait);
        return Ok(polled_process(p, pid));
    }
    let pid = ids[0].clone();
    let mut p = poller(&pid);
    let control: Arc<dyn ProcessControl> = p.control();
    let (stdin, rx) = Stdin::channel(16);
    let collected = spawn_stdin_collector(rx);
    let api = api.clone();
    let machine = machine.to_owned();
    let cmd = cmd.clone();
    let ids = vec![pid.clone()];
    let launch_then_poll = async move {
        let started = async {
            let input = collected.await?;
            let path = format!("{}.in", process_dir(&ids[0]));
            files::on(&api, &machine).write_file(&path, input).await?;
            let launch = Launch {
                api: &api,
                machine: &machine,
                cmd: &cmd,
                files,
                id,
                stdin: StdinFile::Uploaded,
                wait,
            };
            let launched = launch.under_first_free(&ids).await;
            if launched.is_err() {
                // The launch reads the stdin file where it was uploaded; when it failed
                // (the tag is taken, ...) the file would stay among the process files forever.
                files::on(&api, &machine).remove_part(&path).await;
            }
            launched
        }
        .await;
        match started {
            Ok((_, first)) => {
                p.restart_clock();
                p.launched_with(first, wait);
            }
            Err(e) => p.fail(e),
        }
        p
    };
    let events = futures::stream::once(launch_then_poll)
        .flat_map(Poller::into_events)
        .boxed();
    Ok(Process::new(pid, events, Some(stdin), control).with_emulated_streaming())
}
