//! Exec on a Fly Machine.
//!
//! - **Direct**: one buffered `POST …/exec` with an argv, a server-side timeout and the whole
//!   stdin. Used for commands whose timeout fits [`crate::EXEC_DEADLINE`] (or all foreground
//!   commands with [`crate::FlyBuilder::prefer_direct_exec`]). Output arrives at the end.
//! - **Background and poll** (emulated streaming): the command is started detached inside the
//!   machine with stdout and stderr going to files (see `exec/scripts.rs`); the adapter polls
//!   them by offset and streams what is new as `Stdout`/`Stderr` events, then the exit code the
//!   recording subshell wrote. Used for commands without a timeout or longer than the exec
//!   deadline, and for background commands, which can be listed, reattached and killed.
//!
//! `/exec` takes no environment or working directory: a command arrives here with both folded
//! into `sh -c` by core's [`fold_env_cwd`](sandbox_sdk_core::emulate::fold_env_cwd) (in
//! [`FlySandbox`](crate::FlySandbox), or before it in the client layer), and its argv is sent
//! as it is.

mod scripts;

use crate::api::{Action, Api, ScriptExec, script_output};
use crate::config::{DIRECT_ANSWER_LIMIT, POLL_CHUNK, PROVIDER, STDIN_LIMIT};
use crate::files;
use crate::wire::{ExecRequest, ExecResponse};
use async_trait::async_trait;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use sandbox_sdk_core::emulate::files::{EXIT_TAKEN, script_error};
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, ExitStatus, Process, ProcessControl, ProcessEvent, ProcessInfo,
    PtySize, Result, Stdin,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Ticks of 0.2 s a poll waits inside the machine for news before answering.
const POLL_WAIT_TICKS: u64 = 5;

/// Whole seconds a poll may spend waiting in the machine for news ([`POLL_WAIT_TICKS`] of 0.2 s).
const POLL_WAIT_SECS: u64 = 1;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Runs one of the process scripts on `machine` (see [`ScriptExec::exec`]).
async fn run_script(
    api: &Api,
    machine: &str,
    script: &str,
    args: &[&str],
    wait_secs: u64,
    listing: bool,
) -> Result<ExecResponse> {
    let runner = ScriptExec {
        api: api.clone(),
        machine: machine.to_owned(),
    };
    runner.exec(script, args, None, wait_secs, listing).await
}

/// A process script's failure as an error naming `what` (the core's exit-status conventions:
/// 44 no such process, 47 an id in use).
fn failure(resp: ExecResponse, op: &str, machine: &str, what: &str) -> Error {
    script_error(&script_output(resp), PROVIDER, op, machine, what)
}

fn exit_status(resp: &ExecResponse) -> ExitStatus {
    script_output(resp.clone()).output.status
}

/// Collects stdin on its own task, so that a caller who writes everything before reading any
/// output never blocks on the channel; the result is awaited when the command is sent.
fn spawn_stdin_collector(
    rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl std::future::Future<Output = Result<Bytes>> + Send + 'static {
    let task = tokio::spawn(collect_stdin(rx));
    async move {
        task.await.unwrap_or_else(|e| {
            Err(Error::new(
                ErrorKind::Cancelled,
                format!("stdin collection stopped: {e}"),
            )
            .with_provider(PROVIDER)
            .with_operation("exec"))
        })
    }
}

/// Collects a process's stdin until the writer is shut down, up to [`STDIN_LIMIT`].
async fn collect_stdin(mut rx: tokio::sync::mpsc::Receiver<Bytes>) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = rx.recv().await {
        buf.extend_from_slice(&chunk);
        if buf.len() > STDIN_LIMIT {
            return Err(Error::validation(format!(
                "stdin is larger than {STDIN_LIMIT} bytes, the most fly sends with one command"
            ))
            .with_provider(PROVIDER)
            .with_operation("exec"));
        }
    }
    Ok(buf.freeze())
}

