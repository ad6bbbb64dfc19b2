//! `cargo xtask fuzz [--secs N] [TARGET...]`: runs each fuzz target of `fuzz/` (cargo-fuzz,
//! libFuzzer) for a bounded time, starting from its checked-in corpus in `fuzz/corpus/TARGET`,
//! and fails naming any target that crashed (the input lands in `fuzz/artifacts/TARGET`).
//!
//! The targets are the decoders that read what a server sends: error bodies, Connect
//! envelopes, the cassette parser, and each adapter's stream and script-output parsers. CI runs
//! the same inputs as proptests (a fuzzer needs a nightly compiler and minutes, CI has neither);
//! this task is for a longer, coverage-guided look. It needs `cargo install cargo-fuzz` and a
//! nightly toolchain, or, without one, the stable compiler with `RUSTC_BOOTSTRAP=1` (what the
//! sanitizer flags need).

use crate::args::Args;
use crate::{Result, shell};
use std::process::Command;

/// Seconds per target unless `--secs` says otherwise.
const DEFAULT_SECS: u64 = 30;

/// Runs the targets.
pub fn run(mut args: Args) -> Result {
    let secs = match args.value("--secs")? {
        Some(text) => text
            .parse::<u64>()
            .map_err(|e| format!("--secs {text:?}: {e}"))?,
        None => DEFAULT_SECS,
    };
    let wanted = args.rest()?;
    let all = targets()?;
    for name in &wanted {
        if !all.contains(name) {
            return Err(format!(
                "unknown fuzz target {name:?}; known: {}",
                all.join(", ")
            ));
        }
    }
    let chosen: Vec<&String> = all
        .iter()
        .filter(|t| wanted.is_empty() || wanted.contains(t))
        .collect();
    if !shell::cargo_succeeds(&["fuzz", "--version"]) {
        return Err("cargo-fuzz is not installed: cargo install cargo-fuzz".into());
    }
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut crashed = Vec::new();
    for target in chosen {
        println!("fuzz: {target} for {secs} s");
        let mut command = if nightly {
            let mut rustup = Command::new("rustup");
            rustup.args(["run", "nightly", "cargo"]);
            shell::shell_env(rustup)
        } else {
            let mut stable = shell::cargo_command();
            stable.env("RUSTC_BOOTSTRAP", "1");
            stable
        };
        let status = command
            .args(["fuzz", "run", target.as_str(), "--"])
            .arg(format!("-max_total_time={secs}"))
            .current_dir(shell::workspace_root())
            .status()
            .map_err(|e| format!("could not start cargo fuzz: {e}"))?;
        if !status.success() {
            crashed.push(format!("{target} ({status}; see fuzz/artifacts/{target})"));
        }
    }
    if crashed.is_empty() {
        println!("fuzz: every target ran {secs} s with no crash");
        Ok(())
    } else {
        Err(format!("fuzz targets failed: {}", crashed.join(", ")))
    }
}

/// The targets `fuzz/Cargo.toml` declares, in its order.
fn targets() -> Result<Vec<String>> {
    let path = shell::workspace_root().join("fuzz/Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(declared_bins(&text))
}

/// The `name`s of the `[[bin]]` tables of a Cargo.toml.
fn declared_bins(toml: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(value) = line.strip_prefix("name = ") {
            names.push(value.trim_matches('"').to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bins_of_the_fuzz_crate_are_its_targets() {
        let toml = "[package]\nname = \"sandbox-fuzz\"\n\n[[bin]]\nname = \"a\"\npath = \"x\"\n\n[dependencies]\nname = \"no\"\n\n[[bin]]\nname = \"b\"\n";
        assert_eq!(declared_bins(toml), ["a", "b"]);
    }

    #[test]
    fn every_target_has_a_source_file_and_a_seed_corpus() {
        let root = shell::workspace_root().join("fuzz");
        let targets = targets().unwrap();
        assert!(targets.len() >= 3, "{targets:?}");
        for target in targets {
            assert!(
                root.join(format!("fuzz_targets/{target}.rs")).is_file(),
                "{target}"
            );
            let corpus = root.join(format!("corpus/{target}"));
            let seeds = std::fs::read_dir(&corpus)
                .map(|d| d.count())
                .unwrap_or_default();
            assert!(
                seeds > 0,
                "{target} has no seed corpus in {}",
                corpus.display()
            );
        }
    }
}
