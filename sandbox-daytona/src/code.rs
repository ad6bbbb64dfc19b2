//! Stateful code (PROTOCOL.md §12): contexts are the daemon's own (native), cells run over its
//! interpreter WebSocket, and rich results are added on top by a small prelude run once in each
//! context (so results are marked emulated; the daemon itself returns text only).
//!
//! - Each cell is one socket: the first message names the code (`__sbox_cell(CODE)`), the
//!   context, the env (set and restored by the daemon's worker) and the timeout in seconds.
//!   stdout, stderr and error frames become events; the prelude's lines (`\x1f`, this handle's
//!   key, a JSON frame in E2B's vocabulary) become results and the execution count. Close 1000
//!   ends the cell, 4008 is its timeout (the daemon interrupted it), 1001 a worker that died.
//!   The socket is pinged while the cell is silent.
//! - Closing the socket does not stop a cell on Daytona, so dropping a [`CodeRun`] before it
//!   ends sends the worker `SIGINT` through a command (its pid comes from the prelude); the
//!   context keeps its state.
//! - The daemon restarts a dead worker silently with empty globals. The prelude is then gone, so
//!   the next cell fails with a `NameError` for it: that context answers `ContextLost` until
//!   it is restarted (the prelude's reset clears the names and installs itself again, same id)
//!   or removed.

use crate::api::toolbox::Toolbox;
use crate::api::ws::{LogEvent, LogSocket, connect_interpreter};
use crate::config::PROVIDER;
use crate::wire::{InterpreterContextDto, InterpreterFrame, InterpreterRequest};
use sandbox_sdk_core::code::frames::{Frame, parse_line};
use sandbox_sdk_core::code::kernel::{INTERRUPT_GRACE, MAX_FRAME, MAX_OUTPUT};
use sandbox_sdk_core::code::{
    CodeContext, CodeEvent, CodeRun, ContextSpec, ExecutionError, Language, OutputBudget, RunCode,
};
use sandbox_sdk_core::{Command, Error, ErrorKind, Result, Sandbox};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The prelude (Python), run once per context.
const PRELUDE: &str = include_str!("code/prelude.py");

/// The id of the context a cell naming none runs in.
pub(crate) const DEFAULT_CONTEXT: &str = "default";

/// The name the prelude's cell function has in the context's globals.
const CELL_FN: &str = "__sbox_cell";

/// How long past its own timeout a cell's socket is waited on for the daemon's close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The code state of one sandbox handle (shared by its clones).
#[derive(Debug)]
pub(crate) struct Code {
    /// Marks the prelude's lines; random per handle.
    key: String,
    /// Contexts the prelude runs in, with the worker's pid when it said.
    installed: Mutex<BTreeMap<String, Option<u32>>>,
    /// Contexts whose state is gone, with why.
    lost: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Default for Code {
    fn default() -> Self {
        Code {
            key: uuid::Uuid::new_v4().simple().to_string(),
            installed: Mutex::default(),
            lost: Arc::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn context_lost(id: &str, why: &str) -> Error {
    sandbox_sdk_core::code::context_lost(id, why).with_provider(PROVIDER)
}

fn native_context(dto: InterpreterContextDto) -> CodeContext {
    CodeContext {
        id: dto.id,
        language: Language::parse(if dto.language.is_empty() {
            "python"
        } else {
            &dto.language
        }),
        cwd: Some(dto.cwd).filter(|c| !c.is_empty()),
        emulated: false,
    }
}

fn python_only(language: &Language) -> Result<()> {
    if *language == Language::Python {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "Daytona's interpreter runs Python only, not {language}"
        ))
        .with_provider(PROVIDER))
    }
}

/// `code` as a Python string literal (JSON's string syntax is a subset of Python's).
fn literal(code: &str) -> String {
    serde_json::Value::String(code.to_owned()).to_string()
}

impl Code {
    /// `POST /process/interpreter/context`.
    pub async fn create(&self, tb: &Toolbox, spec: &ContextSpec) -> Result<CodeContext> {
        python_only(&spec.language)?;
        Ok(native_context(
            tb.create_interpreter_context(spec.cwd.as_deref()).await?,
        ))
    }

    /// `GET /process/interpreter/context` (the daemon leaves out the default context).
    pub async fn list(&self, tb: &Toolbox) -> Result<Vec<CodeContext>> {
        let all = tb.list_interpreter_contexts().await?;
        Ok(all.into_iter().map(native_context).collect())
    }

