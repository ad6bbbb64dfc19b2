//! The emulated kernel: code contexts for providers without a kernel of their own, each one a
//! small standard-library Python program ([`DRIVER`]) run over the sandbox's exec with stdin.
//!
//! An adapter whose capability map says `code_interpreter`/`stateful_kernel: Emulated` keeps one
//! [`EmulatedKernels`] per sandbox handle and forwards the code operations to it, passing
//! itself as the host:
//!
//! - the driver is written once to `.sbox/kernel-<sha256 prefix>.py` (relative to the sandbox's
//!   working directory; named by its content, so a changed driver is a new file) and started
//!   as `python3 -u <file>`, one process per context;
//! - requests go as JSON lines on its stdin, or, where the provider's stdin does not stream
//!   ([`EmulatedKernels::with_mailbox`]), as numbered files it polls for; frames come back on its
//!   stdout in E2B's vocabulary ([`frames`](super::frames)), each line sealed with a key sent in
//!   the first request, which no argv, environment, child process or frame shows
//!   ([`channel`](super::channel)); the driver points fd 1 and 2 of the cell at pipes it drains,
//!   so nothing a cell or its children print can pose as a frame;
//! - cells in one context run one at a time, in order; contexts run apart;
//! - a cell past its timeout, or whose [`CodeRun`] is dropped, is interrupted (SIGINT in the
//!   kernel, `KeyboardInterrupt` in the cell) and the context keeps its state; a kernel that does
//!   not stop within [`INTERRUPT_GRACE`] is killed, and from then on the context answers
//!   `ContextLost` until it is restarted or removed;
//! - output past [`MAX_OUTPUT`] per cell is dropped and reported ([`CodeEvent::Truncated`]),
//!   formats over [`INLINE_LIMIT`] are left in files under `.sbox/out/` ([`SpilledOutput`]), and no
//!   frame line over [`MAX_FRAME`] is read.
//!
//! Contexts live as long as this handle (and its clones): a handle connected again later starts
//! with none. Only Python is emulated; without `python3` in the sandbox every call is
//! `NotSupported` naming it.
//!
//! [`SpilledOutput`]: super::SpilledOutput

use super::channel::{Inbox, Mailbox, MailboxWriter, Seal};
use super::frames::{Frame, Line, LineReader, parse_line};
use super::{CodeContext, CodeEvent, CodeEventStream, CodeRun, ContextSpec, Language, RunCode};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{Command, ProcessControl, ProcessEvent};
use crate::provider::Sandbox;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

/// The driver program, shipped with the SDK.
pub const DRIVER: &str = include_str!("driver.py");

/// How long a kernel has to stop a cell after an interrupt before it is killed.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

/// How long a new kernel has to say it is ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of stdout and stderr one cell may send; the rest is dropped and counted.
pub const MAX_OUTPUT: usize = 4 << 20;

/// The largest format sent inline; larger ones are left in files.
pub const INLINE_LIMIT: usize = 2 << 20;

/// The longest frame line read from the driver.
pub const MAX_FRAME: usize = 16 << 20;

/// The id of the default context of a language.
pub fn default_context_id(language: &Language) -> String {
    format!("default-{language}")
}

/// Where the driver is written in the sandbox: named by the first 16 hex digits of its SHA-256.
pub fn driver_path() -> String {
    let digest = Sha256::digest(DRIVER.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!(".sbox/kernel-{hex}.py")
}

/// The code contexts of one sandbox handle, run by the emulated driver. Cheap to clone; clones
/// share the contexts.
#[derive(Clone)]
pub struct EmulatedKernels {
    state: Arc<tokio::sync::Mutex<State>>,
    /// Bytes of stdout and stderr one cell may send.
    max_output: usize,
    /// Where requests go when the provider's stdin does not stream.
    mailbox: Option<Arc<dyn MailboxWriter>>,
}

impl Default for EmulatedKernels {
    fn default() -> Self {
        EmulatedKernels::with_max_output(MAX_OUTPUT)
    }
}

#[derive(Default)]
struct State {
    installed: bool,
    contexts: BTreeMap<String, Arc<Kernel>>,
    /// Contexts whose kernel died, by id, with why: they answer `ContextLost`.
    lost: BTreeMap<String, (CodeContext, String)>,
}

impl fmt::Debug for EmulatedKernels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatedKernels").finish_non_exhaustive()
    }
}