/// One buffered `/exec` of `argv` with `stdin`. Non-UTF-8 stdin is sent in base64 and decoded
/// in the machine, because `/exec` takes stdin as a JSON string.
pub(crate) async fn exec_direct(
    api: &Api,
    machine: &str,
    argv: Vec<String>,
    secs: u64,
    stdin: Option<Bytes>,
) -> Result<ExecResponse> {
    let (command, stdin) = match stdin {
        None => (argv, None),
        Some(bytes) => match String::from_utf8(bytes.to_vec()) {
            Ok(text) => (argv, Some(text)),
            Err(_) => {
                let mut wrapped: Vec<String> = ["sh", "-c", "base64 -d | \"$@\"", "sh"]
                    .map(String::from)
                    .to_vec();
                wrapped.extend(argv);
                (wrapped, Some(b64().encode(&bytes)))
            }
        },
    };
    api.exec(
        machine,
        &ExecRequest {
            command,
            timeout: Some(secs.max(1)),
            stdin,
        },
        DIRECT_ANSWER_LIMIT,
    )
    .await
}

fn direct_events(resp: ExecResponse) -> Vec<Result<ProcessEvent>> {
    let status = exit_status(&resp);
    let mut events = Vec::new();
    if let Some(out) = resp.stdout.filter(|s| !s.is_empty()) {
        events.push(Ok(ProcessEvent::Stdout(Bytes::from(out))));
    }
    if let Some(err) = resp.stderr.filter(|s| !s.is_empty()) {
        events.push(Ok(ProcessEvent::Stderr(Bytes::from(err))));
    }
    events.push(Ok(ProcessEvent::Exit(status)));
    events
}

/// Control of a buffered `/exec`: it cannot be interrupted once sent.
struct DirectControl;