    /// Clears a context's names (the daemon has no restart): the prelude's reset, or, where
    /// the prelude is gone, a fresh install. A lost context works again.
    pub async fn restart(&self, tb: &Toolbox, id: &str) -> Result<()> {
        let installed = lock(&self.installed).contains_key(id);
        let lost = lock(&self.lost).contains_key(id);
        if installed && !lost {
            let outcome = self
                .cell(tb, id, "__sbox_reset()", &BTreeMap::new(), None)
                .await?;
            if outcome.error.is_none() {
                return Ok(());
            }
        }
        lock(&self.installed).remove(id);
        self.install(tb, id).await?;
        lock(&self.lost).remove(id);
        Ok(())
    }

    /// `DELETE /process/interpreter/context/{id}`.
    pub async fn remove(&self, tb: &Toolbox, id: &str) -> Result<()> {
        tb.delete_interpreter_context(id).await?;
        lock(&self.installed).remove(id);
        lock(&self.lost).remove(id);
        Ok(())
    }

    /// Runs the prelude in context `id` and keeps the worker's pid.
    async fn install(&self, tb: &Toolbox, id: &str) -> Result<()> {
        let code = format!("{PRELUDE}\n__sbox_install({})\n", literal(&self.key));
        let outcome = self.cell(tb, id, &code, &BTreeMap::new(), None).await?;
        if let Some(error) = outcome.error {
            return Err(Error::new(
                ErrorKind::Provider,
                format!(
                    "the code prelude failed in context {id}: {}: {}",
                    error.name, error.value
                ),
            )
            .with_provider(PROVIDER));
        }
        lock(&self.installed).insert(id.to_owned(), outcome.pid);
        Ok(())
    }

    /// Runs `code` to its end with nothing streamed (the prelude and its reset).
    async fn cell(
        &self,
        tb: &Toolbox,
        id: &str,
        code: &str,
        env: &BTreeMap<String, String>,
        timeout: Option<Duration>,
    ) -> Result<Collected> {
        let mut cell = self.open(tb, id, code, env, timeout).await?;
        let mut collected = Collected::default();
        while let Some(event) = cell.next().await {
            if let CodeEvent::Error(error) = event? {
                collected.error.get_or_insert(error);
            }
        }
        collected.pid = cell.pid;
        Ok(collected)
    }

    /// Opens a cell's socket and sends its request.
    async fn open(
        &self,
        tb: &Toolbox,
        id: &str,
        code: &str,
        env: &BTreeMap<String, String>,
        timeout: Option<Duration>,
    ) -> Result<Cell> {
        let mut socket = connect_interpreter(tb).await?;
        let seconds = timeout.map_or(0, |t| t.as_secs_f64().ceil().max(1.0) as u64);
        let request = InterpreterRequest {
            code,
            context_id: (id != DEFAULT_CONTEXT).then_some(id),
            envs: env,
            timeout: seconds,
        };
        let text = serde_json::to_string(&request)
            .map_err(|e| Error::new(ErrorKind::Validation, format!("the cell: {e}")))?;
        socket
            .send_text(text, tb.api.config.request_timeout)
            .await?;
        Ok(Cell {
            socket: Some(socket),
            context: id.to_owned(),
            key: format!("\u{1f}{}", self.key),
            pending: String::new(),
            marker: None,
            queue: VecDeque::new(),
            budget: OutputBudget::new(MAX_OUTPUT),
            deadline: timeout
                .map(|t| tokio::time::Instant::now() + t + INTERRUPT_GRACE + CLOSE_GRACE),
            pid: None,
            ended: false,
        })
    }