impl EmulatedKernels {
    /// No contexts yet; cells send at most [`MAX_OUTPUT`] bytes of output.
    pub fn new() -> Self {
        EmulatedKernels::default()
    }

    /// No contexts yet; cells send at most `max_output` bytes of stdout and stderr.
    pub fn with_max_output(max_output: usize) -> Self {
        EmulatedKernels {
            state: Arc::default(),
            max_output,
            mailbox: None,
        }
    }

    /// Sends requests to each driver as files written through `writer` (a mailbox the driver
    /// polls, `.sbox/mbox-<random>/`) instead of on its stdin: for providers whose stdin reaches
    /// a process only once it is closed. The driver then runs without stdin.
    pub fn with_mailbox(mut self, writer: Arc<dyn MailboxWriter>) -> Self {
        self.mailbox = Some(writer);
        self
    }

    /// Creates a context and starts its kernel.
    pub async fn create_context(
        &self,
        host: &dyn Sandbox,
        spec: &ContextSpec,
    ) -> Result<CodeContext> {
        check_language(host, &spec.language)?;
        let id = format!("ctx-{:016x}", rand::random::<u64>());
        let context = CodeContext {
            id: id.clone(),
            language: spec.language.clone(),
            cwd: spec.cwd.clone(),
            emulated: true,
        };
        let kernel = self.start(host, context.clone()).await?;
        self.state.lock().await.contexts.insert(id, kernel);
        Ok(context)
    }

    /// The contexts this handle has made (lost ones too: they still need a restart or removal).
    pub async fn list_contexts(&self) -> Result<Vec<CodeContext>> {
        let state = self.state.lock().await;
        let mut all: Vec<CodeContext> =
            state.contexts.values().map(|k| k.context.clone()).collect();
        all.extend(state.lost.values().map(|(c, _)| c.clone()));
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    /// Restarts context `id`: its kernel is replaced by a fresh one and its state is gone.
    pub async fn restart_context(&self, host: &dyn Sandbox, id: &str) -> Result<()> {
        let context = {
            let mut state = self.state.lock().await;
            if let Some(kernel) = state.contexts.remove(id) {
                kernel.shut_down().await;
                kernel.context.clone()
            } else if let Some((context, _)) = state.lost.remove(id) {
                context
            } else {
                return Err(not_found(host, id));
            }
        };
        let kernel = self.start(host, context).await?;
        self.state
            .lock()
            .await
            .contexts
            .insert(id.to_string(), kernel);
        Ok(())
    }

    /// Removes context `id` and ends its kernel.
    pub async fn remove_context(&self, host: &dyn Sandbox, id: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        if let Some(kernel) = state.contexts.remove(id) {
            kernel.shut_down().await;
            Ok(())
        } else if state.lost.remove(id).is_some() {
            Ok(())
        } else {
            Err(not_found(host, id))
        }
    }

    /// Runs one cell in the context it names, or in its language's default context (made on first
    /// use).
    pub async fn run_code(&self, host: &dyn Sandbox, request: &RunCode) -> Result<CodeRun> {
        request.validate()?;
        let kernel = self.kernel_for(host, request).await?;
        kernel.run(request).await
    }

    async fn kernel_for(&self, host: &dyn Sandbox, request: &RunCode) -> Result<Arc<Kernel>> {
        let mut state = self.state.lock().await;
        let id = match &request.context {
            Some(id) => id.clone(),
            None => {
                let language = request.language_or_default();
                check_language(host, &language)?;
                default_context_id(&language)
            }
        };
        if let Some((_, why)) = state.lost.get(&id) {
            return Err(context_lost(host, &id, why));
        }
        if let Some(kernel) = state.contexts.get(&id) {
            if let Some(why) = kernel.lost_reason() {
                let kernel = state.contexts.remove(&id).expect("just found");
                state
                    .lost
                    .insert(id.clone(), (kernel.context.clone(), why.clone()));
                return Err(context_lost(host, &id, &why));
            }
            if let Some(language) = &request.language
                && request.context.is_some()
                && *language != kernel.context.language
            {
                return Err(Error::validation(format!(
                    "context {id} runs {}, not {language}",
                    kernel.context.language
                )));
            }
            return Ok(kernel.clone());
        }
        if request.context.is_some() {
            return Err(not_found(host, &id));
        }
        let context = CodeContext {
            id: id.clone(),
            language: request.language_or_default(),
            cwd: None,
            emulated: true,
        };
        drop(state);
        let kernel = self.start(host, context).await?;
        let mut state = self.state.lock().await;
        // Another run may have started the default context meanwhile: keep the first.
        let kept = state.contexts.entry(id).or_insert(kernel).clone();
        Ok(kept)
    }

    async fn start(&self, host: &dyn Sandbox, context: CodeContext) -> Result<Arc<Kernel>> {
        let path = driver_path();
        let installed = self.state.lock().await.installed;
        if !installed {
            install(host, &path).await?;
            self.state.lock().await.installed = true;
        }
        Kernel::start(host, &path, context, self.max_output, self.mailbox.clone()).await
    }
}

async fn install(host: &dyn Sandbox, path: &str) -> Result<()> {
    if host.stat(path).await.is_ok() {
        return Ok(());
    }
    host.write_file(path, Bytes::from_static(DRIVER.as_bytes()))
        .await
        .map(|_| ())
}

fn check_language(host: &dyn Sandbox, language: &Language) -> Result<()> {
    if *language == Language::Python {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::NotSupported,
        format!(
            "{} runs only Python in its emulated code interpreter, not {language}",
            host.provider()
        ),
    )
    .with_provider(host.provider())
    .with_operation("run_code"))
}

