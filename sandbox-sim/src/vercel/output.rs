//! One command's record (PROTOCOL.md §6.3, §6.5): its process group, its output kept as
//! `{"stream", "data"}` lines for the session's life, its exit, and the NDJSON streams that
//! replay and follow it.

use super::{lock, now_ms};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The NDJSON content type, exactly as the JS SDK checks it.
pub(crate) const NDJSON: &str = "application/x-ndjson";

/// One stream's pending bytes: an incomplete UTF-8 sequence held back until the rest arrives.
#[derive(Default)]
struct Utf8Tail(Vec<u8>);

impl Utf8Tail {
    /// The text of `pending + chunk` up to the last complete character (invalid bytes
    /// replaced), keeping an incomplete final sequence for the next chunk.
    fn push(&mut self, chunk: &[u8]) -> String {
        self.0.extend_from_slice(chunk);
        let cut = match std::str::from_utf8(&self.0) {
            Ok(_) => self.0.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.0.len(),
        };
        let rest = self.0.split_off(cut);
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0 = rest;
        text
    }

    fn flush(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0.clear();
        text
    }
}

#[derive(Default)]
struct Out {
    /// `(is stderr, text)` in arrival order.
    lines: Vec<(bool, String)>,
    exit: Option<i32>,
    duration: Option<u64>,
    tails: [Utf8Tail; 2],
}

/// One command of a session.
pub(crate) struct Cmd {
    pub id: String,
    name: String,
    args: Vec<String>,
    cwd: String,
    session: String,
    started_at: u64,
    /// The process group (the local process's pid), for signals; 0 for one that never started.
    pgid: i32,
    out: Mutex<Out>,
    changed: tokio::sync::watch::Sender<u64>,
    /// The process's stdin when it was started with `attachStdin` (PROTOCOL.md §6.6). An async
    /// lock: writes are applied one at a time, in the order they arrive.
    pub stdin: tokio::sync::Mutex<StdinPipe>,
}

/// A command's stdin as the server holds it: the writer while it is open, and how many bytes
/// it has taken (the `offset` a next chunk starts at, PROTOCOL.md §6.6).
pub(crate) struct StdinPipe {
    /// Whether the command was started with `attachStdin`.
    pub attached: bool,
    /// The process's stdin; `None` once closed (by a `close`, or a process that stopped
    /// reading).
    pub writer: Option<sandbox_sdk_core::Stdin>,
    /// Bytes written so far.
    pub written: u64,
    /// Whether a `close` went through.
    pub closed: bool,
}

impl Cmd {
    /// A record of `program args` just started in `cwd` (as the sandbox shows it) of
    /// `session`, its process group `pgid` (0 for one that never started), with `stdin` when it
    /// was started with `attachStdin` (`attached`).
    pub fn new(
        program: String,
        args: Vec<String>,
        cwd: String,
        session: String,
        pgid: i32,
        attached: bool,
        stdin: Option<sandbox_sdk_core::Stdin>,
    ) -> Cmd {
        Cmd {
            id: format!(
                "cmd_{}",
                crate::random_from(b"abcdefghijklmnopqrstuvwxyz0123456789", 24)
            ),
            name: program,
            args,
            cwd,
            session,
            started_at: now_ms(),
            pgid,
            out: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            stdin: tokio::sync::Mutex::new(StdinPipe {
                attached,
                writer: stdin,
                written: 0,
                closed: false,
            }),
        }
    }

    pub fn to_json(&self) -> Value {
        let out = lock(&self.out);
        let mut c = json!({
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "cwd": self.cwd,
            "sessionId": self.session,
            "exitCode": out.exit,
            "startedAt": self.started_at,
        });
        if let Some(d) = out.duration {
            c["durationMs"] = json!(d);
        }
        c
    }

    pub fn exited(&self) -> bool {
        lock(&self.out).exit.is_some()
    }

