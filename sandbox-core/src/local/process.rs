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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Held while the group is signalled and while its leader is reaped and `exit` set, so a
    /// signal only goes out while the leader is unreaped: until then its pid, and so the group
    /// id, cannot belong to anyone else.
    signals: Mutex<()>,
    /// Where the group is recorded once its leader is reaped, for destroy's sweep.
    groups: Arc<Mutex<Vec<EndedGroup>>>,
}

/// A process group of the sandbox whose leader has been reaped: its id is free for reuse, so
/// destroy counts as ours only the members that started before the leader was reaped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EndedGroup {
    pub(crate) pgid: i32,
    /// Time since boot, in clock ticks, read just before the leader was reaped; 0 where
    /// unknown (then no member counts).
    pub(crate) reaped_at: u64,
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
            signals: Mutex::new(()),
            groups: Default::default(),
        }
    }

    /// Records the group in `groups` once its leader is reaped.
    pub(crate) fn recording_to(mut self, groups: Arc<Mutex<Vec<EndedGroup>>>) -> Self {
        self.groups = groups;
        self
    }

    pub(crate) fn finished(&self) -> Option<Finished> {
        *self.exit.borrow()
    }

    /// Sends `signal` to the whole process group while its leader is unreaped (and so the group
    /// id still ours). Once the leader has ended and been reaped this does nothing: the id may
    /// have been taken by an unrelated group since. A group that is already gone is not an error.
    pub(crate) fn signal_group(&self, signal: Signal) -> Result<()> {
        let _signals = super::lock(&self.signals);
        if self.finished().is_some() {
            return Ok(());
        }
        signal_group(self.pgid, signal)
    }

    /// Reaps the leader with `reap` (which must not block: the leader has exited, see
    /// [`wait_exited`]) and records how it ended, with no signal going out in between. Returns
    /// `None` if `reap` finds it still running.
    pub(crate) fn reap(
        &self,
        reap: impl FnOnce() -> std::io::Result<Option<std::process::ExitStatus>>,
    ) -> Option<Finished> {
        let _signals = super::lock(&self.signals);
        let reaped_at = ticks_since_boot().unwrap_or(0);
        let status = reap().transpose()?;
        let mut groups = super::lock(&self.groups);
        // An earlier group of the sandbox under the same id had no member left when the id was
        // given out again: its record is spent. So the list holds at most one record per id.
        groups.retain(|g| g.pgid != self.pgid);
        groups.push(EndedGroup {
            pgid: self.pgid,
            reaped_at,
        });
        drop(groups);
        Some(self.finish(status))
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
        let state = s.guard.state.clone();
        wait_exited_async(state.pgid).await;
        let finished = match state.reap(|| s.child.try_wait()) {
            Some(finished) => finished,
            // Not seen exiting (no waitid here): reap first, record after.
            None => {
                let waited = s.child.wait().await;
                state
                    .reap(|| waited.map(Some))
                    .unwrap_or_else(|| state.finish(Err(std::io::Error::other("no exit status"))))
            }
        };
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
        wait_exited(state.pgid);
        if state.reap(|| child.try_wait()).is_none() {
            // Not seen exiting (no waitid here): reap first, record after.
            let waited = child.wait();
            state.reap(|| waited.map(Some));
        }
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

/// Blocks until child `pid` has exited, without reaping it (`waitid` with `WNOWAIT`), so its pid
/// stays reserved until [`ProcState::reap`]. Returns at once where that is not available, or
/// when the child cannot be waited for.
pub(crate) fn wait_exited(pid: i32) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::wait::{Id, WaitPidFlag, waitid};
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(Pid::from_raw(pid)), flags) {}
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pid;
}

/// [`wait_exited`] for async code: a non-blocking look first (a foreground child whose output
/// ended has usually exited), then a blocking wait on the blocking pool.
async fn wait_exited_async(pid: i32) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        if let Ok(WaitStatus::StillAlive) = waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            let _ = tokio::task::spawn_blocking(move || wait_exited(pid)).await;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pid;
}