fn not_found(host: &dyn Sandbox, id: &str) -> Error {
    Error::new(ErrorKind::NotFound, format!("no code context {id}"))
        .with_provider(host.provider())
        .with_sandbox_id(host.id())
}

fn context_lost(host: &dyn Sandbox, id: &str, why: &str) -> Error {
    super::context_lost(id, why)
        .with_provider(host.provider())
        .with_sandbox_id(host.id())
}

/// Where frames of the cell now running go.
struct Route {
    id: String,
    frames: mpsc::Sender<Frame>,
}

struct Shared {
    route: Option<Route>,
    lost: Option<String>,
}

/// One running driver; dropping it ends the driver.
struct Kernel {
    context: CodeContext,
    inbox: tokio::sync::Mutex<Inbox>,
    control: Arc<dyn ProcessControl>,
    cells: Arc<tokio::sync::Mutex<()>>,
    shared: Arc<Mutex<Shared>>,
    /// Tells the reader a cell has started (it reads the kernel's output only while one runs).
    wake: Arc<Notify>,
    /// Dropped with the kernel, which tells its reader to kill the driver: a driver reading a
    /// mailbox would otherwise never see its end.
    _alive: oneshot::Sender<()>,
}

impl Kernel {
    async fn start(
        host: &dyn Sandbox,
        path: &str,
        context: CodeContext,
        max_output: usize,
        mailbox: Option<Arc<dyn MailboxWriter>>,
    ) -> Result<Arc<Kernel>> {
        let mut command = Command::new("python3").arg("-u").arg(path);
        let mailbox = mailbox.map(|writer| {
            let dir = format!(".sbox/mbox-{:016x}", rand::random::<u64>());
            command = command.clone().arg("--mailbox").arg(&dir);
            Mailbox::new(writer, dir)
        });
        if mailbox.is_none() {
            command = command.stdin();
        }
        let key = format!(
            "{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        );
        let hello = serde_json::json!({
            "type": "hello",
            "key": key,
            "cwd": context.cwd,
            "max_output": max_output,
            "inline_limit": INLINE_LIMIT,
            "spill_dir": ".sbox/out",
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let start_timeout = || {
            Error::new(
                ErrorKind::Timeout,
                format!(
                    "the emulated kernel did not start within {} s",
                    START_TIMEOUT.as_secs()
                ),
            )
        };
        // A mailbox holds the hello before the driver starts: it reads it first.
        let mut inbox = match mailbox {
            Some(mailbox) => {
                let mut inbox = Inbox::Mailbox(mailbox);
                match tokio::time::timeout_at(deadline, inbox.send(&hello)).await {
                    Ok(sent) => sent?,
                    Err(_) => return Err(start_timeout()),
                }
                Some(inbox)
            }
            None => None,
        };
        let mut process = match host.exec(&command).await {
            Ok(process) => process,
            // A program not found, not a provider's 404 (a sandbox that is gone).
            Err(e) if e.kind() == ErrorKind::NotFound && e.status().is_none() => {
                return Err(no_python(host));
            }
            Err(e) => return Err(e),
        };
        let control = process.control();
        let inbox = match inbox.take() {
            Some(inbox) => inbox,
            None => {
                let Some(stdin) = process.take_stdin() else {
                    return Err(Error::new(
                        ErrorKind::NotSupported,
                        format!(
                            "{} gave the kernel no stdin; the emulated code interpreter needs one",
                            host.provider()
                        ),
                    ));
                };
                let mut inbox = Inbox::Stdin(stdin);
                match tokio::time::timeout_at(deadline, inbox.send(&hello)).await {
                    Ok(written) => written?,
                    Err(_) => {
                        let _ = control.kill().await;
                        return Err(start_timeout());
                    }
                }
                inbox
            }
        };

        // Read until the driver says it is ready (or why it cannot be).
        let mut seal = Seal::new(&key);
        let mut lines = LineReader::new(MAX_FRAME);
        let mut diagnostics = Diagnostics::default();
        'ready: loop {
            let event = match tokio::time::timeout_at(deadline, process.next_event()).await {
                Err(_) => {
                    let _ = control.kill().await;
                    return Err(start_timeout());
                }
                Ok(event) => event,
            };
            match event {
                Some(Ok(ProcessEvent::Stdout(chunk))) => {
                    for line in lines.push(&chunk) {
                        let Some((_, Frame::Ready(ready))) = opened(&line, &mut seal) else {
                            continue;
                        };
                        if let Some(why) = ready.get("error").and_then(|v| v.as_str()) {
                            let _ = control.kill().await;
                            return Err(Error::validation(format!("code context cwd: {why}")));
                        }
                        break 'ready;
                    }
                }
                Some(Ok(ProcessEvent::Stderr(chunk))) => diagnostics.push(&chunk),
                Some(Ok(ProcessEvent::Exit(status))) => {
                    if status.code == Some(127) || diagnostics.says_python_missing() {
                        return Err(no_python(host));
                    }
                    return Err(Error::new(
                        ErrorKind::Provider,
                        format!(
                            "the emulated kernel ended before it was ready ({status}): {}",
                            diagnostics.text()
                        ),
                    )
                    .with_provider(host.provider()));
                }
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(Error::new(
                        ErrorKind::Transport,
                        "the emulated kernel's output ended before it was ready",
                    ));
                }
            }
        }

        let shared = Arc::new(Mutex::new(Shared {
            route: None,
            lost: None,
        }));
        let (alive, dropped) = oneshot::channel();
        let wake = Arc::new(Notify::new());
        let kernel = Arc::new(Kernel {
            context,
            inbox: tokio::sync::Mutex::new(inbox),
            control,
            cells: Arc::new(tokio::sync::Mutex::new(())),
            shared: shared.clone(),
            wake: wake.clone(),
            _alive: alive,
        });
        let reader = Reader {
            lines,
            seal,
            diagnostics,
        };
        tokio::spawn(follow(process, reader, shared, wake, dropped));
        Ok(kernel)
    }

    fn lost_reason(&self) -> Option<String> {
        self.shared.lock().expect("kernel state").lost.clone()
    }

    fn mark_lost(&self, why: &str) {
        let mut shared = self.shared.lock().expect("kernel state");
        if shared.lost.is_none() {
            shared.lost = Some(why.to_string());
        }
        shared.route = None;
    }

    async fn shut_down(&self) {
        let _ = self
            .send_control(serde_json::json!({"type": "shutdown"}))
            .await;
        let _ = self.control.kill().await;
        self.mark_lost("it was shut down");
    }

    async fn run(self: &Arc<Self>, request: &RunCode) -> Result<CodeRun> {
        let guard = self.cells.clone().lock_owned().await;
        if let Some(why) = self.lost_reason() {
            return Err(super::context_lost(&self.context.id, &why));
        }
        let id = format!("{:016x}", rand::random::<u64>());
        let (frames_tx, frames_rx) = mpsc::channel(64);
        self.shared.lock().expect("kernel state").route = Some(Route {
            id: id.clone(),
            frames: frames_tx,
        });
        self.wake.notify_one();
        let execute = serde_json::json!({
            "type": "execute",
            "id": id,
            "code": request.code,
            "env_vars": request.env,
        });
        if let Err(e) = self.inbox.lock().await.send(&execute).await {
            self.mark_lost("its requests could not be sent");
            return Err(super::context_lost(
                &self.context.id,
                &format!("its requests could not be sent: {e}"),
            ));
        }
        let (events_tx, events_rx) = mpsc::channel(64);
        let deadline = request.execution_timeout().map(|t| (Instant::now() + t, t));
        tokio::spawn(pump(
            self.clone(),
            id,
            frames_rx,
            events_tx,
            deadline,
            guard,
        ));
        let events: CodeEventStream = Box::pin(receiver_stream(events_rx));
        Ok(CodeRun::new(self.context.clone(), events))
    }

    async fn interrupt(&self, id: &str) -> Result<()> {
        self.send_control(serde_json::json!({"type": "interrupt", "id": id}))
            .await
    }

    /// Sends a control request, bounded by [`INTERRUPT_GRACE`]: a kernel that no longer reads
    /// its requests is not waited on for ever.
    async fn send_control(&self, line: serde_json::Value) -> Result<()> {
        let write = async { self.inbox.lock().await.send(&line).await };
        match tokio::time::timeout(INTERRUPT_GRACE, write).await {
            Ok(result) => result,
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                "the emulated kernel stopped taking requests",
            )),
        }
    }
}

