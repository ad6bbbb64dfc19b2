//! Stateful code (PROTOCOL.md §10): native through the interpreter server on port 49999 when
//! the sandbox's template serves it (`code-interpreter-v1` and templates built from it, found
//! by its health check, once per handle), core's emulated kernel over envd with stdin
//! otherwise; everything the emulation makes is marked `emulated`.
//!
//! Native cells are one `POST /execute` each. The execution timeout is one deadline over the
//! whole stream; reaching it, or dropping the [`CodeRun`], closes the connection, and the server
//! then interrupts the kernel, keeping its state. A kernel that restarted under a cell
//! (`ContextRestarting`, `UnexpectedEndOfExecution`) lost its state: that cell and every later
//! one in the context answer `ContextLost` until the context is restarted or removed. Output
//! past [`MAX_OUTPUT`] per cell is dropped and reported, as the emulated kernel does.

use crate::api::interpreter::{ContextWire, ExecuteRequest, Interpreter};
use crate::config::PROVIDER;
use futures::StreamExt;
use sandbox_sdk_core::ByteStream;
use sandbox_sdk_core::code::frames::{Frame, Line, LineReader, parse_line};
use sandbox_sdk_core::code::kernel::{EmulatedKernels, MAX_FRAME, MAX_OUTPUT, default_context_id};
use sandbox_sdk_core::code::{
    CodeContext, CodeEvent, CodeRun, ContextSpec, Language, OutputBudget, RunCode,
};
use sandbox_sdk_core::{Error, ErrorKind, Result};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// Errors the server makes up when the kernel under a cell restarted or went away.
const LOST: &[&str] = &["ContextRestarting", "UnexpectedEndOfExecution"];

/// The code state of one sandbox handle (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct Code {
    /// Whether the template serves the interpreter: asked once.
    native: tokio::sync::OnceCell<bool>,
    /// The contexts run by core's emulated kernel, when it does not.
    pub emulated: EmulatedKernels,
    /// Native contexts whose kernel lost its state, by id, with why.
    lost: Arc<Mutex<BTreeMap<String, String>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn context_lost(id: &str, why: &str) -> Error {
    sandbox_sdk_core::code::context_lost(id, why).with_provider(PROVIDER)
}

fn native_context(wire: ContextWire) -> CodeContext {
    CodeContext {
        id: wire.id,
        language: Language::parse(&wire.language),
        cwd: Some(wire.cwd).filter(|c| !c.is_empty()),
        emulated: false,
    }
}

/// Per-call env values go to E2B, which pastes them into the cell unescaped (PROTOCOL.md
/// §10.3): only names and values that cannot end a string literal or start code are sent; any
/// other is refused, naming the variable (never its value).
fn checked_env(env: &BTreeMap<String, String>) -> Result<()> {
    for (name, value) in env {
        let name_ok =
            name.bytes().enumerate().all(|(i, b)| {
                b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit())
            }) && !name.is_empty();
        let value_ok = !value
            .chars()
            .any(|c| matches!(c, '\'' | '"' | '\\' | '`' | '$' | '{' | '}') || c.is_control());
        if !name_ok || !value_ok {
            return Err(Error::validation(format!(
                "run_code env {name:?}: E2B's interpreter pastes env names and values into the \
                 cell unescaped, so names must be identifiers and values may not hold quotes, \
                 backslashes, backticks, `$`, braces or control characters; set this one in the \
                 code instead"
            ))
            .with_provider(PROVIDER));
        }
    }
    Ok(())
}

impl Code {
    /// Whether `interpreter` is there (asked once; an unanswered check is asked again later).
    pub async fn native(&self, interpreter: &Interpreter) -> Result<bool> {
        self.native
            .get_or_try_init(|| interpreter.serves())
            .await
            .copied()
    }

    /// `POST /contexts`.
    pub async fn create(
        &self,
        interpreter: &Interpreter,
        spec: &ContextSpec,
    ) -> Result<CodeContext> {
        let made = interpreter
            .create_context(spec.language.as_str(), spec.cwd.as_deref())
            .await?;
        Ok(native_context(made))
    }

    /// `GET /contexts`.
    pub async fn list(&self, interpreter: &Interpreter) -> Result<Vec<CodeContext>> {
        let all = interpreter.list_contexts().await?;
        Ok(all.into_iter().map(native_context).collect())
    }

    /// `POST /contexts/{id}/restart`: a lost context works again.
    pub async fn restart(&self, interpreter: &Interpreter, id: &str) -> Result<()> {
        interpreter.restart_context(id).await?;
        lock(&self.lost).remove(id);
        Ok(())
    }

    /// `DELETE /contexts/{id}`.
    pub async fn remove(&self, interpreter: &Interpreter, id: &str) -> Result<()> {
        interpreter.remove_context(id).await?;
        lock(&self.lost).remove(id);
        Ok(())
    }

