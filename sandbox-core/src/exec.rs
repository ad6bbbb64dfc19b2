//! Running commands: what to run ([`Command`]), and the owned [`Process`] handle over a tagged
//! event stream that keeps stdout and stderr apart.

use crate::error::{Error, ErrorKind, Result};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWrite;

/// Size of a pseudo-terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct PtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

impl Default for PtySize {
    fn default() -> Self {
        PtySize { cols: 80, rows: 24 }
    }
}

/// A command to run in a sandbox: an argument vector plus options.
///
/// `timeout` is how long the *process* may live (`Duration::ZERO`, the default, means no limit),
/// kept apart from `request_timeout`, which bounds only the HTTP call that starts it.
///
/// ```
/// use sandbox_sdk_core::Command;
/// use std::time::Duration;
///
/// let cmd = Command::new("python3")
///     .arg("-c")
///     .arg("print('hi')")
///     .cwd("work")
///     .env("PYTHONUNBUFFERED", "1")
///     .timeout(Duration::from_secs(30));
/// assert_eq!(cmd.argv, ["python3", "-c", "print('hi')"]);
///
/// let shell = Command::shell("echo $HOME | wc -c");
/// assert_eq!(shell.argv, ["sh", "-c", "echo $HOME | wc -c"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Command {
    /// Program and arguments; `argv[0]` is the program.
    pub argv: Vec<String>,
    /// Working directory; relative paths resolve against the sandbox's working directory.
    pub cwd: Option<String>,
    /// Extra environment variables for this command.
    pub env: BTreeMap<String, String>,
    /// User to run as, where the provider supports it.
    pub user: Option<String>,
    /// How long the process may run; `Duration::ZERO` means no limit.
    pub timeout: Duration,
    /// How long the request that starts the process may take; `None` keeps the client's default.
    pub request_timeout: Option<Duration>,
    /// Run detached: the process outlives the handle and can be listed, reattached and killed.
    pub background: bool,
    /// Keep stdin open for [`Process::take_stdin`].
    pub stdin: bool,
    /// Run in a pseudo-terminal of this size.
    pub pty: Option<PtySize>,
    /// A tag to find the process again by, where the provider supports it.
    pub tag: Option<String>,
    /// The arguments carry secrets (for example env values folded into a shell script):
    /// `Debug` and [`Command::describe`] then show only the program.
    pub secret_args: bool,
    /// Made by [`Command::shell`]: `argv` is `["sh", "-c", LINE]`, and an adapter may run LINE
    /// with the shell the provider's own SDK uses (E2B: a login bash). Changing `argv` by hand
    /// afterwards clears nothing; set this to `false` to insist on exactly `sh -c`.
    pub shell: bool,
}

impl Command {
    /// A command running `program` with no arguments.
    pub fn new(program: impl Into<String>) -> Self {
        Command {
            argv: vec![program.into()],
            ..Command::default()
        }
    }

    /// A shell command line, run as `sh -c LINE`, or with the provider's usual shell where its
    /// adapter says so (see [`Command::shell`](Command#structfield.shell)).
    pub fn shell(line: impl Into<String>) -> Self {
        Command {
            argv: vec!["sh".into(), "-c".into(), line.into()],
            shell: true,
            ..Command::default()
        }
    }

