//! Child processes of a local sandbox: spawning, the live foreground stream, the file-backed
//! background stream, and killing whole process groups.

use crate::error::{Error, ErrorKind, Result};
use crate::exec::{EventStream, ExitStatus, ProcessControl, ProcessEvent, PtySize};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::io::ReaderStream;

/// Chunk size for reading a child's output.
const CHUNK: usize = 64 * 1024;
/// How often a background stream looks for new output in its files.
const POLL: Duration = Duration::from_millis(20);

/// How a tracked process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) timed_out: bool,
}

/// What the sandbox knows about one of its processes.
#[derive(Debug)]
pub(crate) struct ProcState {
    /// The process group id (the leader's pid, as it runs in its own group).
    pub(crate) pgid: i32,
    pub(crate) argv: Vec<String>,
    /// The command line for messages ([`Command::describe`](crate::Command::describe): secret
    /// arguments redacted).
    pub(crate) shown: String,
    pub(crate) cwd: String,
    pub(crate) tag: Option<String>,
    /// The stdout and stderr files of a background process; `None` in the foreground.
    pub(crate) output: Option<(PathBuf, PathBuf)>,
    /// The process timeout (`Duration::ZERO` = none).
    pub(crate) limit: Duration,
    /// Set by the watchdog when the process timeout fired.
    pub(crate) timed_out: AtomicBool,
    /// `None` while running.
    pub(crate) exit: watch::Sender<Option<Finished>>,
}

impl ProcState {
    pub(crate) fn new(
        pgid: i32,
        argv: Vec<String>,
        shown: String,
        cwd: String,
        tag: Option<String>,
        output: Option<(PathBuf, PathBuf)>,
        limit: Duration,
    ) -> Self {
        ProcState {
            pgid,
            argv,
            shown,
            cwd,
            tag,
            output,
            limit,
            timed_out: AtomicBool::new(false),
            exit: watch::Sender::new(None),
        }
    }

    pub(crate) fn finished(&self) -> Option<Finished> {
        *self.exit.borrow()
    }

    /// Sends `signal` to the whole process group; a group that is already gone is not an error.
    pub(crate) fn signal_group(&self, signal: Signal) -> Result<()> {
        signal_group(self.pgid, signal)
    }

    fn finish(&self, status: std::io::Result<std::process::ExitStatus>) -> Finished {
        let status = match status {
            Ok(s) => exit_status(s),
            Err(_) => ExitStatus {
                code: None,
                signal: None,
                emulated: false,
            },
        };
        let finished = Finished {
            status,
            timed_out: self.timed_out.load(Ordering::SeqCst),
        };
        self.exit.send_replace(Some(finished));
        finished
    }
}

/// Sends `signal` to process group `pgid`, ignoring a group that no longer exists.
pub(crate) fn signal_group(pgid: i32, signal: Signal) -> Result<()> {
    if pgid <= 1 {
        return Err(Error::new(
            ErrorKind::Provider,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(Error::new(
            ErrorKind::Provider,
            format!("cannot send {signal} to process group {pgid}: {e}"),
        )
        .with_source(e)),
    }
}

fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus {
        code: status.code(),
        signal: status.signal(),
        emulated: false,
    }
}

/// The error that ends the stream of a process killed by its timeout.
pub(crate) fn timeout_error(shown: &str, limit: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "command {shown:?} ran past its process timeout of {}ms and its process group was killed",
            limit.as_millis()
        ),
    )
}

/// Kills the process group when the process timeout runs out. `Duration::ZERO` = no watchdog.
pub(crate) fn watchdog(state: &Arc<ProcState>) -> Option<JoinHandle<()>> {
    let limit = state.limit;
    if limit.is_zero() {
        return None;
    }
    let state = state.clone();
    Some(tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        if state.finished().is_none() {
            state.timed_out.store(true, Ordering::SeqCst);
            let _ = state.signal_group(Signal::SIGKILL);
        }
    }))
}

/// [`ProcessControl`] for a local process: kill sends SIGKILL to its whole process group.
/// Holds the process and the id of its sandbox (for error context).
pub(crate) struct GroupControl(pub(crate) Arc<ProcState>, pub(crate) String);

#[async_trait]
impl ProcessControl for GroupControl {
    async fn kill(&self) -> Result<()> {
        self.0
            .signal_group(Signal::SIGKILL)
            .map_err(|e| e.or_context("local", "kill", Some(&self.1)))
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported("local", "pty").with_sandbox_id(&self.1))
    }
}

/// Runs when a foreground stream ends or is dropped: kills the group if it did not finish,
/// stops the watchdog, and forgets the process.
pub(crate) struct ForegroundGuard {
    pub(crate) state: Arc<ProcState>,
    pub(crate) watchdog: Option<JoinHandle<()>>,
    pub(crate) on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Drop for ForegroundGuard {
    fn drop(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
        if self.state.finished().is_none() {
            let _ = self.state.signal_group(Signal::SIGKILL);
        }
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

/// Field order matters: the guard is dropped first, so the group is killed while its leader is
/// still unreaped (its pid cannot have been reused).
struct Foreground {
    guard: ForegroundGuard,
    out: Option<ReaderStream<ChildStdout>>,
    err: Option<ReaderStream<ChildStderr>>,
    child: Child,
    done: bool,
}

async fn next_chunk<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut Option<ReaderStream<R>>,
) -> Option<std::io::Result<Bytes>> {
    match reader {
        Some(r) => r.next().await,
        None => std::future::pending().await,
    }
}

fn pipe_error(e: std::io::Error, pipe: &str) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!("cannot read the child's {pipe}: {e}"),
    )
    .with_source(e)
}