#[async_trait]
impl ProcessControl for DirectControl {
    async fn kill(&self) -> Result<()> {
        Err(Error::new(
            ErrorKind::NotSupported,
            "a command run through one buffered /exec cannot be killed; run it without a timeout \
             or in the background to get a killable process",
        )
        .with_provider(PROVIDER)
        .with_operation("kill_process"))
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

/// Starts `cmd` through one buffered `/exec`. Without stdin the call is made now (errors
/// surface from `exec`); with stdin it is made once the stdin writer is shut down.
pub(crate) async fn start_direct(
    api: &Api,
    machine: &str,
    cmd: &Command,
    secs: u64,
) -> Result<Process> {
    let argv = cmd.argv.clone();
    if cmd.stdin {
        let (stdin, rx) = Stdin::channel(16);
        let collected = spawn_stdin_collector(rx);
        let api = api.clone();
        let machine_id = machine.to_owned();
        let events = futures::stream::once(async move {
            let input = collected.await?;
            exec_direct(&api, &machine_id, argv, secs, Some(input)).await
        })
        .flat_map(|result| {
            futures::stream::iter(match result {
                Ok(resp) => direct_events(resp),
                Err(e) => vec![Err(e)],
            })
        })
        .boxed();
        return Ok(
            Process::new("exec", events, Some(stdin), Arc::new(DirectControl))
                .with_emulated_streaming(),
        );
    }
    let resp = exec_direct(api, machine, argv, secs, None).await?;
    let events = futures::stream::iter(direct_events(resp)).boxed();
    Ok(Process::new("exec", events, None, Arc::new(DirectControl)).with_emulated_streaming())
}

/// One parsed poll answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PollAnswer {
    pub alive: bool,
    pub exit: Option<ExitStatus>,
    pub out_size: u64,
    pub err_size: u64,
    pub stdout: Bytes,
    pub stderr: Bytes,
}

fn decode_b64(text: &str) -> Option<Bytes> {
    let joined: String = text.split_whitespace().collect();
    b64().decode(joined).ok().map(Bytes::from)
}

/// Parses `sandbox-fly-poll ALIVE EXIT OUT ERR [OUTFORM ERRFORM]`, stdout, a `.` line, stderr.
/// Each stream comes in base64 unless its form is `raw`: then it is the whole stream as it is
/// (the script sends that only for a stream of printable ASCII and newlines whose every byte it
/// read back, from offset 0), exactly its size in bytes, followed by a newline.
pub(crate) fn parse_poll(text: &str) -> Option<PollAnswer> {
    let start = text.find(scripts::POLL_TAG)?;
    let text = &text[start..];
    let (header, rest) = text.split_once('\n').unwrap_or((text, ""));
    let mut fields = header.split_whitespace().skip(1);
    let alive = fields.next()? == "1";
    let exit = match fields.next()? {
        "-" => None,
        s if s.starts_with('s') => Some(ExitStatus::signal(s[1..].parse().ok()?)),
        s => Some(ExitStatus::code(s.parse().ok()?)),
    };
    let out_size = fields.next()?.parse().ok()?;
    let err_size = fields.next()?.parse().ok()?;
    let raw_out = fields.next() == Some("raw");
    let raw_err = fields.next() == Some("raw");
    let (stdout, err) = if raw_out {
        let (out, rest) = split_raw(rest, out_size)?;
        (out, rest.strip_prefix(".\n").or(rest.strip_prefix('.'))?)
    } else {
        let (out, err) = match rest.strip_prefix(".\n") {
            Some(err) => ("", err),
            None => match rest.split_once("\n.\n") {
                Some((out, err)) => (out, err),
                None => rest.split_once(".\n").or_else(|| rest.split_once('.'))?,
            },
        };
        let out = if out.trim() == "." { "" } else { out };
        (decode_b64(out)?, err)
    };
    let stderr = if raw_err {
        split_raw(err, err_size)?.0
    } else {
        decode_b64(err)?
    };
    Some(PollAnswer {
        alive,
        exit,
        out_size,
        err_size,
        stdout,
        stderr,
    })
}

/// The first `size` bytes of `text` (a raw stream) and what follows its closing newline.
fn split_raw(text: &str, size: u64) -> Option<(Bytes, &str)> {
    let size = usize::try_from(size).ok()?;
    let stream = text.get(..size)?;
    let rest = &text[size..];
    Some((
        Bytes::copy_from_slice(stream.as_bytes()),
        rest.strip_prefix('\n').unwrap_or(rest),
    ))
}

fn poll_result(resp: ExecResponse, machine: &str, pid: &str) -> Result<PollAnswer> {
    if resp.exit_code.unwrap_or(0) != 0 {
        return Err(failure(
            resp,
            "exec",
            machine,
            &format!("background process {pid}"),
        ));
    }
    parse_poll(resp.stdout.as_deref().unwrap_or("")).ok_or_else(|| {
        Error::new(
            ErrorKind::Provider,
            format!("unreadable poll answer for background process {pid}"),
        )
        .with_provider(PROVIDER)
        .with_operation("exec")
        .with_sandbox_id(machine)
    })
}

/// Kills a polled process through the `KILL` script.
pub(crate) struct PolledControl {
    pub api: Api,
    pub machine: String,
    pub pid: String,
}

impl PolledControl {
    /// Kills the process; with `clean` also removes its files (output included) from
    /// the machine, for a process nobody will poll again.
    pub(crate) async fn kill_now(&self, clean: bool) -> Result<()> {
        let dir = process_dir(&self.pid);
        let mut args = vec![dir.as_str()];
        if clean {
            args.push("1");
        }
        let resp = run_script(&self.api, &self.machine, scripts::KILL, &args, 0, false).await?;
        match resp.exit_code.unwrap_or(0) {
            0 => Ok(()),
            _ => Err(failure(
                resp,
                "kill_process",
                &self.machine,
                &format!("process {}", self.pid),
            )),
        }
    }
}

#[async_trait]
impl ProcessControl for PolledControl {
    async fn kill(&self) -> Result<()> {
        // The stream (if any) still polls for the recorded exit, and cleans up after it.
        self.kill_now(false).await
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

/// The path prefix of a background process's files inside the machine (`DIR.pid`, `DIR.out`, …).
pub(crate) fn process_dir(pid: &str) -> String {
    format!("{}/{pid}", scripts::ROOT)
}

/// Process ids name directories, so only `[A-Za-z0-9_.-]` (not starting with `.`) is accepted.
pub(crate) fn validate_pid(pid: &str) -> Result<()> {
    let ok = !pid.is_empty()
        && pid.len() <= 64
        && !pid.starts_with('.')
        && pid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "invalid process id or tag {pid:?}: use letters, digits, '_', '-' and '.'"
        ))
        .with_provider(PROVIDER))
    }
}

