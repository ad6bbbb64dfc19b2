//! Exec on a Fly Machine.
//!
//! - **Direct**: one buffered `POST …/exec` with an argv, a server-side timeout and the whole
//!   stdin. Used for commands whose timeout fits [`crate::EXEC_DEADLINE`] (or all foreground
//!   commands with [`crate::FlyBuilder::prefer_direct_exec`]). Output arrives at the end.
//! - **Background and poll** (emulated streaming): the command is started detached inside the
//!   machine with stdout and stderr going to files (see [`crate::scripts`]); the adapter polls
//!   them by offset and streams what is new as `Stdout`/`Stderr` events, then the exit code the
//!   wrapping shell recorded. Used for commands without a timeout or longer than the exec
//!   deadline, and for background commands, which can be listed, reattached and killed.
//!
//! Environment and working directory are passed as argv (`env -- K=V …`, `cd -- "$1"` in a tiny
//! wrapper; see [`wrap_argv`]), so no value is ever spliced into shell text and no value is
//! taken for an option, an assignment or `cd -`.

use crate::api::Api;
use crate::error::PROVIDER;
use crate::scripts;
use crate::wire::{ExecRequest, ExecResponse};
use async_trait::async_trait;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, ExitStatus, Process, ProcessControl, ProcessEvent, ProcessInfo,
    PtySize, Result, Stdin,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The most stdin the adapter sends with one command. `/exec` takes stdin as one JSON string
/// and Fly documents no size limit, so the adapter keeps it to 1 MiB; more is a `Validation` error.
pub const STDIN_LIMIT: usize = 1024 * 1024;

/// The most bytes of each of stdout and stderr one poll returns (before base64).
pub const POLL_CHUNK: u64 = 256 * 1024;

/// Ticks of 0.2 s a poll waits inside the machine for news before answering.
const POLL_WAIT_TICKS: u64 = 5;

