//! Following a background process to its end by polling: each poll runs the poll script, which
//! waits in the machine for news, then answers with the output past the offsets read so far;
//! the new output becomes `Stdout`/`Stderr` events, then the exit the recording subshell wrote.
//! A foreground process past its timeout, or whose handle is dropped, is killed. Reattaching to
//! a background process ([`attach`]) follows it from its current output on.

use super::poll::{PollAnswer, poll_result};
use super::process::{
    IdSource, PolledControl, ProcessFiles, clean_flag, process_dir, run_script, validate_pid,
};
use super::scripts;
use crate::api::{Action, Api, ScriptCall};
use crate::config::{POLL_CHUNK, PROVIDER};
use futures::StreamExt;
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{
    Error, ErrorKind, EventStream, ExitStatus, Process, ProcessControl, ProcessEvent, Result,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Ticks of 0.2 s a poll waits inside the machine for news before answering.
const POLL_WAIT_TICKS: u64 = 5;

/// Whole seconds a poll may spend waiting in the machine for news ([`POLL_WAIT_TICKS`] of 0.2 s).
const POLL_WAIT_SECS: u64 = 1;

/// Whether exit codes of polled processes are marked as read from a marker: they are recorded by
/// the wrapping shell in a file, not reported by Fly.
const EXIT_FROM_MARKER: bool = true;

/// How a [`Poller`] follows its process.
pub(super) struct Follow {
    /// What becomes of the process's files. [`ProcessFiles::Remove`] is a foreground process:
    /// also killed when its handle is dropped before it ended.
    pub files: ProcessFiles,
    /// Where the process id comes from.
    pub id: IdSource,
    /// The first pause after a poll that came back early without news.
    pub interval: Duration,
    /// When the process times out, and its timeout.
    pub deadline: Option<(Instant, Duration)>,
}

/// State of a polled output stream.
pub(super) struct Poller {
    control: Arc<PolledControl>,
    out: u64,
    err: u64,
    files: ProcessFiles,
    id: IdSource,
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
    /// A poller of the process `control` kills, from offset 0 of its output.
    pub(super) fn new(control: Arc<PolledControl>, follow: Follow) -> Poller {
        Poller {
            control,
            out: 0,
            err: 0,
            files: follow.files,
            id: follow.id,
            backoff: Self::fresh_backoff(follow.interval, follow.deadline),
            quiet: false,
            interval: follow.interval,
            deadline: follow.deadline,
            vanished: 0,
            done: false,
            launched: false,
            queue: VecDeque::new(),
        }
    }

    /// What kills the process.
    pub(super) fn control(&self) -> Arc<PolledControl> {
        self.control.clone()
    }

    /// Starts the timeout again from now (for a process launched only once its stdin was in).
    pub(super) fn restart_clock(&mut self) {
        self.deadline = self
            .deadline
            .map(|(_, limit)| (Instant::now() + limit, limit));
        self.backoff = Self::fresh_backoff(self.interval, self.deadline);
    }

    /// Ends the stream with `error`, without polling (a launch that failed).
    pub(super) fn fail(&mut self, error: Error) {
        self.done = true;
        self.queue.push_back(Err(error));
    }

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
            clean_flag(self.files, self.id),
        ]
        .map(str::to_owned);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let c = &self.control;
        let script = scripts::poll_script();
        let call = ScriptCall::new(&script, &args).waiting(POLL_WAIT_SECS);
        let answer = run_script(&c.api, &c.machine, call)
            .await
            .and_then(|resp| poll_result(resp, &c.machine, &c.pid));
        (answer, Duration::from_millis(ticks * 200))
    }

    /// Takes the launch's answer. A launch that waited in the machine for the whole timeout and
    /// still found the process running means the timeout has passed, whatever the local clock
    /// says: the process is killed next instead of polled once more.
    pub(super) fn launched_with(&mut self, first: PollAnswer, waited: Duration) {
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
                let killed = self.control.kill_now(self.files).await;
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

    /// The events of the process, polled as they are read.
    pub(super) fn into_events(self) -> EventStream {
        futures::stream::unfold(self, |mut p| async move {
            let event = p.next().await?;
            Some((event, p))
        })
        .boxed()
    }
}

/// A foreground process whose handle is dropped before it ended is killed (in the background, on
/// the current runtime), as the core's `Process` docs allow; a background one keeps running.
/// Only a process that was launched is killed (`launched`), never one still waiting for stdin.
impl Drop for Poller {
    fn drop(&mut self) {
        if self.done || self.files == ProcessFiles::Keep || !self.launched {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let control = self.control.clone();
            handle.spawn(async move {
                if let Err(e) = control.kill_now(ProcessFiles::Remove).await {
                    tracing::debug!(pid = %control.pid, error = %e, "fly: could not kill a dropped process");
                }
            });
        }
    }
}

/// The handle of the process `poller` follows, under `pid`.
pub(super) fn polled_process(poller: Poller, pid: String) -> Process {
    let control: Arc<dyn ProcessControl> = poller.control.clone();
    Process::new(pid, poller.into_events(), None, control).with_emulated_streaming()
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
    let script = scripts::poll_script();
    let args = [dir.as_str(), "0", "0", "0", "0", "0"];
    let resp = run_script(api, machine, ScriptCall::new(&script, &args)).await?;
    let first = poll_result(resp, machine, pid)?;
    let follow = Follow {
        files: ProcessFiles::Keep,
        id: IdSource::Tag,
        interval: api.settings.poll_interval,
        deadline: None,
    };
    let mut poller = Poller::new(control, follow);
    poller.out = first.out_size;
    poller.err = first.err_size;
    poller.apply(first);
    Ok(polled_process(poller, pid.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_poller() -> Poller {
        let api = Api::new(crate::config::Settings::for_tests("my-app")).unwrap();
        let control = Arc::new(PolledControl {
            api,
            machine: "1857156b526dd8".to_owned(),
            pid: "p1".to_owned(),
        });
        Poller::new(
            control,
            Follow {
                // Not a foreground process: dropping it must not spawn a kill.
                files: ProcessFiles::Keep,
                id: IdSource::Counter,
                interval: Duration::ZERO,
                deadline: None,
            },
        )
    }

    fn answer(exit: Option<ExitStatus>, out_size: u64, stdout: &'static [u8]) -> PollAnswer {
        PollAnswer {
            alive: exit.is_none(),
            exit,
            out_size,
            err_size: 0,
            stdout: bytes::Bytes::from_static(stdout),
            stderr: bytes::Bytes::new(),
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
}
