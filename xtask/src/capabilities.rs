//! `cargo xtask capabilities [--json]`: every provider's capability map, side by side, as the
//! `sandbox-sdk` example `capabilities` prints it with every provider compiled in (so xtask
//! depends on no adapter).

use crate::Result;
use crate::args::Args;
use crate::shell;

/// The matrix as a Markdown table, as written into README.md.
pub fn markdown() -> Result<String> {
    matrix(&[])
}

/// Prints the matrix: Markdown by default, JSON with `--json`.
pub fn run(mut args: Args) -> Result {
    let as_json = args.flag("--json");
    args.finish()?;
    print!("{}", matrix(if as_json { &["--json"] } else { &[] })?);
    Ok(())
}

/// What the example prints with `args`.
fn matrix(args: &[&str]) -> Result<String> {
    let output = shell::cargo_command()
        .args([
            "run",
            "--quiet",
            "-p",
            "sandbox-sdk",
            "--features",
            "full",
            "--example",
            "capabilities",
            "--",
        ])
        .args(args)
        .current_dir(shell::workspace_root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "the capabilities example failed ({})",
            output.status
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("the matrix is not UTF-8: {e}"))
}