    /// The line of a [`Command::shell`] command, when this is one and `argv` still has its shape.
    pub fn shell_line(&self) -> Option<&str> {
        match self.argv.as_slice() {
            [sh, c, line] if self.shell && sh == "sh" && c == "-c" => Some(line),
            _ => None,
        }
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Sets the process timeout (`Duration::ZERO` = no limit).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the timeout of the request that starts the process.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Runs detached.
    pub fn background(mut self) -> Self {
        self.background = true;
        self
    }

    /// Keeps stdin open.
    pub fn stdin(mut self) -> Self {
        self.stdin = true;
        self
    }

    /// Runs in a pseudo-terminal.
    pub fn pty(mut self, size: PtySize) -> Self {
        self.pty = Some(size);
        self
    }

    /// Sets a tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// The command line for messages and logs: the argv joined by spaces, or only the program
    /// and an argument count when [`Command::secret_args`] is set.
    pub fn describe(&self) -> String {
        match self.argv.split_first() {
            Some((program, args)) if self.secret_args => {
                format!("{program} <{} arguments redacted>", args.len())
            }
            _ => self.argv.join(" "),
        }
    }

    /// Checks what every provider rejects: an empty argv, an empty program, NUL bytes anywhere,
    /// and environment names that are not `[A-Za-z_][A-Za-z0-9_]*`.
    pub fn validate(&self) -> Result<()> {
        let Some(program) = self.argv.first() else {
            return Err(Error::validation("empty command: argv has no program"));
        };
        if program.is_empty() {
            return Err(Error::validation(
                "empty command: the program name is empty",
            ));
        }
        for (i, arg) in self.argv.iter().enumerate() {
            if arg.contains('\0') {
                return Err(Error::validation(format!(
                    "argument {i} contains a NUL byte"
                )));
            }
        }
        if let Some(cwd) = &self.cwd {
            if cwd.contains('\0') {
                return Err(Error::validation("cwd contains a NUL byte"));
            }
            if cwd.is_empty() {
                return Err(Error::validation("cwd is empty"));
            }
        }
        validate_env(&self.env)?;
        if let Some(user) = &self.user
            && (user.is_empty() || user.contains('\0'))
        {
            return Err(Error::validation("user is empty or contains a NUL byte"));
        }
        Ok(())
    }
}

/// Checks every name in `env` with [`validate_env_name`] and that no value holds a NUL byte.
pub(crate) fn validate_env(env: &BTreeMap<String, String>) -> Result<()> {
    for (key, value) in env {
        validate_env_name(key)?;
        if value.contains('\0') {
            return Err(Error::validation(format!(
                "value of environment variable {key} contains a NUL byte"
            )));
        }
    }
    Ok(())
}

/// Checks that `name` is a portable environment variable name.
pub fn validate_env_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let valid = matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "invalid environment variable name {name:?}: use letters, digits and _, not starting with a digit"
        )))
    }
}

/// Env values may be secrets, so `Debug` shows only their names.
impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let argv: &dyn fmt::Debug = if self.secret_args {
            &"<redacted>"
        } else {
            &self.argv
        };
        f.debug_struct("Command")
            .field("argv", argv)
            .field("cwd", &self.cwd)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("user", &self.user)
            .field("timeout", &self.timeout)
            .field("request_timeout", &self.request_timeout)
            .field("background", &self.background)
            .field("stdin", &self.stdin)
            .field("pty", &self.pty)
            .field("tag", &self.tag)
            .field("shell", &self.shell)
            .finish()
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct ExitStatus {
    /// The exit code; `None` when the process was killed by a signal.
    pub code: Option<i32>,
    /// The signal that killed it, when known.
    pub signal: Option<i32>,
    /// The code was read from an output marker, not reported by the provider.
    pub emulated: bool,
}

impl ExitStatus {
    /// A normal exit with `code`.
    pub fn code(code: i32) -> Self {
        ExitStatus {
            code: Some(code),
            signal: None,
            emulated: false,
        }
    }

    /// Death by `signal`.
    pub fn signal(signal: i32) -> Self {
        ExitStatus {
            code: None,
            signal: Some(signal),
            emulated: false,
        }
    }

    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(sig)) => write!(f, "killed by signal {sig}"),
            (None, None) => f.write_str("unknown exit"),
        }
    }
}

/// One event from a running process. Stdout and stderr are never merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// Bytes written to stdout (or to the pty).
    Stdout(Bytes),
    /// Bytes written to stderr.
    Stderr(Bytes),
    /// The process ended; always the last event.
    Exit(ExitStatus),
}

/// A process's collected output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Everything written to stdout.
    pub stdout: Bytes,
    /// Everything written to stderr.
    pub stderr: Bytes,
    /// How it ended.
    pub status: ExitStatus,
}

impl Output {
    /// Stdout as text (invalid UTF-8 replaced).
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text (invalid UTF-8 replaced).
    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// A process known to a sandbox (from [`crate::Sandbox::processes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessInfo {
    /// The provider's id for the process.
    pub pid: String,
    /// Its tag, if any.
    pub tag: Option<String>,
    /// Its argument vector.
    pub argv: Vec<String>,
    /// Its working directory, when known.
    pub cwd: Option<String>,
    /// Whether it is still running.
    pub running: bool,
}

/// Out-of-band control of a running process, given by the adapter to each [`Process`].
#[async_trait]
pub trait ProcessControl: Send + Sync {
    /// Kills the process (and, where the provider can, its children).
    async fn kill(&self) -> Result<()>;
    /// Resizes the process's pty.
    async fn resize(&self, size: PtySize) -> Result<()>;
}

/// A process's stdin: an [`AsyncWrite`]; shutting it down closes the process's stdin.
pub struct Stdin(Pin<Box<dyn AsyncWrite + Send>>);

