//! Stateful code: contexts that keep their state between runs, and `run_code` with rich
//! results (the "code interpreter").
//!
//! - A [`CodeContext`] is one kernel: a language, a working directory and the variables earlier
//!   cells left behind. [`Sandbox::create_code_context`], [`list_code_contexts`],
//!   [`restart_code_context`] (state cleared, same id) and [`remove_code_context`] manage them
//!   (capability `stateful_kernel`); a run that names no context uses the language's default one.
//! - [`Sandbox::run_code`] (capability `code_interpreter`) returns a [`CodeRun`]: a stream of
//!   [`CodeEvent`]s (the execution count, stdout and stderr chunks, rich [`CodeResult`]s, an
//!   [`ExecutionError`]) that ends when the cell ends. [`CodeRun::execution`] collects it into
//!   an [`Execution`].
//! - Three knobs, kept apart: [`RunCode::timeout`] bounds the cell (default
//!   [`DEFAULT_EXECUTION_TIMEOUT`]; a cell past it is interrupted and the context keeps its
//!   state), [`RunCode::request_timeout`] bounds only the request that starts it, and the
//!   sandbox's own lifetime is [`CreateSpec::timeout`](crate::CreateSpec) /
//!   [`Sandbox::set_timeout`].
//! - Dropping a [`CodeRun`] before it ends interrupts the cell; the context keeps its state.
//!   When a context's state is gone (its kernel was killed or died) the next call on it fails
//!   with [`ErrorKind::ContextLost`](crate::ErrorKind::ContextLost) — never a silent fresh
//!   context.
//!
//! Providers without a kernel of their own run the [`kernel`] driver (a small standard-library
//! Python program) over exec with stdin; everything that comes from it is marked
//! [`emulated`](Execution::emulated).
//!
//! ```no_run
//! # async fn demo(provider: &dyn sandbox_sdk_core::Provider) -> sandbox_sdk_core::Result<()> {
//! use sandbox_sdk_core::CreateSpec;
//! use sandbox_sdk_core::code::RunCode;
//!
//! let sandbox = provider.create(&CreateSpec::new()).await?;
//! sandbox.run_code(&RunCode::python("x = 20")).await?.execution().await?;
//! let run = sandbox.run_code(&RunCode::python("x * 2 + 2")).await?;
//! let execution = run.execution().await?;
//! assert_eq!(execution.text(), Some("42"));
//! sandbox.destroy().await?;
//! # Ok(()) }
//! ```
//!
//! [`Sandbox::create_code_context`]: crate::Sandbox::create_code_context
//! [`list_code_contexts`]: crate::Sandbox::list_code_contexts
//! [`restart_code_context`]: crate::Sandbox::restart_code_context
//! [`remove_code_context`]: crate::Sandbox::remove_code_context
//! [`Sandbox::run_code`]: crate::Sandbox::run_code
//! [`Sandbox::set_timeout`]: crate::Sandbox::set_timeout

use crate::error::{Error, Result};
use base64::Engine;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

pub mod channel;
pub mod frames;
pub mod kernel;

/// How long a cell may run when [`RunCode::timeout`] is not set: 300 s, as E2B's Python SDK.
pub const DEFAULT_EXECUTION_TIMEOUT: Duration = Duration::from_secs(300);

/// A language a code context runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    /// Python 3.
    #[default]
    Python,
    /// JavaScript (Node).
    JavaScript,
    /// TypeScript (run on the JavaScript kernel where the provider does that).
    TypeScript,
    /// R.
    R,
    /// Java.
    Java,
    /// Bash.
    Bash,
    /// Any other name the provider knows.
    Other(String),
}

impl Language {
    /// Parses a name the way E2B does: case-insensitive, `js` is JavaScript, `ts` TypeScript.
    pub fn parse(name: &str) -> Language {
        match name.trim().to_ascii_lowercase().as_str() {
            "python" | "python3" | "py" => Language::Python,
            "javascript" | "js" | "node" => Language::JavaScript,
            "typescript" | "ts" => Language::TypeScript,
            "r" => Language::R,
            "java" => Language::Java,
            "bash" | "sh" | "shell" => Language::Bash,
            _ => Language::Other(name.trim().to_string()),
        }
    }

