//! `cargo xtask capabilities [--json]`: every provider's capability map, side by side.

use crate::Result;
use crate::args::Args;
use sandbox_sdk_core::{Capabilities, matrix_json, matrix_markdown};

/// Every provider the workspace ships, in table order. Adapter crates add one line each.
pub fn providers() -> Vec<(&'static str, Capabilities)> {
    vec![
        ("local", sandbox_sdk_core::local::CAPABILITIES),
        ("e2b", sandbox_e2b::CAPABILITIES),
        ("daytona", sandbox_daytona::CAPABILITIES),
        ("fly", sandbox_fly::CAPABILITIES),
        ("vercel", sandbox_vercel::CAPABILITIES),
    ]
}

/// The matrix as a Markdown table, as written into README.md.
pub fn markdown() -> String {
    matrix_markdown(&providers())
}

/// The matrix as pretty-printed JSON: `{"provider": {"capability": "level", ..., "flags": {...}}}`.
pub fn json() -> String {
    let value = matrix_json(&providers());
    serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
}

/// Prints the matrix: Markdown by default, JSON with `--json`.
pub fn run(mut args: Args) -> Result {
    let as_json = args.flag("--json");
    args.finish()?;
    if as_json {
        println!("{}", json());
    } else {
        print!("{}", markdown());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sdk_core::Capability;

    #[test]
    fn provider_names_are_unique_and_lowercase() {
        let providers = providers();
        assert!(!providers.is_empty());
        let mut names: Vec<_> = providers.iter().map(|(name, _)| *name).collect();
        assert!(names.iter().all(|n| {
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        }));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), providers.len());
    }

    #[test]
    fn json_has_every_provider_and_capability() {
        let value: serde_json::Value = serde_json::from_str(&json()).unwrap();
        for (name, caps) in providers() {
            for cap in Capability::ALL {
                assert_eq!(value[name][cap.as_str()], caps.level(*cap).as_str());
            }
        }
    }
}
