//! One exec session (PROTOCOL.md §5.5, §18.6–§18.9): a real process in its own process group
//! (on a pseudo-terminal for TTY sessions), its last output kept for replay, its stdin, the
//! sockets attached to it and the timer that kills it once they are all gone.

use super::lock;
use super::pty::Pty;
use bytes::Bytes;
use nix::sys::signal::Signal;
use sandbox_sdk_core::time::format_rfc3339;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Stream ids of the non-TTY frames (PROTOCOL.md §5.2).
pub(crate) const STDIN: u8 = 0;
/// Stdout frames.
pub(crate) const STDOUT: u8 = 1;
/// Stderr frames.
pub(crate) const STDERR: u8 = 2;
/// The exit frame: one byte, the code.
pub(crate) const EXIT: u8 = 3;
/// Stdin closed.
pub(crate) const STDIN_EOF: u8 = 4;

/// What a spawn asked for, resolved.
pub(crate) struct SpawnSpec {
    /// The executable (`path`, or argv\[0\]).
    pub program: String,
    /// The argv, argv\[0\] included.
    pub argv: Vec<String>,
    /// The host directory the command starts in.
    pub cwd: PathBuf,
    /// That directory as the sprite shows it.
    pub workdir: String,
    /// The whole environment.
    pub env: BTreeMap<String, String>,
    /// Whether stdin frames reach the command.
    pub stdin: bool,
    /// `(cols, rows)` of the terminal of a TTY session.
    pub tty: Option<(u16, u16)>,
    /// How long it runs on once no socket is attached; `None` for ever.
    pub max_after_disconnect: Option<Duration>,
    /// How many output bytes are kept for replay.
    pub scrollback: usize,
}

/// One piece of output, numbered in arrival order.
#[derive(Clone)]
pub(crate) struct Chunk {
    pub seq: u64,
    pub stream: u8,
    pub data: Bytes,
}

#[derive(Default)]
struct Out {
    chunks: VecDeque<Chunk>,
    bytes: usize,
    next_seq: u64,
    total: u64,
    exit: Option<u8>,
    finished_at: Option<Instant>,
    attached: usize,
    detach_gen: u64,
    /// Where each attached socket's live output stands (the next sequence number it sends),
    /// by reader id: output a reader has not sent yet is never dropped.
    readers: std::collections::BTreeMap<u64, u64>,
    next_reader: u64,
    last_activity: Option<SystemTime>,
}

/// One session.
pub(crate) struct Session {
    /// The PID, also the session id (PROTOCOL.md §18.8); 0 for a command that never started.
    pub id: u32,
    pub command: String,
    pub workdir: String,
    pub created: SystemTime,
    pub tty: bool,
    size: Mutex<(u16, u16)>,
    max_after: Option<Duration>,
    scrollback: usize,
    out: Mutex<Out>,
    changed: watch::Sender<u64>,
    /// Woken when a reader moves on or leaves: the pumps wait on it while readers lag.
    room: tokio::sync::Notify,
    stdin: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
    master: Option<std::fs::File>,
}

impl Session {
    fn record(id: u32, spec: &SpawnSpec, master: Option<std::fs::File>) -> Session {
        Session {
            id,
            command: spec.argv.join(" "),
            workdir: spec.workdir.clone(),
            created: SystemTime::now(),
            tty: spec.tty.is_some(),
            size: Mutex::new(spec.tty.unwrap_or((80, 24))),
            max_after: spec.max_after_disconnect,
            scrollback: spec.scrollback.max(1),
            out: Mutex::default(),
            changed: watch::channel(0).0,
            room: tokio::sync::Notify::new(),
            stdin: Mutex::new(None),
            master,
        }
    }

    /// A command that could not start: its error on stderr and exit 127, as a shell reports
    /// a program it cannot find. It is never listed.
    pub fn failed(spec: &SpawnSpec, message: &str) -> Arc<Session> {
        let session = Arc::new(Session::record(0, spec, None));
        let stream = if session.tty { STDOUT } else { STDERR };
        session.push(stream, Bytes::from(format!("{message}\r\n").into_bytes()));
        session.finish(127);
        session
    }

