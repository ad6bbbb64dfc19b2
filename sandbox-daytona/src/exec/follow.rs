//! Following a running session command to its end: live over the log WebSocket
//! (PROTOCOL.md §8.2), or by polling the command and its logs (§6.2, [`LogFollow::Poll`]).
//!
//! Either way the follow ends on the command's end marks (see [`command_line`](super::marks::command_line)):
//! once both streams end in theirs, with the key stdout's first line announced, the output is
//! complete and the stdout mark carries the exit status, so nothing waits for the server's
//! close (about a second after the last byte, §8.2) or for the exit-code file. A mark without
//! that key (one a program the command runs printed) is output and ends nothing. Output
//! without marks (a killed command, one started elsewhere, a sandbox that could not make a
//! key) ends with the stream, and the exit code is read from the daemon.
//!
//! [`LogFollow::Poll`]: crate::LogFollow::Poll

use super::demux::{LogDemux, LogStream};
use super::logs::{BodyScan, LogCursor};
use super::marks::{SIGKILL, Timing, Trailers, exit_event};
use super::session::{CommandState, SessionGuard};
use crate::api::toolbox::Toolbox;
use crate::api::ws::{LogEvent, LogSocket, connect_logs};
use crate::config::{PROVIDER, backoff_until, deadline_after};
use crate::wire::SessionCommandDto;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{ByteStream, Error, ErrorKind, ExitStatus, ProcessEvent, Result};
use std::collections::VecDeque;
use std::sync::Arc;

enum Step {
    Connect,
    Stream,
    Poll,
    /// Reading one poll's logs body, chunk by chunk; `exit` is the exit code the command
    /// showed just before.
    PollBody {
        body: ByteStream,
        scan: Box<BodyScan>,
        exit: Option<i32>,
    },
    Exit,
    Done,
}

/// Follows one command; its events come out of [`Follower::next`].
pub(crate) struct Follower {
    tb: Arc<Toolbox>,
    sid: String,
    cid: String,
    state: Arc<CommandState>,
    pending: VecDeque<Result<ProcessEvent>>,
    step: Step,
    /// The WebSocket's demultiplexer (polling keeps its own in the cursor).
    demux: LogDemux,
    cursor: LogCursor,
    /// Both streams' end marks.
    tails: Trailers,
    ws: Option<LogSocket>,
    /// The pauses between looks at the exit code once the log stream ended without marks.
    exit_wait: Option<Backoff>,
    /// The pauses between polls.
    poll_wait: Option<Backoff>,
    guard: SessionGuard,
    timing: Option<Timing>,
    /// Log bytes decoded since the follower last let the runtime worker go.
    since_yield: usize,
}

/// How many log bytes are decoded before the follower yields the runtime worker: a server
/// that answers at once (megabytes of logs per poll) cannot hold a worker for long.
const YIELD_EVERY: usize = 256 * 1024;

impl Follower {
    pub(crate) fn new(
        tb: Arc<Toolbox>,
        sid: String,
        cid: String,
        state: Arc<CommandState>,
        guard: SessionGuard,
        poll: bool,
        timing: Option<Timing>,
    ) -> Self {
        Follower {
            tb,
            sid,
            cid,
            state,
            pending: VecDeque::new(),
            step: if poll { Step::Poll } else { Step::Connect },
            demux: LogDemux::new(),
            cursor: LogCursor::default(),
            tails: Trailers::default(),
            ws: None,
            exit_wait: None,
            poll_wait: None,
            guard,
            timing,
            since_yield: 0,
        }
    }

    /// Counts `decoded` bytes and yields the worker once [`YIELD_EVERY`] have passed.
    async fn pace(&mut self, decoded: usize) {
        self.since_yield += decoded;
        if self.since_yield >= YIELD_EVERY {
            self.since_yield = 0;
            tokio::task::yield_now().await;
        }
    }