    /// The name providers use on the wire (`python`, `javascript`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::R => "r",
            Language::Java => "java",
            Language::Bash => "bash",
            Language::Other(name) => name,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Language {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Language {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(Language::parse(&String::deserialize(d)?))
    }
}

/// What a new code context runs and where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextSpec {
    /// Its language (default Python).
    pub language: Language,
    /// Its working directory; `None` keeps the provider's default (the sandbox's home).
    pub cwd: Option<String>,
}

impl ContextSpec {
    /// A context of `language` in the default directory.
    pub fn new(language: Language) -> Self {
        ContextSpec {
            language,
            cwd: None,
        }
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
}

/// A code context: one kernel whose state lasts from run to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeContext {
    /// The provider's id for it.
    pub id: String,
    /// Its language.
    pub language: Language,
    /// Its working directory, when known.
    pub cwd: Option<String>,
    /// Run by the SDK's emulated kernel, not by the provider.
    pub emulated: bool,
}

/// One cell to run.
///
/// ```
/// use sandbox_sdk_core::code::{Language, RunCode};
/// use std::time::Duration;
///
/// let run = RunCode::python("import os; os.environ['GREETING']")
///     .env("GREETING", "it's safe")
///     .timeout(Duration::from_secs(30));
/// assert_eq!(run.language, Some(Language::Python));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RunCode {
    /// The source of the cell.
    pub code: String,
    /// The context to run in; `None` runs in the default context of [`RunCode::language`].
    pub context: Option<String>,
    /// The language of the default context to use; ignored when `context` is set (it must then
    /// be `None` or that context's language).
    pub language: Option<Language>,
    /// Environment variables set for this cell only (restored afterwards).
    pub env: BTreeMap<String, String>,
    /// How long the cell may run (`None`: [`DEFAULT_EXECUTION_TIMEOUT`]; `Duration::ZERO`: no
    /// limit). A cell past it is interrupted, the context keeps its state, and the run ends with
    /// a `Timeout` error.
    pub timeout: Option<Duration>,
    /// How long the request that starts the cell may take; `None` keeps the client's default.
    pub request_timeout: Option<Duration>,
}

impl RunCode {
    /// A cell of `code` for the default context of the provider's default language.
    pub fn new(code: impl Into<String>) -> Self {
        RunCode {
            code: code.into(),
            ..RunCode::default()
        }
    }

    /// A Python cell for the default Python context.
    pub fn python(code: impl Into<String>) -> Self {
        RunCode::new(code).language(Language::Python)
    }

    /// Runs in context `id`.
    pub fn context(mut self, id: impl Into<String>) -> Self {
        self.context = Some(id.into());
        self
    }

    /// Runs in the default context of `language`.
    pub fn language(mut self, language: Language) -> Self {
        self.language = Some(language);
        self
    }

    /// Sets an environment variable for this cell.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the execution timeout (`Duration::ZERO` = no limit).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the timeout of the request that starts the cell.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// The execution timeout in effect: `None` means no limit.
    pub fn execution_timeout(&self) -> Option<Duration> {
        match self.timeout {
            None => Some(DEFAULT_EXECUTION_TIMEOUT),
            Some(Duration::ZERO) => None,
            Some(limit) => Some(limit),
        }
    }

    /// The language this run asks for: its own, or Python.
    pub fn language_or_default(&self) -> Language {
        self.language.clone().unwrap_or_default()
    }

    /// Checks what every provider rejects: NUL bytes in the code, bad env names and values.
    pub fn validate(&self) -> Result<()> {
        if self.code.contains('\0') {
            return Err(Error::validation("the code contains a NUL byte"));
        }
        if let Some(id) = &self.context
            && (id.is_empty() || id.contains(['\0', '/']))
        {
            return Err(Error::validation(
                "a context id is empty or contains '/' or NUL",
            ));
        }
        crate::exec::validate_env(&self.env)?;
        Ok(())
    }
}

/// Env values may be secrets, so `Debug` shows only their names, and the code only its size.
impl fmt::Debug for RunCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunCode")
            .field("code", &format_args!("<{} bytes>", self.code.len()))
            .field("context", &self.context)
            .field("language", &self.language)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// MIME types of the formats a [`CodeResult`] can carry, with E2B's field names beside them.
