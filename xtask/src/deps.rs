//! `cargo xtask deps`: the dependency check CI runs.
//!
//! - **Known advisories**: fails when `Cargo.lock` holds a version of a crate below the version
//!   that fixed an advisory this project has been hit by ([`KNOWN_ADVISORIES`]). Works offline.
//! - **RustSec database**: runs `cargo audit` when it is installed and can reach the advisory
//!   database; otherwise prints one line saying the check was skipped and why (this machine has
//!   no route to GitHub, where the database lives).
//! - **Duplicate major versions**: lists every crate locked at two or more semver-incompatible
//!   versions (each one is compiled and linked separately). Listed, not failed: most come from
//!   dependencies' own choices.

use crate::args::Args;
use crate::{Result, shell};
use std::collections::BTreeMap;
use std::process::Stdio;

/// An advisory this project was hit by: the crate, the first fixed version, the advisory id.
pub const KNOWN_ADVISORIES: &[(&str, &str, &str)] = &[("russh", "0.60.3", "RUSTSEC-2026-0154")];

/// Runs the check.
pub fn run(args: Args) -> Result {
    args.finish()?;
    check()
}

/// The check as CI runs it.
pub fn check() -> Result {
    let lock = std::fs::read_to_string(shell::workspace_root().join("Cargo.lock"))
        .map_err(|e| format!("cannot read Cargo.lock: {e}"))?;
    let packages = locked_packages(&lock);
    let hits = advisory_hits(&packages);
    println!("{}", rustsec_audit());
    let duplicates = duplicate_majors(&built_packages()?);
    if duplicates.is_empty() {
        println!("no crate is locked at two major versions");
    } else {
        println!(
            "crates locked at more than one major version ({}):",
            duplicates.len()
        );
        for (name, versions) in &duplicates {
            println!("  {name}: {}", versions.join(", "));
        }
    }
    if hits.is_empty() {
        Ok(())
    } else {
        Err(hits.join("; "))
    }
}

/// Every `(name, version)` in a `Cargo.lock`.
fn locked_packages(lock: &str) -> Vec<(String, String)> {
    let mut packages = Vec::new();
    let mut name = None;
    for line in lock.lines() {
        if line == "[[package]]" {
            name = None;
        } else if let Some(value) = line.strip_prefix("name = ") {
            name = Some(value.trim_matches('"').to_owned());
        } else if let (Some(value), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            packages.push((n, value.trim_matches('"').to_owned()));
        }
    }
    packages
}