    /// Sends `signal` to the command's process group while it runs.
    pub fn signal(&self, signal: i32) {
        if self.pgid <= 0 || self.exited() {
            return;
        }
        if let Ok(sig) = nix::sys::signal::Signal::try_from(signal) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid), sig);
        }
    }

    pub fn push(&self, stderr: bool, chunk: &[u8]) {
        {
            let mut out = lock(&self.out);
            let text = out.tails[usize::from(stderr)].push(chunk);
            if !text.is_empty() {
                out.lines.push((stderr, text));
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    pub fn finish(&self, code: i32, began: Instant) {
        {
            let mut out = lock(&self.out);
            for stderr in [false, true] {
                let text = out.tails[usize::from(stderr)].flush();
                if !text.is_empty() {
                    out.lines.push((stderr, text));
                }
            }
            out.exit = Some(code);
            out.duration = Some(began.elapsed().as_millis() as u64);
        }
        // An exited command's stdin is gone (a write in flight keeps its own until it answers).
        if let Ok(mut pipe) = self.stdin.try_lock() {
            pipe.writer = None;
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Waits until the command exits.
    pub async fn wait(&self) {
        let mut rx = self.changed.subscribe();
        while !self.exited() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// The NDJSON stream of this command: `head` first (the `{"command"}` line of a waited
    /// start), then, with `logs`, every output line from the first, following until the exit,
    /// then with `tail` the finished `{"command"}` line. Cut after `cut` when set.
    pub fn ndjson(
        self: &Arc<Self>,
        head: bool,
        logs: bool,
        tail: bool,
        cut: Option<Duration>,
    ) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
        enum Step {
            Head,
            Lines(usize),
            Done,
        }
        let rx = self.changed.subscribe();
        let start = if head { Step::Head } else { Step::Lines(0) };
        let stream = futures::stream::unfold(
            (self.clone(), rx, start),
            move |(cmd, mut rx, step)| async move {
                let line = |v: Value| Bytes::from(format!("{v}\n"));
                match step {
                    Step::Done => None,
                    Step::Head => {
                        let first = line(json!({ "command": cmd.to_json() }));
                        Some((Ok(first), (cmd, rx, Step::Lines(0))))
                    }
                    Step::Lines(mut i) => loop {
                        rx.mark_unchanged();
                        let next = {
                            let out = lock(&cmd.out);
                            if logs && i < out.lines.len() {
                                let (stderr, text) = &out.lines[i];
                                let stream = if *stderr { "stderr" } else { "stdout" };
                                Some(Some(json!({ "stream": stream, "data": text })))
                            } else if out.exit.is_some() {
                                Some(None)
                            } else {
                                None
                            }
                        };
                        match next {
                            Some(Some(v)) => {
                                i += 1;
                                return Some((Ok(line(v)), (cmd, rx, Step::Lines(i))));
                            }
                            Some(None) if tail => {
                                let last = line(json!({ "command": cmd.to_json() }));
                                return Some((Ok(last), (cmd, rx, Step::Done)));
                            }
                            Some(None) => return None,
                            None => {
                                if rx.changed().await.is_err() {
                                    let closed = json!({ "stream": "error", "data": {
                                        "code": "sandbox_stream_closed",
                                        "message": "Sandbox stream was closed and is not accepting commands.",
                                    }});
                                    return Some((Ok(line(closed)), (cmd, rx, Step::Done)));
                                }
                            }
                        }
                    },
                }
            },
        );
        match cut {
            Some(after) => cut_at(stream.boxed(), after),
            None => stream.boxed(),
        }
    }
}

/// `body` until `after` has passed, then a reset (Vercel's edge cutting a long response).
pub(crate) fn cut_at(
    body: BoxStream<'static, Result<Bytes, std::io::Error>>,
    after: Duration,
) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    let deadline = Instant::now() + after;
    futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(item)) => Some((item, Some(body))),
            Ok(None) => None,
            Err(_) => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "terminated by the edge",
                )),
                None,
            )),
        }
    })
    .boxed()
}