pub mod mime {
    /// `text`.
    pub const TEXT: &str = "text/plain";
    /// `html`.
    pub const HTML: &str = "text/html";
    /// `markdown`.
    pub const MARKDOWN: &str = "text/markdown";
    /// `svg`.
    pub const SVG: &str = "image/svg+xml";
    /// `png` (base64 text).
    pub const PNG: &str = "image/png";
    /// `jpeg` (base64 text).
    pub const JPEG: &str = "image/jpeg";
    /// `pdf` (base64 text).
    pub const PDF: &str = "application/pdf";
    /// `latex`.
    pub const LATEX: &str = "text/latex";
    /// `json` (any JSON value).
    pub const JSON: &str = "application/json";
    /// `javascript`.
    pub const JAVASCRIPT: &str = "application/javascript";
    /// `data` (E2B's table data: a pandas frame as columns).
    pub const DATA: &str = "e2b/data";
    /// `chart` (E2B's chart description).
    pub const CHART: &str = "e2b/chart";

    /// E2B's field name for each known MIME type, in E2B's order.
    pub const E2B_FIELDS: [(&str, &str); 12] = [
        ("text", TEXT),
        ("html", HTML),
        ("markdown", MARKDOWN),
        ("svg", SVG),
        ("png", PNG),
        ("jpeg", JPEG),
        ("pdf", PDF),
        ("latex", LATEX),
        ("json", JSON),
        ("javascript", JAVASCRIPT),
        ("data", DATA),
        ("chart", CHART),
    ];
}

/// A format too large to send inline, left as a file in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpilledOutput {
    /// Its MIME type.
    pub mime: String,
    /// The file in the sandbox that holds it (raw bytes, not base64).
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// One rich result: a MIME bundle, the main result of the cell (its last expression) or one of
/// its `display()` results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CodeResult {
    /// The cell's last expression (`true`), or a `display()` result.
    pub is_main_result: bool,
    /// Every format by MIME type ([`mime`]): text formats as strings, binary ones as base64
    /// strings, JSON ones as values. Formats nobody here knows are kept under their own type.
    pub data: BTreeMap<String, serde_json::Value>,
    /// Formats too large to send inline, left as files in the sandbox.
    pub spilled: Vec<SpilledOutput>,
    /// Made by the SDK's emulation (the emulated kernel, or rich results built on a provider's
    /// text-only kernel), not by the provider.
    pub emulated: bool,
}

impl CodeResult {
    /// The format of MIME type `mime`.
    pub fn get(&self, mime: &str) -> Option<&serde_json::Value> {
        self.data.get(mime)
    }

    /// A text format (`text/plain`, `text/html`, ...) as a string.
    pub fn get_str(&self, mime: &str) -> Option<&str> {
        self.data.get(mime).and_then(serde_json::Value::as_str)
    }

    /// The plain-text form.
    pub fn text(&self) -> Option<&str> {
        self.get_str(mime::TEXT)
    }

    /// A base64 format (`image/png`, `image/jpeg`, `application/pdf`) decoded to bytes.
    pub fn binary(&self, mime: &str) -> Option<Vec<u8>> {
        let text = self.get_str(mime)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()
    }

    /// The PNG image, decoded.
    pub fn png(&self) -> Option<Vec<u8>> {
        self.binary(mime::PNG)
    }

    /// The MIME types this result carries, inline or spilled.
    pub fn formats(&self) -> Vec<&str> {
        let mut formats: Vec<&str> = self.data.keys().map(String::as_str).collect();
        formats.extend(self.spilled.iter().map(|s| s.mime.as_str()));
        formats
    }
}

/// The error a cell raised.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionError {
    /// The exception's name (`NameError`, `KeyboardInterrupt`, ...).
    pub name: String,
    /// Its value (the message).
    pub value: String,
    /// The traceback as text.
    pub traceback: String,
}

/// One event of a running cell. Stdout and stderr are never merged.
#[derive(Debug, Clone, PartialEq)]
pub enum CodeEvent {
    /// The context's execution count for this cell (usually first).
    ExecutionCount(u64),
    /// Text the cell wrote to stdout.
    Stdout(String),
    /// Text the cell wrote to stderr.
    Stderr(String),
    /// A rich result.
    Result(CodeResult),
    /// The error the cell raised; the context keeps its state.
    Error(ExecutionError),
    /// The cell wrote more than the output cap: `dropped` bytes of stdout and stderr were left
    /// out after this point.
    Truncated {
        /// How many bytes were dropped.
        dropped: u64,
    },
}