/// Every `(name, version)` built for this machine (`cargo tree`; the lockfile also holds other
/// platforms' crates).
fn built_packages() -> Result<Vec<(String, String)>> {
    let output = shell::cargo_command()
        .args([
            "tree",
            "--workspace",
            "--all-features",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(shell::workspace_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not start cargo tree: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(tree_packages(&String::from_utf8_lossy(&output.stdout)))
}

/// `(name, version)` of each `name vX.Y.Z ...` line of `cargo tree` output, once each.
fn tree_packages(text: &str) -> Vec<(String, String)> {
    let mut seen: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some((name.to_owned(), version.to_owned()))
        })
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// `1.2.3-rc.1` as numbers, ignoring any pre-release or build suffix.
fn numbers(version: &str) -> Vec<u64> {
    version
        .split(['-', '+'])
        .next()
        .unwrap_or("")
        .split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect()
}

/// The semver compatibility class: the major, or for 0.x the minor (0.x.y), or for 0.0.z all.
fn major(version: &str) -> String {
    match numbers(version).as_slice() {
        [0, 0, patch, ..] => format!("0.0.{patch}"),
        [0, minor, ..] => format!("0.{minor}"),
        [major, ..] => major.to_string(),
        [] => version.to_owned(),
    }
}

/// One line per locked package below a known advisory's fixed version.
fn advisory_hits(packages: &[(String, String)]) -> Vec<String> {
    let mut hits = Vec::new();
    for (name, version) in packages {
        for (crate_name, fixed, id) in KNOWN_ADVISORIES {
            if name == crate_name && numbers(version) < numbers(fixed) {
                hits.push(format!(
                    "{name} {version} is affected by {id} (fixed in {fixed}): upgrade it"
                ));
            }
        }
    }
    hits
}

/// Crates locked at two or more compatibility classes, each with its versions.
fn duplicate_majors(packages: &[(String, String)]) -> BTreeMap<String, Vec<String>> {
    let mut by_name: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (name, version) in packages {
        by_name
            .entry(name.clone())
            .or_default()
            .insert(major(version), version.clone());
    }
    by_name
        .into_iter()
        .filter(|(_, classes)| classes.len() > 1)
        .map(|(name, classes)| {
            let mut versions: Vec<String> = classes.into_values().collect();
            versions.sort_by_key(|v| numbers(v));
            (name, versions)
        })
        .collect()
}

/// `cargo audit`'s verdict, or why it was skipped.
fn rustsec_audit() -> String {
    if !shell::cargo_succeeds(&["audit", "--version"]) {
        return "advisory database check skipped: cargo-audit is not installed \
                (known advisories were checked offline)"
            .to_owned();
    }
    let output = shell::cargo_command()
        .args(["audit", "--quiet"])
        .current_dir(shell::workspace_root())
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(out) if out.status.success() => "cargo audit: no advisories".to_owned(),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stderr);
            if text.contains("fetch") || text.contains("network") || text.contains("resolve") {
                "advisory database check skipped: the RustSec database is not reachable \
                 (known advisories were checked offline)"
                    .to_owned()
            } else {
                format!(
                    "cargo audit reported advisories (not failing CI):\n{}",
                    String::from_utf8_lossy(&out.stdout)
                )
            }
        }
        Err(e) => format!("advisory database check skipped: cargo audit did not start: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"
[[package]]
name = "rand"
version = "0.8.5"

[[package]]
name = "rand"
version = "0.9.2"

[[package]]
name = "russh"
version = "0.54.5"

[[package]]
name = "serde"
version = "1.0.200"

[[package]]
name = "serde"
version = "1.0.219"
"#;

    #[test]
    fn locked_versions_below_a_fix_are_hits() {
        let packages = locked_packages(LOCK);
        assert_eq!(packages.len(), 5);
        let hits = advisory_hits(&packages);
        assert_eq!(hits.len(), 1);
        assert!(hits[0].contains("RUSTSEC-2026-0154"), "{hits:?}");
        let fixed = LOCK.replace("0.54.5", "0.60.3");
        assert!(advisory_hits(&locked_packages(&fixed)).is_empty());
        let newer = LOCK.replace("0.54.5", "0.65.1");
        assert!(advisory_hits(&locked_packages(&newer)).is_empty());
    }

    #[test]
    fn cargo_tree_lines_are_read_once_each() {
        let text = "xtask v0.1.0 (/w/xtask)\nrand v0.8.5\nrand v0.9.2\nrand v0.8.5 (*)\n\n";
        assert_eq!(
            tree_packages(text),
            [
                ("rand".to_owned(), "0.8.5".to_owned()),
                ("rand".to_owned(), "0.9.2".to_owned()),
                ("xtask".to_owned(), "0.1.0".to_owned())
            ]
        );
    }

    #[test]
    fn only_semver_incompatible_versions_are_duplicates() {
        let duplicates = duplicate_majors(&locked_packages(LOCK));
        assert_eq!(duplicates.len(), 1);
        assert_eq!(duplicates["rand"], ["0.8.5", "0.9.2"]);
        assert_eq!(major("1.2.3"), "1");
        assert_eq!(major("0.22.1"), "0.22");
        assert_eq!(major("0.0.7"), "0.0.7");
        assert!(numbers("0.60.3-rc.1") >= numbers("0.60.3"));
    }
}