    pub(crate) async fn next(&mut self) -> Option<Result<ProcessEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if event.is_err() {
                    self.step = Step::Done;
                }
                return Some(event);
            }
            let result = match std::mem::replace(&mut self.step, Step::Done) {
                Step::Done => return None,
                Step::Connect => self.connect().await,
                Step::Stream => self.read_frame().await,
                Step::Poll => self.poll_once().await,
                Step::PollBody { body, scan, exit } => self.poll_body(body, scan, exit).await,
                Step::Exit => self.read_exit().await,
            };
            if let Err(e) = result {
                self.step = Step::Done;
                self.ws = None;
                let e = self.tb.explain(e).await;
                self.pending.push_back(Err(e.or_context(
                    PROVIDER,
                    "exec",
                    Some(&self.tb.sandbox_id),
                )));
            }
        }
    }

    fn push_pieces(&mut self, pieces: Vec<(LogStream, Bytes)>) {
        for (stream, bytes) in pieces {
            let ready = match stream {
                LogStream::Stdout => self.tails.stdout(&bytes).map(ProcessEvent::Stdout),
                LogStream::Stderr => self.tails.stderr(&bytes).map(ProcessEvent::Stderr),
            };
            if let Some(event) = ready {
                self.pending.push_back(Ok(event));
            }
        }
    }

    /// The exit status the end marks give once both streams end in theirs, with the key.
    fn marked_status(&self) -> Option<i32> {
        self.tails.status()
    }

    /// Passes on the held-back ends of both streams, before the exit event.
    fn flush_tails(&mut self) {
        let (out, err) = self.tails.finish();
        if let Some(rest) = out {
            self.pending.push_back(Ok(ProcessEvent::Stdout(rest)));
        }
        if let Some(rest) = err {
            self.pending.push_back(Ok(ProcessEvent::Stderr(rest)));
        }
    }

    fn finish_killed(&mut self) {
        self.ws = None;
        self.flush_tails();
        self.guard.disarm();
        self.pending
            .push_back(Ok(ProcessEvent::Exit(ExitStatus::signal(SIGKILL))));
        self.step = Step::Done;
    }

    /// The command ended with `code`: its session goes back to the pool (a foreground one), and
    /// the exit (or a `Timeout` for a command its timeout stopped) is the last event.
    fn finish_exit(&mut self, code: i32) {
        if !self.state.finish() {
            self.finish_killed();
            return;
        }
        self.ws = None;
        self.flush_tails();
        self.guard.release();
        self.pending
            .push_back(exit_event(code, self.timing.as_ref()));
        self.step = Step::Done;
    }

    async fn connect(&mut self) -> Result<()> {
        if self.state.killed() {
            self.step = Step::Exit;
            return Ok(());
        }
        match connect_logs(&self.tb, &self.sid, &self.cid).await {
            Ok(Some(ws)) => {
                self.ws = Some(ws);
                self.step = Step::Stream;
            }
            Ok(None) => self.step = Step::Poll,
            // The session is gone before the stream opened: it was deleted (killed), by this
            // handle or by `kill_process`, as a 404 on the status is read (`fetch_command`).
            Err(e) if e.kind() == ErrorKind::NotFound => self.finish_killed(),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    async fn read_frame(&mut self) -> Result<()> {
        let Some(ws) = self.ws.as_mut() else {
            self.step = Step::Exit;
            return Ok(());
        };
        let event = ws.next().await?;
        self.step = Step::Stream;
        match event {
            LogEvent::Data(bytes) => {
                let pieces = self.demux.feed(&bytes);
                self.push_pieces(pieces);
                self.pace(bytes.len()).await;
            }
            LogEvent::Close(code, _) => {
                self.end_stream();
                if let Some(code) = code.filter(|c| *c != 1000 && *c != 1005)
                    && !self.state.killed()
                {
                    return Err(Error::new(
                        ErrorKind::Transport,
                        format!("log stream closed with code {code}"),
                    ));
                }
            }
            LogEvent::Other => {}
            LogEvent::End => self.end_stream(),
            LogEvent::Broken(e) => {
                if self.state.killed() {
                    self.end_stream();
                } else {
                    return Err(e);
                }
            }
        }
        // Both end marks seen: the output is complete, whatever the server does next.
        if let Some(status) = self.marked_status() {
            self.finish_exit(status);
        }
        Ok(())
    }

    fn end_stream(&mut self) {
        let pieces = self.demux.finish();
        self.push_pieces(pieces);
        self.ws = None;
        self.step = Step::Exit;
    }

    /// The command's status, `None` once its session is gone. (Borrows nothing: a `&self`
    /// across the await would need the follower to be `Sync`, which its body stream is not.)
    fn fetch_command(
        &self,
    ) -> impl Future<Output = Result<Option<SessionCommandDto>>> + Send + use<> {
        let (tb, sid, cid) = (self.tb.clone(), self.sid.clone(), self.cid.clone());
        async move {
            match tb.command(&sid, &cid, "exec").await {
                Ok(c) => Ok(Some(c)),
                // The session is gone: it was deleted (killed), by this handle or by
                // `kill_process`.
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

impl Follower {
    /// After the log stream ended without both marks: read the exit code, backing off while
    /// the daemon has not written it yet.
    async fn read_exit(&mut self) -> Result<()> {
        if self.state.killed() {
            self.finish_killed();
            return Ok(());
        }
        if let Some(status) = self.marked_status() {
            self.finish_exit(status);
            return Ok(());
        }
        match self.fetch_command().await? {
            None => self.finish_killed(),
            Some(SessionCommandDto {
                exit_code: Some(code),
                ..
            }) => self.finish_exit(code),
            Some(_) => {
                let config = &self.tb.api.config;
                let backoff = self.exit_wait.get_or_insert_with(|| {
                    backoff_until(
                        config.poll_interval,
                        deadline_after(config.state_change_timeout),
                    )
                });
                if !backoff.pause().await {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        "the log stream ended but the command has no exit code",
                    ));
                }
                self.step = Step::Exit;
            }
        }
        Ok(())
    }

    /// One poll: the command's status, then its logs (read in [`Step::PollBody`]). The exit
    /// code is written after the output, so logs read after it was seen are complete.
    async fn poll_once(&mut self) -> Result<()> {
        if self.state.killed() {
            self.finish_killed();
            return Ok(());
        }
        let Some(command) = self.fetch_command().await? else {
            self.finish_killed();
            return Ok(());
        };
        let logs = self
            .tb
            .command_logs(&self.sid, &self.cid, None, "exec")
            .await?;
        let scan = BodyScan::new(logs.header("content-type"));
        self.step = Step::PollBody {
            body: logs.bytes_stream(),
            scan: Box::new(scan),
            exit: command.exit_code,
        };
        Ok(())
    }

    /// Reads one chunk of a poll's logs, passing on only what is new; at the body's end,
    /// finishes on the end marks or the exit code, or pauses before the next poll.
    async fn poll_body(
        &mut self,
        mut body: ByteStream,
        mut scan: Box<BodyScan>,
        exit: Option<i32>,
    ) -> Result<()> {
        match body.next().await {
            Some(chunk) => {
                let chunk = chunk?;
                let pieces = scan.feed(&mut self.cursor, &chunk)?;
                self.push_pieces(pieces);
                self.step = Step::PollBody { body, scan, exit };
                // Every poll reads the whole log again: yield between chunks, not per poll.
                self.pace(chunk.len()).await;
            }
            None => {
                scan.finish()?;
                if let Some(status) = self.marked_status() {
                    self.finish_exit(status);
                } else if let Some(code) = exit {
                    let rest = self.cursor.finish();
                    self.push_pieces(rest);
                    self.finish_exit(code);
                } else {
                    // No deadline: a command may run for as long as it likes.
                    let interval = self.tb.api.config.poll_interval;
                    self.poll_wait
                        .get_or_insert_with(|| Backoff::new(interval))
                        .pause()
                        .await;
                    self.step = Step::Poll;
                }
            }
        }
        Ok(())
    }
}
