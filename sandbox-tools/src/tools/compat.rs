//! The model vendors' own tool shapes, mapped onto the same implementations: Anthropic's `bash`
//! and `str_replace_based_edit_tool`, OpenAI's `shell` and `apply_patch`.

use super::commands::{GRACE, shell_command};
use super::editor::{DESCRIPTION as EDITOR_DESCRIPTION, EditorInput, edit};
use super::patch::apply_ops;
use super::{Def, call_timeout, make, ok};
use crate::patch::{self, PatchOp};
use crate::result::{ToolError, ToolResult};
use crate::session::{Session, lock};
use crate::tool::{Annotations, Family};
use crate::trailer::Trailer;
use sandbox_sdk_core::Capability;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The `type` of Anthropic's bash tool this mapping follows.
pub const ANTHROPIC_BASH_TYPE: &str = "bash_20250124";
/// The `type` of Anthropic's text-editor tool this mapping follows.
pub const ANTHROPIC_EDITOR_TYPE: &str = "text_editor_20250728";

pub(super) fn defs() -> Vec<Def> {
    vec![
        Def {
            name: "bash",
            title: "Bash (Anthropic shape)",
            description: "Run a bash command in the sandbox and return its output (stdout, then stderr, then a non-zero exit code). The working directory persists as in one shell session: after `cd DIR`, the next call starts in DIR. Other shell state does not: each call is a new bash process, so variables, functions and aliases set in one call are gone in the next (put `export X=1 && ...` in the same command). restart: true starts over in the sandbox's default directory.",
            annotations: Annotations::DESTRUCTIVE,
            family: Family::Anthropic,
            requires: &[],
            needs_provider: false,
            native: Some(|| json!({"type": ANTHROPIC_BASH_TYPE, "name": "bash"})),
            build: |def, s| {
                make::<BashInput>(
                    def,
                    s,
                    |s, i| Box::pin(bash(s, i)),
                    |_, s| s.command_timeout(None) + GRACE,
                )
            },
        },
        Def {
            name: "str_replace_based_edit_tool",
            title: "Text editor (Anthropic shape)",
            description: EDITOR_DESCRIPTION,
            annotations: Annotations::DESTRUCTIVE,
            family: Family::Anthropic,
            requires: &[Capability::FilesUpload],
            needs_provider: false,
            native: Some(
                || json!({"type": ANTHROPIC_EDITOR_TYPE, "name": "str_replace_based_edit_tool"}),
            ),
            build: |def, s| make::<EditorInput>(def, s, |s, i| Box::pin(edit(s, i)), call_timeout),
        },
        Def {
            name: "shell",
            title: "Shell (OpenAI shape)",
            description: "Run shell commands in the sandbox, in order, each in a fresh shell, and return each one's stdout, stderr and outcome (its exit code, or a timeout). timeout_ms bounds the whole batch; max_output_length bounds the characters kept per command (stdout and stderr together), keeping the beginning and the end.",
            annotations: Annotations::DESTRUCTIVE,
            family: Family::OpenAi,
            requires: &[],
            needs_provider: false,
            native: Some(|| json!({"type": "shell"})),
            build: |def, s| {
                make::<ShellInput>(
                    def,
                    s,
                    |s, i| Box::pin(shell(s, i)),
                    |i, s| shell_limit(i, s) + GRACE,
                )
            },
        },
        Def {
            name: "apply_patch",
            title: "Apply patch (OpenAI shape)",
            description: "Create, update or delete one file in the sandbox. type create_file: diff holds the new file, every line starting with +. type update_file: diff is a V4A diff of @@ sections whose lines start with a space (context), - (removed) or + (added). type delete_file: no diff. Nothing is written unless the whole diff matches the file.",
            annotations: Annotations::DESTRUCTIVE,
            family: Family::OpenAi,
            requires: &[Capability::FilesUpload],
            needs_provider: false,
            native: Some(|| json!({"type": "apply_patch"})),
            build: |def, s| {
                make::<OpenAiPatchInput>(def, s, |s, i| Box::pin(openai_patch(s, i)), call_timeout)
            },
        },
    ]
}

/// Input of Anthropic's `bash` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct BashInput {
    /// The bash command to run.
    #[serde(default)]
    command: Option<String>,
    /// Start over: forget the working directory earlier calls moved to.
    #[serde(default)]
    restart: bool,
}

async fn bash(s: Arc<Session>, input: BashInput) -> Result<ToolResult, ToolError> {
    if input.restart {
        lock(&s.bash_cwd).clear();
        return Ok(ok("tool has been restarted.", json!({"restarted": true})));
    }
    let Some(line) = input.command.filter(|l| !l.trim().is_empty()) else {
        return Err(ToolError::invalid_input(
            "no command given",
            "pass command, or restart: true",
        ));
    };
    let sandbox = s.sandbox(None).await?;
    let id = sandbox.id().to_owned();
    let previous = lock(&s.bash_cwd).get(&id).cloned();
    let mut trailer = Trailer::new();
    let script = trailer.script(&line, previous.as_deref())?;
    let command = shell_command(&s, &script, None, BTreeMap::new())?;
    let limit = s.command_timeout(None);
    let out = s
        .run_collect(
            &*sandbox,
            command,
            limit,
            s.config.max_output_bytes,
            Some(&mut trailer),
        )
        .await?;
    // A command that ended the shell (`exit`, a kill, the timeout) reported no directory:
    // the next call starts where this one did.
    let cwd = match trailer.value() {
        Some(cwd) => {
            lock(&s.bash_cwd).insert(id, cwd.clone());
            Some(cwd)
        }
        None => previous,
    };
    let stdout = out.stdout.render("stdout", &s.config.redactor);
    let stderr = out.stderr.render("stderr", &s.config.redactor);
    let mut text = stdout.text.clone();
    if !stderr.text.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("<stderr>\n");
        text.push_str(&stderr.text);
        text.push_str("\n</stderr>");
    }
    let code = out.status.and_then(|st| st.code);
    if out.timed_out {
        text.push_str(&format!(
            "\n[timed out after {}s and was killed]",
            limit.as_secs()
        ));
    } else if code != Some(0) {
        match out.status {
            Some(status) => text.push_str(&format!("\n[{status}]")),
            None => text.push_str("\n[ended without an exit status]"),
        }
    }
    if text.is_empty() {
        text = "(no output)".to_owned();
    }
    Ok(ok(
        text,
        json!({
            "stdout": stdout.text,
            "stderr": stderr.text,
            "exit_code": code,
            "timed_out": out.timed_out,
            "cwd": cwd,
        }),
    ))
}