impl Stdin {
    /// Wraps any writer.
    pub fn new(writer: impl AsyncWrite + Send + 'static) -> Self {
        Stdin(Box::pin(writer))
    }

    /// A stdin whose writes arrive as chunks on the returned receiver, for adapters that send input
    /// as messages. The channel holds `capacity` chunks (backpressure); shutting the writer down or
    /// dropping it ends the receiver.
    pub fn channel(capacity: usize) -> (Stdin, tokio::sync::mpsc::Receiver<Bytes>) {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
        let writer = ChannelWriter {
            sender: Some(tokio_util::sync::PollSender::new(tx)),
            outcome: None,
        };
        (Stdin::new(writer), rx)
    }

    /// [`Stdin::channel`] for an adapter that delivers the chunks with requests that can fail:
    /// it tells the writer how delivery ended through the returned [`StdinOutcome`]. Shutting
    /// the writer down then waits for that word and fails with the adapter's error, and a write
    /// after delivery failed fails with it too, so an `Unauthorized` or `QuotaExceeded` answer
    /// reaches the caller as itself (inside the `io::Error`; `Error::from` gets it back).
    pub fn channel_with_outcome(
        capacity: usize,
    ) -> (Stdin, tokio::sync::mpsc::Receiver<Bytes>, StdinOutcome) {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
        let (outcome_tx, outcome_rx) = tokio::sync::oneshot::channel();
        let writer = ChannelWriter {
            sender: Some(tokio_util::sync::PollSender::new(tx)),
            outcome: Some(outcome_rx),
        };
        (Stdin::new(writer), rx, StdinOutcome(outcome_tx))
    }
}

/// How an adapter's delivery of stdin ended, for the writer of [`Stdin::channel_with_outcome`].
/// Report before dropping the chunk receiver; dropping it unreported reads as success.
#[derive(Debug)]
pub struct StdinOutcome(tokio::sync::oneshot::Sender<Result<()>>);

impl StdinOutcome {
    /// Reports that every chunk (and the close, when the writer was shut down) was delivered,
    /// or the error that stopped delivery.
    pub fn report(self, result: Result<()>) {
        let _ = self.0.send(result);
    }
}

impl fmt::Debug for Stdin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Stdin")
    }
}

impl AsyncWrite for Stdin {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.0.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.0.as_mut().poll_shutdown(cx)
    }
}

struct ChannelWriter {
    sender: Option<tokio_util::sync::PollSender<Bytes>>,
    /// How delivery ended ([`Stdin::channel_with_outcome`]); `None` once read, or never asked.
    outcome: Option<tokio::sync::oneshot::Receiver<Result<()>>>,
}

impl ChannelWriter {
    /// The error for a write the channel no longer takes: the adapter's, when it reported one.
    fn closed(&mut self) -> std::io::Error {
        if let Some(mut outcome) = self.outcome.take()
            && let Ok(Err(e)) = outcome.try_recv()
        {
            return e.into();
        }
        std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin is closed")
    }
}

impl AsyncWrite for ChannelWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let Some(sender) = self.sender.as_mut() else {
            return Poll::Ready(Err(self.closed()));
        };
        match sender.poll_reserve(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Err(self.closed())),
            Poll::Ready(Ok(())) => match sender.send_item(Bytes::copy_from_slice(buf)) {
                Ok(()) => Poll::Ready(Ok(buf.len())),
                Err(_) => Poll::Ready(Err(self.closed())),
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.sender = None;
        let Some(outcome) = self.outcome.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let answer = match Pin::new(outcome).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(Err(e))) => Err(e.into()),
            // Delivered, or the adapter stopped without a word (the process ended).
            Poll::Ready(Ok(Ok(())) | Err(_)) => Ok(()),
        };
        self.outcome = None;
        Poll::Ready(answer)
    }
}

/// The event stream an adapter hands to [`Process::new`]. It must end with exactly one
/// [`ProcessEvent::Exit`] or an error, and should do its reading lazily (when polled) or through
/// a bounded channel, so a slow consumer slows the producer instead of filling memory.
pub type EventStream = BoxStream<'static, Result<ProcessEvent>>;

/// An owned handle to a running process.
///
/// Read events with [`Process::next_event`] (or use it as a [`Stream`]), or collect them with
/// [`Process::output`]. Dropping the handle drops the event stream and with it any reader the
/// adapter started; a foreground process may then be killed, a background one keeps running.
pub struct Process {
    pid: String,
    events: EventStream,
    stdin: Option<Stdin>,
    control: Arc<dyn ProcessControl>,
    emulated_streaming: bool,
    finished: bool,
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.pid)
            .field("has_stdin", &self.stdin.is_some())
            .field("emulated_streaming", &self.emulated_streaming)
            .field("finished", &self.finished)
            .finish()
    }
}

