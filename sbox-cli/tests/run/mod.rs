//! Running the built `sbox` against a `local` root of the test's own, shared by the tests that
//! drive it as a process.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `sbox ARGS` with its local sandboxes under `root`, stdin empty, backtraces on (a test can
/// look for a panic's).
pub fn sbox_command(root: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sbox"));
    command
        .args(args)
        .env("SBOX_LOCAL_ROOT", root.join("root"))
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    command
}

/// Runs `sbox ARGS` to its end.
pub fn sbox(root: &Path, args: &[&str]) -> Output {
    sbox_command(root, args).output().unwrap()
}

/// Creates a local sandbox and returns its id.
pub fn create(root: &Path) -> String {
    let out = sbox(root, &["create", "--provider", "local"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// What a run printed on stdout.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a run printed on stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