/// A collected cell: what [`CodeRun::execution`] returns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// Rich results in the order they came: `display()` results and the main result.
    pub results: Vec<CodeResult>,
    /// Stdout chunks in order.
    pub stdout: Vec<String>,
    /// Stderr chunks in order.
    pub stderr: Vec<String>,
    /// The error the cell raised, if any.
    pub error: Option<ExecutionError>,
    /// The context's execution count for this cell, when the kernel reports one.
    pub execution_count: Option<u64>,
    /// Bytes of output dropped past the output cap.
    pub truncated_bytes: u64,
    /// Run by the SDK's emulated kernel, or with rich results emulated on the provider's kernel.
    pub emulated: bool,
}

impl Execution {
    /// The main result (the cell's last expression), if any.
    pub fn main_result(&self) -> Option<&CodeResult> {
        self.results.iter().find(|r| r.is_main_result)
    }

    /// The plain text of the main result.
    pub fn text(&self) -> Option<&str> {
        self.main_result().and_then(CodeResult::text)
    }

    /// All stdout as one string.
    pub fn stdout_text(&self) -> String {
        self.stdout.concat()
    }

    /// All stderr as one string.
    pub fn stderr_text(&self) -> String {
        self.stderr.concat()
    }

    /// Adds one event.
    pub fn push(&mut self, event: CodeEvent) {
        match event {
            CodeEvent::ExecutionCount(count) => self.execution_count = Some(count),
            CodeEvent::Stdout(text) => self.stdout.push(text),
            CodeEvent::Stderr(text) => self.stderr.push(text),
            CodeEvent::Result(result) => self.results.push(result),
            CodeEvent::Error(error) => {
                // The first error is the cell's; later ones (a kernel's second report) add nothing.
                if self.error.is_none() {
                    self.error = Some(error);
                }
            }
            CodeEvent::Truncated { dropped } => self.truncated_bytes += dropped,
        }
    }
}

/// The error of a context whose state is gone (its kernel died or was killed): every call on
/// it answers this until it is restarted or removed, never a silent fresh kernel.
pub fn context_lost(id: &str, why: &str) -> Error {
    Error::new(
        crate::ErrorKind::ContextLost,
        format!(
            "code context {id} lost its state ({why}); restart it to start afresh, or remove it"
        ),
    )
}

/// Stdout and stderr of one cell kept up to a byte limit; what is past it is counted, for a
/// [`CodeEvent::Truncated`] at the end. Adapters reading a provider's kernel use it so a native
/// cell is bounded as the emulated kernel bounds its own ([`kernel::MAX_OUTPUT`]).
#[derive(Debug, Clone)]
pub struct OutputBudget {
    limit: usize,
    kept: usize,
    dropped: u64,
}

impl OutputBudget {
    /// Room for `limit` bytes.
    pub fn new(limit: usize) -> Self {
        OutputBudget {
            limit,
            kept: 0,
            dropped: 0,
        }
    }

    /// The part of `text` that still fits (cut at a character boundary); the rest is counted.
    /// Once anything was left out, everything after it is too, so what is kept has no gap.
    pub fn admit(&mut self, text: String) -> Option<String> {
        let room = if self.dropped > 0 {
            0
        } else {
            self.limit.saturating_sub(self.kept)
        };
        if text.len() <= room {
            self.kept += text.len();
            return (!text.is_empty()).then_some(text);
        }
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.kept += cut;
        self.dropped += (text.len() - cut) as u64;
        (cut > 0).then(|| text[..cut].to_owned())
    }

    /// Counts `bytes` left out for another reason (a line over a frame bound).
    pub fn count_dropped(&mut self, bytes: u64) {
        self.dropped += bytes;
    }

    /// The event that reports what was left out, if anything was.
    pub fn truncated(&self) -> Option<CodeEvent> {
        (self.dropped > 0).then_some(CodeEvent::Truncated {
            dropped: self.dropped,
        })
    }
}

/// The stream a provider hands to [`CodeRun::new`]: the cell's events, ending after the last
/// one (`None`) when the cell ended, or with an error when it could not end cleanly (a
/// `Timeout`, a lost connection, a `ContextLost` kernel).
pub type CodeEventStream = BoxStream<'static, Result<CodeEvent>>;

