//! The code-interpreter tool: a cell run in a stateful code context, with its output, its error,
//! its rich results as text and its images as images.

use super::commands::GRACE;
use super::{Def, make, ok};
use crate::config::ToolConfig;
use crate::result::{ToolError, ToolImage, ToolResult};
use crate::session::Session;
use crate::tool::{Annotations, Family};
use crate::truncate::{CappedBuffer, Truncated, head_and_tail};
use base64::Engine;
use futures::StreamExt;
use sandbox_sdk_core::code::{
    CodeContext, CodeEvent, CodeResult, CodeRun, ContextSpec, ExecutionError, Language, RunCode,
    mime,
};
use sandbox_sdk_core::{Capability, Error, ErrorKind};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The `context` value that asks for a fresh context.
pub(crate) const NEW_CONTEXT: &str = "new";

/// The most rich results kept from one cell; later ones are counted, not kept.
pub(crate) const MAX_RESULTS: usize = 32;

/// The image formats returned as images, in the order a result's first one is picked.
pub(crate) const IMAGE_FORMATS: [&str; 4] = [mime::PNG, mime::JPEG, "image/gif", "image/webp"];

/// The formats shown as a result's text, the first one it has: plain text, else markdown,
/// HTML, JSON, LaTeX, and SVG source last.
pub(crate) const TEXT_FORMATS: [&str; 6] = [
    mime::TEXT,
    mime::MARKDOWN,
    mime::HTML,
    mime::JSON,
    mime::LATEX,
    mime::SVG,
];

pub(super) fn defs() -> Vec<Def> {
    vec![Def {
        name: "sandbox_run_code_v1",
        title: "Run code in a stateful interpreter",
        description: "Run a cell of code (Python unless language says otherwise) in a stateful interpreter in the sandbox, as in a Jupyter notebook: variables, imports and definitions carry over to later calls in the same context. Returns stdout and stderr (long output keeps its beginning and end), the error the cell raised with its traceback, the value of its last expression and whatever it displayed (as text; plots and images come back as images), the execution count, and the context_id it ran in. Omit context to use the language's default context; pass an earlier context_id to continue in that one, or context: \"new\" for a fresh, separate one; add restart: true (with a context_id) to clear that context's state first. A cell still running at its timeout is interrupted and the context keeps its state. For shell commands and programs use sandbox_run_v1 instead.",
        annotations: Annotations::DESTRUCTIVE,
        family: Family::Standard,
        requires: &[Capability::CodeInterpreter],
        needs_provider: false,
        native: None,
        build: |def, s| {
            make::<RunCodeInput>(
                def,
                s,
                |s, i| Box::pin(run_code(s, i)),
                |i, s| s.command_timeout(i.timeout_secs) + GRACE,
            )
        },
    }]
}

/// Input of `sandbox_run_code_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunCodeInput {
    /// The code of the cell, for example `import math\nmath.sqrt(2)`. Its last expression is
    /// its result.
    pub code: String,
    /// The language: python (the default), javascript, typescript, r, java or bash, as far as
    /// the sandbox's interpreter runs it. Ignored for an existing context, which keeps its own.
    #[serde(default)]
    pub language: Option<String>,
    /// Which context to run in: omit for the language's default context, pass a context_id an
    /// earlier call returned to continue in it, or "new" for a fresh context of its own.
    #[serde(default)]
    pub context: Option<String>,
    /// Restart the context named by `context` before running: its state is cleared, its id
    /// stays. Needs a context_id.
    #[serde(default)]
    pub restart: bool,
    /// Seconds the cell may run before it is interrupted (default 60, capped by the tool set).
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    /// The sandbox to run in; omit for the current sandbox.
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

/// What a cell left, collected in bounded memory.
#[derive(Debug, Clone)]
pub(crate) struct CodeOutcome {
    pub stdout: CappedBuffer,
    pub stderr: CappedBuffer,
    pub results: Vec<CodeResult>,
    /// Results past [`MAX_RESULTS`], not kept.
    pub results_left_out: usize,
    pub error: Option<ExecutionError>,
    pub execution_count: Option<u64>,
    /// Output bytes the kernel dropped past its own cap.
    pub kernel_dropped: u64,
    pub emulated: bool,
    pub timed_out: bool,
}