/// Whole seconds a poll may spend waiting in the machine for news ([`POLL_WAIT_TICKS`] of 0.2 s).
const POLL_WAIT_SECS: u64 = 1;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The argv that runs `cmd` with its env and cwd, without any shell quoting (every value is an
/// argument of its own, never shell text):
///
/// - env: `env -- K=V… PROGRAM…`. `env` reads every word with a `=` as an assignment up to the
///   program, even after `--`, so a program whose name holds a `=` goes through the `sh` wrapper
///   below (`env -- K=V sh -c 'exec "$@"' sh A=B …`), where it is the wrapper's argument.
/// - cwd: `sh -c 'cd -- "$1" || exit 1; shift; exec "$@"' sh CWD PROGRAM…`, a relative CWD
///   written `./CWD`: `cd -- -` still means "the previous directory" in dash, bash and BusyBox,
///   and a relative name would consult `CDPATH`.
/// - a program whose name starts with `-` is run by the wrapper as a plain command (`"$@"`), not
///   with `exec`: bash and BusyBox take `exec -l` for an option of `exec`.
///
/// Without env and cwd the argv goes to Fly's `/exec` as it is (no shell reads it).
pub(crate) fn wrap_argv(cmd: &Command) -> Vec<String> {
    let program = cmd.argv.first().map(String::as_str).unwrap_or("");
    let needs_shell = cmd.cwd.is_some() || (!cmd.env.is_empty() && program.contains('='));
    let mut argv = Vec::new();
    if !cmd.env.is_empty() {
        argv.extend(["env", "--"].map(String::from));
        argv.extend(cmd.env.iter().map(|(k, v)| format!("{k}={v}")));
    }
    if needs_shell {
        let run = if program.starts_with('-') {
            "\"$@\""
        } else {
            "exec \"$@\""
        };
        let script = if cmd.cwd.is_some() {
            format!("cd -- \"$1\" || exit 1; shift; {run}")
        } else {
            run.to_owned()
        };
        argv.extend(["sh".to_owned(), "-c".to_owned(), script, "sh".to_owned()]);
        if let Some(cwd) = &cmd.cwd {
            argv.push(if cwd.starts_with('/') {
                cwd.clone()
            } else {
                format!("./{cwd}")
            });
        }
    }
    argv.extend(cmd.argv.iter().cloned());
    argv
}

/// The server-side deadline, in whole seconds, of one of the adapter's own scripts (file chunks,
/// stat, kill, listing, launch, poll): they do little work in the machine, so they get the
/// request timeout (at least 1 s), plus the `wait_secs` a launch or poll spends waiting in the
/// machine on purpose. The HTTP call is bounded by this deadline plus the request timeout
/// ([`Api::exec`]), so a silent server costs about twice the request timeout, never more.
pub(crate) fn script_secs(api: &Api, wait_secs: u64) -> u64 {
    let budget = api.settings.request_timeout.as_secs_f64().ceil().max(1.0) as u64;
    budget + wait_secs
}

/// The largest `/exec` answer read for one of the adapter's own scripts other than the listings:
/// they print at most a download block ([`crate::files::DOWNLOAD_CHUNK`], about 1 MiB as
/// escaped base64) or a poll's two [`POLL_CHUNK`]s (about 0.7 MiB), so 2 MiB is twice what a
/// machine running them honestly can answer.
pub const SCRIPT_ANSWER_LIMIT: usize = 2 * crate::files::MAX_EXEC_BODY;

/// The largest `/exec` answer read for a listing (files or processes), whose size grows with what
/// the machine holds: 16 MiB, some 200,000 file entries.
pub const LISTING_ANSWER_LIMIT: usize = 16 * 1024 * 1024;

/// The largest `/exec` answer read for a command run directly ([`crate::FlyBuilder::prefer_direct_exec`],
/// or a command with a timeout within the exec deadline), whose whole stdout and stderr come in
/// the one answer: 16 MiB. A command that prints more fails with the transport's size error; run
/// it without a timeout (polled output, 256 KiB per answer) or write its output to a file.
pub const DIRECT_ANSWER_LIMIT: usize = 16 * 1024 * 1024;

/// Runs a short script through `/exec`: `sh -c SCRIPT sh ARGS…`, with the deadline of
/// [`script_secs`] (`wait_secs` being the time it is asked to wait in the machine), reading an
/// answer of at most [`SCRIPT_ANSWER_LIMIT`] ([`LISTING_ANSWER_LIMIT`] for the listings).
pub(crate) async fn run_script(
    api: &Api,
    machine: &str,
    script: &str,
    args: &[&str],
    stdin: Option<String>,
    wait_secs: u64,
) -> Result<ExecResponse> {
    let secs = script_secs(api, wait_secs);
    let mut command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        "sh".to_owned(),
    ];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    let limit = if script == scripts::LIST || script == scripts::PROCESSES {
        LISTING_ANSWER_LIMIT
    } else {
        SCRIPT_ANSWER_LIMIT
    };
    api.exec(
        machine,
        &ExecRequest {
            command,
            timeout: Some(secs),
            stdin,
        },
        limit,
    )
    .await
}

/// A script's failure as an error: exit 44 is `NotFound`, 45 `Validation`, 47 `Conflict`,
/// permission problems `Unauthorized`, anything else `Provider`; the message names `what` and
/// carries the script's stderr.
pub(crate) fn script_error(resp: &ExecResponse, op: &str, machine: &str, what: &str) -> Error {
    let stderr = resp.stderr.as_deref().unwrap_or("").trim();
    let code = resp.exit_code.unwrap_or(0);
    let kind = match code {
        44 => ErrorKind::NotFound,
        45 => ErrorKind::Validation,
        47 => ErrorKind::Conflict,
        _ if stderr.contains("No such file") => ErrorKind::NotFound,
        _ if stderr.contains("Permission denied") || stderr.contains("Read-only") => {
            ErrorKind::Unauthorized
        }
        _ if stderr.contains("Not a directory") || stderr.contains("Is a directory") => {
            ErrorKind::Validation
        }
        _ if stderr.contains("File exists") => ErrorKind::Conflict,
        _ => ErrorKind::Provider,
    };
    let detail = if stderr.is_empty() {
        format!("exit code {code}")
    } else {
        stderr.chars().take(300).collect()
    };
    let error = Error::new(kind, format!("{what}: {detail}"))
        .with_provider(PROVIDER)
        .with_operation(op)
        .with_sandbox_id(machine);
    match &resp.request_id {
        Some(id) => error.with_request_id(id.clone()),
        None => error,
    }
}

