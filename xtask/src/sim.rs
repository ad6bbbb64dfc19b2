//! `cargo xtask sim` runs the `sandbox-sim` binary (a provider simulator on a port, so any
//! program, an official SDK or a user's agent, can be pointed at it); `cargo xtask sim-check` proves the simulators with
//! clients nobody here wrote: each provider's official SDK, installed from its lockfile under
//! `tools/sim-check/<provider>`, runs `check.mjs` against the simulator and must pass every
//! check. The request log of each run is written to `target/sim-check/<provider>.jsonl`.
//!
//! Needs Node.js ≥ 18 and npm (on the CI machine); `npm ci` installs the SDKs from the npm
//! registry. The Sprites SDK needs a global `WebSocket`: on Node 20 its `check.mjs` restarts
//! itself with `--experimental-websocket`.

use crate::args::Args;
use crate::{Result, shell};
use sandbox_sim::FaultPlan;
use std::process::Command;

/// The providers whose official SDK `sim-check` drives (each has `tools/sim-check/<name>`).
const SDK_CHECKS: &[&str] = &["daytona", "e2b", "sprites", "vercel"];

/// `cargo xtask sim ARGS`: the `sandbox-sim` binary with the same arguments (`--provider NAME
/// [--port N] [--faults SPEC] [--page-cap N]`), serving until interrupted.
pub fn run(args: Args) -> Result {
    let mut cargo = vec!["run", "--quiet", "-p", "sandbox-sim", "--"];
    let args = args.passthrough();
    cargo.extend(args.iter().map(String::as_str));
    shell::run_cargo(&cargo)
}

/// `cargo xtask sim-check`: every official-SDK check.
pub fn run_check(args: Args) -> Result {
    args.finish()?;
    check()
}

/// The check as CI runs it.
pub fn check() -> Result {
    let root = shell::workspace_root();
    let logs = root.join("target").join("sim-check");
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    for provider in SDK_CHECKS {
        let dir = root.join("tools").join("sim-check").join(provider);
        println!("== sim-check {provider}: the official SDK against the simulator");
        node(&dir, "npm", &["ci", "--no-audit", "--no-fund"], &[])?;
        let runtime = runtime()?;
        let sim = runtime.block_on(sandbox_sim::start(provider, 0, FaultPlan::new()))?;
        // The simulator serves on the runtime's worker threads while node runs.
        let result = node(&dir, "node", &["check.mjs"], &sim.env());
        let log = logs.join(format!("{provider}.jsonl"));
        std::fs::write(&log, sim.server().log().to_json_lines())
            .map_err(|e| format!("writing {}: {e}", log.display()))?;
        drop(sim);
        result.map_err(|e| format!("{e}; the request log is in {}", log.display()))?;
    }
    // Fly has no official SDK to run: sandbox-fly's `openapi_sim` test checks the adapter's
    // run against Fly's OpenAPI instead.
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting a tokio runtime: {e}"))
}

/// Runs `program args` in `dir` with `env` added, failing with what it was.
fn node(dir: &std::path::Path, program: &str, args: &[&str], env: &[(&str, String)]) -> Result {
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(dir)
        .status()
        .map_err(|e| format!("could not start {program} (Node.js and npm are needed): {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` in {} failed ({status})",
            args.join(" "),
            dir.display()
        ))
    }
}
