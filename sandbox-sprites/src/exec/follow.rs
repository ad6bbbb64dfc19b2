//! [`Follower`]: reads one command's exec socket into process events, writes its stdin, keeps
//! its timeout, and survives a socket that breaks or goes silent by re-attaching at
//! `/exec/{id}` (PROTOCOL.md §5.5).
//!
//! On a re-attach the server first replays the session's recent output (the last 1 MiB,
//! §18.6), then sends `session_info`, then live output. The follower counts the bytes it has
//! delivered per stream and drops that many from the replay, so nothing is repeated while the
//! session's output fits the replay; past that, output made while detached beyond the replay's
//! reach is lost (the protocol has no offset). A session that ended while detached is still
//! attachable for a while and gives its exit (§18.7); one that is gone (404) ends the process
//! with a `Transport` error, as do [`crate::config::DEFAULT_MAX_REATTACHES`] re-attaches in a
//! row that bring nothing.

use super::kill;
use crate::api::exec::{ExecSocket, Frame, Target, open};
use crate::config::{KILL_SIGNAL, PROVIDER};
use crate::lifecycle::Handle;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{
    Error, ErrorKind, EventStream, ExitStatus, ProcessEvent, PtySize, Result, StdinOutcome,
};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What passing a frame on did.
enum Step {
    /// Nothing reached the reader (a session name, replayed output already delivered).
    Nothing,
    /// New output reached the reader.
    Delivered,
    /// The command ended: the last event.
    Exit(ProcessEvent),
}

/// How many events wait for the reader: a slow reader slows the socket.
const EVENTS_BUFFER: usize = 16;

/// The longest pause between re-attach attempts.
const MAX_REATTACH_PAUSE: Duration = Duration::from_secs(2);

/// Follows one session.
pub(crate) struct Follower {
    handle: Handle,
    session: Option<String>,
    socket: Option<ExecSocket>,
    /// Whether the session was opened with stdin (re-attaches ask for it again).
    with_stdin: bool,
    /// A TTY session (§5.3).
    tty: bool,
    /// Terminal sizes to send, from [`Follower::resizer`]'s sender.
    resize: Option<mpsc::Receiver<PtySize>>,
    early: Vec<Frame>,
    stdin: Option<(mpsc::Receiver<Bytes>, StdinOutcome)>,
    deadline: Option<(Instant, Duration)>,
    /// Bytes still to drop from a replay, per stream; `None` when the socket is live.
    replay_skip: Option<(u64, u64)>,
    delivered: (u64, u64),
}

impl Follower {
    pub fn new(
        handle: Handle,
        session: Option<String>,
        socket: ExecSocket,
        with_stdin: bool,
        tty: bool,
    ) -> Self {
        Follower {
            handle,
            session,
            socket: Some(socket),
            with_stdin,
            tty,
            resize: None,
            early: Vec::new(),
            stdin: None,
            deadline: None,
            replay_skip: None,
            delivered: (0, 0),
        }
    }

    /// Frames read before the follower took over, delivered first.
    pub fn early(mut self, frames: Vec<Frame>) -> Self {
        self.early = frames;
        self
    }

    /// The stdin chunks to send, and where to report how delivery ended.
    pub fn stdin(mut self, stdin: Option<(mpsc::Receiver<Bytes>, StdinOutcome)>) -> Self {
        self.stdin = stdin;
        self
    }