fn exit_status(resp: &ExecResponse) -> ExitStatus {
    match resp.exit_signal {
        Some(sig) if sig > 0 => ExitStatus::signal(sig as i32),
        _ => ExitStatus::code(resp.exit_code.unwrap_or(0) as i32),
    }
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
    let argv = wrap_argv(cmd);
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

/// Parses `sandbox-fly-poll ALIVE EXIT OUT ERR`, base64 stdout, `.`, base64 stderr.
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
    let (out, err) = match rest.split_once("\n.\n") {
        Some((out, err)) => (out, err),
        None => {
            let (out, err) = rest.split_once(".\n").or_else(|| rest.split_once('.'))?;
            (out, err)
        }
    };
    let out = if out.trim() == "." { "" } else { out };
    Some(PollAnswer {
        alive,
        exit,
        out_size,
        err_size,
        stdout: decode_b64(out)?,
        stderr: decode_b64(err)?,
    })
}

fn poll_result(resp: ExecResponse, machine: &str, pid: &str) -> Result<PollAnswer> {
    if resp.exit_code.unwrap_or(0) != 0 {
        return Err(script_error(
            &resp,
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
    /// Kills the process; with `clean` also removes its directory (output files included) from
    /// the machine, for a process nobody will poll again.
    pub(crate) async fn kill_now(&self, clean: bool) -> Result<()> {
        let dir = process_dir(&self.pid);
        let mut args = vec![dir.as_str()];
        if clean {
            args.push("1");
        }
        let resp = run_script(&self.api, &self.machine, scripts::KILL, &args, None, 0).await?;
        match resp.exit_code.unwrap_or(0) {
            0 => Ok(()),
            _ => Err(script_error(
                &resp,
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

/// The directory of a background process inside the machine.
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
            None,
            POLL_WAIT_SECS,
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
    /// rate allows ([`crate::pace::ExecPace`]): each waits in the machine for news, so a silent process costs one
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
            let mut wake = c.api.pace.next_at(&c.machine);
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
    serde_json::json!({
        "argv": cmd.argv,
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
/// time). An id whose directory exists is skipped (exit 47), except that a tag (`reuse`) may
/// take over the directory of a finished process.
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
        args.extend(wrap_argv(cmd));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let resp = run_script(
            api,
            machine,
            &scripts::run_script(),
            &args,
            None,
            wait.as_secs_f64().ceil() as u64,
        )
        .await?;
        if resp.exit_code == Some(47) {
            last = Some(script_error(
                &resp,
                "exec",
                machine,
                &format!("process id {pid}"),
            ));
            continue;
        }
        return Ok((pid.clone(), poll_result(resp, machine, pid)?));
    }
    Err(last.unwrap_or_else(|| {
        Error::new(ErrorKind::Conflict, "no free process id").with_provider(PROVIDER)
    }))
}

/// The poll scripts' clean flag: `0` keeps the process directory (a background process), `1`
/// removes it once everything is read, `2` does so detached after answering, for an untagged
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
            crate::files::upload_bytes(&api, &machine, &path, input).await?;
            let launched = launch(&api, &machine, &ids, &cmd, clean, true, reuse, wait).await;
            if launched.is_err() {
                // The launch moves the stdin file into the process directory; when it failed
                // (the tag is taken, ...) the file would stay beside the directories forever.
                crate::files::remove_part(&api, &machine, &path).await;
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
        None,
        0,
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
/// directory is cleaned up).
pub(crate) async fn processes(api: &Api, machine: &str) -> Result<Vec<ProcessInfo>> {
    let resp = run_script(api, machine, scripts::PROCESSES, &[scripts::ROOT], None, 0).await?;
    if resp.exit_code.unwrap_or(0) != 0 {
        return Err(script_error(
            &resp,
            "processes",
            machine,
            "listing processes",
        ));
    }
    Ok(parse_processes(resp.stdout.as_deref().unwrap_or("")))
}

/// Parses `ID RUNNING BASE64(meta.json)` lines; unreadable lines are skipped.
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
    fn wrap_argv_passes_env_and_cwd_as_arguments() {
        let cmd = Command::new("echo")
            .arg("a b")
            .cwd("/w d")
            .env("K", "v'\"$x");
        assert_eq!(
            wrap_argv(&cmd),
            [
                "env",
                "--",
                "K=v'\"$x",
                "sh",
                "-c",
                "cd -- \"$1\" || exit 1; shift; exec \"$@\"",
                "sh",
                "/w d",
                "echo",
                "a b"
            ]
        );
        assert_eq!(wrap_argv(&Command::new("true")), ["true"]);
        assert_eq!(
            wrap_argv(&Command::new("true").env("A", "1")),
            ["env", "--", "A=1", "true"]
        );
        assert_eq!(
            wrap_argv(&Command::new("-l").cwd("-")),
            [
                "sh",
                "-c",
                "cd -- \"$1\" || exit 1; shift; \"$@\"",
                "sh",
                "./-",
                "-l"
            ]
        );
        assert_eq!(
            wrap_argv(&Command::new("A=B").env("K", "V")),
            ["env", "--", "K=V", "sh", "-c", "exec \"$@\"", "sh", "A=B"]
        );
    }

    /// The wrapper's argv, run for real the way Fly's `/exec` runs an argv (no shell around it)
    /// under every toolset: a program named `A=B` runs (was read by `env` as one more
    /// assignment, and the environment printed instead), a cwd named `-` is that directory (was
    /// `cd -`, the previous directory), and a program named `-l` runs (bash and BusyBox took it
    /// for an option of `exec`).
    #[test]
    fn hostile_program_and_cwd_names_run_as_given_under_every_shell() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("sandbox-fly-wrap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let bin = root.join("bin");
        let work = root.join("work");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(work.join("-")).unwrap();
        for (name, body) in [
            ("A=B", "echo \"ran A=B K=$K\""),
            ("-l", "echo \"ran -l $1\""),
            ("where", "pwd"),
        ] {
            let path = bin.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let sets = crate::scripts::test_tools::toolsets(&root, &["sh", "env"]);
        assert!(!sets.is_empty(), "no sh on this host");
        let cases: Vec<(Command, String)> = vec![
            (Command::new("A=B").env("K", "V"), "ran A=B K=V\n".into()),
            (
                Command::new("where").cwd("-"),
                format!("{}\n", work.join("-").display()),
            ),
            (Command::new("-l").arg("x").cwd("-"), "ran -l x\n".into()),
            (
                Command::new("-l").arg("x").env("K", "V"),
                "ran -l x\n".into(),
            ),
        ];
        let mut failures = Vec::new();
        for (label, tools) in &sets {
            let path = format!("{}:{}:/usr/bin:/bin", tools.display(), bin.display());
            for (cmd, expected) in &cases {
                let argv = wrap_argv(cmd);
                let out = std::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .env_clear()
                    .env("PATH", &path)
                    .env("OLDPWD", "/")
                    .current_dir(&work)
                    .output()
                    .unwrap();
                let got = String::from_utf8_lossy(&out.stdout);
                if got != expected.as_str() {
                    failures.push(format!(
                        "{label}: {argv:?}: expected {expected:?}, got {got:?} {:?}",
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
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
        let api = Api::new(
            crate::FlyBuilder::new()
                .token("t")
                .app("my-app")
                .base_url("http://127.0.0.1:1"),
        )
        .unwrap();
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
