//! `cargo xtask record --provider NAME [--scenario S]`: records cassettes from the live service.
//!
//! It runs the provider's conformance tests with `SANDBOX_CONFORMANCE_RECORD=1`, one at a time.
//! The adapter's `tests/conformance.rs` builds its suite with `Suite::record(..)` in that case
//! (see `sandbox_conformance::record`): each scenario that can run live goes through a loopback
//! recording proxy to the real service (credentials from the provider's usual environment
//! variables), and a passing scenario's cassette is written with tokens, sandbox ids, service
//! addresses and signed URL parameters scrubbed to placeholders. The fixture check runs
//! afterwards; review every cassette before committing it.

use crate::args::Args;
use crate::conformance::TARGETS;
use crate::{Result, fixtures, shell};

/// Records one provider's cassettes (or one scenario's).
pub fn run(mut args: Args) -> Result {
    let provider = args
        .value("--provider")?
        .ok_or("usage: cargo xtask record --provider NAME [--scenario S]")?;
    let scenario = args.value("--scenario")?;
    args.finish()?;
    let cargo_args = command(&provider, scenario.as_deref())?;
    let started = std::time::SystemTime::now();
    println!(
        "==> SANDBOX_CONFORMANCE_RECORD=1 cargo {}",
        cargo_args.join(" ")
    );
    let status = shell::cargo_command()
        .args(&cargo_args)
        .current_dir(shell::workspace_root())
        .env("SANDBOX_CONFORMANCE_RECORD", "1")
        .status()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "recording {provider} failed: a scenario that fails live is not written, and one whose \
             cassette is missing and cannot be derived fails saying why (the failures above list \
             them)"
        ));
    }
    let package = TARGETS
        .iter()
        .find(|t| t.provider == provider)
        .map(|t| t.package)
        .unwrap_or_default();
    let dir = shell::workspace_root()
        .join(package)
        .join("tests/cassettes");
    let written = newer_files(&dir, started);
    if written.is_empty() {
        return Err(format!(
            "no cassette under {} was written: the suite in {package}/tests/conformance.rs must \
             build `Suite::record(..)` when `sandbox_conformance::recording()` is true",
            dir.display()
        ));
    }
    println!("recorded {} cassette(s):", written.len());
    for file in &written {
        println!("  {}", file.display());
    }
    println!("checking the cassettes (review them before committing):");
    fixtures::check()
}

/// Files under `dir` (recursively) modified at or after `since`.
fn newer_files(dir: &std::path::Path, since: std::time::SystemTime) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if path.is_dir() {
            out.extend(newer_files(&path, since));
        } else if std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|m| m >= since)
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The cargo arguments that record `provider` (and only `scenario`, when given).
fn command(provider: &str, scenario: Option<&str>) -> Result<Vec<String>> {
    if provider == "local" {
        return Err("local runs the suite live; it has no cassettes to record".into());
    }
    let target = TARGETS
        .iter()
        .find(|t| t.provider == provider)
        .ok_or_else(|| format!("unknown provider {provider:?}"))?;
    let mut args: Vec<String> = [
        "test",
        "-p",
        target.package,
        "--all-features",
        "--test",
        "conformance",
        "--",
    ]
    .map(str::to_owned)
    .to_vec();
    let prefix = target.filter.unwrap_or("");
    match scenario {
        Some(s) => args.extend([format!("{prefix}{s}"), "--exact".to_owned()]),
        None if !prefix.is_empty() => args.push(prefix.to_owned()),
        None => {}
    }
    args.push("--test-threads=1".to_owned());
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_test_command_per_provider_and_scenario() {
        let args = command("e2b", Some("files_roundtrip")).expect("e2b");
        assert_eq!(
            args.join(" "),
            "test -p sandbox-e2b --all-features --test conformance -- files_roundtrip --exact --test-threads=1"
        );
        let args = command("fake", None).expect("fake");
        assert!(
            args.join(" ").ends_with("-- fake_http:: --test-threads=1"),
            "{args:?}"
        );
        assert!(command("local", None).is_err());
        let dir = tempfile::tempdir().expect("tempdir");
        let before = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::write(dir.path().join("a.json"), "{}").expect("write");
        assert_eq!(newer_files(dir.path(), before).len(), 1);
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        assert!(newer_files(dir.path(), later).is_empty());
        assert!(command("nope", None).is_err());
    }
}
