//! A command's stdin (PROTOCOL.md §6.6): the [`Stdin`] writer of a command started with
//! `attachStdin`, delivered by a task that sends its chunks in order as
//! `POST …/cmd/{id}/stdin {data, offset}` and, when the writer is shut down or dropped,
//! `{offset, close: true}`.
//!
//! - Every request carries `offset`, the bytes the server confirmed before it, so a request
//!   sent again after an ambiguous failure (a reset, a timeout, a 502/503/504) or a 429 goes
//!   with the same offset and data: the server skips what it already took and nothing is
//!   written twice (§6.6). At most [`MAX_ATTEMPTS`] sends per request, pausing as the
//!   official SDK does (0.4 s doubling, a 429's `Retry-After` up to 20 s).
//! - Chunks already queued are sent together, up to [`CHUNK`] bytes of data per request (the
//!   SDK's size, keeping the base64 JSON body under the API's 1 MB limit). A write is sent as
//!   soon as the task sees it, never held for the close: a process reading lines gets each
//!   one as it is written.
//! - A command that takes no more input answers 400 `command_stdin_unavailable` (or 404 once
//!   it is gone): a write then fails as a closed pipe would, and a close is taken as done.
//! - When the process ends (or its handle is dropped) the task sends what is already queued
//!   and stops, so no task outlives the process. How delivery ended goes back to the writer:
//!   its shutdown returns once the close was answered, with the request's error when one
//!   failed (a 401 stays `Unauthorized`, a 429 `QuotaExceeded`).

use crate::api::Api;
use crate::config::PROVIDER;
use crate::wire::StdinBody;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use sandbox_sdk_core::{Error, ErrorKind, Result, Stdin};
use std::time::Duration;
use tokio::sync::mpsc::{self, error::TryRecvError};

/// The most data bytes one request carries (the official SDK's `STDIN_CHUNK_SIZE`).
pub(crate) const CHUNK: usize = 512 * 1024;

/// How many times one request is sent before its error is kept (the SDK's five retries).
pub(crate) const MAX_ATTEMPTS: u32 = 6;

/// The longest `Retry-After` waited for; a 429 asking more fails the write (as in the SDK).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);

/// How many chunks the writer may queue ahead of the requests (backpressure).
const QUEUE: usize = 16;

/// Where one command's stdin goes.
#[derive(Clone)]
struct Target {
    api: Api,
    name: String,
    session: String,
    command: String,
}