/// The live event stream of a foreground child: reads its pipes only when polled (a slow reader
/// slows the child through the pipe buffers), then reaps it and emits exactly one `Exit`.
pub(crate) fn foreground_stream(
    child: Child,
    out: ChildStdout,
    err: ChildStderr,
    guard: ForegroundGuard,
) -> EventStream {
    let state = Foreground {
        out: Some(ReaderStream::with_capacity(out, CHUNK)),
        err: Some(ReaderStream::with_capacity(err, CHUNK)),
        child,
        guard,
        done: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        while s.out.is_some() || s.err.is_some() {
            tokio::select! {
                chunk = next_chunk(&mut s.out) => match chunk {
                    Some(Ok(bytes)) => return Some((Ok(ProcessEvent::Stdout(bytes)), s)),
                    Some(Err(e)) => {
                        s.done = true;
                        return Some((Err(pipe_error(e, "stdout")), s));
                    }
                    None => s.out = None,
                },
                chunk = next_chunk(&mut s.err) => match chunk {
                    Some(Ok(bytes)) => return Some((Ok(ProcessEvent::Stderr(bytes)), s)),
                    Some(Err(e)) => {
                        s.done = true;
                        return Some((Err(pipe_error(e, "stderr")), s));
                    }
                    None => s.err = None,
                },
            }
        }
        let waited = s.child.wait().await;
        let finished = s.guard.state.finish(waited);
        s.done = true;
        if let Some(w) = s.guard.watchdog.take() {
            w.abort();
        }
        let event = if finished.timed_out {
            Err(timeout_error(&s.guard.state.shown, s.guard.state.limit))
        } else {
            Ok(ProcessEvent::Exit(finished.status))
        };
        Some((event, s))
    })
    .boxed()
}

/// Waits for a background child on a dedicated thread (independent of any async runtime) and
/// records how it ended.
pub(crate) fn reap_in_background(
    mut child: std::process::Child,
    state: Arc<ProcState>,
    watchdog: Option<JoinHandle<()>>,
) {
    let reaper = move || {
        let waited = child.wait();
        state.finish(waited);
        if let Some(w) = watchdog {
            w.abort();
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("local-sandbox-reaper".into())
        .spawn(reaper)
    {
        tracing::warn!(error = %e, "cannot start a reaper thread for a background process");
    }
}

struct Tail {
    out: tokio::fs::File,
    err: tokio::fs::File,
    exit: watch::Receiver<Option<Finished>>,
    /// Keeps the sender alive, so `changed()` only wakes on a real change.
    state: Arc<ProcState>,
    buf: Vec<u8>,
    done: bool,
}

impl Tail {
    async fn read_some(file: &mut tokio::fs::File, buf: &mut Vec<u8>) -> Result<Option<Bytes>> {
        buf.resize(CHUNK, 0);
        let n = file.read(buf).await.map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("cannot read background output: {e}"),
            )
            .with_source(e)
        })?;
        Ok((n > 0).then(|| Bytes::copy_from_slice(&buf[..n])))
    }
}

/// The event stream of a background process: its output files read as they grow (polled every
/// few milliseconds, and only while the stream is polled), then its exit.
pub(crate) fn tail_stream(
    out: tokio::fs::File,
    err: tokio::fs::File,
    state: Arc<ProcState>,
) -> EventStream {
    let state = Tail {
        out,
        err,
        exit: state.exit.subscribe(),
        state,
        buf: Vec::new(),
        done: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        loop {
            // Read the status before the files: once it is set, the files hold everything.
            let finished = *s.exit.borrow_and_update();
            match Tail::read_some(&mut s.out, &mut s.buf).await {
                Ok(Some(b)) => return Some((Ok(ProcessEvent::Stdout(b)), s)),
                Ok(None) => {}
                Err(e) => {
                    s.done = true;
                    return Some((Err(e), s));
                }
            }
            match Tail::read_some(&mut s.err, &mut s.buf).await {
                Ok(Some(b)) => return Some((Ok(ProcessEvent::Stderr(b)), s)),
                Ok(None) => {}
                Err(e) => {
                    s.done = true;
                    return Some((Err(e), s));
                }
            }
            if let Some(finished) = finished {
                s.done = true;
                let event = if finished.timed_out {
                    Err(timeout_error(&s.state.shown, s.state.limit))
                } else {
                    Ok(ProcessEvent::Exit(finished.status))
                };
                return Some((event, s));
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = s.exit.changed() => {}
            }
        }
    })
    .boxed()
}

/// Sends `SIGKILL` to every process of this user whose environment holds `marker=id`, found by
/// scanning `/proc` (Linux); where `/proc` is absent this does nothing. Repeats while it finds
/// some, so children forked during the sweep are caught too.
pub(crate) fn kill_marked(marker: &str, id: &str) {
    let needle = format!("{marker}={id}");
    let own = std::process::id();
    for _ in 0..5 {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        let mut killed = 0;
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == own {
                continue;
            }
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ
                .split(|b| *b == 0)
                .any(|var| var == needle.as_bytes())
            {
                let Ok(raw) = i32::try_from(pid) else {
                    continue;
                };
                if nix::sys::signal::kill(Pid::from_raw(raw), Signal::SIGKILL).is_ok() {
                    killed += 1;
                }
            }
        }
        if killed == 0 {
            return;
        }
    }
}