impl CodeOutcome {
    /// Nothing yet, each stream capped at `cap` bytes.
    pub fn new(cap: usize) -> Self {
        CodeOutcome {
            stdout: CappedBuffer::new(cap),
            stderr: CappedBuffer::new(cap),
            results: Vec::new(),
            results_left_out: 0,
            error: None,
            execution_count: None,
            kernel_dropped: 0,
            emulated: false,
            timed_out: false,
        }
    }

    fn push(&mut self, event: CodeEvent) {
        match event {
            CodeEvent::ExecutionCount(count) => self.execution_count = Some(count),
            CodeEvent::Stdout(text) => self.stdout.push(text.as_bytes()),
            CodeEvent::Stderr(text) => self.stderr.push(text.as_bytes()),
            CodeEvent::Result(result) => {
                self.emulated |= result.emulated;
                if self.results.len() < MAX_RESULTS {
                    self.results.push(result);
                } else {
                    self.results_left_out += 1;
                }
            }
            CodeEvent::Error(error) => {
                if self.error.is_none() {
                    self.error = Some(error);
                }
            }
            CodeEvent::Truncated { dropped } => self.kernel_dropped += dropped,
        }
    }
}

/// How the context of a run was reached.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ContextUse {
    pub context: CodeContext,
    pub created: bool,
    pub restarted: bool,
}

async fn run_code(s: Arc<Session>, input: RunCodeInput) -> Result<ToolResult, ToolError> {
    if input.code.trim().is_empty() {
        return Err(ToolError::invalid_input(
            "the code is empty",
            "pass the code of the cell to run",
        ));
    }
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let language = input
        .language
        .as_deref()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(Language::parse);
    let limit = s.command_timeout(input.timeout_secs);
    let mut request = RunCode::new(input.code).timeout(limit);
    let (mut created, mut restarted) = (false, false);
    match input
        .context
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        Some(NEW_CONTEXT) => {
            let mut spec = ContextSpec::new(language.unwrap_or_default());
            if let Some(root) = s.config.paths.root() {
                spec = spec.cwd(root);
            }
            let context = sandbox.create_code_context(&spec).await?;
            request = request.context(context.id);
            created = true;
        }
        Some(id) => {
            request = request.context(id);
            request.validate()?;
            if input.restart {
                sandbox.restart_code_context(id).await?;
                restarted = true;
            }
        }
        None if input.restart => {
            return Err(ToolError::invalid_input(
                "restart needs the context to restart",
                "pass the context_id an earlier call returned as context, or context: \"new\" for a fresh context",
            ));
        }
        None => request = request.language(language.unwrap_or_default()),
    }
    request.validate()?;
    let run = sandbox.run_code(&request).await?;
    let context = run.context().clone();
    let outcome = collect(run, s.config.max_output_bytes).await?;
    let used = ContextUse {
        context,
        created,
        restarted,
    };
    Ok(render_code(&outcome, &used, sandbox.id(), limit, &s.config))
}

