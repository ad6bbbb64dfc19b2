//! Running cargo from xtask, always from the workspace root.

use crate::Result;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether cargo commands from here build without incremental caches (see
/// [`without_incremental_caches`]).
static NO_INCREMENTAL: AtomicBool = AtomicBool::new(false);

/// From now on, cargo commands from this process build without incremental caches: a build
/// from a clean tree gains nothing from them, and they hold about as much disk as the build
/// itself (6.0 of 13.2 GiB at the peak of a full CI run), which ran a CI machine out of space.
pub fn without_incremental_caches() {
    NO_INCREMENTAL.store(true, Ordering::Relaxed);
}

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The cargo that runs us (`$CARGO`), so a pinned toolchain stays pinned.
pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// The variables `cargo run` sets for the xtask binary itself. A nested cargo that inherits
/// them hands them to build scripts that watch them (`ring` reruns when `CARGO_MANIFEST_DIR` or
/// `CARGO_PKG_NAME` change), so every build from inside xtask would rebuild those crates and all
/// that depend on them, and the next build from a shell would rebuild them back.
const CARGO_RUN_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_RUSTC_CURRENT_DIR",
    "CARGO_TARGET_TMPDIR",
];

/// Whether `name` is set by `cargo run` for the binary it runs (see [`CARGO_RUN_VARS`]).
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_") || CARGO_RUN_VARS.contains(&name)
}

/// A `cargo` command with the environment a shell would give it: without the variables
/// `cargo run` set for xtask, so builds from xtask and from a shell share `target/`.
pub fn cargo_command() -> Command {
    shell_env(Command::new(cargo()))
}

/// `command` without the variables `cargo run` set for xtask (see [`cargo_command`]), and with
/// `CARGO_INCREMENTAL=0` after [`without_incremental_caches`].
pub fn shell_env(mut command: Command) -> Command {
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(&name);
        }
    }
    if NO_INCREMENTAL.load(Ordering::Relaxed) {
        command.env("CARGO_INCREMENTAL", "0");
    }
    command
}

/// Runs `cargo ARGS` in the workspace root with inherited output; an error names the exit status.
pub fn run_cargo(args: &[&str]) -> Result {
    let mut cargo = cargo_command();
    cargo.args(args);
    run_in_root(cargo, "cargo")
}

/// Runs `command` (named `what` in errors) in the workspace root with inherited output; an
/// error names the exit code or the signal.
fn run_in_root(mut command: Command, what: &str) -> Result {
    let status = command
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("could not start {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(match status.code() {
            Some(code) => format!("exit code {code}"),
            None => "killed by a signal".to_owned(),
        })
    }
}

/// Builds the binary `name` as the test build built it, and returns its path: with the
/// workspace's flags (a `cargo run -p` would unify features differently) and with the examples,
/// whose dev-dependencies turn on the same dependency features the tests turn on (without them
/// cargo rebuilds tokio, reqwest and every crate above them for the binary alone).
pub fn workspace_binary(name: &str) -> Result<PathBuf> {
    run_cargo(&[
        "build",
        "--workspace",
        "--all-features",
        "--examples",
        "--bin",
        name,
    ])?;
    Ok(workspace_root().join("target").join("debug").join(name))
}

/// Runs `program ARGS` in the workspace root with inherited output; an error names the exit
/// status.
pub fn run_program(program: &Path, args: &[&str]) -> Result {
    let mut command = shell_env(Command::new(program));
    command.args(args);
    run_in_root(command, &program.display().to_string())
}

/// Whether `cargo ARGS` runs and exits 0, with all output discarded.
pub fn cargo_succeeds(args: &[&str]) -> bool {
    cargo_command()
        .args(args)
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_cargo_run_sets_is_left_out() {
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_BIN_NAME",
        ] {
            assert!(set_by_cargo_run(name), "{name}");
        }
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "RUSTFLAGS",
            "PATH",
        ] {
            assert!(!set_by_cargo_run(name), "{name}");
        }
    }
}