/// The task sending a command's stdin, and how to tell it the command has ended.
pub(crate) struct Pump {
    exited: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Pump {
    /// Tells the pump the command ended and waits until it has sent what was already written
    /// (and the close when the writer was closed). It never waits for more input.
    pub async fn finish(self) {
        let _ = self.exited.send(());
        let _ = self.task.await;
    }
}

/// The stdin writer of command `command` and the task delivering it.
pub(crate) fn pump(api: Api, name: String, session: String, command: String) -> (Stdin, Pump) {
    let (stdin, mut rx, outcome) = Stdin::channel_with_outcome(QUEUE);
    let (exited, mut exited_rx) = tokio::sync::oneshot::channel::<()>();
    let target = Target {
        api,
        name,
        session,
        command,
    };
    let task = tokio::spawn(async move {
        let mut offset = 0u64;
        let result: Result<()> = async {
            loop {
                let first = tokio::select! {
                    biased;
                    chunk = rx.recv() => chunk,
                    _ = &mut exited_rx => {
                        // The command ended: send what is queued, close if the writer did.
                        let (queued, closed) = drain(&mut rx, usize::MAX);
                        if !queued.is_empty() {
                            write(&target, &mut offset, queued).await?;
                        }
                        return if closed { close(&target, offset).await } else { Ok(()) };
                    }
                };
                let Some(first) = first else {
                    return close(&target, offset).await;
                };
                let mut data = BytesMut::from(&first[..]);
                let (more, closed) = drain(&mut rx, CHUNK.saturating_sub(data.len()));
                data.extend_from_slice(&more);
                write(&target, &mut offset, data.freeze()).await?;
                if closed {
                    return close(&target, offset).await;
                }
            }
        }
        .await;
        if let Err(e) = &result {
            tracing::debug!(error = %e, command = %target.command, "vercel: stdin closed after an error");
        }
        // The writer's shutdown (or next write) answers with this, kind and all.
        outcome.report(result);
        drop(rx);
    });
    (stdin, Pump { exited, task })
}

/// The chunks already queued, up to about `limit` bytes (a chunk is never split), and whether
/// the writer is gone (shut down or dropped) behind them.
fn drain(rx: &mut mpsc::Receiver<Bytes>, limit: usize) -> (Bytes, bool) {
    let mut data = BytesMut::new();
    while data.len() < limit {
        match rx.try_recv() {
            Ok(chunk) => data.extend_from_slice(&chunk),
            Err(TryRecvError::Empty) => return (data.freeze(), false),
            Err(TryRecvError::Disconnected) => return (data.freeze(), true),
        }
    }
    (data.freeze(), false)
}

/// Whether `e` says the command takes no more input (§6.6): `command_stdin_unavailable`, or
/// the command gone.
fn not_accepted(e: &Error) -> bool {
    matches!(
        (e.kind(), e.status()),
        (ErrorKind::Conflict, Some(400)) | (ErrorKind::NotFound, Some(404))
    )
}

/// Writes `data` at `offset`, [`CHUNK`] bytes per request, moving `offset` past what the server
/// confirmed.
async fn write(target: &Target, offset: &mut u64, data: Bytes) -> Result<()> {
    let end = *offset + data.len() as u64;
    while *offset < end {
        let from = (*offset + data.len() as u64 - end) as usize;
        let piece = data.slice(from..(from + CHUNK).min(data.len()));
        let body = StdinBody {
            data: Some(base64::engine::general_purpose::STANDARD.encode(&piece)),
            offset: *offset,
            close: false,
        };
        let answer = match send(target, &body).await {
            Ok(answer) => answer,
            Err(e) if not_accepted(&e) => {
                return Err(Error::new(
                    ErrorKind::Transport,
                    format!(
                        "command {} no longer reads stdin (it exited or closed it)",
                        target.command
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("stdin")
                .with_sandbox_id(&target.name)
                .with_retryable(false)
                .with_source(e));
            }
            Err(e) => return Err(e),
        };
        let sent_to = *offset + piece.len() as u64;
        // The server's count, or (without one) the bytes sent; never backwards.
        *offset = answer.bytes_written.unwrap_or(sent_to).clamp(*offset, end);
        if *offset == sent_to - piece.len() as u64 {
            return Err(crate::error::protocol_error(
                "stdin",
                &target.name,
                "the stdin request was answered without taking any bytes",
            ));
        }
    }
    Ok(())
}

/// Closes stdin after `offset` bytes. A command that already stopped taking input has nothing
/// to close.
async fn close(target: &Target, offset: u64) -> Result<()> {
    let body = StdinBody {
        data: None,
        offset,
        close: true,
    };
    match send(target, &body).await {
        Ok(_) => Ok(()),
        Err(e) if not_accepted(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether a failed stdin request is sent again: its offset makes a resend safe (§6.6), so on
/// anything that may not have reached the command or may have been applied — a transport
/// failure, a timeout, a 502/503/504 — and on a 429 that asks for at most 20 s.
fn resend_after(e: &Error, attempt: u32) -> Option<Duration> {
    let backoff = Duration::from_millis(400).saturating_mul(1 << attempt.min(8));
    match e.kind() {
        ErrorKind::Transport | ErrorKind::Timeout => Some(backoff),
        ErrorKind::QuotaExceeded => match e.retry_after() {
            Some(wait) if wait > MAX_RETRY_AFTER => None,
            Some(wait) if !wait.is_zero() => Some(wait),
            _ => Some(backoff),
        },
        ErrorKind::Provider if matches!(e.status(), Some(502..=504)) => Some(backoff),
        _ => None,
    }
}

/// Sends one request, again with the same body while [`resend_after`] says so.
async fn send(target: &Target, body: &StdinBody) -> Result<crate::wire::StdinAnswer> {
    let mut attempt = 0;
    loop {
        let result = target
            .api
            .write_stdin(&target.name, &target.session, &target.command, body)
            .await;
        let e = match result {
            Ok(answer) => return Ok(answer),
            Err(e) => e,
        };
        attempt += 1;
        match resend_after(&e, attempt - 1) {
            Some(pause) if attempt < MAX_ATTEMPTS => {
                tracing::debug!(error = %e, attempt, offset = body.offset, "vercel: stdin request failed; sending it again");
                tokio::time::sleep(pause).await;
            }
            _ => return Err(e),
        }
    }
}
