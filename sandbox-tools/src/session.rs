//! The state the tools of one set share: the provider, the sandbox calls go to, the sandboxes
//! reached so far, background processes and the configuration.

use crate::config::{OWNER_LABEL, ToolConfig};
use crate::result::{ToolError, ToolResult};
use crate::trailer::Trailer;
use crate::truncate::CappedBuffer;
use bytes::BytesMut;
use futures::TryStreamExt;
use sandbox_sdk_core::{
    Capabilities, Command, ExitStatus, ProcessEvent, Provider, Sandbox, SandboxExt,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A process started by `sandbox_process_start_v1`, its output collected as it comes.
pub(crate) struct Background {
    pub command: String,
    pub stdout: Mutex<CappedBuffer>,
    pub stderr: Mutex<CappedBuffer>,
    pub end: Mutex<Option<Result<ExitStatus, String>>>,
    pub task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

pub(crate) struct Session {
    pub provider: Option<Arc<dyn Provider>>,
    /// The sandbox the set was built with, always allowed.
    pub bound: Option<Arc<dyn Sandbox>>,
    pub current: Mutex<Option<Arc<dyn Sandbox>>>,
    pub known: Mutex<HashMap<String, Arc<dyn Sandbox>>>,
    pub background: Mutex<HashMap<(String, String), Arc<Background>>>,
    /// The `bash` tool's working directory in each sandbox (by id), as its last call left it.
    pub bash_cwd: Mutex<HashMap<String, String>>,
    pub config: ToolConfig,
    pub capabilities: Capabilities,
}

impl Drop for Session {
    fn drop(&mut self) {
        for bg in lock(&self.background).values() {
            if let Some(task) = lock(&bg.task).take() {
                task.abort();
            }
        }
    }
}

/// The shell wrapper: run the line under bash when the sandbox has it, else under sh.
const SHELL_WRAPPER: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; else exec sh -c \"$1\"; fi";

/// How a command run to completion (or to its deadline) ended.
pub(crate) struct RunOutcome {
    pub stdout: CappedBuffer,
    pub stderr: CappedBuffer,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
}

impl Session {
    pub fn redact(&self, result: &mut ToolResult) {
        let r = &self.config.redactor;
        if r.is_empty() {
            return;
        }
        result.text = r.text(&result.text);
        r.json(&mut result.structured);
    }

    pub fn path(&self, path: &str) -> Result<String, ToolError> {
        self.config.paths.resolve(path)
    }

    pub fn owner_label(&self) -> (&'static str, &str) {
        (OWNER_LABEL, self.config.owner.as_str())
    }

    /// The sandbox a call goes to: `id` when given, else the current one (or, without an
    /// implicit sandbox, the one the set was built for).
    pub async fn sandbox(&self, id: Option<&str>) -> Result<Arc<dyn Sandbox>, ToolError> {
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            if !self.config.implicit_sandbox {
                return self.bound.clone().ok_or_else(|| {
                    ToolError::invalid_input(
                        "sandbox_id is required: this server is shared by clients without a                          session, so there is no current sandbox",
                        "pass the sandbox_id that sandbox_create_v1 or sandbox_connect_v1 returned",
                    )
                });
            }
            return lock(&self.current).clone().ok_or_else(|| {
                ToolError::invalid_input(
                    "there is no current sandbox",
                    "create one with sandbox_create_v1 or connect to one with sandbox_connect_v1, or pass sandbox_id",
                )
            });
        };
        if let Some(bound) = &self.bound
            && bound.id() == id
        {
            return Ok(bound.clone());
        }
        if let Some(known) = lock(&self.known).get(id) {
            return Ok(known.clone());
        }
        self.connect(id).await
    }

    /// Connects to `id` through the provider, checking the owner label when `only_ours`.
    pub async fn connect(&self, id: &str) -> Result<Arc<dyn Sandbox>, ToolError> {
        if let Some(bound) = &self.bound
            && bound.id() == id
        {
            return Ok(bound.clone());
        }
        let Some(provider) = &self.provider else {
            return Err(ToolError::not_found(
                format!("sandbox {id:?} is not the sandbox these tools work on"),
                "omit sandbox_id to use the current sandbox",
            ));
        };
        let sandbox: Arc<dyn Sandbox> = Arc::from(provider.connect(id).await?);
        if self.config.only_ours {
            let info = sandbox.info().await?;
            let (key, owner) = self.owner_label();
            if info.metadata.get(key).map(String::as_str) != Some(owner) {
                return Err(ToolError::not_found(
                    format!("sandbox {id:?} was not created by these tools"),
                    "use a sandbox from sandbox_list_v1, or create one with sandbox_create_v1",
                ));
            }
        }
        lock(&self.known).insert(id.to_owned(), sandbox.clone());
        Ok(sandbox)
    }

    pub fn set_current(&self, sandbox: Arc<dyn Sandbox>) {
        lock(&self.known).insert(sandbox.id().to_owned(), sandbox.clone());
        *lock(&self.current) = Some(sandbox);
    }

    pub fn forget(&self, id: &str) {
        lock(&self.known).remove(id);
        let mut current = lock(&self.current);
        if current.as_ref().is_some_and(|s| s.id() == id) {
            *current = None;
        }
    }

    /// The timeout a model asked for, bounded by the configuration.
    pub fn command_timeout(&self, secs: Option<f64>) -> Duration {
        let asked = secs
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(self.config.default_command_timeout);
        asked.min(self.config.max_command_timeout)
    }

    /// A shell line as a command: bash when the sandbox has it, else sh.
    pub fn shell(&self, line: &str) -> Command {
        Command::new("sh").args(["-c", SHELL_WRAPPER, "sh", line])
    }

    /// Runs `command` until it exits or `limit` passes (then kills it), collecting stdout and
    /// stderr apart in bounded memory. With a `trailer`, stdout passes through it first, so its
    /// trailer line is never output (the caller reads the value from it).
    pub async fn run_collect(
        &self,
        sandbox: &dyn Sandbox,
        mut command: Command,
        limit: Duration,
        cap: usize,
        mut trailer: Option<&mut Trailer>,
    ) -> Result<RunOutcome, ToolError> {
        // The provider's own limit is a backstop a little after ours.
        command.timeout = limit + Duration::from_secs(5);
        command.validate()?;
        let mut process = sandbox.exec(&command).await?;
        let control = process.control();
        let mut outcome = RunOutcome {
            stdout: CappedBuffer::new(cap),
            stderr: CappedBuffer::new(cap),
            status: None,
            timed_out: false,
        };
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, process.next_event()).await {
                Err(_) => {
                    outcome.timed_out = true;
                    let _ = tokio::time::timeout(Duration::from_secs(5), control.kill()).await;
                    break;
                }
                Ok(None) => break,
                Ok(Some(event)) => match event? {
                    ProcessEvent::Stdout(b) => match trailer.as_deref_mut() {
                        Some(trailer) => outcome.stdout.push(&trailer.push(&b)),
                        None => outcome.stdout.push(&b),
                    },
                    ProcessEvent::Stderr(b) => outcome.stderr.push(&b),
                    ProcessEvent::Exit(status) => {
                        outcome.status = Some(status);
                        break;
                    }
                },
            }
        }
        if let Some(trailer) = trailer {
            outcome.stdout.push(&trailer.finish());
        }
        Ok(outcome)
    }

    /// Reads a whole text file, refusing files over `max_file_bytes` and non-UTF-8 ones.
    pub async fn read_text(&self, sandbox: &dyn Sandbox, path: &str) -> Result<String, ToolError> {
        let max = self.config.max_file_bytes;
        let mut download = sandbox.download(path).await?;
        let mut buf = BytesMut::new();
        while let Some(chunk) = download.try_next().await? {
            buf.extend_from_slice(&chunk);
            if buf.len() as u64 > max {
                return Err(ToolError::invalid_input(
                    format!("{path} is larger than {max} bytes, the most these tools load"),
                    format!(
                        "read part of it with a command, for example `sed -n '1,200p' {path}` or `head -c 65536 {path}`"
                    ),
                ));
            }
        }
        String::from_utf8(buf.to_vec()).map_err(|_| {
            ToolError::invalid_input(
                format!("{path} is not UTF-8 text (a binary file?)"),
                format!(
                    "inspect it with a command, for example `file {path}` or `xxd {path} | head`"
                ),
            )
        })
    }

    /// Whether `path` exists in `sandbox`.
    pub async fn exists(&self, sandbox: &dyn Sandbox, path: &str) -> Result<bool, ToolError> {
        Ok(sandbox.exists(path).await?)
    }
}
