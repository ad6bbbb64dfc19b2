//! `cargo xtask deps`: the dependency check CI runs.
//!
//! - **Known advisories**: fails when `Cargo.lock` holds a version of a crate below the version
//!   that fixed an advisory this project has been hit by ([`KNOWN_ADVISORIES`]). Works offline.
//! - **RustSec database**: runs `cargo audit` when it is installed and can reach the advisory
//!   database; otherwise prints one line saying the check was skipped and why (this machine has
//!   no route to GitHub, where the database lives).
//! - **MSRV**: fails when a dependency built for this machine declares a `rust-version` above
//!   the workspace's (`cargo metadata`), so the MSRV the crates publish stays true of their
//!   dependency tree. Our own code is held to it by clippy's `incompatible_msrv` lint (on in the
//!   clippy step), which reads the same `rust-version`.
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
    let built = built_packages()?;
    let msrv = msrv_problems(&built)?;
    let duplicates = duplicate_majors(&built);
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
    let problems: Vec<String> = hits.into_iter().chain(msrv).collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// One line per built dependency whose `rust-version` is above the workspace's; prints the
/// verdict.
fn msrv_problems(built: &[(String, String)]) -> Result<Vec<String>> {
    let output = shell::cargo_command()
        .args(["metadata", "--format-version", "1", "--all-features"])
        .current_dir(shell::workspace_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not start cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed no JSON: {e}"))?;
    let ours = workspace_msrv(&metadata)?;
    let problems = above_msrv(&metadata, built, &ours);
    if problems.is_empty() {
        println!(
            "MSRV {ours}: no dependency built here declares a newer rust-version ({} checked)",
            built.len()
        );
    }
    Ok(problems)
}

/// The `rust-version` every workspace member declares (they share one).
fn workspace_msrv(metadata: &serde_json::Value) -> Result<String> {
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str())
        .collect();
    let versions: std::collections::BTreeSet<&str> = packages(metadata)
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
        .filter_map(|p| p["rust_version"].as_str())
        .collect();
    match versions.into_iter().collect::<Vec<_>>().as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err("no workspace member declares a rust-version".into()),
        many => Err(format!(
            "workspace members declare different rust-versions: {}",
            many.join(", ")
        )),
    }
}

/// A `rust-version` (`1.89` or `1.89.0`) as three numbers.
fn rust_version(version: &str) -> [u64; 3] {
    let mut parts = numbers(version).into_iter();
    [0; 3].map(|_| parts.next().unwrap_or(0))
}

fn packages(metadata: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    metadata["packages"].as_array().into_iter().flatten()
}

/// Built packages whose declared `rust-version` is newer than `msrv`.
fn above_msrv(metadata: &serde_json::Value, built: &[(String, String)], msrv: &str) -> Vec<String> {
    packages(metadata)
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            let version = p["version"].as_str()?;
            let needs = p["rust_version"].as_str()?;
            let is_built = built.iter().any(|(n, v)| n == name && v == version);
            (is_built && rust_version(needs) > rust_version(msrv)).then(|| {
                format!("{name} {version} needs Rust {needs}, above the workspace MSRV {msrv}")
            })
        })
        .collect()
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
    fn only_built_dependencies_above_the_msrv_are_named() {
        let metadata = serde_json::json!({
            "workspace_members": ["ours 0.1.0"],
            "packages": [
                {"id": "ours 0.1.0", "name": "ours", "version": "0.1.0", "rust_version": "1.89"},
                {"id": "a", "name": "same", "version": "1.0.0", "rust_version": "1.89.0"},
                {"id": "b", "name": "newer", "version": "2.0.0", "rust_version": "1.90"},
                {"id": "c", "name": "unbuilt", "version": "1.0.0", "rust_version": "1.95"},
                {"id": "d", "name": "silent", "version": "1.0.0", "rust_version": null},
            ]
        });
        let built: Vec<(String, String)> =
            [("same", "1.0.0"), ("newer", "2.0.0"), ("silent", "1.0.0")]
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect();
        let msrv = workspace_msrv(&metadata).unwrap();
        assert_eq!(msrv, "1.89");
        assert_eq!(
            above_msrv(&metadata, &built, &msrv),
            ["newer 2.0.0 needs Rust 1.90, above the workspace MSRV 1.89"]
        );
    }

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