    /// When the command's time is up, and the timeout it came from.
    pub fn deadline(mut self, deadline: Option<(Instant, Duration)>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Where to send terminal sizes, for a TTY session (`None` without one).
    pub fn resizer(&mut self) -> Option<mpsc::Sender<PtySize>> {
        if !self.tty {
            return None;
        }
        let (tx, rx) = mpsc::channel(4);
        self.resize = Some(rx);
        Some(tx)
    }

    /// The socket is an attach: its replay is delivered whole (nothing was delivered yet).
    pub fn replaying(mut self) -> Self {
        self.replay_skip = Some((0, 0));
        self
    }

    /// The events, produced by a task that reads ahead at most [`EVENTS_BUFFER`] events.
    /// Dropping the stream stops the task and closes the socket; the session then runs on for
    /// its `max_run_after_disconnect`.
    pub fn into_events(self) -> EventStream {
        let (tx, rx) = mpsc::channel(EVENTS_BUFFER);
        tokio::spawn(self.run(tx));
        tokio_stream_from(rx)
    }

    async fn run(mut self, tx: mpsc::Sender<Result<ProcessEvent>>) {
        let end = self.follow(&tx).await;
        if let Some((_, outcome)) = self.stdin.take() {
            outcome.report(match &end {
                Err(e) => Err(copy(e)),
                Ok(_) => Ok(()),
            });
        }
        if let Some(socket) = self.socket.take() {
            socket.close().await;
        }
        let _ = tx.send(end).await;
    }

    /// Follows to the end: the exit event, or the error that ended following.
    async fn follow(&mut self, tx: &mpsc::Sender<Result<ProcessEvent>>) -> Result<ProcessEvent> {
        let mut timed_out: Option<Duration> = None;
        let mut fruitless = 0u32;
        for frame in std::mem::take(&mut self.early) {
            if let Step::Exit(exit) = self.deliver(frame, tx, timed_out).await? {
                return Ok(exit);
            }
        }
        loop {
            let Some(socket) = self.socket.as_mut() else {
                return Err(self.lost("the exec socket is gone"));
            };
            let deadline = self.deadline;
            let stdin = self.stdin.as_mut().map(|(rx, _)| rx);
            let resize = self.resize.as_mut();
            let frame = tokio::select! {
                size = recv(resize) => {
                    match size {
                        Some(size) => {
                            if let Err(e) = socket.send_resize(size.cols, size.rows).await {
                                tracing::debug!(error = %e, "sprites: a resize could not be sent");
                            }
                        }
                        // The process handle is gone: nothing more to resize.
                        None => self.resize = None,
                    }
                    continue;
                }
                frame = socket.next() => frame,
                chunk = recv(stdin) => {
                    let sent = match chunk {
                        Some(chunk) => socket.send_stdin(&chunk).await,
                        None => {
                            let sent = socket.send_eof().await;
                            if let Some((_, outcome)) = self.stdin.take() {
                                outcome.report(sent.as_ref().map(|_| ()).map_err(copy));
                            }
                            sent
                        }
                    };
                    if let Err(e) = sent {
                        // Whether the server took the chunk is unknown, so it is neither lost in
                        // silence nor sent twice: stdin closes with this error for its writer,
                        // and the output is followed on through a re-attach.
                        tracing::debug!(error = %e, "sprites: stdin could not be sent; re-attaching");
                        if let Some((_, outcome)) = self.stdin.take() {
                            outcome.report(Err(stdin_broken(&e)));
                        }
                    }
                    continue;
                }
                _ = sleep_until(deadline.map(|(at, _)| at)) => {
                    let timeout = deadline.map(|(_, t)| t).unwrap_or_default();
                    // The kill was sent and no exit came within the idle bound, or nothing
                    // will end it for us: stop waiting now.
                    if timed_out.is_some() || !self.kill_for_timeout().await {
                        return Err(self.timeout_error(timeout));
                    }
                    timed_out = Some(timeout);
                    let grace = Instant::now() + self.handle.api.settings.stream_idle;
                    self.deadline = Some((grace, timeout));
                    continue;
                }
            };
            match frame {
                Ok(Frame::Closed) | Err(_) => {
                    let cause = match frame {
                        Err(e) => e.to_string(),
                        _ => "the exec socket closed before the command's exit".into(),
                    };
                    fruitless += 1;
                    if fruitless > self.handle.api.settings.max_reattaches {
                        return Err(self.lost(&format!(
                            "{cause}; {} re-attaches brought nothing",
                            fruitless - 1
                        )));
                    }
                    self.reattach(&cause).await?;
                }
                Ok(frame) => match self.deliver(frame, tx, timed_out).await? {
                    Step::Exit(exit) => return Ok(exit),
                    // Only output not seen before counts: a replay of known bytes is nothing.
                    Step::Delivered => fruitless = 0,
                    Step::Nothing => {}
                },
            }
        }
    }

    /// Passes one frame on: output (minus what a replay repeats), the session's name (which
    /// ends a replay), or the exit.
    async fn deliver(
        &mut self,
        frame: Frame,
        tx: &mpsc::Sender<Result<ProcessEvent>>,
        timed_out: Option<Duration>,
    ) -> Result<Step> {
        let event = match frame {
            Frame::Stdout(data) => self.fresh(data, true).map(ProcessEvent::Stdout),
            Frame::Stderr(data) => self.fresh(data, false).map(ProcessEvent::Stderr),
            Frame::Session(id) => {
                self.replay_skip = None;
                self.session.get_or_insert(id);
                None
            }
            Frame::Exit(code) => {
                if let Some(timeout) = timed_out {
                    return Err(self.timeout_error(timeout));
                }
                return Ok(Step::Exit(ProcessEvent::Exit(ExitStatus::code(code))));
            }
            Frame::Closed => None,
        };
        let Some(event) = event else {
            return Ok(Step::Nothing);
        };
        if tx.send(Ok(event)).await.is_err() {
            // The reader is gone: stop following.
            return Err(Error::new(
                ErrorKind::Cancelled,
                "the process handle was dropped",
            ));
        }
        Ok(Step::Delivered)
    }

    fn timeout_error(&self, timeout: Duration) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!("the command ran past its timeout of {timeout:?} and was killed"),
        )
        .with_provider(PROVIDER)
        .with_operation("exec")
        .with_sandbox_id(&self.handle.name)
    }

    /// The part of `data` not yet delivered (a replay repeats what was), counted.
    fn fresh(&mut self, data: Bytes, stdout: bool) -> Option<Bytes> {
        let data = match self.replay_skip.as_mut() {
            Some((out, err)) => {
                let skip = if stdout { out } else { err };
                let n = (*skip).min(data.len() as u64);
                *skip -= n;
                data.slice(n as usize..)
            }
            None => data,
        };
        if data.is_empty() {
            return None;
        }
        let count = if stdout {
            &mut self.delivered.0
        } else {
            &mut self.delivered.1
        };
        *count += data.len() as u64;
        Some(data)
    }

    /// Opens `/exec/{id}` again, backing off between attempts, for at most the idle bound.
    async fn reattach(&mut self, cause: &str) -> Result<()> {
        if let Some(socket) = self.socket.take() {
            socket.close().await;
        }
        let Some(id) = self.session.clone() else {
            return Err(self.lost(&format!(
                "{cause}; the server never named the session, so it cannot be re-attached"
            )));
        };
        tracing::debug!(sprite = %self.handle.name, session = %id, cause, "sprites: re-attaching to a command");
        let settings = &self.handle.api.settings;
        let mut backoff = Backoff::new(MAX_REATTACH_PAUSE).within(settings.stream_idle);
        loop {
            let target = Target::Attach {
                id: &id,
                stdin: self.with_stdin,
                tty: self.tty,
            };
            match open(&self.handle.api, &self.handle.name, target, "exec").await {
                Ok(socket) => {
                    self.socket = Some(socket);
                    self.replay_skip = Some(self.delivered);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(self.lost(&format!(
                        "{cause}; session {id} is gone, so its exit status is unknown"
                    )));
                }
                Err(e) if matches!(e.kind(), ErrorKind::Unauthorized | ErrorKind::Validation) => {
                    return Err(e);
                }
                Err(e) => {
                    if !backoff.pause().await {
                        return Err(self.lost(&format!("{cause}; re-attaching failed: {e}")));
                    }
                }
            }
        }
    }

    /// Kills the session whose time is up; `false` when it cannot be (no session id, or the
    /// kill failed), so no exit will come of it.
    async fn kill_for_timeout(&self) -> bool {
        let Some(id) = &self.session else {
            return false;
        };
        match kill(&self.handle, id, KILL_SIGNAL).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "sprites: a command past its timeout could not be killed");
                false
            }
        }
    }

    fn lost(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Transport,
            format!("following the command failed: {why}"),
        )
        .with_provider(PROVIDER)
        .with_operation("exec")
        .with_sandbox_id(&self.handle.name)
        .with_ambiguous(true)
    }
}

/// An error of the same kind and message, for a second reader (stdin's writer).
fn copy(e: &Error) -> Error {
    Error::new(e.kind(), e.message().to_owned()).with_provider(PROVIDER)
}

/// The error stdin's writer gets when a chunk could not be sent (PROTOCOL.md §18.15).
fn stdin_broken(e: &Error) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!(
            "stdin closed: a chunk could not be sent ({}), and whether it arrived is unknown; \
             the command runs on and its output is still followed",
            e.message()
        ),
    )
    .with_provider(PROVIDER)
    .with_operation("exec")
    .with_ambiguous(true)
}

/// The next item of `rx`, or never when there is none.
async fn recv<T>(rx: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The receiver as an event stream that ends after the last event.
fn tokio_stream_from(rx: mpsc::Receiver<Result<ProcessEvent>>) -> EventStream {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) }).boxed()
}