/// Time since boot in clock ticks (`USER_HZ`, 100 per second), the unit of a process's start
/// time in `/proc/<pid>/stat`; `None` without `/proc`. Were `USER_HZ` larger, start times would
/// read later than they are and fewer processes would count as started before a given moment:
/// the safe direction for [`sweep`].
fn ticks_since_boot() -> Option<u64> {
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds = uptime.split_whitespace().next()?;
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, "0"));
    let centis: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(2)
        .collect();
    Some(whole.parse::<u64>().ok()? * 100 + centis.parse::<u64>().ok()?)
}

/// One process as `/proc/<pid>/stat` shows it.
struct ProcEntry {
    pid: i32,
    ppid: i32,
    pgid: i32,
    /// Start time in clock ticks since boot.
    start: u64,
    zombie: bool,
}

fn proc_entry(pid: i32) -> Option<ProcEntry> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // rest[0] is field 3 (state), so field n is rest[n - 3].
    Some(ProcEntry {
        pid,
        ppid: rest.get(1)?.parse().ok()?,
        pgid: rest.get(2)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
        zombie: *rest.first()? == "Z",
    })
}

fn all_processes() -> Vec<ProcEntry> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_entry)
        .collect()
}

/// Kills, on Linux, every process of this user that belongs to the sandbox as far as `/proc`
/// can tell: one whose environment holds `marker=id`; a member of one of its `live` groups
/// (leader not yet reaped); a member of one of its `ended` groups whose id is not a live pid
/// again and that started no later than the clock tick (10ms) in which that group's leader was
/// reaped (a later one may belong to a group that reused the id; one that reused it, ended and
/// left members all within that tick is the case this cannot tell apart); and every descendant
/// of these. Found processes are stopped first and killed at the end, so none can
/// fork or orphan a child while the tree is walked. Where `/proc` is absent this does nothing.
///
/// A process can still escape: one that clears the marker, leaves the group (`setsid`) and whose
/// parent exits before the sweep (a daemon's double fork) is re-parented outside the sandbox
/// and carries nothing left to tell it apart.
pub(crate) fn sweep(marker: &str, id: &str, live: &[i32], ended: &[EndedGroup]) {
    use std::collections::BTreeMap;
    let needle = format!("{marker}={id}");
    let own = i32::try_from(std::process::id()).unwrap_or(0);
    let marked = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
            environ
                .split(|b| *b == 0)
                .any(|var| var == needle.as_bytes())
        })
    };
    // pid -> start time of every process stopped so far.
    let mut found: BTreeMap<i32, u64> = BTreeMap::new();
    for _ in 0..20 {
        let procs = all_processes();
        // An ended group whose id is a live pid again was taken over: that pid was free only
        // once no process was left in our group, so all its members now are someone else's.
        let ended: Vec<EndedGroup> = ended
            .iter()
            .filter(|g| !procs.iter().any(|p| p.pid == g.pgid))
            .copied()
            .collect();
        let mut new = 0;
        // Repeat over one snapshot until no more descendants turn up.
        loop {
            let mut grew = false;
            for p in &procs {
                if p.pid == own || p.pid <= 1 || p.zombie || found.contains_key(&p.pid) {
                    continue;
                }
                let ours = found.contains_key(&p.ppid)
                    || live.contains(&p.pgid)
                    || ended
                        .iter()
                        .any(|g| g.pgid == p.pgid && p.start <= g.reaped_at)
                    || marked(p.pid);
                if ours && nix::sys::signal::kill(Pid::from_raw(p.pid), Signal::SIGSTOP).is_ok() {
                    found.insert(p.pid, p.start);
                    grew = true;
                    new += 1;
                }
            }
            if !grew {
                break;
            }
        }
        if new == 0 {
            break;
        }
    }
    for (pid, start) in found {
        // Stopped processes do not exit by themselves; check it is still the same one anyway.
        if proc_entry(pid).is_some_and(|p| p.start == start) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}
