//! `sbox code`: one cell in a sandbox's stateful code interpreter, from the shell.

use futures::StreamExt;
use sandbox_sdk_core::Sandbox;
use sandbox_sdk_core::code::{CodeEvent, CodeResult, Language, RunCode, mime};
use sandbox_sdk_core::text::escape_controls;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

use crate::Fail;

/// What `sbox code` was asked to run and how.
#[derive(Debug)]
pub struct CodeRequest {
    /// The cell's source.
    pub code: String,
    /// The context to run in; `None` is the language's default context.
    pub context: Option<String>,
    /// The language; `None` is Python (or the context's own).
    pub language: Option<String>,
    /// How long the cell may run; `None` is the SDK's default.
    pub timeout: Option<Duration>,
    /// Where to save images, when asked.
    pub save_images: Option<PathBuf>,
}

/// The formats saved as image files, with their file extensions.
const IMAGE_FILES: [(&str, &str); 5] = [
    (mime::PNG, "png"),
    (mime::JPEG, "jpg"),
    ("image/gif", "gif"),
    ("image/webp", "webp"),
    (mime::SVG, "svg"),
];

/// Where the code comes from: `-c CODE`, a file, or `-` for stdin.
pub async fn source(code: Option<String>, file: Option<&Path>) -> Result<String, Fail> {
    match (code, file) {
        (Some(code), _) => Ok(code),
        (None, Some(path)) if path == Path::new("-") => {
            let mut text = String::new();
            tokio::io::AsyncReadExt::read_to_string(&mut tokio::io::stdin(), &mut text)
                .await
                .map_err(|e| format!("cannot read the code from stdin: {e}"))?;
            Ok(text)
        }
        (None, Some(path)) => tokio::fs::read_to_string(path)
            .await
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        (None, None) => Err("no code given: pass -c CODE, a FILE, or - to read stdin".to_owned()),
    }
}

/// Runs the cell: stdout and stderr stream through as they come, each result's text goes to
/// stdout (a displayed result's only when it has no image), the error's traceback to stderr
/// with status 1. Images are saved under `save_images` when given (their paths on stderr),
/// else counted on stderr. Ctrl-C interrupts the cell (the context keeps its state) and exits
/// with 130.
pub async fn run(sandbox: &dyn Sandbox, request: CodeRequest) -> Result<ExitCode, Fail> {
    let mut run_code = RunCode::new(request.code);
    if let Some(context) = request.context {
        run_code = run_code.context(context);
    }
    match (request.language, run_code.context.is_some()) {
        (Some(language), _) => run_code = run_code.language(Language::parse(&language)),
        (None, false) => run_code = run_code.language(Language::Python),
        (None, true) => {}
    }
    if let Some(timeout) = request.timeout {
        run_code = run_code.timeout(timeout);
    }
    run_code.validate().map_err(|e| e.to_string())?;
    if let Some(dir) = &request.save_images {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let interrupted = crate::interrupt()?;
    tokio::pin!(interrupted);
    let mut run = sandbox
        .run_code(&run_code)
        .await
        .map_err(|e| e.to_string())?;
    let (mut stdout, mut stderr) = (tokio::io::stdout(), tokio::io::stderr());
    let mut failed = false;
    let mut images_seen = 0usize;
    let mut saved = 0usize;
    loop {
        let event = tokio::select! {
            event = run.next() => event,
            _ = &mut interrupted => {
                // Dropping the run interrupts the cell; the context keeps its state.
                drop(run);
                eprintln!("sbox: interrupted; the cell was interrupted");
                return Ok(ExitCode::from(130));
            }
        };
        let Some(event) = event else { break };
        let written = match event.map_err(|e| e.to_string())? {
            CodeEvent::ExecutionCount(_) => Ok(()),
            CodeEvent::Stdout(text) => crate::write_through(&mut stdout, text.as_bytes()).await,
            CodeEvent::Stderr(text) => crate::write_through(&mut stderr, text.as_bytes()).await,
            CodeEvent::Result(result) => {
                let images = images(&result);
                if let Some(text) = result_text(&result, !images.is_empty()) {
                    let mut line = text.to_owned();
                    if !line.ends_with('\n') {
                        line.push('\n');
                    }
                    if let Err(e) = crate::write_through(&mut stdout, line.as_bytes()).await {
                        drop(run);
                        return Err(crate::out::failed(e));
                    }
                }
                for (format, ext, bytes) in images {
                    images_seen += 1;
                    if let Some(dir) = &request.save_images {
                        let path = save(dir, ext, &bytes).await?;
                        saved += 1;
                        eprintln!(
                            "sbox: saved {format} to {}",
                            escape_controls(&path.display().to_string())
                        );
                    }
                }
                for spilled in &result.spilled {
                    eprintln!(
                        "sbox: {} of {} bytes was left in the sandbox at {}",
                        spilled.mime,
                        spilled.bytes,
                        escape_controls(&spilled.path)
                    );
                }
                Ok(())
            }
            CodeEvent::Error(error) => {
                failed = true;
                let mut shown = if error.traceback.trim().is_empty() {
                    format!("{}: {}", error.name, error.value)
                } else {
                    error.traceback.clone()
                };
                if !shown.ends_with('\n') {
                    shown.push('\n');
                }
                crate::write_through(&mut stderr, shown.as_bytes()).await
            }
            CodeEvent::Truncated { dropped } => {
                eprintln!("sbox: {dropped} bytes of output were dropped past the kernel's limit");
                Ok(())
            }
        };
        if let Err(e) = written {
            // Nobody reads the output any more: interrupt the cell (dropping the run does;
            // the context keeps its state), then end quietly (see `out`).
            drop(run);
            return Err(crate::out::failed(e));
        }
    }
    if images_seen > saved {
        eprintln!(
            "sbox: {} image(s) not saved (pass --save-images DIR to save them)",
            images_seen - saved
        );
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The text a result prints: its plain text (else markdown), for the main result always, for a
/// displayed one only when it has no image (whose text is then a placeholder like `<Figure>`).
fn result_text(result: &CodeResult, has_image: bool) -> Option<&str> {
    if !result.is_main_result && has_image {
        return None;
    }
    result.text().or_else(|| result.get_str(mime::MARKDOWN))
}

/// A result's images, decoded, with their MIME types and file extensions.
fn images(result: &CodeResult) -> Vec<(&'static str, &'static str, Vec<u8>)> {
    IMAGE_FILES
        .iter()
        .filter_map(|(format, ext)| {
            let bytes = if *format == mime::SVG {
                result.get_str(format)?.as_bytes().to_vec()
            } else {
                result.binary(format)?
            };
            Some((*format, *ext, bytes))
        })
        .collect()
}

/// Writes `bytes` to the first free `image-N.EXT` in `dir` (never over an existing file).
async fn save(dir: &Path, ext: &str, bytes: &[u8]) -> Result<PathBuf, Fail> {
    for n in 1u32.. {
        let path = dir.join(format!("image-{n}.{ext}"));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await;
        match file {
            Ok(mut file) => {
                file.write_all(bytes)
                    .await
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
        }
    }
    Err(format!("no free image name in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_displayed_figure_prints_no_placeholder_but_the_main_result_does() {
        let mut r = CodeResult::default();
        r.data.insert(mime::TEXT.into(), json!("<Figure>"));
        r.data.insert(mime::PNG.into(), json!("iVBORw0K"));
        assert_eq!(images(&r).len(), 1);
        assert_eq!(result_text(&r, true), None);
        r.is_main_result = true;
        assert_eq!(result_text(&r, true), Some("<Figure>"));
    }
}