/// State of a polled output stream.
struct Poller {
    control: Arc<PolledControl>,
    out: u64,
    err: u64,
    clean: bool,
    /// The process id is the caller's tag (it may be asked for again).
    tagged: bool,
    /// Pauses after polls that came back early without news; reset by news.
    backoff: Backoff,
    /// The last poll came back early without news (its wait in the machine was cut short).
    quiet: bool,
    interval: Duration,
    deadline: Option<(Instant, Duration)>,
    vanished: u8,
    done: bool,
    launched: bool,
    queue: VecDeque<Result<ProcessEvent>>,
}

impl Poller {
    fn apply(&mut self, answer: PollAnswer) {
        self.launched = true;
        let progressed = !answer.stdout.is_empty() || !answer.stderr.is_empty();
        self.out += answer.stdout.len() as u64;
        self.err += answer.stderr.len() as u64;
        if !answer.stdout.is_empty() {
            self.queue
                .push_back(Ok(ProcessEvent::Stdout(answer.stdout)));
        }
        if !answer.stderr.is_empty() {
            self.queue
                .push_back(Ok(ProcessEvent::Stderr(answer.stderr)));
        }
        match answer.exit {
            Some(status) if self.out >= answer.out_size && self.err >= answer.err_size => {
                self.queue.push_back(Ok(ProcessEvent::Exit(ExitStatus {
                    emulated: EXIT_FROM_MARKER,
                    ..status
                })));
                self.done = true;
            }
            Some(_) if !progressed => {
                // The exit is recorded, so the sizes are final, yet nothing more came back
                // (`base64` or `tail` missing or failing in the image): polling again would
                // loop forever.
                self.queue.push_back(Err(Error::new(
                    ErrorKind::Provider,
                    format!(
                        "background process {} exited but its output could not be read past \
                         byte {} of {} (stdout) / {} of {} (stderr); does the image have \
                         base64, head and tail?",
                        self.control.pid, self.out, answer.out_size, self.err, answer.err_size
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("exec")
                .with_sandbox_id(&self.control.machine)));
                self.done = true;
            }
            Some(_) => {}
            None if !answer.alive => {
                self.vanished += 1;
                if self.vanished >= 2 {
                    self.queue.push_back(Err(Error::new(
                        ErrorKind::Provider,
                        format!(
                            "background process {} ended without recording an exit status \
                             (was the machine restarted?)",
                            self.control.pid
                        ),
                    )
                    .with_provider(PROVIDER)
                    .with_operation("exec")
                    .with_sandbox_id(&self.control.machine)));
                    self.done = true;
                }
            }
            None => self.vanished = 0,
        }
    }

    /// One poll; also returns how long the machine was asked to wait for news.
    async fn poll(&mut self) -> (Result<PollAnswer>, Duration) {
        let ticks = match self.deadline {
            Some((at, _)) => {
                let left = at.saturating_duration_since(Instant::now()).as_millis() as u64;
                POLL_WAIT_TICKS.min(left / 200)
            }
            None => POLL_WAIT_TICKS,
        };
        let dir = process_dir(&self.control.pid);
        let args = [
            dir.as_str(),
            &self.out.to_string(),
            &self.err.to_string(),
            &POLL_CHUNK.to_string(),
            &ticks.to_string(),
            clean_flag(self.clean, self.tagged),
        ]
        .map(str::to_owned);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let c = &self.control;
        let answer = run_script(
            &c.api,
            &c.machine,
            &scripts::poll_script(),
            &args,
            POLL_WAIT_SECS,
            false,
        )
        .await
        .and_then(|resp| poll_result(resp, &c.machine, &c.pid));
        (answer, Duration::from_millis(ticks * 200))
    }

    /// Takes the launch's answer. A launch that waited in the machine for the whole timeout and
    /// still found the process running means the timeout has passed, whatever the local clock
    /// says: the process is killed next instead of polled once more.
    fn launched_with(&mut self, first: PollAnswer, waited: Duration) {
        if let Some((_, limit)) = self.deadline
            && waited >= limit
            && first.exit.is_none()
        {
            self.deadline = Some((Instant::now(), limit));
        }
        self.apply(first);
    }

    /// A backoff for quiet polls, bounded by the process's deadline.
    fn fresh_backoff(interval: Duration, deadline: Option<(Instant, Duration)>) -> Backoff {
        let backoff = Backoff::new(interval);
        match deadline {
            Some((at, _)) => backoff.within(at.saturating_duration_since(Instant::now())),
            None => backoff,
        }
    }

    /// The next event: queued ones first, then one poll. Polls go at once, as the machine's exec
    /// rate allows (the machine's exec bucket): each waits in the machine for news, so a silent process costs one
    /// call per wait, not a client-side sleep. A poll that comes back early without news (the
    /// wait was cut short by the deadline, or `sleep` fails in the image) is followed by a
    /// [`Backoff`] pause, so nothing spins.
    async fn next(&mut self) -> Option<Result<ProcessEvent>> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            if self.quiet {
                self.backoff.pause().await;
            }
            let c = &self.control;
            let mut wake = c.api.pace.next_at(Action::Exec, &c.machine);
            if let Some((at, _)) = self.deadline {
                wake = wake.min(at);
            }
            tokio::time::sleep_until(wake).await;
            if let Some((at, limit)) = self.deadline
                && Instant::now() >= at
            {
                self.done = true;
                // Nothing polls this process again: a foreground one's files go with it.
                let killed = self.control.kill_now(self.clean).await;
                let mut error = Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "process {} ran past its timeout of {}s and was killed",
                        self.control.pid,
                        limit.as_secs_f64()
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("exec")
                .with_sandbox_id(&self.control.machine);
                if let Err(e) = killed {
                    error = error.with_source(e);
                }
                return Some(Err(error));
            }
            let (answer, waited) = {
                let started = Instant::now();
                let (answer, asked) = self.poll().await;
                (answer, (started.elapsed(), asked))
            };
            match answer {
                Ok(answer) => {
                    let news = answer.exit.is_some()
                        || !answer.stdout.is_empty()
                        || !answer.stderr.is_empty();
                    let (took, asked) = waited;
                    self.quiet = !news && (asked.is_zero() || took < asked / 2);
                    if news {
                        self.backoff = Self::fresh_backoff(self.interval, self.deadline);
                    }
                    self.apply(answer);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// A foreground process whose handle is dropped before it ended is killed (in the background, on
/// the current runtime), as the core's `Process` docs allow; a background one keeps running.
/// Only a process that was launched is killed (`launched`), never one still waiting for stdin.
impl Drop for Poller {
    fn drop(&mut self) {
        if self.done || !self.clean || !self.launched {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let control = self.control.clone();
            handle.spawn(async move {
                if let Err(e) = control.kill_now(true).await {
                    tracing::debug!(pid = %control.pid, error = %e, "fly: could not kill a dropped process");
                }
            });
        }
    }
}

/// Whether exit codes of polled processes are marked as read from a marker: they are recorded by
/// the wrapping shell in a file, not reported by Fly.
const EXIT_FROM_MARKER: bool = true;

fn polled_process(poller: Poller, pid: String, stdin: Option<Stdin>) -> Process {
    let control: Arc<dyn ProcessControl> = poller.control.clone();
    let events = futures::stream::unfold(poller, |mut p| async move {
        let event = p.next().await?;
        Some((event, p))
    })
    .boxed();
    Process::new(pid, events, stdin, control).with_emulated_streaming()
}

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

/// Launches `cmd` detached under the first free id of `ids`, waits up to `wait` in the machine
/// for it to end, and returns that id and the first poll (the whole result when it ended in
/// time). An id whose files exist is skipped (exit 47), except that a tag (`reuse`) may
/// take over the id of a finished process.
#[allow(clippy::too_many_arguments)]
async fn launch(
    api: &Api,
    machine: &str,
    ids: &[String],
    cmd: &Command,
    clean: bool,
    stdin: bool,
    reuse: bool,
    wait: Duration,
) -> Result<(String, PollAnswer)> {
    let mut last = None;
    for pid in ids {
        let mut args: Vec<String> = vec![
            process_dir(pid),
            sleep_operand(wait),
            POLL_CHUNK.to_string(),
            clean_flag(clean, reuse).to_owned(),
            flag(stdin),
            meta_json(cmd),
            flag(reuse),
        ];
        args.extend(cmd.argv.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let resp = run_script(
            api,
            machine,
            &scripts::run_script(),
            &args,
            wait.as_secs_f64().ceil() as u64,
            false,
        )
        .await?;
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

/// The poll scripts' clean flag: `0` keeps the process's files (a background process), `1`
/// removes them once everything is read, `2` does so in the background after answering, for an untagged
/// id (`p{seq}…`) that no later command can ask for, so the removal races with nothing.
fn clean_flag(clean: bool, tagged: bool) -> &'static str {
    match (clean, tagged) {
        (false, _) => "0",
        (true, true) => "1",
        (true, false) => "2",
    }
}

fn flag(on: bool) -> String {
    if on { "1" } else { "0" }.to_owned()
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
pub(crate) async fn start_polled(
    api: &Api,
    machine: &str,
    cmd: &Command,
    seq: u64,
) -> Result<Process> {
    let ids = candidate_ids(cmd, seq)?;
    let reuse = cmd.tag.is_some();
    let clean = !cmd.background;
    let deadline = (!cmd.timeout.is_zero()).then(|| (Instant::now() + cmd.timeout, cmd.timeout));
    let wait = launch_wait(api, cmd);
    let interval = api.settings.poll_interval;
    let poller = |pid: &str| Poller {
        control: Arc::new(PolledControl {
            api: api.clone(),
            machine: machine.to_owned(),
            pid: pid.to_owned(),
        }),
        out: 0,
        err: 0,
        clean,
        tagged: reuse,
        backoff: Poller::fresh_backoff(interval, deadline),
        quiet: false,
        interval,
        deadline,
        vanished: 0,
        done: false,
        launched: false,
        queue: VecDeque::new(),
    };
    if !cmd.stdin {
        let (pid, first) = launch(api, machine, &ids, cmd, clean, false, reuse, wait).await?;
        let mut p = poller(&pid);
        p.launched_with(first, wait);
        return Ok(polled_process(p, pid, None));
    }
    let pid = ids[0].clone();
    let mut p = poller(&pid);
    let control: Arc<dyn ProcessControl> = p.control.clone();
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
            let launched = launch(&api, &machine, &ids, &cmd, clean, true, reuse, wait).await;
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
                p.deadline = deadline.map(|(_, limit)| (Instant::now() + limit, limit));
                p.backoff = Poller::fresh_backoff(p.interval, p.deadline);
                p.launched_with(first, wait);
            }
            Err(e) => {
                p.done = true;
                p.queue.push_back(Err(e));
            }
        }
        p
    };
    let events = futures::stream::once(launch_then_poll)
        .flat_map(|poller| {
            futures::stream::unfold(poller, |mut p| async move {
                let event = p.next().await?;
                Some((event, p))
            })
        })
        .boxed();
    Ok(Process::new(pid, events, Some(stdin), control).with_emulated_streaming())
}

/// Reattaches to a background process: output from now on, then its exit.
pub(crate) async fn attach(api: &Api, machine: &str, pid: &str) -> Result<Process> {
    validate_pid(pid)?;
    let control = Arc::new(PolledControl {
        api: api.clone(),
        machine: machine.to_owned(),
        pid: pid.to_owned(),
    });
    let dir = process_dir(pid);
    let resp = run_script(
        api,
        machine,
        &scripts::poll_script(),
        &[&dir, "0", "0", "0", "0", "0"],
        0,
        false,
    )
    .await?;
    let first = poll_result(resp, machine, pid)?;
    let interval = api.settings.poll_interval;
    let mut poller = Poller {
        control: control.clone(),
        out: first.out_size,
        err: first.err_size,
        clean: false,
        tagged: true,
        backoff: Poller::fresh_backoff(interval, None),
        quiet: false,
        interval,
        deadline: None,
        vanished: 0,
        done: false,
        launched: false,
        queue: VecDeque::new(),
    };
    poller.apply(first);
    Ok(polled_process(poller, pid.to_owned(), None))
}

/// Lists the background processes started in the machine (running or finished, until their
/// files are cleaned up).
pub(crate) async fn processes(api: &Api, machine: &str) -> Result<Vec<ProcessInfo>> {
    let resp = run_script(api, machine, scripts::PROCESSES, &[scripts::ROOT], 0, true).await?;
    if resp.exit_code.unwrap_or(0) != 0 {
        return Err(failure(resp, "processes", machine, "listing processes"));
    }
    Ok(parse_processes(resp.stdout.as_deref().unwrap_or("")))
}

/// Parses `ID RUNNING BASE64(meta)` lines; unreadable lines are skipped.
pub(crate) fn parse_processes(text: &str) -> Vec<ProcessInfo> {
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        argv: Vec<String>,
        #[serde(default)]
        tag: Option<String>,
        #[serde(default)]
        cwd: Option<String>,
    }
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let pid = parts.next()?.to_owned();
            // Only well-formed lines of ids the adapter could have made (the script lists no
            // others; this holds even if the machine's tools print something else).
            validate_pid(&pid).ok()?;
            let running = match parts.next()? {
                "1" => true,
                "0" => false,
                _ => return None,
            };
            let meta: Meta = parts
                .next()
                .and_then(decode_b64)
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            if parts.next().is_some() {
                return None;
            }
            Some(ProcessInfo {
                pid,
                tag: meta.tag,
                argv: meta.argv,
                cwd: meta.cwd,
                running,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stdin_over_the_cap_is_a_validation_error() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let collected = spawn_stdin_collector(rx);
        let sender = tokio::spawn(async move {
            let chunk = Bytes::from(vec![b'x'; 256 * 1024]);
            for _ in 0..5 {
                if tx.send(chunk.clone()).await.is_err() {
                    return false;
                }
            }
            true
        });
        let err = collected.await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation);
        assert!(err.message().contains("1048576"), "{err}");
        // The collector stopped reading, so the writer sees a closed pipe instead of blocking.
        let _ = sender.await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(Bytes::from_static(b"ok")).await.unwrap();
        drop(tx);
        assert_eq!(&spawn_stdin_collector(rx).await.unwrap()[..], b"ok");
    }

    #[test]
    fn poll_answers_parse_with_and_without_output() {
        let text = "sandbox-fly-poll 0 3 5 4\naGVsbG8=\n.\nb29wcw==\n";
        let a = parse_poll(text).unwrap();
        assert!(!a.alive);
        assert_eq!(a.exit, Some(ExitStatus::code(3)));
        assert_eq!((a.out_size, a.err_size), (5, 4));
        assert_eq!(&a.stdout[..], b"hello");
        assert_eq!(&a.stderr[..], b"oops");
        let a = parse_poll("sandbox-fly-poll 1 - 0 0\n.\n").unwrap();
        assert!(a.alive && a.exit.is_none() && a.stdout.is_empty() && a.stderr.is_empty());
        let a = parse_poll("sandbox-fly-poll 0 s9 0 0\n.\n").unwrap();
        assert_eq!(a.exit, Some(ExitStatus::signal(9)));
        assert!(parse_poll("garbage").is_none());
        // Raw streams: exactly their size, even when they hold `.` lines or the tag.
        let a = parse_poll("sandbox-fly-poll 0 0 9 5 raw raw\nx\n.\nsandb\n.\na\n.\nb\n").unwrap();
        assert_eq!(
            (&a.stdout[..], &a.stderr[..]),
            (&b"x\n.\nsandb"[..], &b"a\n.\nb"[..])
        );
        let a = parse_poll("sandbox-fly-poll 0 0 3 4 raw b64\nhi\n\n.\nb29wcw==\n").unwrap();
        assert_eq!((&a.stdout[..], &a.stderr[..]), (&b"hi\n"[..], &b"oops"[..]));
        let a = parse_poll("sandbox-fly-poll 0 0 0 5 b64 raw\n.\na\n.\nb\n").unwrap();
        assert_eq!((&a.stdout[..], &a.stderr[..]), (&b""[..], &b"a\n.\nb"[..]));
        // A raw stream shorter than its size, or cut inside a character, is unreadable.
        assert!(parse_poll("sandbox-fly-poll 0 0 9 0 raw b64\nhi\n.\n").is_none());
        assert!(parse_poll("sandbox-fly-poll 0 0 1 0 raw b64\n\u{e9}\n.\n").is_none());
        assert!(parse_poll("sandbox-fly-poll 1 x 0 0\n.\n").is_none());
    }

    #[test]
    fn base64_wrapped_at_76_columns_decodes() {
        let data = vec![7u8; 200];
        let encoded = b64().encode(&data);
        let wrapped: Vec<String> = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let text = format!("sandbox-fly-poll 1 - 200 0\n{}\n.\n", wrapped.join("\n"));
        assert_eq!(parse_poll(&text).unwrap().stdout.len(), 200);
    }

    #[test]
    fn process_lines_parse() {
        let meta = b64().encode(r#"{"argv":["sleep","9"],"tag":"job","cwd":null}"#);
        let list = parse_processes(&format!("job 1 {meta}\npabc 0 \n\n"));
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].pid, "job");
        assert!(list[0].running);
        assert_eq!(list[0].argv, ["sleep", "9"]);
        assert_eq!(list[0].tag.as_deref(), Some("job"));
        assert!(!list[1].running);
    }

    #[test]
    fn pids_are_restricted_to_safe_characters() {
        assert!(validate_pid("p0123abc").is_ok());
        assert!(validate_pid("job-1.x").is_ok());
        for bad in ["", "../x", ".hidden", "a/b", "a b", "a$b"] {
            assert!(validate_pid(bad).is_err(), "{bad}");
        }
    }

    fn test_poller() -> Poller {
        let api = Api::new(crate::config::Settings::for_tests("my-app")).unwrap();
        Poller {
            control: Arc::new(PolledControl {
                api,
                machine: "1857156b526dd8".to_owned(),
                pid: "p1".to_owned(),
            }),
            out: 0,
            err: 0,
            // Not a foreground process: dropping it must not spawn a kill.
            clean: false,
            tagged: false,
            backoff: Backoff::new(Duration::ZERO),
            quiet: false,
            interval: Duration::ZERO,
            deadline: None,
            vanished: 0,
            done: false,
            launched: false,
            queue: VecDeque::new(),
        }
    }

    fn answer(exit: Option<ExitStatus>, out_size: u64, stdout: &'static [u8]) -> PollAnswer {
        PollAnswer {
            alive: exit.is_none(),
            exit,
            out_size,
            err_size: 0,
            stdout: Bytes::from_static(stdout),
            stderr: Bytes::new(),
        }
    }

    #[test]
    fn the_exit_waits_for_all_output_then_ends_the_stream() {
        let mut p = test_poller();
        p.apply(answer(Some(ExitStatus::code(3)), 6, b"abcd"));
        assert!(!p.done, "two bytes are still to come");
        assert_eq!(p.out, 4);
        p.apply(answer(Some(ExitStatus::code(3)), 6, b"ef"));
        assert!(p.done);
        let events: Vec<_> = p.queue.drain(..).map(Result::unwrap).collect();
        assert!(matches!(&events[0], ProcessEvent::Stdout(b) if &b[..] == b"abcd"));
        assert!(matches!(&events[1], ProcessEvent::Stdout(b) if &b[..] == b"ef"));
        assert!(matches!(&events[2], ProcessEvent::Exit(s) if s.code == Some(3)));
    }

    #[test]
    fn an_exit_with_unreadable_output_is_an_error_not_an_endless_poll() {
        let mut p = test_poller();
        p.apply(answer(Some(ExitStatus::code(0)), 5, b""));
        assert!(p.done, "no more polls");
        let err = p.queue.pop_front().unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Provider);
        assert!(err.message().contains("byte 0 of 5"), "{err}");
        assert!(p.queue.is_empty());
    }

    #[test]
    fn direct_exit_status_prefers_the_signal() {
        let r = ExecResponse {
            exit_code: Some(-1),
            exit_signal: Some(9),
            ..ExecResponse::default()
        };
        assert_eq!(exit_status(&r), ExitStatus::signal(9));
        assert_eq!(exit_status(&ExecResponse::default()), ExitStatus::code(0));
    }
}