impl Process {
    /// Builds a handle from the adapter's parts.
    pub fn new(
        pid: impl Into<String>,
        events: EventStream,
        stdin: Option<Stdin>,
        control: Arc<dyn ProcessControl>,
    ) -> Self {
        Process {
            pid: pid.into(),
            events,
            stdin,
            control,
            emulated_streaming: false,
            finished: false,
        }
    }

    /// Marks the stream as emulated (for example polled from files rather than pushed live).
    pub fn with_emulated_streaming(mut self) -> Self {
        self.emulated_streaming = true;
        self
    }

    /// Replaces the event stream (used by wrappers that filter events, such as exit-code markers).
    pub fn map_events(mut self, f: impl FnOnce(EventStream) -> EventStream) -> Self {
        let events = std::mem::replace(&mut self.events, futures::stream::empty().boxed());
        self.events = f(events);
        self
    }

    /// The provider's id for the process (a pid, a session command id, ...).
    pub fn pid(&self) -> &str {
        &self.pid
    }

    /// Whether the output is emulated rather than streamed natively.
    pub fn is_streaming_emulated(&self) -> bool {
        self.emulated_streaming
    }

    /// Takes the stdin writer; `None` if the command was not started with stdin or it was taken.
    pub fn take_stdin(&mut self) -> Option<Stdin> {
        self.stdin.take()
    }

    /// The next event, or `None` once the exit event has been returned.
    pub async fn next_event(&mut self) -> Option<Result<ProcessEvent>> {
        self.next().await
    }

    /// Kills the process. Works while another task is reading its output.
    pub async fn kill(&self) -> Result<()> {
        self.control.kill().await
    }

    /// A handle for killing or resizing the process from another task.
    pub fn control(&self) -> Arc<dyn ProcessControl> {
        self.control.clone()
    }

    /// Resizes the pty.
    pub async fn resize(&self, size: PtySize) -> Result<()> {
        self.control.resize(size).await
    }

    /// Waits for the process to end, discarding its output.
    pub async fn wait(mut self) -> Result<ExitStatus> {
        self.stdin = None;
        while let Some(event) = self.next_event().await {
            if let ProcessEvent::Exit(status) = event? {
                return Ok(status);
            }
        }
        Err(Error::new(ErrorKind::Transport, "process already finished"))
    }

    /// Waits for the process to end and collects stdout and stderr apart.
    pub async fn output(mut self) -> Result<Output> {
        self.stdin = None;
        let mut stdout = BytesMut::new();
        let mut stderr = BytesMut::new();
        while let Some(event) = self.next_event().await {
            match event? {
                ProcessEvent::Stdout(b) => stdout.extend_from_slice(&b),
                ProcessEvent::Stderr(b) => stderr.extend_from_slice(&b),
                ProcessEvent::Exit(status) => {
                    return Ok(Output {
                        stdout: stdout.freeze(),
                        stderr: stderr.freeze(),
                        status,
                    });
                }
            }
        }
        Err(Error::new(ErrorKind::Transport, "process already finished"))
    }
}

impl Stream for Process {
    type Item = Result<ProcessEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        match this.events.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(event) => {
                let event = match event {
                    Some(Ok(ProcessEvent::Exit(s))) => {
                        this.finished = true;
                        Some(Ok(ProcessEvent::Exit(s)))
                    }
                    Some(Err(e)) => {
                        this.finished = true;
                        Some(Err(e))
                    }
                    None => {
                        this.finished = true;
                        Some(Err(Error::new(
                            ErrorKind::Transport,
                            format!(
                                "output stream of process {} ended without an exit status",
                                this.pid
                            ),
                        )))
                    }
                    other => other,
                };
                Poll::Ready(event)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    struct NoControl;

    #[async_trait]
    impl ProcessControl for NoControl {
        async fn kill(&self) -> Result<()> {
            Ok(())
        }
        async fn resize(&self, _size: PtySize) -> Result<()> {
            Ok(())
        }
    }

    fn process(events: Vec<Result<ProcessEvent>>) -> Process {
        Process::new(
            "1",
            futures::stream::iter(events).boxed(),
            None,
            Arc::new(NoControl),
        )
    }

    #[tokio::test]
    async fn output_keeps_stdout_and_stderr_apart() {
        let p = process(vec![
            Ok(ProcessEvent::Stdout(Bytes::from_static(b"a"))),
            Ok(ProcessEvent::Stderr(Bytes::from_static(b"b"))),
            Ok(ProcessEvent::Stdout(Bytes::from_static(b"c"))),
            Ok(ProcessEvent::Exit(ExitStatus::code(3))),
        ]);
        let out = p.output().await.unwrap();
        assert_eq!(&out.stdout[..], b"ac");
        assert_eq!(&out.stderr[..], b"b");
        assert_eq!(out.status.code, Some(3));
    }

    #[tokio::test]
    async fn a_stream_that_ends_without_exit_is_a_transport_error() {
        let p = process(vec![Ok(ProcessEvent::Stdout(Bytes::from_static(b"a")))]);
        let err = p.wait().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transport);
    }