/// Input of OpenAI's `shell` tool (the `action` of a `shell_call`).
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ShellInput {
    /// The commands to run, in order.
    commands: Vec<String>,
    /// The most milliseconds the whole batch may take.
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// The most characters of output kept per command (stdout and stderr together).
    #[serde(default)]
    max_output_length: Option<u64>,
}

fn shell_limit(input: &ShellInput, s: &Session) -> Duration {
    s.command_timeout(input.timeout_ms.map(|ms| ms as f64 / 1000.0))
}

async fn shell(s: Arc<Session>, input: ShellInput) -> Result<ToolResult, ToolError> {
    if input.commands.is_empty() {
        return Err(ToolError::invalid_input(
            "commands is empty",
            "pass at least one command",
        ));
    }
    let sandbox = s.sandbox(None).await?;
    let limit = shell_limit(&input, &s);
    let per_command = input
        .max_output_length
        .map(|n| n as usize)
        .unwrap_or(usize::MAX)
        .min(2 * s.config.max_output_bytes);
    let deadline = tokio::time::Instant::now() + limit;
    let mut outputs: Vec<Value> = Vec::new();
    for line in &input.commands {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            outputs.push(json!({
                "stdout": "",
                "stderr": "not run: the batch's timeout was spent",
                "outcome": {"type": "timeout"},
            }));
            continue;
        }
        let command = shell_command(&s, line, None, BTreeMap::new())?;
        let out = s
            .run_collect(
                &*sandbox,
                command,
                left,
                per_command.div_ceil(2).max(1),
                None,
            )
            .await?;
        let outcome = match (out.timed_out, out.status) {
            (true, _) => json!({"type": "timeout"}),
            (false, Some(status)) => json!({
                "type": "exit",
                "exit_code": status.code.unwrap_or(128 + status.signal.unwrap_or(0)),
            }),
            (false, None) => json!({"type": "exit", "exit_code": -1}),
        };
        outputs.push(json!({
            "stdout": out.stdout.render("stdout", &s.config.redactor).text,
            "stderr": out.stderr.render("stderr", &s.config.redactor).text,
            "outcome": outcome,
        }));
    }
    let value = json!({
        "output": outputs,
        "max_output_length": input.max_output_length,
    });
    Ok(ok(value.to_string(), value))
}

/// The kind of an OpenAI `apply_patch` operation.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(clippy::enum_variant_names)] // the names are OpenAI's: create_file, update_file, delete_file
pub(crate) enum OperationType {
    /// Create a new file; diff lines all start with `+`.
    CreateFile,
    /// Change a file with a V4A diff.
    UpdateFile,
    /// Delete a file.
    DeleteFile,
}

/// Input of OpenAI's `apply_patch` tool (the `operation` of an `apply_patch_call`).
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct OpenAiPatchInput {
    /// create_file, update_file or delete_file.
    #[serde(rename = "type")]
    kind: OperationType,
    /// The file.
    path: String,
    /// The diff (not used by delete_file).
    #[serde(default)]
    diff: Option<String>,
}

async fn openai_patch(s: Arc<Session>, input: OpenAiPatchInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(None).await?;
    let need_diff = || {
        input.diff.clone().ok_or_else(|| {
            ToolError::invalid_input(
                "this operation needs a diff",
                "pass diff with the file's lines (create_file) or V4A hunks (update_file)",
            )
        })
    };
    let op = match input.kind {
        OperationType::CreateFile => PatchOp::Add {
            path: input.path.clone(),
            contents: patch::parse_create(&need_diff()?)?,
        },
        OperationType::UpdateFile => {
            let diff = need_diff()?;
            let lines: Vec<&str> = diff.lines().collect();
            let hunks = patch::parse_hunks(&lines, 1)?;
            if hunks.is_empty() {
                return Err(ToolError::invalid_input(
                    "the diff has no hunks",
                    "pass @@ sections with ' ', '-' and '+' lines",
                ));
            }
            PatchOp::Update {
                path: input.path.clone(),
                move_to: None,
                hunks,
            }
        }
        OperationType::DeleteFile => PatchOp::Delete {
            path: input.path.clone(),
        },
    };
    let result = apply_ops(&s, &*sandbox, vec![op]).await?;
    let output = result.text.clone();
    Ok(ok(
        output.clone(),
        json!({"status": "completed", "output": output}),
    ))
}
