//! `cargo xtask mcp-check`: the official MCP TypeScript SDK client (`tools/mcp-client`, pinned by
//! its lockfile) drives `sbox mcp --provider local` end to end: initialize, list the tools, call
//! run / write / str_replace / read / apply_patch, and a failure as a tool result. A client no
//! one here wrote is the judge of our MCP server.
//!
//! Needs Node.js ≥ 18 and npm (on the CI machine); `npm ci` installs the client from the npm
//! registry.

use crate::args::Args;
use crate::{Result, shell};
use std::process::Command;

/// Runs the check.
pub fn run(args: Args) -> Result {
    args.finish()?;
    check()
}

/// The check as CI runs it: builds `sbox` with the workspace's flags, installs the client, runs it.
pub fn check() -> Result {
    shell::run_cargo(&["build", "--workspace", "--all-features", "--bin", "sbox"])?;
    let root = shell::workspace_root();
    let client = root.join("tools").join("mcp-client");
    let sbox = root.join("target").join("debug").join("sbox");
    let run = |program: &str, args: &[&str]| -> Result {
        let status = Command::new(program)
            .args(args)
            .current_dir(&client)
            .status()
            .map_err(|e| format!("could not start {program} (Node.js and npm are needed): {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("`{program} {}` failed ({status})", args.join(" ")))
        }
    };
    run("npm", &["ci", "--no-audit", "--no-fund"])?;
    let sbox = sbox.to_string_lossy().into_owned();
    run("node", &["check.mjs", &sbox])
}