    #[tokio::test]
    async fn nothing_is_read_after_exit() {
        let mut p = process(vec![
            Ok(ProcessEvent::Exit(ExitStatus::code(0))),
            Ok(ProcessEvent::Stdout(Bytes::from_static(b"late"))),
        ]);
        assert!(matches!(
            p.next_event().await,
            Some(Ok(ProcessEvent::Exit(_)))
        ));
        assert!(p.next_event().await.is_none());
    }

    #[tokio::test]
    async fn channel_stdin_delivers_chunks_and_closes_on_shutdown() {
        let (mut stdin, mut rx) = Stdin::channel(2);
        stdin.write_all(b"hello").await.unwrap();
        stdin.shutdown().await.unwrap();
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"hello"));
        assert!(rx.recv().await.is_none());
        assert!(stdin.write_all(b"x").await.is_err());
    }

    #[tokio::test]
    async fn a_reported_failure_reaches_the_writer_as_itself() {
        // Shutdown waits for the adapter's word and fails with its error.
        let (mut stdin, mut rx, outcome) = Stdin::channel_with_outcome(2);
        stdin.write_all(b"hello").await.unwrap();
        let adapter = tokio::spawn(async move {
            assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"hello"));
            assert!(rx.recv().await.is_none());
            outcome.report(Err(Error::new(ErrorKind::Unauthorized, "close refused")));
        });
        let err = stdin.shutdown().await.unwrap_err();
        assert_eq!(Error::from(err).kind(), ErrorKind::Unauthorized);
        adapter.await.unwrap();

        // A write after delivery failed fails with the adapter's error, not a bare broken pipe.
        let (mut stdin, rx, outcome) = Stdin::channel_with_outcome(2);
        outcome.report(Err(Error::new(ErrorKind::QuotaExceeded, "slow down")));
        drop(rx);
        let err = stdin.write_all(b"x").await.unwrap_err();
        assert_eq!(Error::from(err).kind(), ErrorKind::QuotaExceeded);

        // Delivered, or dropped without a word: shutdown succeeds.
        let (mut stdin, rx, outcome) = Stdin::channel_with_outcome(2);
        outcome.report(Ok(()));
        drop(rx);
        stdin.shutdown().await.unwrap();
        let (mut stdin, rx, outcome) = Stdin::channel_with_outcome(2);
        drop((rx, outcome));
        stdin.shutdown().await.unwrap();
    }

    #[test]
    fn validate_rejects_empty_nul_and_bad_env_names() {
        assert_eq!(
            Command::default().validate().unwrap_err().kind(),
            ErrorKind::Validation
        );
        assert!(Command::new("").validate().is_err());
        assert!(Command::new("echo").arg("a\0b").validate().is_err());
        assert!(Command::new("echo").cwd("a\0").validate().is_err());
        assert!(Command::new("echo").env("1X", "v").validate().is_err());
        assert!(Command::new("echo").env("A-B", "v").validate().is_err());
        assert!(Command::new("echo").env("X", "a\0").validate().is_err());
        assert!(Command::new("echo").env("_X1", "v").validate().is_ok());
    }

    #[test]
    fn debug_hides_env_values() {
        let cmd = Command::new("x").env("API_KEY", "canary-value");
        assert!(!format!("{cmd:?}").contains("canary-value"));
    }

    #[test]
    fn secret_args_are_hidden_from_debug_and_describe() {
        let mut cmd = Command::shell("export K='canary-value'");
        assert_eq!(cmd.describe(), "sh -c export K='canary-value'");
        cmd.secret_args = true;
        assert_eq!(cmd.describe(), "sh <2 arguments redacted>");
        assert!(!format!("{cmd:?}").contains("canary-value"));
    }
}
