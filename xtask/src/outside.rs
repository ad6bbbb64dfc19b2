//! `cargo xtask outside-check`: the example adapter of `examples/outside-adapter` (a crate of its
//! own, outside this workspace, using only the public API of `sandbox-sdk-core` and
//! `sandbox-conformance`) goes green from a clean recording, as an outside provider author's
//! crate would: its cassettes are deleted, recorded afresh from its loopback Acme service (the
//! injected failures derived in the same run), replayed against the committed request
//! snapshots, and tampered with (`tests/tamper.rs`).
//!
//! It builds in the workspace's `target/` with the workspace's `Cargo.lock` copied in, so the
//! registry dependencies already built for the workspace are reused.

use crate::args::Args;
use crate::{Result, shell};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the example crate lives, relative to the workspace root.
pub const EXAMPLE: &str = "examples/outside-adapter";

/// Runs the check.
pub fn run(args: Args) -> Result {
    args.finish()?;
    check()
}

/// One cargo command of the check: what it does, its arguments, and whether it records.
struct Stage {
    what: &'static str,
    args: Vec<&'static str>,
    record: bool,
}

fn stages() -> Vec<Stage> {
    let stage = |what, args: &[&'static str], record| Stage {
        what,
        args: args.to_vec(),
        record,
    };
    vec![
        stage("format", &["fmt", "--", "--check"], false),
        stage(
            "lint",
            &["clippy", "--all-targets", "--", "-D", "warnings"],
            false,
        ),
        // The fleet scenarios (owner_scope, reap*, usage) cannot be recorded, and the
        // example ships no hand-written cassettes: they are left out here (the kit's fake
        // replays them from hand-written cassettes).
        stage(
            "record from the live service (and derive)",
            &[
                "test",
                "--test",
                "conformance",
                "--",
                "--skip",
                "owner_scope",
                "--skip",
                "reap",
                "--skip",
                "usage",
            ],
            true,
        ),
        stage(
            "replay, snapshots and tamper checks",
            &[
                "test",
                "--",
                "--skip",
                "owner_scope",
                "--skip",
                "reap",
                "--skip",
                "usage",
            ],
            false,
        ),
    ]
}

/// The check as CI runs it.
pub fn check() -> Result {
    let root = shell::workspace_root();
    let dir = root.join(EXAMPLE);
    let started = Instant::now();
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))
        .map_err(|e| format!("cannot copy Cargo.lock into {}: {e}", dir.display()))?;
    let cassettes = dir.join("tests/cassettes");
    if cassettes.exists() {
        std::fs::remove_dir_all(&cassettes)
            .map_err(|e| format!("cannot clear {}: {e}", cassettes.display()))?;
    }
    for stage in stages() {
        let stage_started = Instant::now();
        let args = cargo_args(&stage, &dir, &root.join("target"));
        println!(
            "==> {EXAMPLE}: {}: {}cargo {}",
            stage.what,
            if stage.record {
                "SANDBOX_CONFORMANCE_RECORD=1 "
            } else {
                ""
            },
            args.join(" ")
        );
        let mut command = shell::cargo_command();
        command
            .args(&args)
            .current_dir(&dir)
            // Snapshots are compared, never written: a new or changed one fails.
            .env("INSTA_UPDATE", "no");
        if stage.record {
            command.env("SANDBOX_CONFORMANCE_RECORD", "1");
        } else {
            command.env_remove("SANDBOX_CONFORMANCE_RECORD");
        }
        let status = command
            .status()
            .map_err(|e| format!("could not start cargo: {e}"))?;
        if !status.success() {
            return Err(format!(
                "{EXAMPLE}: {} failed ({status}); run `cargo xtask outside-check` to reproduce",
                stage.what
            ));
        }
        println!(
            "    {} ok in {:.1}s",
            stage.what,
            stage_started.elapsed().as_secs_f64()
        );
    }
    println!(
        "==> {EXAMPLE}: green from a clean recording in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The cargo arguments of `stage`, pointed at the example's manifest and the shared target dir.
fn cargo_args(stage: &Stage, dir: &Path, target: &Path) -> Vec<String> {
    let manifest: PathBuf = dir.join("Cargo.toml");
    let (command, rest) = stage.args.split_first().unwrap_or((&"test", &[]));
    let mut args = vec![
        (*command).to_owned(),
        "--manifest-path".to_owned(),
        manifest.display().to_string(),
    ];
    if *command != "fmt" {
        args.extend(["--target-dir".to_owned(), target.display().to_string()]);
    }
    args.extend(rest.iter().map(|a| (*a).to_owned()));
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_targets_the_example_and_the_shared_target_dir() {
        let dir = Path::new("/repo/examples/outside-adapter");
        let target = Path::new("/repo/target");
        let stages = stages();
        let record = stages.iter().filter(|s| s.record).count();
        assert_eq!(record, 1, "one recording stage");
        let last = stages.last().expect("stages");
        assert!(!last.record, "the last stage replays");
        for stage in &stages {
            let args = cargo_args(stage, dir, target).join(" ");
            assert!(
                args.contains("--manifest-path /repo/examples/outside-adapter/Cargo.toml"),
                "{args}"
            );
            if !args.starts_with("fmt") {
                assert!(args.contains("--target-dir /repo/target"), "{args}");
            }
        }
        let record = stages.iter().find(|s| s.record).expect("record");
        assert_eq!(
            cargo_args(record, dir, target).join(" "),
            "test --manifest-path /repo/examples/outside-adapter/Cargo.toml --target-dir /repo/target --test conformance -- --skip owner_scope --skip reap --skip usage"
        );
    }
}