    /// Starts the command.
    pub fn spawn(spec: &SpawnSpec) -> std::io::Result<Arc<Session>> {
        match spec.tty {
            None => Session::spawn_pipes(spec),
            Some((cols, rows)) => Session::spawn_pty(spec, cols, rows),
        }
    }

    fn spawn_pipes(spec: &SpawnSpec) -> std::io::Result<Arc<Session>> {
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.arg0(spec.argv.first().unwrap_or(&spec.program))
            .args(spec.argv.iter().skip(1))
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(&spec.env)
            .process_group(0)
            .stdin(if spec.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let pid = child.id().ok_or_else(|| std::io::Error::other("no pid"))?;
        let session = Arc::new(Session::record(pid, spec, None));
        if let Some(mut stdin) = child.stdin.take() {
            let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
            *lock(&session.stdin) = Some(tx);
            tokio::spawn(async move {
                while let Some(data) = rx.recv().await {
                    if stdin.write_all(&data).await.is_err() || stdin.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let s = session.clone();
        tokio::spawn(async move {
            let (_, _, status) = tokio::join!(
                pump(out, STDOUT, s.clone()),
                pump(err, STDERR, s.clone()),
                child.wait()
            );
            s.finish(status.map(|st| exit_code(&st)).unwrap_or(137));
        });
        Ok(session)
    }

    fn spawn_pty(spec: &SpawnSpec, cols: u16, rows: u16) -> std::io::Result<Arc<Session>> {
        let pty = Pty::open(cols, rows)?;
        // `setsid --ctty` makes the command a session leader with the terminal as its controlling
        // terminal (so ^C and SIGWINCH reach it); without it the command gets its own group.
        let setsid = ["/usr/bin/setsid", "/bin/setsid"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let mut cmd = match setsid {
            Some(setsid) => {
                let mut cmd = tokio::process::Command::new(setsid);
                cmd.arg("--ctty").arg(&spec.program);
                cmd
            }
            None => {
                let mut cmd = tokio::process::Command::new(&spec.program);
                cmd.process_group(0);
                cmd
            }
        };
        cmd.args(spec.argv.iter().skip(1))
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(&spec.env)
            .stdin(pty.stdio()?)
            .stdout(pty.stdio()?)
            .stderr(pty.stdio()?);
        let mut child = cmd.spawn()?;
        drop(cmd);
        let pid = child.id().ok_or_else(|| std::io::Error::other("no pid"))?;
        let Pty { master, slave } = pty;
        drop(slave);
        let reader = tokio::fs::File::from_std(master.try_clone()?);
        let mut writer = tokio::fs::File::from_std(master.try_clone()?);
        let session = Arc::new(Session::record(pid, spec, Some(master)));
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        *lock(&session.stdin) = Some(tx);
        tokio::spawn(async move {
            while let Some(data) = rx.recv().await {
                if writer.write_all(&data).await.is_err() || writer.flush().await.is_err() {
                    return;
                }
            }
        });
        let s = session.clone();
        tokio::spawn(async move {
            let mut pumping = std::pin::pin!(pump(Some(reader), STDOUT, s.clone()));
            let (status, pumped) = tokio::select! {
                status = child.wait() => (status, false),
                _ = &mut pumping => (child.wait().await, true),
            };
            if !pumped {
                // A grandchild may hold the terminal open: take what is there, then finish.
                let _ = tokio::time::timeout(Duration::from_millis(200), &mut pumping).await;
            }
            s.finish(status.map(|st| exit_code(&st)).unwrap_or(137));
        });
        Ok(session)
    }

    /// Waits while an attached socket is more than the scrollback behind, as a real pipe blocks
    /// a writer whose reader lags: a live stream never loses output, only a replay is cut.
    async fn wait_room(&self) {
        loop {
            let notified = self.room.notified();
            {
                let out = lock(&self.out);
                let Some(&slowest) = out.readers.values().min() else {
                    return;
                };
                let unsent: usize = out
                    .chunks
                    .iter()
                    .filter(|c| c.seq >= slowest)
                    .map(|c| c.data.len())
                    .sum();
                if unsent <= self.scrollback {
                    return;
                }
            }
            notified.await;
        }
    }

    /// A socket starts reading live output at `cursor`; returns its reader id.
    pub fn reader_start(&self, cursor: u64) -> u64 {
        let mut out = lock(&self.out);
        let id = out.next_reader;
        out.next_reader += 1;
        out.readers.insert(id, cursor);
        id
    }

    /// Reader `id` has sent everything before `cursor`.
    pub fn reader_at(&self, id: u64, cursor: u64) {
        lock(&self.out).readers.insert(id, cursor);
        self.room.notify_waiters();
    }

    /// Reader `id` is gone.
    pub fn reader_end(&self, id: u64) {
        lock(&self.out).readers.remove(&id);
        self.room.notify_waiters();
    }

    /// Adds output, dropping the oldest beyond the scrollback that every reader has sent.
    fn push(&self, stream: u8, data: Bytes) {
        if data.is_empty() {
            return;
        }
        {
            let mut out = lock(&self.out);
            let seq = out.next_seq;
            out.next_seq += 1;
            out.total += data.len() as u64;
            out.bytes += data.len();
            out.last_activity = Some(SystemTime::now());
            out.chunks.push_back(Chunk { seq, stream, data });
            let slowest = out.readers.values().min().copied().unwrap_or(u64::MAX);
            while out.bytes > self.scrollback {
                let excess = out.bytes - self.scrollback;
                let Some(front) = out.chunks.front_mut().filter(|c| c.seq < slowest) else {
                    break;
                };
                if front.data.len() <= excess {
                    let len = front.data.len();
                    out.chunks.pop_front();
                    out.bytes -= len;
                } else {
                    front.data = front.data.slice(excess..);
                    out.bytes -= excess;
                }
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    fn finish(&self, code: u8) {
        {
            let mut out = lock(&self.out);
            out.exit = Some(code);
            out.finished_at = Some(Instant::now());
        }
        lock(&self.stdin).take();
        self.changed.send_modify(|n| *n += 1);
    }

    /// Notified at every new output and at the exit.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The kept chunks from `seq` on (from the oldest kept when older ones are gone), the next
    /// sequence number, and the exit code once the command ended.
    pub fn chunks_from(&self, seq: u64) -> (Vec<Chunk>, u64, Option<u8>) {
        let out = lock(&self.out);
        let chunks = out
            .chunks
            .iter()
            .filter(|c| c.seq >= seq)
            .cloned()
            .collect();
        (chunks, out.next_seq, out.exit)
    }

    /// Whether the command still runs.
    pub fn is_running(&self) -> bool {
        self.id != 0 && lock(&self.out).exit.is_none()
    }

    /// The exit code, once it ended.
    pub fn exit(&self) -> Option<u8> {
        lock(&self.out).exit
    }

    /// When it ended.
    pub fn finished_at(&self) -> Option<Instant> {
        lock(&self.out).finished_at
    }

    /// Waits for the exit.
    pub async fn wait(&self) -> u8 {
        let mut rx = self.subscribe();
        loop {
            if let Some(code) = self.exit() {
                return code;
            }
            if rx.changed().await.is_err() {
                return self.exit().unwrap_or(137);
            }
        }
    }

    /// A socket attached. Returns whether it is the only one (the owner).
    pub fn attach(&self) -> bool {
        let mut out = lock(&self.out);
        out.attached += 1;
        out.detach_gen += 1;
        out.last_activity = Some(SystemTime::now());
        out.attached == 1
    }

    /// A socket went away; once none is left the command runs on for
    /// `max_run_after_disconnect`, then is killed (PROTOCOL.md §5.5).
    pub fn detach(self: &Arc<Self>) {
        let generation = {
            let mut out = lock(&self.out);
            out.attached = out.attached.saturating_sub(1);
            if out.attached > 0 || out.exit.is_some() {
                return;
            }
            out.detach_gen
        };
        let Some(after) = self.max_after else {
            return;
        };
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let Some(session) = weak.upgrade() else {
                return;
            };
            let orphaned = {
                let out = lock(&session.out);
                out.attached == 0 && out.detach_gen == generation && out.exit.is_none()
            };
            if orphaned {
                session.signal(Signal::SIGKILL);
            }
        });
    }

    /// Sends `signal` to the process group while the command runs (PROTOCOL.md §18.9).
    pub fn signal(&self, signal: Signal) {
        if !self.is_running() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.id) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// Feeds stdin (ignored once it is closed or when the session has none).
    pub fn write_stdin(&self, data: Bytes) {
        if let Some(tx) = lock(&self.stdin).as_ref() {
            let _ = tx.send(data);
        }
    }

    /// Closes stdin (non-TTY sessions; a terminal has no end of input but ^D).
    pub fn close_stdin(&self) {
        if !self.tty {
            lock(&self.stdin).take();
        }
    }

    /// Resizes the terminal of a TTY session.
    pub fn resize(&self, cols: u16, rows: u16) {
        if let Some(master) = &self.master {
            let pty = rustix::termios::Winsize {
                ws_row: rows.max(1),
                ws_col: cols.max(1),
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            if rustix::termios::tcsetwinsize(master, pty).is_ok() {
                *lock(&self.size) = (cols, rows);
            }
        }
    }

    /// The `session_info` message (PROTOCOL.md §5.4, §18.6).
    pub fn info(&self, is_owner: bool) -> Value {
        let created = self
            .created
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut v = json!({
            "type": "session_info",
            "session_id": self.id,
            "command": self.command,
            "created": created,
            "is_owner": is_owner,
            "tty": self.tty,
        });
        if self.tty {
            let (cols, rows) = *lock(&self.size);
            v["cols"] = json!(cols);
            v["rows"] = json!(rows);
        }
        v
    }

    /// The session list entry (PROTOCOL.md §5.5, §18.8).
    pub fn to_json(&self) -> Value {
        let out = lock(&self.out);
        let secs = self
            .created
            .elapsed()
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let rate = if secs >= 1.0 {
            (out.total as f64 / secs) as u64
        } else {
            out.total
        };
        let mut v = json!({
            "id": self.id,
            "command": self.command,
            "workdir": self.workdir,
            "created": format_rfc3339(self.created),
            "bytes_per_second": rate,
            "is_active": out.attached > 0,
            "tty": self.tty,
        });
        if let Some(t) = out.last_activity {
            v["last_activity"] = json!(format_rfc3339(t));
        }
        v
    }
}

/// Reads `from` into the session as `stream` until its end (or an error: a terminal's master
/// reads EIO once the last holder of the slave is gone).
async fn pump<R: tokio::io::AsyncRead + Unpin>(from: Option<R>, stream: u8, session: Arc<Session>) {
    let Some(mut from) = from else {
        return;
    };
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                session.wait_room().await;
                session.push(stream, Bytes::copy_from_slice(&buf[..n]));
            }
        }
    }
}

/// The one-byte exit code: the code, or `128 + N` for a command ended by signal N
/// (PROTOCOL.md §18.9).
fn exit_code(status: &std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        (None, None) => 137,
    }
}

/// Parses a signal name (`SIGTERM`, `TERM`, `term`) or number.
pub(crate) fn parse_signal(text: &str) -> Option<Signal> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse().ok()
}

/// Parses a Go duration (`10s`, `1m30s`, `500ms`, `2h`, `0`); a bare number is seconds.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(secs) = text.parse::<f64>() {
        return (secs >= 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs));
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    total
        .is_finite()
        .then(|| Duration::from_secs_f64(total.max(0.0)))
}