    /// One cell of the caller's: the prelude first where it is not installed yet.
    pub async fn run<S: Sandbox + Clone>(
        &self,
        sb: &S,
        tb: &Toolbox,
        request: &RunCode,
    ) -> Result<CodeRun> {
        request.validate()?;
        python_only(&request.language_or_default())?;
        let id = request
            .context
            .clone()
            .unwrap_or_else(|| DEFAULT_CONTEXT.to_owned());
        if let Some(why) = lock(&self.lost).get(&id) {
            return Err(context_lost(&id, why));
        }
        if !lock(&self.installed).contains_key(&id) {
            self.install(tb, &id).await?;
        }
        let code = format!("{CELL_FN}({})", literal(&request.code));
        let cell = self
            .open(tb, &id, &code, &request.env, request.execution_timeout())
            .await?;
        let pid = lock(&self.installed).get(&id).copied().flatten();
        let interrupt = Interrupt {
            sandbox: Some(Box::new(sb.clone())),
            pid,
        };
        let context = CodeContext {
            id: id.clone(),
            language: Language::Python,
            cwd: None,
            emulated: false,
        };
        let lost = self.lost.clone();
        let events =
            futures::stream::unfold(Some((cell, interrupt, lost, id)), |state| async move {
                let (mut cell, mut interrupt, lost, id) = state?;
                match cell.next().await {
                    Some(Ok(CodeEvent::Error(error))) if is_lost(&error) => {
                        interrupt.done();
                        let why = "the daemon restarted its worker with empty globals";
                        lock(&lost).insert(id.clone(), why.to_owned());
                        Some((Err(context_lost(&id, why)), None))
                    }
                    Some(Ok(event)) => Some((Ok(event), Some((cell, interrupt, lost, id)))),
                    Some(Err(e)) => {
                        interrupt.done();
                        if e.kind() == ErrorKind::ContextLost {
                            lock(&lost).insert(id.clone(), "the worker process ended".to_owned());
                        }
                        Some((Err(e), None))
                    }
                    None => {
                        interrupt.done();
                        None
                    }
                }
            });
        Ok(CodeRun::new(context, Box::pin(events)))
    }
}

/// Whether an error says the prelude is gone: the worker was restarted with empty globals.
fn is_lost(error: &ExecutionError) -> bool {
    error.name == "NameError" && error.value.contains(CELL_FN)
}

/// What a cell run to its end without streaming gave.
#[derive(Default)]
struct Collected {
    error: Option<ExecutionError>,
    pid: Option<u32>,
}

/// Interrupts the cell's worker when a run is dropped before its end (closing the socket
/// does not stop a cell on Daytona).
struct Interrupt {
    sandbox: Option<Box<dyn Sandbox>>,
    pid: Option<u32>,
}

impl Interrupt {
    /// The cell ended: nothing to interrupt.
    fn done(&mut self) {
        self.sandbox = None;
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        let (Some(sandbox), Some(pid)) = (self.sandbox.take(), self.pid) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let kill = Command::new("kill")
                .arg("-INT")
                .arg(pid.to_string())
                .timeout(Duration::from_secs(30));
            if let Ok(process) = sandbox.exec(&kill).await {
                let _ = process.wait().await;
            }
        });
    }
}

/// One cell's socket being read.
struct Cell {
    socket: Option<LogSocket>,
    context: String,
    /// `\x1f` and the handle's key: the start of a prelude line.
    key: String,
    /// Stdout held back: it may be the start of a prelude line.
    pending: String,
    /// A prelude line being read, after its key.
    marker: Option<String>,
    queue: VecDeque<Result<CodeEvent>>,
    budget: OutputBudget,
    deadline: Option<tokio::time::Instant>,
    pid: Option<u32>,
    ended: bool,
}

