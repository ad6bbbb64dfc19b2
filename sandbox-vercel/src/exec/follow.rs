//! Following one command to its end (PROTOCOL.md §6, §11): its output from the NDJSON stream it
//! was started with or from `/logs`, its exit from the command object.
//!
//! Vercel's edge cuts long responses after about 5–6 minutes, and a stream may go silent or
//! drop at any time while the command keeps running. So a stream that breaks is not the end:
//! the follower reads the command (`GET …/cmd/{id}`), and while it runs, or when it ended but
//! its output may not all have arrived, reads `/logs` again. `/logs` replays from the first
//! byte, so the follower counts the bytes of stdout and stderr it has handed out and skips
//! them. A clean end of `/logs` without an exit yet is followed by `GET …?wait=true`.
//!
//! Bounds: every stream has the builder's idle bound; a break that came sooner than that bound
//! after connecting and brought nothing new counts as fruitless, and after
//! [`max_reconnects`](crate::VercelBuilder::max_reconnects) of those in a row following gives up
//! with `Transport` (the command keeps running; `attach` follows it again). Breaks after a long
//! connection (silence past the idle bound, the edge's cut) do not count: a command may run
//! silently for hours.

use super::ndjson::Lines;
use crate::api::Api;
use crate::config::PROVIDER;
use crate::error::protocol_error;
use crate::wire::LogLine;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::{Error, ErrorKind, EventStream, ExitStatus, ProcessEvent, Result};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// The longest pause between fruitless reconnects.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Where one command stands.
pub(crate) struct Follower {
    api: Api,
    name: String,
    session: String,
    command: String,
    /// The open stream, when reading; `initial` when it is the start call's own.
    lines: Option<Lines>,
    initial: bool,
    connected_at: Instant,
    /// Bytes of stdout and stderr handed out so far, and counted on the open stream.
    handed: [u64; 2],
    counted: [u64; 2],
    progressed: bool,
    /// The exit, once known from a command object.
    exit: Option<i32>,
    fruitless: u32,
    pending: VecDeque<ProcessEvent>,
    done: bool,
}

impl Follower {
    /// A follower reading `lines`, the start call's stream, past its first `command` line.
    pub fn on_start_stream(
        api: Api,
        name: String,
        session: String,
        command: String,
        lines: Lines,
    ) -> Follower {
        let mut f = Follower::attached(api, name, session, command);
        f.lines = Some(lines);
        f.initial = true;
        f
    }

    /// A follower that reads the command's `/logs` from the start.
    pub fn attached(api: Api, name: String, session: String, command: String) -> Follower {
        Follower {
            api,
            name,
            session,
            command,
            lines: None,
            initial: false,
            connected_at: Instant::now(),
            handed: [0, 0],
            counted: [0, 0],
            progressed: false,
            exit: None,
            fruitless: 0,
            pending: VecDeque::new(),
            done: false,
        }
    }

    /// The events, read as the caller polls them.
    pub fn into_events(self) -> EventStream {
        futures::stream::unfold(self, |mut f| async move {
            let event = f.next().await?;
            Some((event, f))
        })
        .boxed()
    }

    fn error(&self, kind: ErrorKind, message: String) -> Error {
        Error::new(kind, message)
            .with_provider(PROVIDER)
            .with_operation("exec")
            .with_sandbox_id(&self.name)
    }

