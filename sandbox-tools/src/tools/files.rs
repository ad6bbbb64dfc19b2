//! File tools: read (with line ranges), write, list, stat, mkdir, move, remove.

use super::{Def, call_timeout, make, ok};
use crate::result::{ToolError, ToolResult};
use crate::session::Session;
use crate::tool::{Annotations, Family};
use base64::Engine;
use bytes::Bytes;
use sandbox_sdk_core::{Capability, FileInfo, ListOptions};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::SystemTime;

const FILES: &[Capability] = &[Capability::FilesUpload];

pub(super) fn defs() -> Vec<Def> {
    vec![
        Def {
            name: "sandbox_file_read_v1",
            title: "Read a file",
            description: "Read a text file from the sandbox, whole or a range of lines (start_line and end_line, 1-based and inclusive; end_line -1 means to the end). Returns the text as it is, without line numbers. Long output is cut at a whole line and says which start_line to read on from.",
            annotations: Annotations::READ_ONLY,
            family: Family::Standard,
            requires: FILES,
            needs_provider: false,
            native: None,
            build: |def, s| make::<ReadInput>(def, s, |s, i| Box::pin(read(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_file_write_v1",
            title: "Write a file",
            description: "Write a whole file in the sandbox, creating parent directories and replacing the file if it exists. content is text, or base64 when encoding is \"base64\" (for binary files). To change part of a file, prefer sandbox_editor_v1 (str_replace) or sandbox_apply_patch_v1.",
            annotations: Annotations {
                idempotent: true,
                ..Annotations::DESTRUCTIVE
            },
            family: Family::Standard,
            requires: FILES,
            needs_provider: false,
            native: None,
            build: |def, s| make::<WriteInput>(def, s, |s, i| Box::pin(write(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_file_list_v1",
            title: "List a directory",
            description: "List the entries of a directory in the sandbox: kind (file, dir, symlink), size and path. depth 1 (the default) lists only the directory's own entries; up to 5 descends further.",
            annotations: Annotations::READ_ONLY,
            family: Family::Standard,
            requires: FILES,
            needs_provider: false,
            native: None,
            build: |def, s| make::<ListInput>(def, s, |s, i| Box::pin(list(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_file_stat_v1",
            title: "Stat a path",
            description: "Return whether a path exists in the sandbox and, if it does, its kind (file, dir, symlink), size, permissions and modification time.",
            annotations: Annotations::READ_ONLY,
            family: Family::Standard,
            requires: FILES,
            needs_provider: false,
            native: None,
            build: |def, s| make::<PathInput>(def, s, |s, i| Box::pin(stat(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_file_mkdir_v1",
            title: "Make a directory",
            description: "Create a directory in the sandbox, with its parents. An existing directory is not an error.",
            annotations: Annotations::ADDITIVE_IDEMPOTENT,
            family: Family::Standard,
            requires: FILES,
            needs_provider: false,
            native: None,
            build: |def, s| make::<PathInput>(def, s, |s, i| Box::pin(mkdir(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_file_move_v1",
            title: "Move or rename",
            description: "Move or rename a file or directory in the sandbox. Refuses to replace an existing destination unless overwrite is true.",
            annotations: Annotations::DESTRUCTIVE,
            family: Family::Standard,
            requires: FILES,
            needs_provider: false,
            native: None,
            build: |def, s| make::<MoveInput>(def, s, |s, i| Box::pin(rename(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_file_remove_v1",
            title: "Remove a file or directory",
            description: "Remove a file, or a directory with everything in it, from the sandbox. This cannot be undone.",
            annotations: Annotations {
                idempotent: true,
                ..Annotations::DESTRUCTIVE
            },
            family: Family::Standard,
            requires: FILES,
            needs_provider: false,
            native: None,
            build: |def, s| make::<PathInput>(def, s, |s, i| Box::pin(remove(s, i)), call_timeout),
        },
    ]
}

/// Input of `sandbox_file_read_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadInput {
    /// The file; relative paths start at the sandbox's working directory.
    path: String,
    /// First line to return, 1-based (default 1).
    #[serde(default)]
    #[schemars(range(min = 1))]
    start_line: Option<u64>,
    /// Last line to return, inclusive; -1 or omitted means to the end.
    #[serde(default)]
    end_line: Option<i64>,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// How `content` is encoded.
#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Encoding {
    /// UTF-8 text.
    #[default]
    Text,
    /// Base64 of the bytes.
    Base64,
}

/// Input of `sandbox_file_write_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteInput {
    /// The file; relative paths start at the sandbox's working directory.
    path: String,
    /// The whole new content.
    content: String,
    /// How content is encoded: "text" (default) or "base64".
    #[serde(default)]
    encoding: Encoding,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// Input of `sandbox_file_list_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListInput {
    /// The directory (default: the working directory).
    #[serde(default)]
    path: Option<String>,
    /// How deep to list, 1 to 5 (default 1).
    #[serde(default)]
    #[schemars(range(min = 1, max = 5))]
    depth: Option<u32>,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// Input naming one path.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PathInput {
    /// The path; relative paths start at the sandbox's working directory.
    path: String,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// Input of `sandbox_file_move_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MoveInput {
    /// The path to move.
    from: String,
    /// The new path.
    to: String,
    /// Replace an existing destination (default false).
    #[serde(default)]
    overwrite: bool,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

pub(crate) fn file_json(info: &FileInfo) -> Value {
    json!({
        "path": info.path,
        "name": info.name,
        "kind": info.kind,
        "size": info.size,
        "mode": info.mode.map(|m| format!("{:o}", m & 0o7777)),
        "modified_unix": info.modified
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs()),
    })
}

async fn read(s: Arc<Session>, input: ReadInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let path = s.path(&input.path)?;
    let text = s.read_text(&*sandbox, &path).await?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total = lines.len();
    let start = input.start_line.unwrap_or(1).max(1) as usize;
    let end = match input.end_line {
        None | Some(-1) => total,
        Some(e) if e < 1 => {
            return Err(ToolError::invalid_input(
                format!("end_line {e} is not a line number"),
                "use a 1-based line number, or -1 for the end of the file",
            ));
        }
        Some(e) => (e as usize).min(total),
    };
    if total > 0 && start > total {
        return Err(ToolError::invalid_input(
            format!("start_line {start} is past the end: {path} has {total} lines"),
            format!("use a start_line from 1 to {total}"),
        ));
    }
    if end < start && total > 0 {
        return Err(ToolError::invalid_input(
            format!("end_line {end} is before start_line {start}"),
            "use an end_line at or after start_line",
        ));
    }
    let cap = s.config.max_output_bytes;
    let mut content = String::new();
    let mut last = start.saturating_sub(1);
    for line in lines.iter().take(end).skip(start.saturating_sub(1)) {
        if !content.is_empty() && content.len() + line.len() > cap {
            break;
        }
        content.push_str(line);
        last += 1;
    }
    let cut = total > 0 && last < end;
    if cut {
        // A secret running on past the last line shown (a multi-line key) is cut there.
        content = s.config.redactor.before_cut(&content);
    }
    let mut text_out = content.clone();
    if cut {
        if !text_out.ends_with('\n') {
            text_out.push('\n');
        }
        text_out.push_str(&format!(
            "[output stopped after line {last} of {total} ({cap} bytes at most per call): read on with start_line={}]",
            last + 1
        ));
    }
    Ok(ok(
        text_out,
        json!({
            "path": path,
            "content": content,
            "start_line": start.min(total.max(1)),
            "end_line": last,
            "total_lines": total,
            "truncated": cut,
        }),
    ))
}

async fn write(s: Arc<Session>, input: WriteInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let path = s.path(&input.path)?;
    let data = match input.encoding {
        Encoding::Text => Bytes::from(input.content.into_bytes()),
        Encoding::Base64 => Bytes::from(
            base64::engine::general_purpose::STANDARD
                .decode(input.content.trim())
                .map_err(|e| {
                    ToolError::invalid_input(
                        format!("content is not valid base64: {e}"),
                        "send standard base64 (A-Z, a-z, 0-9, +, /, = padding), or use encoding \"text\"",
                    )
                })?,
        ),
    };
    let transfer = sandbox.write_file(&path, data).await?;
    Ok(ok(
        format!("wrote {} bytes to {path}", transfer.bytes),
        json!({"path": path, "bytes": transfer.bytes}),
    ))
}

async fn list(s: Arc<Session>, input: ListInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let path = s.path(input.path.as_deref().unwrap_or("."))?;
    let depth = input.depth.unwrap_or(1).clamp(1, 5);
    let mut entries = sandbox.list_files(&path, ListOptions { depth }).await?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let max = s.config.max_list_entries;
    let truncated = entries.len() > max;
    let total = entries.len();
    entries.truncate(max);
    let mut text: String = entries
        .iter()
        .map(|e| {
            let kind = match e.kind {
                sandbox_sdk_core::FileKind::Dir => "dir ",
                sandbox_sdk_core::FileKind::File => "file",
                sandbox_sdk_core::FileKind::Symlink => "link",
                sandbox_sdk_core::FileKind::Other => "other",
            };
            format!("{kind} {:>10} {}\n", e.size, e.path)
        })
        .collect();
    if entries.is_empty() {
        text = format!("{path} is empty\n");
    }
    if truncated {
        text.push_str(&format!(
            "[{total} entries; only the first {max} are shown: list a subdirectory or lower the depth]\n"
        ));
    }
    let items: Vec<Value> = entries.iter().map(file_json).collect();
    Ok(ok(
        text,
        json!({"path": path, "entries": items, "total": total, "truncated": truncated}),
    ))
}

async fn stat(s: Arc<Session>, input: PathInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let path = s.path(&input.path)?;
    match sandbox.stat(&path).await {
        Ok(info) => {
            let mut value = file_json(&info);
            value["exists"] = json!(true);
            Ok(ok(
                format!(
                    "{path}: {} of {} bytes",
                    value["kind"].as_str().unwrap_or("entry"),
                    info.size
                ),
                value,
            ))
        }
        Err(e) if e.kind() == sandbox_sdk_core::ErrorKind::NotFound => Ok(ok(
            format!("{path} does not exist"),
            json!({"path": path, "exists": false}),
        )),
        Err(e) => Err(e.into()),
    }
}

async fn mkdir(s: Arc<Session>, input: PathInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let path = s.path(&input.path)?;
    sandbox.mkdir(&path).await?;
    Ok(ok(
        format!("directory {path} exists"),
        json!({"path": path}),
    ))
}

async fn rename(s: Arc<Session>, input: MoveInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let from = s.path(&input.from)?;
    let to = s.path(&input.to)?;
    if !input.overwrite && s.exists(&*sandbox, &to).await? {
        return Err(ToolError::conflict(
            format!("{to} already exists"),
            "choose another destination, or pass overwrite: true to replace it",
        ));
    }
    sandbox.rename(&from, &to).await?;
    Ok(ok(
        format!("moved {from} to {to}"),
        json!({"from": from, "to": to}),
    ))
}

async fn remove(s: Arc<Session>, input: PathInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let path = s.path(&input.path)?;
    if path == "." || path == "/" || Some(path.as_str()) == s.config.paths.root() {
        return Err(ToolError::invalid_input(
            format!("refusing to remove {path}: it is the working directory or the root"),
            "remove the entries inside it one by one instead",
        ));
    }
    sandbox.remove(&path).await?;
    Ok(ok(format!("removed {path}"), json!({"path": path})))
}