/// A running cell: a stream of [`CodeEvent`]s. Dropping it before it ends interrupts the cell.
pub struct CodeRun {
    context: CodeContext,
    events: CodeEventStream,
}

impl fmt::Debug for CodeRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeRun")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl CodeRun {
    /// Builds a run from the provider's parts.
    pub fn new(context: CodeContext, events: CodeEventStream) -> Self {
        CodeRun { context, events }
    }

    /// The context the cell runs in.
    pub fn context(&self) -> &CodeContext {
        &self.context
    }

    /// Whether the kernel is the SDK's emulation.
    pub fn is_emulated(&self) -> bool {
        self.context.emulated
    }

    /// Waits for the cell to end and collects its events. A cell that raised is still `Ok`
    /// (see [`Execution::error`]); a cell that could not end cleanly is the stream's error.
    pub async fn execution(mut self) -> Result<Execution> {
        let mut execution = Execution {
            emulated: self.context.emulated,
            ..Execution::default()
        };
        while let Some(event) = self.events.next().await {
            let event = event?;
            if let CodeEvent::Result(result) = &event
                && result.emulated
            {
                execution.emulated = true;
            }
            execution.push(event);
        }
        Ok(execution)
    }
}

impl Stream for CodeRun {
    type Item = Result<CodeEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_next_unpin(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_budget_cuts_at_a_character_boundary_and_counts_the_rest() {
        let mut budget = OutputBudget::new(5);
        assert_eq!(budget.admit("abc".into()).as_deref(), Some("abc"));
        // "é" is two bytes: only one byte of room is left after "d", so it is cut before it.
        assert_eq!(budget.admit("dé!".into()).as_deref(), Some("d"));
        assert_eq!(budget.admit("more".into()), None);
        assert_eq!(
            budget.truncated(),
            Some(CodeEvent::Truncated { dropped: 7 })
        );
        assert_eq!(OutputBudget::new(1).truncated(), None);
    }

    #[test]
    fn languages_parse_as_e2b_names_them() {
        assert_eq!(Language::parse("JS"), Language::JavaScript);
        assert_eq!(Language::parse("ts"), Language::TypeScript);
        assert_eq!(Language::parse("Python"), Language::Python);
        assert_eq!(Language::parse("lua"), Language::Other("lua".into()));
        assert_eq!(Language::JavaScript.to_string(), "javascript");
    }

    #[test]
    fn the_three_timeouts_default_apart() {
        let run = RunCode::python("1");
        assert_eq!(run.execution_timeout(), Some(DEFAULT_EXECUTION_TIMEOUT));
        assert_eq!(run.request_timeout, None);
        assert_eq!(
            run.clone().timeout(Duration::ZERO).execution_timeout(),
            None
        );
    }

    #[test]
    fn debug_hides_env_values_and_code() {
        let run = RunCode::python("secret = 'hunter2'").env("TOKEN", "s3cr3t");
        let text = format!("{run:?}");
        assert!(
            !text.contains("s3cr3t") && !text.contains("hunter2"),
            "{text}"
        );
        assert!(text.contains("TOKEN"), "{text}");
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let bad = RunCode::python("1").env("1X", "v");
        assert!(bad.validate().unwrap_err().to_string().contains("1X"));
        assert!(RunCode::python("a\0b").validate().is_err());
        assert!(RunCode::python("1").context("../x").validate().is_err());
    }

    #[test]
    fn an_execution_keeps_the_first_error_and_finds_the_main_result() {
        let mut execution = Execution::default();
        let mut main = CodeResult {
            is_main_result: true,
            ..CodeResult::default()
        };
        main.data.insert(mime::TEXT.into(), "42".into());
        execution.push(CodeEvent::Result(CodeResult::default()));
        execution.push(CodeEvent::Result(main));
        execution.push(CodeEvent::Error(ExecutionError {
            name: "A".into(),
            ..ExecutionError::default()
        }));
        execution.push(CodeEvent::Error(ExecutionError {
            name: "B".into(),
            ..ExecutionError::default()
        }));
        assert_eq!(execution.text(), Some("42"));
        assert_eq!(execution.error.unwrap().name, "A");
    }
}
