//! The editor tool: `view`, `create`, `str_replace`, `insert`, with the semantics of
//! Anthropic's text-editor tool.

use super::{Def, call_timeout, make, ok};
use crate::editor;
use crate::result::{ToolError, ToolResult};
use crate::session::Session;
use crate::tool::{Annotations, Family};
use crate::truncate::head_and_tail;
use bytes::Bytes;
use sandbox_sdk_core::{Capability, FileKind, ListOptions};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

pub(crate) const DESCRIPTION: &str = "View and edit text files in the sandbox. Commands:\n- view: show a file with line numbers (view_range [start, end] limits it, 1-based, end -1 = to the end), or list a directory two levels deep.\n- create: make a new file with file_text; refuses to overwrite an existing file.\n- str_replace: replace old_str with new_str; old_str must appear in the file exactly once, verbatim (whitespace and indentation included); if it appears 0 or several times nothing changes and the error says how many times and on which lines.\n- insert: insert new_str after line insert_line (0 = at the top).\nEdits return the changed lines with numbers, to check the result.";

pub(super) fn defs() -> Vec<Def> {
    vec![Def {
        name: "sandbox_editor_v1",
        title: "Edit files",
        description: DESCRIPTION,
        annotations: Annotations::DESTRUCTIVE,
        family: Family::Standard,
        requires: &[Capability::FilesUpload],
        needs_provider: false,
        native: None,
        build: |def, s| make::<EditorInput>(def, s, |s, i| Box::pin(edit(s, i)), call_timeout),
    }]
}

/// What the editor should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EditorCommand {
    /// Show a file with line numbers, or list a directory.
    View,
    /// Create a new file.
    Create,
    /// Replace the one occurrence of old_str with new_str.
    StrReplace,
    /// Insert new_str after line insert_line.
    Insert,
    /// Not offered (and not in the schema): answered with a hint to make the reverse edit.
    #[schemars(skip)]
    UndoEdit,
}

/// Input of the editor tools.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct EditorInput {
    /// view, create, str_replace or insert.
    pub command: EditorCommand,
    /// The file or directory; relative paths start at the sandbox's working directory.
    pub path: String,
    /// create: the whole content of the new file.
    #[serde(default)]
    pub file_text: Option<String>,
    /// str_replace: the exact text to replace; must appear exactly once.
    #[serde(default)]
    pub old_str: Option<String>,
    /// str_replace: the replacement (empty or omitted deletes old_str); insert: the text to insert.
    #[serde(default, alias = "insert_text")]
    pub new_str: Option<String>,
    /// insert: the line after which to insert (0 = the top of the file).
    #[serde(default)]
    pub insert_line: Option<i64>,
    /// view: [start, end] lines, 1-based and inclusive; end -1 means to the end.
    #[serde(default)]
    pub view_range: Option<[i64; 2]>,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

fn missing(field: &str, command: &str) -> ToolError {
    ToolError::invalid_input(
        format!("{command} needs {field}"),
        format!("call again with {field} set"),
    )
}

pub(crate) async fn edit(s: Arc<Session>, input: EditorInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let path = s.path(&input.path)?;
    let cap = s.config.max_output_bytes;
    match input.command {
        EditorCommand::View => {
            let info = sandbox.stat(&path).await?;
            if info.kind == FileKind::Dir {
                if input.view_range.is_some() {
                    return Err(ToolError::invalid_input(
                        format!("{path} is a directory; view_range applies to files"),
                        "omit view_range to list the directory",
                    ));
                }
                let mut entries = sandbox.list_files(&path, ListOptions { depth: 2 }).await?;
                entries.retain(|e| {
                    !e.path
                        .split('/')
                        .any(|part| part.starts_with('.') && part != "." && part != "..")
                });
                entries.sort_by(|a, b| a.path.cmp(&b.path));
                let max = s.config.max_list_entries;
                let total = entries.len();
                let mut text = format!(
                    "files and directories up to 2 levels deep in {path}, hidden items excluded:\n"
                );
                for e in entries.iter().take(max) {
                    let slash = if e.kind == FileKind::Dir { "/" } else { "" };
                    text.push_str(&format!("{}{slash}\n", e.path));
                }
                if total > max {
                    text.push_str(&format!("[{total} entries; the first {max} are shown]\n"));
                }
                return Ok(ok(
                    text,
                    json!({"path": path, "kind": "dir", "entries": total}),
                ));
            }
            let text = s.read_text(&*sandbox, &path).await?;
            let (numbered, start, end) = editor::view(&text, input.view_range)?;
            let shown = head_and_tail(&numbered, cap, "the file view", &s.config.redactor);
            let mut out = shown.text.clone();
            if shown.was_cut() {
                out.push_str("\n[view a smaller view_range to see the cut lines]");
            }
            Ok(ok(
                out,
                json!({
                    "path": path,
                    "start_line": start,
                    "end_line": end,
                    "total_lines": editor::line_count(&text),
                    "truncated": shown.was_cut(),
                }),
            ))
        }
        EditorCommand::Create => {
            let file_text = input
                .file_text
                .ok_or_else(|| missing("file_text", "create"))?;
            if s.exists(&*sandbox, &path).await? {
                return Err(ToolError::conflict(
                    format!("{path} already exists; create does not overwrite files"),
                    "change it with str_replace or insert, or remove it first",
                ));
            }
            let bytes = file_text.len();
            sandbox.write_file(&path, Bytes::from(file_text)).await?;
            Ok(ok(
                format!("created {path} ({bytes} bytes)"),
                json!({"path": path, "bytes": bytes}),
            ))
        }
        EditorCommand::StrReplace => {
            let old = input
                .old_str
                .ok_or_else(|| missing("old_str", "str_replace"))?;
            let new = input.new_str.unwrap_or_default();
            let text = s.read_text(&*sandbox, &path).await?;
            let (updated, line) = editor::str_replace(&text, &old, &new, &path)?;
            sandbox
                .write_file(&path, Bytes::from(updated.clone()))
                .await?;
            let changed = new.matches('\n').count();
            let snippet = editor::snippet(&updated, line, changed, 4);
            let snippet = head_and_tail(&snippet, cap, "the snippet", &s.config.redactor).text;
            Ok(ok(
                format!("edited {path}; the changed region now reads:\n{snippet}"),
                json!({"path": path, "line": line, "replacements": 1}),
            ))
        }
        EditorCommand::Insert => {
            let after = input
                .insert_line
                .ok_or_else(|| missing("insert_line", "insert"))?;
            let new = input.new_str.ok_or_else(|| missing("new_str", "insert"))?;
            let text = s.read_text(&*sandbox, &path).await?;
            let updated = editor::insert(&text, after, &new)?;
            sandbox
                .write_file(&path, Bytes::from(updated.clone()))
                .await?;
            let first = after as usize + 1;
            let snippet = editor::snippet(&updated, first, new.matches('\n').count(), 4);
            let snippet = head_and_tail(&snippet, cap, "the snippet", &s.config.redactor).text;
            Ok(ok(
                format!("inserted after line {after} of {path}; the region now reads:\n{snippet}"),
                json!({"path": path, "inserted_after": after}),
            ))
        }
        EditorCommand::UndoEdit => Err(ToolError::new(
            "not_supported",
            "undo_edit is not offered",
            "undo a change by making the reverse edit with str_replace",
        )),
    }
}