fn receiver_stream(
    mut rx: mpsc::Receiver<Result<CodeEvent>>,
) -> impl futures::Stream<Item = Result<CodeEvent>> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// How a cell's pump ended its wait for frames.
enum Wait {
    Frame(Option<Frame>),
    Deadline,
    Dropped,
}

/// Moves one cell's frames to its [`CodeRun`] ([`pump_frames`]); holds the context's cell lock
/// until the kernel has ended the cell, and then stops routing frames to it, so that the
/// kernel's output is not read while no cell runs.
async fn pump(
    kernel: Arc<Kernel>,
    id: String,
    frames: mpsc::Receiver<Frame>,
    events: mpsc::Sender<Result<CodeEvent>>,
    deadline: Option<(Instant, Duration)>,
    cell: tokio::sync::OwnedMutexGuard<()>,
) {
    pump_frames(&kernel, &id, frames, events, deadline).await;
    let mut shared = kernel.shared.lock().expect("kernel state");
    if shared.route.as_ref().is_some_and(|route| route.id == id) {
        shared.route = None;
    }
    drop(shared);
    drop(cell);
}

/// Moves one cell's frames to its [`CodeRun`], enforcing the timeout and interrupting the cell
/// when the run is dropped, until the cell has ended.
async fn pump_frames(
    kernel: &Kernel,
    id: &str,
    mut frames: mpsc::Receiver<Frame>,
    events: mpsc::Sender<Result<CodeEvent>>,
    deadline: Option<(Instant, Duration)>,
) {
    let context = kernel.context.id.clone();
    loop {
        let wait = tokio::select! {
            frame = frames.recv() => Wait::Frame(frame),
            _ = sleep_until(deadline.map(|d| d.0)) => Wait::Deadline,
            _ = events.closed() => Wait::Dropped,
        };
        match wait {
            Wait::Frame(Some(Frame::Event(event))) => {
                let sent = tokio::select! {
                    sent = events.send(Ok(event)) => sent.is_ok(),
                    _ = sleep_until(deadline.map(|d| d.0)) => {
                        stop(kernel, id, &mut frames).await;
                        return;
                    }
                };
                if !sent {
                    stop(kernel, id, &mut frames).await;
                    return;
                }
            }
            Wait::Frame(Some(Frame::End(_))) => return,
            Wait::Frame(Some(_)) => {}
            Wait::Frame(None) => {
                let why = kernel
                    .lost_reason()
                    .unwrap_or_else(|| "the kernel ended during a cell".into());
                let _ = events.send(Err(super::context_lost(&context, &why))).await;
                return;
            }
            Wait::Deadline => {
                let limit = deadline.map(|d| d.1).unwrap_or_default();
                let error = if stop(kernel, id, &mut frames).await {
                    Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "the cell ran past its {} s execution timeout and was interrupted; \
                             context {context} keeps its state",
                            limit.as_secs_f64()
                        ),
                    )
                } else {
                    Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "the cell ran past its {} s execution timeout and did not stop within \
                             {} s of the interrupt, so its kernel was killed: context {context} \
                             lost its state",
                            limit.as_secs_f64(),
                            INTERRUPT_GRACE.as_secs()
                        ),
                    )
                };
                let _ = events.send(Err(error)).await;
                return;
            }
            Wait::Dropped => {
                stop(kernel, id, &mut frames).await;
                return;
            }
        }
    }
}

