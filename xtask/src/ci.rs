//! `cargo xtask ci`: everything CI checks, in order, stopping at the first failure with the
//! step's name and the command that reproduces (or fixes) it.
//!
//! Every cargo command uses `--workspace --all-features`, so all steps share one build of each
//! crate in `target/`, built without incremental caches (a clean build gains nothing from them
//! and they would double `target/`). After each step it prints how much `target/` holds and how
//! much the disk has left, so a run that fills the disk shows where. To add a step, add one line
//! to [`steps`].

use crate::args::Args;
use crate::{
    Result, conformance, deps, disk, faults, fixtures, mcp, outside, readme, shell, sim, skeleton,
};
use std::time::{Duration, Instant};

/// What a step does.
enum Action {
    /// Runs `cargo ARGS` in the workspace root.
    Cargo(Vec<&'static str>),
    /// Runs an xtask function in this process.
    Task(fn() -> Result),
}

/// One CI step.
struct Step {
    /// Short name shown in the header and in the failure message.
    name: &'static str,
    /// The command a person runs to reproduce the step.
    reproduce: String,
    /// The command that fixes a failure, when there is one (fmt, stale README).
    fix: Option<&'static str>,
    action: Action,
}

impl Step {
    fn cargo(name: &'static str, args: &[&'static str]) -> Step {
        Step {
            name,
            reproduce: format!("cargo {}", args.join(" ")),
            fix: None,
            action: Action::Cargo(args.to_vec()),
        }
    }

    fn task(name: &'static str, reproduce: &'static str, run: fn() -> Result) -> Step {
        Step {
            name,
            reproduce: reproduce.to_owned(),
            fix: None,
            action: Action::Task(run),
        }
    }

    fn fix(mut self, command: &'static str) -> Step {
        self.fix = Some(command);
        self
    }
}

/// The steps, in the order they run; tests run under nextest when `nextest` is true.
fn steps(nextest: bool) -> Vec<Step> {
    vec![
        Step::cargo("fmt", &["fmt", "--all", "--", "--check"]).fix("cargo fmt --all"),
        Step::task("adapter skeleton", "cargo xtask skeleton", skeleton::check),
        Step::cargo(
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ],
        ),
        test_step(nextest),
        Step::cargo(
            "doc tests",
            &["test", "--workspace", "--all-features", "--doc"],
        ),
        Step::cargo(
            "no default features",
            &[
                "check",
                "-p",
                "sandbox-sdk-core",
                "-p",
                "sandbox-sdk",
                "--no-default-features",
            ],
        ),
        Step::cargo(
            "package",
            &[
                "package",
                "--workspace",
                "--exclude",
                "xtask",
                "--exclude",
                "sandbox-bench",
                "--no-verify",
                "--allow-dirty",
            ],
        ),
        Step::cargo(
            "docs",
            &["doc", "--workspace", "--all-features", "--no-deps"],
        ),
        Step::cargo(
            "examples",
            &["build", "--workspace", "--examples", "--all-features"],
        ),
        Step::task("readme", "cargo xtask readme --check", readme::check).fix(readme::FIX),
        Step::task("conformance", "cargo xtask conformance", conformance::check),
        Step::task(
            "reliability matrix",
            "cargo xtask faults --check",
            faults::check,
        )
        .fix(faults::FIX),
        Step::task("fixtures", "cargo xtask fixtures", fixtures::check),
        Step::task("dependencies", "cargo xtask deps", deps::check),
        Step::task(
            "mcp client and conformance",
            "cargo xtask mcp-check",
            mcp::check,
        ),
        Step::task(
            "outside adapter",
            "cargo xtask outside-check",
            outside::check,
        ),
        Step::task(
            "official SDKs vs simulators",
            "cargo xtask sim-check",
            sim::check,
        ),
    ]
}

/// Tests with nextest when it is installed, else with `cargo test` (lib, bins and integration
/// tests only: doc tests have their own step and examples are built by theirs).
fn test_step(nextest: bool) -> Step {
    if nextest {
        Step::cargo(
            "tests",
            &["nextest", "run", "--workspace", "--all-features"],
        )
    } else {
        Step::cargo(
            "tests",
            &[
                "test",
                "--workspace",
                "--all-features",
                "--lib",
                "--bins",
                "--tests",
            ],
        )
    }
}

/// Runs every step, failing fast.
pub fn run(args: Args) -> Result {
    args.finish()?;
    shell::without_incremental_caches();
    let steps = steps(shell::cargo_succeeds(&["nextest", "--version"]));
    let total = steps.len();
    let started = Instant::now();
    for (i, step) in steps.iter().enumerate() {
        println!("==> [{}/{total}] {}: {}", i + 1, step.name, step.reproduce);
        let step_started = Instant::now();
        let outcome = match &step.action {
            Action::Cargo(args) => shell::run_cargo(args),
            Action::Task(task) => task(),
        };
        if let Err(why) = outcome {
            let mut message = format!(
                "ci step `{}` failed: {why}\n  reproduce: {}",
                step.name, step.reproduce
            );
            if let Some(fix) = step.fix {
                message.push_str(&format!("\n  fix:       {fix}"));
            }
            return Err(message);
        }
        println!(
            "    {} ok in {}; {}",
            step.name,
            seconds(step_started.elapsed()),
            disk::report(&shell::workspace_root().join("target"))
        );
    }
    println!(
        "==> ci passed: {total} steps in {}",
        seconds(started.elapsed())
    );
    Ok(())
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cargo_step_shares_one_feature_set() {
        // fmt has no features; the no-default-features check and packaging exist to build
        // something else on purpose.
        let own_features = ["fmt", "no default features", "package"];
        for step in steps(true).into_iter().chain(steps(false)) {
            if let Action::Cargo(args) = &step.action
                && !own_features.contains(&step.name)
            {
                assert!(args.contains(&"--all-features"), "{}", step.name);
                assert!(args.contains(&"--workspace"), "{}", step.name);
            }
        }
    }

    #[test]
    fn step_names_are_unique_and_reproducible() {
        let steps = steps(true);
        let mut names: Vec<_> = steps.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), steps.len());
        for step in &steps {
            assert!(step.reproduce.starts_with("cargo "), "{}", step.reproduce);
        }
    }

    #[test]
    fn fmt_and_readme_steps_print_their_fix() {
        let steps = steps(false);
        let fix = |name: &str| steps.iter().find(|s| s.name == name).and_then(|s| s.fix);
        assert_eq!(fix("fmt"), Some("cargo fmt --all"));
        assert_eq!(fix("readme"), Some("cargo xtask readme"));
    }
}