    /// One cell. `running` tells, after a stream that ended early, whether the sandbox is still
    /// up (to say which of the two it was).
    pub async fn run(
        &self,
        interpreter: &Interpreter,
        request: &RunCode,
        running: impl Future<Output = bool> + Send + 'static,
    ) -> Result<CodeRun> {
        request.validate()?;
        checked_env(&request.env)?;
        let language = request.language_or_default();
        let key = request
            .context
            .clone()
            .unwrap_or_else(|| default_context_id(&language));
        if let Some(why) = lock(&self.lost).get(&key) {
            return Err(context_lost(&key, why));
        }
        let context = CodeContext {
            id: key.clone(),
            language: language.clone(),
            cwd: None,
            emulated: false,
        };
        let body = ExecuteRequest {
            code: &request.code,
            context_id: request.context.as_deref(),
            language: request.context.is_none().then(|| language.as_str()),
            env_vars: (!request.env.is_empty()).then_some(&request.env),
        };
        let deadline = request
            .execution_timeout()
            .map(|t| tokio::time::Instant::now() + t);
        let open = match deadline {
            Some(at) => {
                tokio::time::timeout_at(at, interpreter.execute(&body, request.request_timeout))
                    .await
                    .map_err(|_| timed_out(request.execution_timeout().unwrap_or_default()))?
            }
            None => interpreter.execute(&body, request.request_timeout).await,
        }?;
        let cell = Cell {
            body: open,
            lines: LineReader::new(MAX_FRAME),
            queue: VecDeque::new(),
            budget: OutputBudget::new(MAX_OUTPUT),
            ended: false,
            key,
            lost: self.lost.clone(),
            running: Some(Box::pin(running)),
        };
        let limit = request.execution_timeout().unwrap_or_default();
        let events = futures::stream::unfold(Some(cell), move |state| {
            async move {
                let mut cell = state?;
                let next = match deadline {
                    Some(at) => match tokio::time::timeout_at(at, cell.next()).await {
                        Ok(next) => next,
                        // Dropping the stream closes the connection: the server interrupts.
                        Err(_) => return Some((Err(timed_out(limit)), None)),
                    },
                    None => cell.next().await,
                };
                match next {
                    Some(Ok(event)) => Some((Ok(event), Some(cell))),
                    Some(Err(e)) => Some((Err(e), None)),
                    None => None,
                }
            }
        })
        .boxed();
        Ok(CodeRun::new(context, events))
    }
}

fn timed_out(limit: std::time::Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "the cell ran past its {}ms timeout: it was interrupted and the context keeps its state",
            limit.as_millis()
        ),
    )
    .with_provider(PROVIDER)
    .with_operation("run_code")
}

/// One native cell's stream being read.
struct Cell {
    body: ByteStream,
    lines: LineReader,
    queue: VecDeque<Result<CodeEvent>>,
    budget: OutputBudget,
    ended: bool,
    key: String,
    lost: Arc<Mutex<BTreeMap<String, String>>>,
    running: Option<Pin<Box<dyn Future<Output = bool> + Send>>>,
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
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    for line in self.lines.push(&chunk) {
                        self.line(line);
                    }
                }
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(e));
                }
                None => {
                    self.ended = true;
                    let still = match self.running.take() {
                        Some(running) => running.await,
                        None => true,
                    };
                    let why = if still {
                        "the interpreter's stream ended before end_of_execution: the connection \
                         was lost"
                    } else {
                        "the sandbox was killed while the cell ran (it timed out or was killed)"
                    };
                    let kind = if still {
                        ErrorKind::Transport
                    } else {
                        ErrorKind::NotFound
                    };
                    return Some(Err(Error::new(kind, why)
                        .with_provider(PROVIDER)
                        .with_operation("run_code")));
                }
            }
        }
    }

    fn line(&mut self, line: Line) {
        if self.ended {
            return;
        }
        let bytes = match line {
            Line::Whole(bytes) => bytes,
            Line::TooLong => {
                // A line over the frame bound (a huge result): left out, and said.
                self.budget.count_dropped(MAX_FRAME as u64);
                return;
            }
        };
        let frame = match parse_line(&bytes, false) {
            Ok((_, frame)) => frame,
            Err(bad) => {
                self.ended = true;
                self.queue
                    .push_back(Err(Error::new(ErrorKind::Provider, bad.0)
                        .with_provider(PROVIDER)
                        .with_operation("run_code")));
                return;
            }
        };
        match frame {
            Frame::Event(CodeEvent::Stdout(text)) => self.output(text, CodeEvent::Stdout),
            Frame::Event(CodeEvent::Stderr(text)) => self.output(text, CodeEvent::Stderr),
            Frame::Event(CodeEvent::Error(error)) if LOST.contains(&error.name.as_str()) => {
                let why = format!("{}: {}", error.name, error.value);
                lock(&self.lost).insert(self.key.clone(), why.clone());
                self.ended = true;
                self.queue.push_back(Err(context_lost(&self.key, &why)));
            }
            Frame::Event(event) => self.queue.push_back(Ok(event)),
            Frame::End(_) => {
                self.ended = true;
                if let Some(truncated) = self.budget.truncated() {
                    self.queue.push_back(Ok(truncated));
                }
            }
            Frame::Keepalive | Frame::Ready(_) | Frame::Unknown(_) => {}
        }
    }

    /// Passes output on up to the cap, counting the rest.
    fn output(&mut self, text: String, event: fn(String) -> CodeEvent) {
        if let Some(kept) = self.budget.admit(text) {
            self.queue.push_back(Ok(event(kept)));
        }
    }
}
