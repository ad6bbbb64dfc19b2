//! Command tools: run to completion, and background start / output so far / kill.

use super::{Def, call_timeout, make, ok};
use crate::redact::Redactor;
use crate::result::{ToolError, ToolResult};
use crate::session::{Background, RunOutcome, Session, lock};
use crate::tool::{Annotations, Family};
use crate::truncate::{CappedBuffer, Truncated};
use futures::StreamExt;
use sandbox_sdk_core::{Capability, Command, ExitStatus, ProcessEvent, Sandbox};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How much longer than a command's own timeout its call may take (start-up, kill, clean-up).
pub(crate) const GRACE: Duration = Duration::from_secs(15);

pub(super) fn defs() -> Vec<Def> {
    vec![
        Def {
            name: "sandbox_run_v1",
            title: "Run a command",
            description: "Run a shell command in the sandbox and wait for it to finish (bash when the sandbox has it, else sh). Returns the exit code, and stdout and stderr separately; long output keeps its beginning and end and says how much was cut from the middle. Each call starts a fresh shell: `cd` and exported variables do not carry over, so pass cwd and env instead. A command still running at its timeout is killed and its output so far is returned with timed_out set; start long-running programs (servers, watchers) with sandbox_process_start_v1 instead.",
            annotations: Annotations::DESTRUCTIVE,
            family: Family::Standard,
            requires: &[],
            needs_provider: false,
            native: None,
            build: |def, s| {
                make::<RunInput>(
                    def,
                    s,
                    |s, i| Box::pin(run(s, i)),
                    |i, s| s.command_timeout(i.timeout_secs) + GRACE,
                )
            },
        },
        Def {
            name: "sandbox_process_start_v1",
            title: "Start a background process",
            description: "Start a shell command in the background (a server, a watcher, a long build) and return at once with its pid. Read what it printed so far with sandbox_process_output_v1 and stop it with sandbox_process_kill_v1. It keeps running after this call.",
            annotations: Annotations::DESTRUCTIVE,
            family: Family::Standard,
            requires: &[Capability::Background],
            needs_provider: false,
            native: None,
            build: |def, s| make::<StartInput>(def, s, |s, i| Box::pin(start(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_process_output_v1",
            title: "Read a background process's output",
            description: "Return the output a background process (started with sandbox_process_start_v1) has printed so far, stdout and stderr separately, and whether it is still running or how it exited. Long output keeps its beginning and end. Call it again later to see more.",
            annotations: Annotations::READ_ONLY,
            family: Family::Standard,
            requires: &[Capability::Background],
            needs_provider: false,
            native: None,
            build: |def, s| {
                make::<OutputInput>(def, s, |s, i| Box::pin(output(s, i)), call_timeout)
            },
        },
        Def {
            name: "sandbox_process_kill_v1",
            title: "Kill a process",
            description: "Kill a process in the sandbox by pid (and, where the provider can, its children). Use it to stop a background process started with sandbox_process_start_v1.",
            annotations: Annotations {
                idempotent: true,
                ..Annotations::DESTRUCTIVE
            },
            family: Family::Standard,
            requires: &[Capability::KillProcess],
            needs_provider: false,
            native: None,
            build: |def, s| make::<KillInput>(def, s, |s, i| Box::pin(kill(s, i)), call_timeout),
        },
    ]
}

/// Input of `sandbox_run_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunInput {
    /// The shell command line to run, for example `ls -la && python3 main.py`.
    pub command: String,
    /// Working directory; relative paths start at the sandbox's working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables for this command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds the command may run before it is killed (default 60, capped by the tool set).
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    /// The sandbox to run in; omit for the current sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

/// Input of `sandbox_process_start_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartInput {
    /// The shell command line to start.
    command: String,
    /// Working directory; relative paths start at the sandbox's working directory.
    #[serde(default)]
    cwd: Option<String>,
    /// Extra environment variables for the process.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The sandbox to start it in; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// Input of `sandbox_process_output_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputInput {
    /// The pid sandbox_process_start_v1 returned.
    pid: String,
    /// The sandbox it runs in; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// Input of `sandbox_process_kill_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KillInput {
    /// The pid of the process.
    pid: String,
    /// The sandbox it runs in; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// Builds the shell command with cwd and env, checked.
pub(crate) fn shell_command(
    s: &Session,
    line: &str,
    cwd: Option<&str>,
    env: BTreeMap<String, String>,
) -> Result<Command, ToolError> {
    if line.trim().is_empty() {
        return Err(ToolError::invalid_input(
            "the command is empty",
            "pass a shell command line",
        ));
    }
    let mut command = s.shell(line);
    command.cwd = match cwd {
        Some(cwd) => Some(s.path(cwd)?),
        None => s.config.paths.root().map(str::to_owned),
    };
    for (key, value) in env {
        sandbox_sdk_core::validate_env_name(&key)?;
        command.env.insert(key, value);
    }
    command.validate()?;
    Ok(command)
}

pub(crate) fn status_json(status: Option<&ExitStatus>) -> (Value, Value) {
    (
        json!(status.and_then(|s| s.code)),
        json!(status.and_then(|s| s.signal)),
    )
}

fn stream_json(t: &Truncated) -> Value {
    json!({"text": t.text, "total_bytes": t.total_bytes, "cut_bytes": t.cut_bytes})
}

/// The run result: exit, then stdout and stderr apart.
pub(crate) fn render_run(outcome: &RunOutcome, limit: Duration, redactor: &Redactor) -> ToolResult {
    let stdout = outcome.stdout.render("stdout", redactor);
    let stderr = outcome.stderr.render("stderr", redactor);
    let (code, signal) = status_json(outcome.status.as_ref());
    let head = match (&outcome.status, outcome.timed_out) {
        (_, true) => format!(
            "timed out after {}s and was killed; output so far:",
            limit.as_secs_f64()
        ),
        (Some(status), false) => status.to_string(),
        (None, false) => "ended without an exit status".to_owned(),
    };
    let mut text = head;
    text.push_str("\n--- stdout ---\n");
    text.push_str(&stdout.text);
    if !stdout.text.is_empty() && !stdout.text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("--- stderr ---\n");
    text.push_str(&stderr.text);
    ok(
        text,
        json!({
            "exit_code": code,
            "signal": signal,
            "timed_out": outcome.timed_out,
            "stdout": stream_json(&stdout),
            "stderr": stream_json(&stderr),
        }),
    )
}

async fn run(s: Arc<Session>, input: RunInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let command = shell_command(&s, &input.command, input.cwd.as_deref(), input.env)?;
    let limit = s.command_timeout(input.timeout_secs);
    let outcome = s
        .run_collect(&*sandbox, command, limit, s.config.max_output_bytes, None)
        .await?;
    Ok(render_run(&outcome, limit, &s.config.redactor))
}

async fn start(s: Arc<Session>, input: StartInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let mut command = shell_command(&s, &input.command, input.cwd.as_deref(), input.env)?;
    command.background = true;
    let process = sandbox.exec(&command).await?;
    let pid = process.pid().to_owned();
    let cap = s.config.max_output_bytes;
    let bg = Arc::new(Background {
        command: input.command.clone(),
        stdout: Mutex::new(CappedBuffer::new(cap)),
        stderr: Mutex::new(CappedBuffer::new(cap)),
        end: Mutex::new(None),
        task: Mutex::new(None),
    });
    let collector = bg.clone();
    let task = tokio::spawn(async move {
        let mut process = process;
        while let Some(event) = process.next().await {
            match event {
                Ok(ProcessEvent::Stdout(b)) => lock(&collector.stdout).push(&b),
                Ok(ProcessEvent::Stderr(b)) => lock(&collector.stderr).push(&b),
                Ok(ProcessEvent::Exit(status)) => {
                    *lock(&collector.end) = Some(Ok(status));
                    return;
                }
                Err(e) => {
                    *lock(&collector.end) = Some(Err(e.to_string()));
                    return;
                }
            }
        }
    });
    *lock(&bg.task) = Some(task);
    lock(&s.background).insert((sandbox.id().to_owned(), pid.clone()), bg);
    Ok(ok(
        format!(
            "started pid {pid} in the background; read its output with sandbox_process_output_v1"
        ),
        json!({"pid": pid, "sandbox_id": sandbox.id()}),
    ))
}

async fn output(s: Arc<Session>, input: OutputInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let key = (sandbox.id().to_owned(), input.pid.clone());
    let Some(bg) = lock(&s.background).get(&key).cloned() else {
        return Err(ToolError::not_found(
            format!(
                "no background process {} started by these tools in sandbox {}",
                input.pid,
                sandbox.id()
            ),
            "use the pid sandbox_process_start_v1 returned; output is kept only for processes started with it",
        ));
    };
    let stdout = lock(&bg.stdout).render("stdout", &s.config.redactor);
    let stderr = lock(&bg.stderr).render("stderr", &s.config.redactor);
    let end = lock(&bg.end).clone();
    let (state, code, signal, error) = match &end {
        None => ("running".to_owned(), Value::Null, Value::Null, Value::Null),
        Some(Ok(status)) => {
            let (code, signal) = status_json(Some(status));
            (format!("exited: {status}"), code, signal, Value::Null)
        }
        Some(Err(e)) => (
            format!("output lost: {e}"),
            Value::Null,
            Value::Null,
            json!(e),
        ),
    };
    let text = format!(
        "pid {} ({}) is {state}\n--- stdout so far ---\n{}\n--- stderr so far ---\n{}",
        input.pid, bg.command, stdout.text, stderr.text
    );
    Ok(ok(
        text,
        json!({
            "pid": input.pid,
            "running": end.is_none(),
            "exit_code": code,
            "signal": signal,
            "error": error,
            "stdout": stream_json(&stdout),
            "stderr": stream_json(&stderr),
        }),
    ))
}

async fn kill(s: Arc<Session>, input: KillInput) -> Result<ToolResult, ToolError> {
    let sandbox: Arc<dyn Sandbox> = s.sandbox(input.sandbox_id.as_deref()).await?;
    sandbox.kill_process(&input.pid).await?;
    Ok(ok(
        format!("killed pid {}", input.pid),
        json!({"pid": input.pid, "killed": true}),
    ))
}
