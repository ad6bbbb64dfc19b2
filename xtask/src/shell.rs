//! Running cargo from xtask, always from the workspace root.

use crate::Result;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The cargo that runs us (`$CARGO`), so a pinned toolchain stays pinned.
pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// Runs `cargo ARGS` in the workspace root with inherited output; an error names the exit status.
pub fn run_cargo(args: &[&str]) -> Result {
    let status = Command::new(cargo())
        .args(args)
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(match status.code() {
            Some(code) => format!("exit code {code}"),
            None => "killed by a signal".to_owned(),
        })
    }
}

/// Whether `cargo ARGS` runs and exits 0, with all output discarded.
pub fn cargo_succeeds(args: &[&str]) -> bool {
    Command::new(cargo())
        .args(args)
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
