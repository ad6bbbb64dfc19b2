//! Load: a thousand sandboxes held at once through `Client` against each provider simulator,
//! each created, given one `run("echo hi")` and destroyed, with zero errors expected; the
//! client's wall time and peak resident set are recorded.
//!
//! The simulator serves from a child process of its own ([`SimChild`]), so the peak
//! RSS measured is the client's alone, in a fresh process (`--load PROVIDER N`) configured only
//! through the provider's usual environment variables, which the simulator prints. There is no
//! raw client doing the same three protocols here: the row's baseline is the goal for
//! the client's peak RSS, 64 MiB (an outside measurement put E2B's official client at 52.7 MiB).
//! Errors are counted into the row (the first three are printed), not fatal: they are data.

use crate::harness::{Config, Record, Result, mib};
use crate::sim::SimChild;
use futures::{StreamExt, stream};
use sandbox_sdk::prelude::*;
use sandbox_sdk_core::client::{Client, RetryPolicy};
use std::process::{Command as Child, Stdio};
use std::sync::Arc;
use std::time::Instant;

const GROUP: &str = "load";
/// Runs one load in this process and prints its measurements as a JSON line.
pub const LOAD_FLAG: &str = "--load";
/// The goal for the client's peak RSS under this load.
const GOAL_MIB: f64 = 64.0;
/// Calls in flight at once (the sandboxes are all held at once; their calls are bounded so the
/// two processes stay within their file-descriptor limits).
const IN_FLIGHT: usize = 64;

/// Runs the load against every simulator.
pub async fn run(config: &Config) -> Result {
    let sandboxes = if config.iterations < 15 { 100 } else { 1_000 };
    for provider in sandbox_bench::ADAPTERS {
        let measured = load_in_children(provider, sandboxes)?;
        let errors = measured["errors"].as_u64().unwrap_or(u64::MAX);
        let seconds = measured["seconds"].as_f64().unwrap_or(f64::NAN);
        Record {
            group: GROUP,
            name: format!(
                "{provider}: {sandboxes} sandboxes held at once, create → run → destroy through Client: peak RSS"
            ),
            baseline_name: "the goal: 64 MiB",
            unit: "MiB",
            higher_is_better: false,
            sdk: measured["peak_mib"].as_f64().unwrap_or(f64::NAN),
            baseline: GOAL_MIB,
            iterations: 1,
            iqr_percent: 0.0,
            notes: format!(
                "{errors} errors; wall time {seconds:.1} s ({:.1} ms per sandbox); {IN_FLIGHT} calls in flight; RSS {:.1} MiB before the load (client built, runtime up); the simulator serves from its own process with its rate limits off (the load is the client's, not the provider's quota) and backs each sandbox with a real local one; the client has the default retry policy; creates carry an idempotency key (on Fly each keyed create looks its key up in a list, which Fly paces to 1/s per app: concurrent look-ups share one list)",
                seconds * 1000.0 / sandboxes as f64,
                measured["idle_mib"].as_f64().unwrap_or(f64::NAN),
            ),
        }
        .emit();
    }
    Ok(())
}

/// Starts the simulator child, then the load child pointed at it; returns the load's JSON.
fn load_in_children(provider: &str, sandboxes: usize) -> Result<serde_json::Value> {
    let sim = SimChild::start(provider, false, "")?;
    let output = Child::new(std::env::current_exe()?)
        .args([LOAD_FLAG, provider, &sandboxes.to_string()])
        .envs(sim.vars().iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::inherit())
        .output()?;
    drop(sim);
    if !output.status.success() {
        return Err(format!("{provider} load failed: {}", output.status).into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// `--load PROVIDER N`: the load itself, configured from the environment; prints the JSON line.
pub async fn load(provider: &str, sandboxes: usize) -> Result {
    let raw = sandbox_sdk::provider_from_lookup(provider, |k| std::env::var(k).ok())?;
    let client: Arc<dyn Provider> =
        Arc::new(Client::builder(raw).retry(RetryPolicy::default()).build());
    let idle = crate::harness::status_field("VmRSS")?;
    std::fs::write("/proc/self/clear_refs", "5")?;
    let started = Instant::now();
    let errors = std::sync::atomic::AtomicU64::new(0);
    let failed = |e: sandbox_sdk::Error| {
        if errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 3 {
            eprintln!("  {provider} load: {e}");
        }
    };
    let made: Vec<Box<dyn Sandbox>> = stream::iter(0..sandboxes)
        .map(|i| {
            let client = client.clone();
            async move {
                let spec = CreateSpec::new().metadata("purpose", "load");
                client
                    .create(&spec.idempotency_key(format!("load-{i}")))
                    .await
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter_map(|made| async { made.map_err(failed).ok() })
        .collect()
        .await;
    stream::iter(&made)
        .for_each_concurrent(IN_FLIGHT, |sandbox| async {
            match sandbox.run(&Command::shell("echo hi")).await {
                Ok(out) if out.stdout_lossy() == "hi\n" => {}
                Ok(out) => failed(sandbox_sdk::Error::new(
                    sandbox_sdk::ErrorKind::Provider,
                    format!("run printed {:?}", out.stdout_lossy()),
                )),
                Err(e) => failed(e),
            }
        })
        .await;
    stream::iter(&made)
        .for_each_concurrent(IN_FLIGHT, |sandbox| async {
            if let Err(e) = sandbox.destroy().await {
                failed(e);
            }
        })
        .await;
    let seconds = started.elapsed().as_secs_f64();
    drop(made);
    let peak = crate::harness::status_field("VmHWM")?;
    let line = serde_json::json!({
        "seconds": seconds,
        "peak_mib": mib(peak),
        "idle_mib": mib(idle),
        "errors": errors.load(std::sync::atomic::Ordering::Relaxed),
    });
    println!("{line}");
    Ok(())
}