    async fn next(&mut self) -> Option<Result<ProcessEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            let step = match self.lines.as_mut() {
                None => self.connect().await,
                Some(lines) => match lines.next_line().await {
                    Some(Ok(line)) => self.take(&line),
                    Some(Err(e))
                        if matches!(e.kind(), ErrorKind::Transport | ErrorKind::Timeout) =>
                    {
                        tracing::debug!(error = %e, command = %self.command, "vercel: command stream broke; checking the command");
                        self.broke().await
                    }
                    Some(Err(e)) => Err(e),
                    None => self.ended().await,
                },
            };
            if let Err(e) = step {
                self.done = true;
                self.lines = None;
                return Some(Err(e.or_context(PROVIDER, "exec", Some(&self.name))));
            }
        }
    }

    /// Opens `/logs` again.
    async fn connect(&mut self) -> Result<()> {
        let stream = self
            .api
            .logs(&self.name, &self.session, &self.command)
            .await?;
        self.lines = Some(Lines::new(stream));
        self.initial = false;
        self.connected_at = Instant::now();
        self.counted = [0, 0];
        self.progressed = false;
        Ok(())
    }

    /// Takes in one line.
    fn take(&mut self, line: &[u8]) -> Result<()> {
        let parsed: LogLine = serde_json::from_slice(line).map_err(|_| {
            protocol_error(
                "exec",
                &self.name,
                "a line of the command stream is not a command or output record",
            )
        })?;
        if let Some(command) = parsed.command {
            if let Some(code) = command.exit_code {
                self.exit = Some(code);
                // The start stream ends with the command's exit (§6.2): everything was read.
                if self.initial {
                    self.finish();
                }
            }
            return Ok(());
        }
        let index = match parsed.stream.as_deref() {
            Some("stdout") => 0,
            Some("stderr") => 1,
            Some("error") => {
                let data = parsed.data.unwrap_or_default();
                let code = data
                    .get("code")
                    .and_then(|c| c.as_str())
                    .unwrap_or("error")
                    .to_owned();
                let message = data
                    .get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or("")
                    .to_owned();
                let kind = if code == "sandbox_stream_closed" {
                    ErrorKind::NotRunning
                } else {
                    ErrorKind::Provider
                };
                // A 200 is not scrubbed by the transport: the decoded text is scrubbed here.
                let message = sandbox_sdk_core::redact::scrub_text(
                    &format!("{message} [{code}]"),
                    &self.api.secrets(),
                );
                let message = sandbox_sdk_core::http::truncate(&message, 512);
                return Err(self.error(kind, format!("the command stream failed: {message}")));
            }
            _ => return Ok(()),
        };
        let data = match parsed.data {
            Some(serde_json::Value::String(text)) => text.into_bytes(),
            Some(serde_json::Value::Null) | None => Vec::new(),
            Some(_) => {
                return Err(protocol_error(
                    "exec",
                    &self.name,
                    "an output record's data is not text",
                ));
            }
        };
        let start = self.counted[index];
        self.counted[index] += data.len() as u64;
        if self.counted[index] <= self.handed[index] {
            return Ok(());
        }
        let skip = self.handed[index].saturating_sub(start) as usize;
        self.handed[index] = self.counted[index];
        self.progressed = true;
        let bytes = Bytes::from(data).slice(skip..);
        self.pending.push_back(if index == 0 {
            ProcessEvent::Stdout(bytes)
        } else {
            ProcessEvent::Stderr(bytes)
        });
        Ok(())
    }

    fn finish(&mut self) {
        let code = self.exit.unwrap_or_default();
        self.pending
            .push_back(ProcessEvent::Exit(ExitStatus::code(code)));
        self.done = true;
        self.lines = None;
    }

    /// The open stream ended cleanly.
    async fn ended(&mut self) -> Result<()> {
        self.lines = None;
        if self.initial {
            // The start stream ended before the command's exit: its outcome is unknown (§6.2).
            return self.broke().await;
        }
        // `/logs` follows the command until it ends (§6.5): all output is in.
        if self.exit.is_some() {
            self.finish();
            return Ok(());
        }
        match self
            .api
            .get_command(&self.name, &self.session, &self.command, true)
            .await
        {
            Ok(answer) if answer.command.exit_code.is_some() => {
                self.exit = answer.command.exit_code;
                self.finish();
                Ok(())
            }
            Ok(_) => self.broke().await,
            Err(e) if matches!(e.kind(), ErrorKind::Transport | ErrorKind::Timeout) => {
                self.broke().await
            }
            Err(e) => Err(e),
        }
    }

    /// The open stream broke (or ended early): read the command, then read `/logs` again
    /// (after a pause when the break was fruitless).
    async fn broke(&mut self) -> Result<()> {
        self.lines = None;
        let quick = self.connected_at.elapsed() < self.api.settings.stream_idle;
        if self.progressed || !quick {
            self.fruitless = 0;
        } else {
            self.fruitless += 1;
        }
        if self.fruitless > self.api.settings.max_reconnects {
            return Err(self
                .error(
                    ErrorKind::Transport,
                    format!(
                        "lost the output of command {} {} times in a row; it may still be \
                         running (attach to it again)",
                        self.command, self.fruitless
                    ),
                )
                .with_ambiguous(true));
        }
        if self.exit.is_none() {
            let answer = self
                .api
                .get_command(&self.name, &self.session, &self.command, false)
                .await?;
            self.exit = answer.command.exit_code;
        }
        if self.fruitless > 0 {
            let pause = Duration::from_millis(25)
                .saturating_mul(1 << self.fruitless.min(10))
                .min(MAX_PAUSE);
            tokio::time::sleep(pause).await;
        }
        // The next poll reconnects to `/logs`.
        self.initial = false;
        self.connected_at = Instant::now();
        Ok(())
    }
}
