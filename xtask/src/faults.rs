//! `cargo xtask faults [--check]`: the reliability matrix, run by its program in
//! `sandbox-bench` (`src/bin/faults.rs`), which drives every adapter against the simulators and
//! writes RELIABILITY.md (`--check` fails when the file is stale).

use crate::args::Args;
use crate::{Result, shell};

/// The command that regenerates RELIABILITY.md.
pub const FIX: &str = "cargo xtask faults";

/// Writes RELIABILITY.md, or with `--check` fails when it differs from a fresh run.
pub fn run(mut args: Args) -> Result {
    let check_only = args.flag("--check");
    args.finish()?;
    matrix(check_only)
}

/// The CI step: fails when RELIABILITY.md is not what the matrix answers now.
pub fn check() -> Result {
    matrix(true)
}

fn matrix(check_only: bool) -> Result {
    let faults = shell::workspace_binary("faults")?;
    let args: &[&str] = if check_only { &["--check"] } else { &[] };
    shell::run_program(&faults, args)
}