impl Cell {
    async fn next(&mut self) -> Option<Result<CodeEvent>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            if self.ended {
                return None;
            }
            let socket = self.socket.as_mut()?;
            let event = match self.deadline {
                Some(at) => match tokio::time::timeout_at(at, socket.next()).await {
                    Ok(event) => event,
                    Err(_) => Err(Error::new(
                        ErrorKind::Timeout,
                        "the cell ran past its timeout and the daemon did not close its socket",
                    )),
                },
                None => socket.next().await,
            };
            match event {
                Ok(LogEvent::Data(bytes)) => self.frame(&bytes),
                Ok(LogEvent::Close(code, reason)) => self.close(code, &reason),
                Ok(LogEvent::End) => self.fail(Error::new(
                    ErrorKind::Transport,
                    "the interpreter socket ended without a close frame",
                )),
                Ok(LogEvent::Other) => {}
                Ok(LogEvent::Broken(e)) | Err(e) => self.fail(e),
            }
        }
    }

    fn fail(&mut self, error: Error) {
        self.ended = true;
        self.queue.push_back(Err(error
            .with_provider(PROVIDER)
            .with_operation("run_code")));
    }

    fn frame(&mut self, bytes: &[u8]) {
        let frame: InterpreterFrame = match serde_json::from_slice(bytes) {
            Ok(frame) => frame,
            Err(e) => {
                return self.fail(Error::new(
                    ErrorKind::Provider,
                    format!("an interpreter frame is not JSON ({e})"),
                ));
            }
        };
        match frame.kind.as_str() {
            "stdout" => self.stdout(&frame.text),
            "stderr" => self.output(frame.text, CodeEvent::Stderr),
            "error" => self.queue.push_back(Ok(CodeEvent::Error(ExecutionError {
                name: frame.name,
                value: frame.value,
                traceback: frame.traceback,
            }))),
            // `control` (completed, interrupted) comes before the close, which ends the cell.
            _ => {}
        }
    }

    fn close(&mut self, code: Option<u16>, reason: &str) {
        self.flush();
        let outcome = match code {
            Some(1000) | None => None,
            Some(4008) => Some(Error::new(
                ErrorKind::Timeout,
                "the cell ran past its timeout: the daemon interrupted it",
            )),
            Some(1001) => Some(context_lost(&self.context, "the worker process ended")),
            Some(1008) if reason.starts_with("context not found") => {
                Some(Error::new(ErrorKind::NotFound, reason.to_owned()))
            }
            Some(1008) => Some(Error::new(ErrorKind::Validation, reason.to_owned())),
            Some(code) => Some(Error::new(
                ErrorKind::Provider,
                format!("the interpreter closed the socket with {code}: {reason}"),
            )),
        };
        match outcome {
            Some(error) => self.fail(error),
            None => {
                self.ended = true;
                if let Some(truncated) = self.budget.truncated() {
                    self.queue.push_back(Ok(truncated));
                }
            }
        }
        if let Some(socket) = self.socket.take() {
            tokio::spawn(socket.close());
        }
    }

    /// Stdout, with the prelude's lines taken out of it.
    fn stdout(&mut self, text: &str) {
        let mut rest = text.to_owned();
        while !rest.is_empty() {
            if let Some(line) = self.marker.as_mut() {
                let Some(end) = rest.find('\n') else {
                    line.push_str(&rest);
                    if line.len() > MAX_FRAME {
                        let dropped = line.len() as u64;
                        self.marker = None;
                        self.budget.count_dropped(dropped);
                    }
                    return;
                };
                line.push_str(&rest[..end]);
                rest = rest[end + 1..].to_owned();
                let line = self.marker.take().unwrap_or_default();
                self.prelude_line(&line);
                continue;
            }
            self.pending.push_str(&rest);
            rest.clear();
            if let Some(at) = self.pending.find(&self.key) {
                let after = self.pending.split_off(at);
                self.flush();
                self.marker = Some(String::new());
                rest = after[self.key.len()..].to_owned();
                continue;
            }
            // Hold back only what could still become the key.
            let keep = longest_prefix_suffix(&self.pending, &self.key);
            let cut = self.pending.len() - keep;
            let out: String = self.pending.drain(..cut).collect();
            self.output(out, CodeEvent::Stdout);
        }
    }

    /// Passes held-back stdout on.
    fn flush(&mut self) {
        let out = std::mem::take(&mut self.pending);
        self.output(out, CodeEvent::Stdout);
    }

    fn output(&mut self, text: String, event: fn(String) -> CodeEvent) {
        if text.is_empty() {
            return;
        }
        if let Some(kept) = self.budget.admit(text) {
            self.queue.push_back(Ok(event(kept)));
        }
    }

    fn prelude_line(&mut self, line: &str) {
        let Ok((_, frame)) = parse_line(line.as_bytes(), true) else {
            return;
        };
        match frame {
            Frame::Event(event) => self.queue.push_back(Ok(event)),
            Frame::Unknown(kind) if kind == "pid" => {
                self.pid = serde_json::from_str::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v["pid"].as_u64())
                    .and_then(|p| u32::try_from(p).ok());
            }
            _ => {}
        }
    }
}

/// The length of the longest end of `text` that is a beginning of `key` (shorter than `key`).
fn longest_prefix_suffix(text: &str, key: &str) -> usize {
    (1..key.len().min(text.len() + 1))
        .rev()
        .find(|n| text.is_char_boundary(text.len() - n) && key.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}