/// Collects a run's events; a cell past its timeout is an outcome with `timed_out`, any other
/// failure of the run (a lost kernel, a lost connection) is the error.
async fn collect(mut run: CodeRun, cap: usize) -> Result<CodeOutcome, Error> {
    let mut outcome = CodeOutcome::new(cap);
    outcome.emulated = run.is_emulated();
    while let Some(event) = run.next().await {
        match event {
            Ok(event) => outcome.push(event),
            Err(e) if e.kind() == ErrorKind::Timeout => {
                outcome.timed_out = true;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(outcome)
}

fn stream_json(t: &Truncated) -> Value {
    json!({"text": t.text, "total_bytes": t.total_bytes, "cut_bytes": t.cut_bytes})
}

/// Drops ANSI escape sequences (the colours of IPython tracebacks).
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // Parameters and intermediates, up to a final byte in '@'..='~'.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

/// A result's text form: its first format of [`TEXT_FORMATS`], with that format's name.
fn text_form(result: &CodeResult) -> Option<(&'static str, String)> {
    TEXT_FORMATS.iter().find_map(|format| {
        let value = result.get(format)?;
        let text = match value {
            Value::String(text) => text.clone(),
            other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
        };
        Some((*format, text))
    })
}

/// A result's image, decoded: its first format of [`IMAGE_FORMATS`].
fn image_of(result: &CodeResult) -> Option<(&'static str, Result<Vec<u8>, ()>)> {
    IMAGE_FORMATS.iter().find_map(|format| {
        let text = result.get_str(format)?;
        let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|_| ());
        Some((*format, bytes))
    })
}

/// The run's result for the model: a header naming the context, then stdout, stderr, the
/// error and each result as text, each capped; images (within [`ToolConfig::max_images`] and
/// [`ToolConfig::max_image_bytes`]) after the text, and what was left out said in it.
pub(crate) fn render_code(
    outcome: &CodeOutcome,
    used: &ContextUse,
    sandbox_id: &str,
    limit: Duration,
    config: &ToolConfig,
) -> ToolResult {
    let redactor = &config.redactor;
    let cap = config.max_output_bytes;
    let context = &used.context;
    let mut text = String::new();
    let count = outcome
        .execution_count
        .map(|n| format!("cell [{n}]"))
        .unwrap_or_else(|| "the cell".to_owned());
    let kernel = if outcome.emulated || context.emulated {
        ", the SDK's emulated kernel"
    } else {
        ""
    };
    let how = match (used.created, used.restarted) {
        (true, _) => "new context",
        (_, true) => "context, restarted first",
        _ => "context",
    };
    if outcome.timed_out {
        text.push_str(&format!(
            "{count} timed out after {}s and was interrupted (the context keeps its state); {how} {} ({}{kernel}); output so far:\n",
            limit.as_secs_f64(),
            context.id,
            context.language,
        ));
    } else {
        text.push_str(&format!(
            "{count} ran in {how} {} ({}{kernel})\n",
            context.id, context.language
        ));
    }

    let stdout = outcome.stdout.render("stdout", redactor);
    let stderr = outcome.stderr.render("stderr", redactor);
    for (label, stream) in [("stdout", &stdout), ("stderr", &stderr)] {
        if stream.total_bytes > 0 {
            text.push_str(&format!("--- {label} ---\n{}", stream.text));
            if !stream.text.ends_with('\n') {
                text.push('\n');
            }
        }
    }

    let error = outcome.error.as_ref().map(|e| {
        let traceback = head_and_tail(&strip_ansi(&e.traceback), cap, "the traceback", redactor);
        let value = head_and_tail(&strip_ansi(&e.value), cap / 4, "the error", redactor);
        (e.name.clone(), value, traceback)
    });
    if let Some((name, value, traceback)) = &error {
        text.push_str(&format!("--- error: {name}: {} ---\n", value.text));
        if !traceback.text.is_empty() {
            text.push_str(&traceback.text);
            if !traceback.text.ends_with('\n') {
                text.push('\n');
            }
        }
    }

    // Results share a budget of twice the stream cap; each shows at most the stream cap.
    let mut budget = cap.saturating_mul(2);
    let mut images: Vec<ToolImage> = Vec::new();
    let mut image_bytes = 0usize;
    let mut images_json = Vec::new();
    let mut left_out_json = Vec::new();
    let mut results_json = Vec::new();
    for (index, result) in outcome.results.iter().enumerate() {
        let formats: Vec<&str> = result.formats();
        let kind = if result.is_main_result {
            "result"
        } else {
            "displayed"
        };
        text.push_str(&format!(
            "--- {kind} {} (formats: {}) ---\n",
            index + 1,
            formats.join(", ")
        ));
        let shown = text_form(result).map(|(format, body)| {
            let room = cap.min(budget);
            let shown = head_and_tail(&body, room, format, redactor);
            budget = budget.saturating_sub(shown.text.len().min(room));
            (format, shown)
        });
        match &shown {
            Some((_, shown)) if !shown.text.is_empty() => {
                text.push_str(&shown.text);
                if !shown.text.ends_with('\n') {
                    text.push('\n');
                }
            }
            Some(_) => {}
            None => text.push_str("(no text form)\n"),
        }

        let mut image_index = Value::Null;
        if let Some((format, decoded)) = image_of(result) {
            let reason = match &decoded {
                Err(()) => Some("its data is not valid base64".to_owned()),
                Ok(_) if images.len() >= config.max_images => Some(format!(
                    "a result carries at most {} images",
                    config.max_images
                )),
                Ok(bytes) if image_bytes + bytes.len() > config.max_image_bytes => Some(format!(
                    "it would take the images past {} bytes in all",
                    config.max_image_bytes
                )),
                Ok(_) => None,
            };
            let size = decoded.as_ref().map(Vec::len).unwrap_or(0);
            match (reason, decoded) {
                (None, Ok(bytes)) => {
                    image_bytes += bytes.len();
                    image_index = json!(images.len());
                    images_json.push(
                        json!({"result": index + 1, "mime_type": format, "bytes": bytes.len()}),
                    );
                    text.push_str(&format!(
                        "[image {} attached: {format}, {} bytes]\n",
                        images.len() + 1,
                        bytes.len()
                    ));
                    images.push(ToolImage {
                        mime_type: format.to_owned(),
                        data: base64::engine::general_purpose::STANDARD.encode(&bytes),
                    });
                }
                (reason, _) => {
                    let reason = reason.unwrap_or_default();
                    text.push_str(&format!(
                        "[image left out: {format}, {size} bytes: {reason}]\n"
                    ));
                    left_out_json.push(json!({
                        "result": index + 1, "mime_type": format, "bytes": size, "reason": reason,
                    }));
                }
            }
        }
        for spilled in &result.spilled {
            text.push_str(&format!(
                "[{} of {} bytes was too large to return; it is in the sandbox at {}]\n",
                spilled.mime, spilled.bytes, spilled.path
            ));
            if IMAGE_FORMATS.contains(&spilled.mime.as_str()) {
                left_out_json.push(json!({
                    "result": index + 1, "mime_type": spilled.mime, "bytes": spilled.bytes,
                    "reason": format!("too large to return inline; in the sandbox at {}", spilled.path),
                }));
            }
        }
        results_json.push(json!({
            "is_main_result": result.is_main_result,
            "formats": formats,
            "text_format": shown.as_ref().map(|(f, _)| *f),
            "text": shown.as_ref().map(|(_, t)| t.text.clone()),
            "text_cut_bytes": shown.as_ref().map(|(_, t)| t.cut_bytes),
            "image": image_index,
            "spilled": result.spilled.iter().map(|s| json!({"mime": s.mime, "path": s.path, "bytes": s.bytes})).collect::<Vec<_>>(),
        }));
    }
    if outcome.results_left_out > 0 {
        text.push_str(&format!(
            "[{} more results left out: only the first {MAX_RESULTS} are returned]\n",
            outcome.results_left_out
        ));
    }
    if outcome.kernel_dropped > 0 {
        text.push_str(&format!(
            "[the kernel dropped {} bytes of output past its own limit]\n",
            outcome.kernel_dropped
        ));
    }
    if outcome.stdout.total() == 0
        && outcome.stderr.total() == 0
        && outcome.error.is_none()
        && outcome.results.is_empty()
    {
        text.push_str("(no output and no result)\n");
    }
    text.push_str(&format!(
        "(pass context: \"{}\" to run more code in this context)",
        context.id
    ));

    let error_json = match &error {
        Some((name, value, traceback)) => json!({
            "name": name,
            "value": value.text,
            "traceback": traceback.text,
            "traceback_cut_bytes": traceback.cut_bytes,
        }),
        None => Value::Null,
    };
    ok(
        text,
        json!({
            "sandbox_id": sandbox_id,
            "context_id": context.id,
            "language": context.language.as_str(),
            "new_context": used.created,
            "restarted": used.restarted,
            "execution_count": outcome.execution_count,
            "emulated": outcome.emulated || context.emulated,
            "timed_out": outcome.timed_out,
            "stdout": stream_json(&stdout),
            "stderr": stream_json(&stderr),
            "error": error_json,
            "results": results_json,
            "results_left_out": outcome.results_left_out,
            "images": images_json,
            "images_left_out": left_out_json,
            "kernel_dropped_bytes": outcome.kernel_dropped,
        }),
    )
    .with_images(images)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Redactor;
    use sandbox_sdk_core::code::SpilledOutput;

    fn config() -> ToolConfig {
        ToolConfig {
            redactor: Redactor::new(),
            ..ToolConfig::default()
        }
    }

    fn used() -> ContextUse {
        ContextUse {
            context: CodeContext {
                id: "ctx-1".into(),
                language: Language::Python,
                cwd: None,
                emulated: true,
            },
            created: false,
            restarted: false,
        }
    }

    fn result(main: bool, formats: &[(&str, Value)]) -> CodeResult {
        let mut r = CodeResult {
            is_main_result: main,
            ..CodeResult::default()
        };
        for (mime, value) in formats {
            r.data.insert((*mime).to_owned(), value.clone());
        }
        r
    }

    fn png(len: usize) -> Value {
        json!(base64::engine::general_purpose::STANDARD.encode(vec![7u8; len]))
    }

    fn render(outcome: &CodeOutcome, config: &ToolConfig) -> ToolResult {
        render_code(outcome, &used(), "sbx", Duration::from_secs(60), config)
    }

    #[test]
    fn output_error_and_results_are_all_in_the_text() {
        let mut outcome = CodeOutcome::new(1024);
        outcome.push(CodeEvent::ExecutionCount(3));
        outcome.push(CodeEvent::Stdout("hello\n".into()));
        outcome.push(CodeEvent::Stderr("warn".into()));
        outcome.push(CodeEvent::Result(result(
            false,
            &[(mime::HTML, json!("<b>hi</b>"))],
        )));
        outcome.push(CodeEvent::Result(result(
            true,
            &[(mime::TEXT, json!("42")), (mime::HTML, json!("<i>42</i>"))],
        )));
        outcome.push(CodeEvent::Error(ExecutionError {
            name: "ValueError".into(),
            value: "bad".into(),
            traceback: "\u{1b}[0;31mTraceback\u{1b}[0m (most recent call last)\nValueError: bad"
                .into(),
        }));
        let r = render(&outcome, &config());
        assert!(!r.is_error);
        assert!(r.images.is_empty());
        let t = &r.text;
        assert!(
            t.starts_with("cell [3] ran in context ctx-1 (python, the SDK's emulated kernel)\n"),
            "{t}"
        );
        assert!(
            t.contains("--- stdout ---\nhello\n--- stderr ---\nwarn\n"),
            "{t}"
        );
        assert!(
            t.contains("--- error: ValueError: bad ---\nTraceback (most recent call last)\n"),
            "{t}"
        );
        assert!(!t.contains('\u{1b}'), "{t}");
        // No plain text: the HTML is the text.
        assert!(
            t.contains("--- displayed 1 (formats: text/html) ---\n<b>hi</b>\n"),
            "{t}"
        );
        assert!(
            t.contains("--- result 2 (formats: text/html, text/plain) ---\n42\n"),
            "{t}"
        );
        assert!(
            t.ends_with("(pass context: \"ctx-1\" to run more code in this context)"),
            "{t}"
        );
        let s = &r.structured;
        assert_eq!(s["context_id"], "ctx-1");
        assert_eq!(s["execution_count"], 3);
        assert_eq!(s["emulated"], true);
        assert_eq!(s["error"]["name"], "ValueError");
        assert_eq!(s["results"][0]["text_format"], "text/html");
        assert_eq!(s["results"][1]["text"], "42");
        assert_eq!(
            s["results"][1]["formats"],
            json!(["text/html", "text/plain"])
        );
    }

    #[test]
    fn images_come_back_as_images_within_the_count_and_byte_caps() {
        let config = ToolConfig {
            max_images: 2,
            max_image_bytes: 1000,
            ..config()
        };
        let mut outcome = CodeOutcome::new(1024);
        for len in [400, 500, 200, 50] {
            outcome.push(CodeEvent::Result(result(
                false,
                &[(mime::PNG, png(len)), (mime::TEXT, json!("<Figure>"))],
            )));
        }
        // Over the byte budget after the first two? 400 + 500 = 900; 200 more would be 1100.
        let r = render(&outcome, &config);
        assert_eq!(r.images.len(), 2);
        assert_eq!(r.images[0].mime_type, "image/png");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&r.images[1].data)
            .unwrap();
        assert_eq!(decoded.len(), 500);
        assert!(
            r.text.contains("[image 1 attached: image/png, 400 bytes]"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains(
                "[image left out: image/png, 200 bytes: a result carries at most 2 images]"
            ),
            "{}",
            r.text
        );
        assert_eq!(r.structured["images"].as_array().unwrap().len(), 2);
        assert_eq!(r.structured["images_left_out"].as_array().unwrap().len(), 2);
        assert_eq!(r.structured["results"][0]["image"], 0);
        assert_eq!(r.structured["results"][2]["image"], Value::Null);
        // No base64 in the text or the structured form.
        let b64 = r.images[0].data.as_str();
        assert!(!r.text.contains(b64) && !r.structured.to_string().contains(b64));

        let config = ToolConfig {
            max_images: 4,
            max_image_bytes: 1000,
            ..config
        };
        let r = render(&outcome, &config);
        assert_eq!(r.images.len(), 3, "{}", r.text);
        assert!(
            r.text.contains("[image left out: image/png, 200 bytes: it would take the images past 1000 bytes in all]"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("[image 3 attached: image/png, 50 bytes]"),
            "{}",
            r.text
        );
    }

    #[test]
    fn bad_spilled_and_svg_images_are_said_not_sent() {
        let mut outcome = CodeOutcome::new(1024);
        outcome.push(CodeEvent::Result(result(
            true,
            &[(mime::JPEG, json!("%%%not base64"))],
        )));
        let mut spilled = result(false, &[(mime::TEXT, json!("<Figure>"))]);
        spilled.spilled.push(SpilledOutput {
            mime: mime::PNG.into(),
            path: ".sbox/out/abc.image_png".into(),
            bytes: 3_000_000,
        });
        outcome.push(CodeEvent::Result(spilled));
        outcome.push(CodeEvent::Result(result(
            false,
            &[(mime::SVG, json!("<svg/>"))],
        )));
        let r = render(&outcome, &config());
        assert!(r.images.is_empty());
        assert!(
            r.text
                .contains("[image left out: image/jpeg, 0 bytes: its data is not valid base64]"),
            "{}",
            r.text
        );
        assert!(r.text.contains("(no text form)"), "{}", r.text);
        assert!(
            r.text.contains("[image/png of 3000000 bytes was too large to return; it is in the sandbox at .sbox/out/abc.image_png]"),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("--- displayed 3 (formats: image/svg+xml) ---\n<svg/>\n"),
            "{}",
            r.text
        );
        assert_eq!(r.structured["images_left_out"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn long_output_tracebacks_and_results_are_capped_head_and_tail() {
        let config = ToolConfig {
            max_output_bytes: 100,
            ..config()
        };
        let mut outcome = CodeOutcome::new(100);
        outcome.push(CodeEvent::Stdout(format!("START{}END", "x".repeat(10_000))));
        outcome.push(CodeEvent::Error(ExecutionError {
            name: "E".into(),
            value: "v".into(),
            traceback: format!("TOP{}BOTTOM", "t".repeat(10_000)),
        }));
        for _ in 0..5 {
            outcome.push(CodeEvent::Result(result(
                false,
                &[(mime::TEXT, json!(format!("HEAD{}TAIL", "r".repeat(10_000))))],
            )));
        }
        outcome.push(CodeEvent::Truncated { dropped: 77 });
        let r = render(&outcome, &config);
        assert!(r.text.len() < 2_000, "{}", r.text.len());
        assert!(
            r.text.contains("START") && r.text.contains("END"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("bytes cut from the middle of stdout"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("TOP") && r.text.contains("BOTTOM"),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("bytes cut from the middle of the traceback"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("HEAD") && r.text.contains("TAIL"),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("[the kernel dropped 77 bytes of output past its own limit]")
        );
        assert_eq!(r.structured["kernel_dropped_bytes"], 77);
        assert!(r.structured["stdout"]["cut_bytes"].as_u64().unwrap() > 0);
    }

    #[test]
    fn results_past_the_limit_are_counted_and_a_timeout_says_so() {
        let mut outcome = CodeOutcome::new(1024);
        for _ in 0..MAX_RESULTS + 3 {
            outcome.push(CodeEvent::Result(result(
                false,
                &[(mime::TEXT, json!("r"))],
            )));
        }
        outcome.timed_out = true;
        let r = render(&outcome, &config());
        assert!(
            r.text
                .starts_with("the cell timed out after 60s and was interrupted"),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("[3 more results left out: only the first 32 are returned]")
        );
        assert_eq!(r.structured["results_left_out"], 3);
        assert_eq!(r.structured["timed_out"], true);

        let empty = render(&CodeOutcome::new(10), &config());
        assert!(
            empty.text.contains("(no output and no result)"),
            "{}",
            empty.text
        );
    }

    #[test]
    fn ansi_sequences_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[1;31mred\u{1b}[0m plain\u{1b}"),
            "red plain"
        );
    }
}