/// Interrupts cell `id` and waits for its end; kills the kernel when it does not come within
/// [`INTERRUPT_GRACE`]. True when the cell ended and the state is kept.
async fn stop(kernel: &Kernel, id: &str, frames: &mut mpsc::Receiver<Frame>) -> bool {
    if kernel.interrupt(id).await.is_ok() {
        let grace = Instant::now() + INTERRUPT_GRACE;
        loop {
            match tokio::time::timeout_at(grace, frames.recv()).await {
                Ok(Some(Frame::End(_))) => return true,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    let _ = kernel.control.kill().await;
    kernel.mark_lost("its kernel was killed after an interrupt went unanswered");
    false
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What reads the driver's output: its lines, the seal they must carry, and the driver's own
/// complaints on stderr.
struct Reader {
    lines: LineReader,
    seal: Seal,
    diagnostics: Diagnostics,
}

/// Reads the driver's output while a cell runs, sending each sealed frame to the cell it names
/// (between cells nothing is read, so a provider whose output is polled is not polled while
/// the kernel is idle: its death is found by the next cell); when the driver ends, the context
/// is lost. When the kernel is dropped (`dropped` resolves), the driver is killed.
async fn follow(
    mut process: crate::exec::Process,
    mut reader: Reader,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    mut dropped: oneshot::Receiver<()>,
) {
    let control = process.control();
    let why = loop {
        let idle = shared.lock().expect("kernel state").route.is_none();
        if idle {
            tokio::select! {
                _ = wake.notified() => continue,
                _ = &mut dropped => {
                    let _ = control.kill().await;
                    break "it was dropped".to_string();
                }
            }
        }
        let event = tokio::select! {
            event = process.next_event() => event,
            _ = &mut dropped => {
                let _ = control.kill().await;
                break "it was dropped".to_string();
            }
        };
        match event {
            Some(Ok(ProcessEvent::Stdout(chunk))) => {
                for line in reader.lines.push(&chunk) {
                    let Some((id, frame)) = opened(&line, &mut reader.seal) else {
                        continue;
                    };
                    let target = {
                        let shared = shared.lock().expect("kernel state");
                        shared
                            .route
                            .as_ref()
                            .filter(|route| Some(&route.id) == id.as_ref())
                            .map(|route| route.frames.clone())
                    };
                    if let Some(target) = target {
                        let _ = target.send(frame).await;
                    }
                }
            }
            Some(Ok(ProcessEvent::Stderr(chunk))) => reader.diagnostics.push(&chunk),
            Some(Ok(ProcessEvent::Exit(status))) => {
                break format!(
                    "its kernel process ended ({status}){}",
                    reader.diagnostics.suffix()
                );
            }
            Some(Err(e)) => break format!("its kernel's output failed: {e}"),
            None => break "its kernel's output ended".to_string(),
        }
    };
    let mut shared = shared.lock().expect("kernel state");
    if shared.lost.is_none() {
        shared.lost = Some(why);
    }
    shared.route = None;
}

/// A sealed frame line: the frame, or `None` for a line not sealed under the kernel's key (or
/// seen before), or not a frame.
fn opened(line: &Line, seal: &mut Seal) -> Option<(Option<String>, Frame)> {
    let Line::Whole(line) = line else {
        return None;
    };
    let body = seal.open(line)?;
    parse_line(body, true).ok()
}

fn no_python(host: &dyn Sandbox) -> Error {
    Error::new(
        ErrorKind::NotSupported,
        format!(
            "python3 was not found in {} sandbox {}: the emulated code interpreter needs it",
            host.provider(),
            host.id()
        ),
    )
    .with_provider(host.provider())
    .with_sandbox_id(host.id())
    .with_operation("run_code")
}

/// The last few KiB the driver wrote to its own stderr (its own faults, never a cell's output).
#[derive(Default)]
struct Diagnostics(Vec<u8>);

impl Diagnostics {
    const KEEP: usize = 4096;

    fn push(&mut self, chunk: &[u8]) {
        self.0.extend_from_slice(chunk);
        if self.0.len() > Self::KEEP {
            let cut = self.0.len() - Self::KEEP;
            self.0.drain(..cut);
        }
    }

    fn text(&self) -> String {
        crate::text::escape_controls(String::from_utf8_lossy(&self.0).trim()).into_owned()
    }

    fn suffix(&self) -> String {
        if self.0.is_empty() {
            String::new()
        } else {
            format!(": {}", self.text())
        }
    }

    fn says_python_missing(&self) -> bool {
        let text = String::from_utf8_lossy(&self.0);
        text.contains("python3: not found")
            || text.contains("python3: command not found")
            || text.contains("No such file or directory") && text.contains("python3")
    }
}
