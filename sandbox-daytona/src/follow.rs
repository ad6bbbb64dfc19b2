//! Following a running session command to its end: live over the log WebSocket
//! (PROTOCOL.md §4.2), or by polling the command and its logs (§3.2, [`LogFollow::Poll`]).
//!
//! Either way the follow ends on the command's end marks (see [`crate::exec::command_line`]):
//! once both streams show theirs, the output is complete and the stdout mark carries the exit
//! status, so nothing waits for the server's close (about a second after the last byte, §4.2)
//! or for the exit-code file. Output without marks (a killed command, one started elsewhere)
//! ends with the stream, and the exit code is read from the daemon.
//!
//! [`LogFollow::Poll`]: crate::LogFollow::Poll

use crate::demux::{LogDemux, LogStream};
use crate::error::{PROVIDER, map_error};
use crate::exec::{CommandState, SIGKILL, SessionGuard, Timing, Trailer, command_path, exit_event};
use crate::logs::{BodyScan, LogCursor};
use crate::sandbox::Toolbox;
use crate::wire::SessionCommandDto;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use sandbox_sdk_core::http::{ErrorResponse, Headers, Method};
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{ByteStream, Error, ErrorKind, ExitStatus, ProcessEvent, Result};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

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
    out_tail: Trailer,
    err_tail: Trailer,
    ws: Option<Ws>,
    /// When the unanswered ping went out.
    ping_sent: Option<Instant>,
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
            out_tail: Trailer::default(),
            err_tail: Trailer::default(),
            ws: None,
            ping_sent: None,
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
                LogStream::Stdout => self.out_tail.push(&bytes).map(ProcessEvent::Stdout),
                LogStream::Stderr => self.err_tail.push(&bytes).map(ProcessEvent::Stderr),
            };
            if let Some(event) = ready {
                self.pending.push_back(Ok(event));
            }
        }
    }

    /// The exit status the end marks give once both streams show theirs.
    fn marked_status(&self) -> Option<i32> {
        match (self.out_tail.complete(), self.err_tail.complete()) {
            (Some(Some(status)), Some(_)) => Some(status),
            _ => None,
        }
    }

    /// Passes on the held-back ends of both streams, before the exit event.
    fn flush_tails(&mut self) {
        if let Some(rest) = self.out_tail.finish() {
            self.pending.push_back(Ok(ProcessEvent::Stdout(rest)));
        }
        if let Some(rest) = self.err_tail.finish() {
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
        let path = format!("{}/logs", command_path(&self.sid, &self.cid));
        match connect_logs(&self.tb, &path).await {
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
        let (every, within) = self.tb.inner.config.log_ping;
        let message = loop {
            // Silence: ping after `every`; a ping that gets no frame at all (not even the
            // pong) within `within` ends the stream.
            let wait = match self.ping_sent {
                Some(at) => (at + within).saturating_duration_since(Instant::now()),
                None => every,
            };
            tokio::select! {
                message = ws.next() => {
                    self.ping_sent = None;
                    break message;
                }
                _ = tokio::time::sleep(wait) => {
                    if self.ping_sent.is_some() {
                        return Err(Error::new(
                            ErrorKind::Transport,
                            format!(
                                "the log stream went silent: no answer to a ping within {within:?}"
                            ),
                        )
                        .with_ambiguous(true));
                    }
                    // The server answers pings but sends none (PROTOCOL.md §4.2).
                    let sent = tokio::time::timeout(within, ws.send(Message::Ping(Bytes::new()))).await;
                    match sent {
                        Ok(Ok(())) => self.ping_sent = Some(Instant::now()),
                        Ok(Err(e)) => return Err(ws_error("log stream ping failed", e)),
                        Err(_) => {
                            return Err(Error::new(
                                ErrorKind::Transport,
                                format!("the log stream could not send a ping within {within:?}"),
                            ));
                        }
                    }
                }
            }
        };
        self.step = Step::Stream;
        match message {
            Some(Ok(Message::Binary(bytes))) => {
                let pieces = self.demux.feed(&bytes);
                self.push_pieces(pieces);
                self.pace(bytes.len()).await;
            }
            Some(Ok(Message::Text(text))) => {
                let pieces = self.demux.feed(text.as_bytes());
                self.push_pieces(pieces);
                self.pace(text.len()).await;
            }
            Some(Ok(Message::Close(frame))) => {
                let code = frame.as_ref().map(|f| u16::from(f.code));
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
            Some(Ok(_)) => {}
            None => self.end_stream(),
            Some(Err(e)) => {
                if self.state.killed() {
                    self.end_stream();
                } else {
                    return Err(ws_error("log stream failed", e));
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

    /// The command's status, `None` once its session is gone. (Borrows only what it needs: a
    /// `&self` across the await would need the follower to be `Sync`, which its body stream
    /// is not.)
    fn fetch_command(
        &self,
    ) -> impl Future<Output = Result<Option<SessionCommandDto>>> + Send + use<> {
        let request = self
            .tb
            .request(Method::Get, &command_path(&self.sid, &self.cid), "exec");
        fetch_command(request)
    }
}

async fn fetch_command(
    request: sandbox_sdk_core::http::Request,
) -> Result<Option<SessionCommandDto>> {
    match request.send_json::<SessionCommandDto>().await {
        Ok(c) => Ok(Some(c)),
        // The session is gone: it was deleted (killed), by this handle or by `kill_process`.
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
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
                let config = &self.tb.inner.config;
                let backoff = self.exit_wait.get_or_insert_with(|| {
                    crate::time::backoff_until(
                        config.poll_interval,
                        crate::time::instant_after(config.state_change_timeout),
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
            .request(
                Method::Get,
                &format!("{}/logs", command_path(&self.sid, &self.cid)),
                "exec",
            )
            .idle_timeout(self.tb.inner.config.idle_timeout)
            .send()
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
                    let interval = self.tb.inner.config.poll_interval;
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

fn ws_error(what: &str, e: tokio_tungstenite::tungstenite::Error) -> Error {
    let kind = match &e {
        tokio_tungstenite::tungstenite::Error::Url(_) => ErrorKind::Validation,
        _ => ErrorKind::Transport,
    };
    Error::new(kind, format!("{what}: {e}"))
}

/// `data` with every occurrence of each of `secrets` (longest first; empty ones and ones
/// shorter than 6 bytes, too likely to match by chance, are left alone) replaced by
/// `<redacted>`.
fn scrub(data: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut secrets: Vec<&[u8]> = secrets
        .iter()
        .map(|s| s.as_bytes())
        .filter(|s| s.len() >= 6)
        .collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    'scan: while at < data.len() {
        for secret in &secrets {
            if data[at..].starts_with(secret) {
                out.extend_from_slice(b"<redacted>");
                at += secret.len();
                continue 'scan;
            }
        }
        out.push(data[at]);
        at += 1;
    }
    out
}

/// The WebSocket URL for a toolbox path: the toolbox base with `http` → `ws`.
pub(crate) fn ws_url(toolbox_base: &str, path: &str) -> Result<String> {
    let rest = if let Some(rest) = toolbox_base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = toolbox_base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        return Err(Error::validation(format!(
            "toolbox URL {toolbox_base:?} is not http or https"
        )));
    };
    Ok(format!("{}{path}?follow=true", rest.trim_end_matches('/')))
}

/// Opens the follow WebSocket with the same headers as every toolbox request.
///
/// `Ok(None)` when the upgrade is refused in a way polling can work around (a proxy or network
/// that does not carry WebSockets: any refusal but 401/403, 404 or the proxy's empty 502, or a
/// handshake that is not a WebSocket one); the caller then polls, and a `tracing` warning says
/// so. Those three are errors, mapped like any other toolbox answer (and then checked against
/// the sandbox's state by the follower, [`Toolbox::explain`]).
async fn connect_logs(tb: &Toolbox, path: &str) -> Result<Option<Ws>> {
    let config = &tb.inner.config;
    let url = ws_url(&tb.base, path)?;
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| ws_error("invalid log stream URL", e))?;
    let headers = request.headers_mut();
    let mut put = |name: &'static str, value: &str| -> Result<()> {
        let value = value
            .parse()
            .map_err(|_| Error::validation(format!("invalid value for header {name}")))?;
        headers.insert(name, value);
        Ok(())
    };
    put("authorization", &format!("Bearer {}", tb.inner.secret))?;
    put("x-daytona-sdk-version", &config.sdk_version)?;
    put("x-daytona-source", crate::builder::SOURCE)?;
    put(
        "user-agent",
        &format!("{}/{}", crate::builder::SOURCE, config.sdk_version),
    )?;
    if config.api_key.is_none()
        && let Some(org) = &config.organization_id
    {
        put("x-daytona-organization-id", org)?;
    }
    let connect = tokio_tungstenite::connect_async(request);
    let fallback = |reason: String| {
        tracing::warn!(
            provider = PROVIDER,
            sandbox_id = %tb.sandbox_id,
            reason = %reason,
            "the log stream WebSocket upgrade was refused; following the command by polling instead"
        );
        Ok(None)
    };
    match tokio::time::timeout(config.request_timeout, connect).await {
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            "log stream upgrade timed out",
        )),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            // A server that echoes the credential must not get it into our errors or logs (the
            // HTTP transport scrubs its error answers the same way).
            let secrets = [
                format!("Bearer {}", tb.inner.secret),
                tb.inner.secret.clone(),
            ];
            let mut h = Headers::new();
            for (name, value) in response.headers() {
                let value = scrub(value.as_bytes(), &secrets);
                h.push(name.as_str(), String::from_utf8_lossy(&value));
            }
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .map(|body| Bytes::from(scrub(&body, &secrets)))
                .unwrap_or_default();
            let error = map_error(&ErrorResponse {
                status,
                headers: h,
                body,
                operation: "exec".into(),
                sandbox_id: Some(tb.sandbox_id.clone()),
                request_id: None,
                method: "GET".into(),
                path: path.to_owned(),
                provider: PROVIDER.into(),
            });
            let decisive = matches!(
                error.kind(),
                ErrorKind::Unauthorized | ErrorKind::NotFound | ErrorKind::NotRunning
            ) || crate::error::is_empty_bad_gateway(&error);
            if decisive {
                // The follower passes it through the same state check as the HTTP path: an
                // empty 502 from a stopped sandbox is `NotRunning` whichever way it came.
                return Err(error);
            }
            fallback(error.to_string())
        }
        Ok(Err(e @ tokio_tungstenite::tungstenite::Error::Protocol(_))) => fallback(e.to_string()),
        Ok(Err(e)) => Err(ws_error("log stream upgrade failed", e)),
        Ok(Ok((ws, _))) => Ok(Some(ws)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_replaces_each_secret_longest_first() {
        let secrets = ["Bearer tok-123456".to_owned(), "tok-123456".to_owned()];
        assert_eq!(
            scrub(b"a Bearer tok-123456 b tok-123456!", &secrets),
            b"a <redacted> b <redacted>!"
        );
        assert_eq!(scrub(b"short", &["".to_owned(), "ab".to_owned()]), b"short");
    }

    #[test]
    fn ws_urls_swap_the_scheme() {
        assert_eq!(
            ws_url(
                "https://proxy.app.daytona.io/toolbox/sb",
                "/process/session/s/command/c/logs"
            )
            .unwrap(),
            "wss://proxy.app.daytona.io/toolbox/sb/process/session/s/command/c/logs?follow=true"
        );
        assert_eq!(
            ws_url("http://127.0.0.1:9/t/sb", "/x").unwrap(),
            "ws://127.0.0.1:9/t/sb/x?follow=true"
        );
        assert!(ws_url("ftp://x", "/x").is_err());
    }
}
