//! `cargo xtask bench`: the SDK's speed and memory against raw baselines measured in the same
//! run, on loopback only. Prints one JSON line per measurement on stdout (collected into
//! `BENCHMARKS.md` by `cargo xtask bench`) and a readable summary on stderr.
//!
//! ```sh
//! cargo bench -p sandbox-bench --bench sdk -- [--quick] [http] [local] [code] [e2b] [daytona] [fly] [vercel] [sprites] [load]
//! ```
//!
//! `--quick` uses small sizes and few iterations; naming groups runs only those.

mod adapter;
mod code;
mod daytona;
mod e2b;
mod fly;
mod harness;
mod http;
mod load;
mod local;
mod server;
mod sim;
mod sprites;
mod vercel;

use harness::{Config, PROBE_FLAG, Result};

/// The groups, in the order they run.
const GROUPS: &[&str] = &[
    "http", "local", "code", "e2b", "daytona", "fly", "vercel", "sprites", "load",
];

#[tokio::main]
async fn main() -> Result {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, provider, rest @ ..] = args.as_slice() {
        if flag == sim::SERVE_FLAG {
            let [limits, faults] = rest else {
                return Err("--serve-sim needs PROVIDER LIMITS FAULTS".into());
            };
            return sim::serve(provider, limits, faults).await;
        }
        if flag == load::LOAD_FLAG {
            let n = rest.first().ok_or("--load needs a count")?.parse()?;
            return load::load(provider, n).await;
        }
    }
    if let Some(i) = args.iter().position(|a| a == PROBE_FLAG) {
        let case = args.get(i + 1).ok_or("--probe needs a case")?;
        let n: u64 = args.get(i + 2).ok_or("--probe needs a size")?.parse()?;
        let growth = if let Some(g) = http::probe(case, n).await? {
            g
        } else if let Some(g) = local::probe(case, n).await? {
            g
        } else if let Some(g) = e2b::probe(case, n).await? {
            g
        } else if let Some(g) = daytona::probe(case, n).await? {
            g
        } else {
            fly::probe(case, n)
                .await?
                .ok_or_else(|| format!("unknown probe {case:?}"))?
        };
        println!("{growth}");
        return Ok(());
    }
    let quick = args.iter().any(|a| a == "--quick");
    let groups: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for group in &groups {
        if !GROUPS.contains(group) {
            return Err(format!(
                "unknown group {group:?} (expected one of {})",
                GROUPS.join(", ")
            )
            .into());
        }
    }
    let wanted = |g: &str| groups.is_empty() || groups.contains(&g);
    let config = Config::new(quick);
    eprintln!("sandbox-sdk-core benchmarks ({config:?})");
    if wanted("http") {
        http::run(&config).await?;
    }
    if wanted("local") {
        local::run(&config).await?;
    }
    if wanted("code") {
        code::run(&config).await?;
    }
    if wanted("e2b") {
        e2b::run(&config).await?;
    }
    if wanted("daytona") {
        daytona::run(&config).await?;
    }
    if wanted("fly") {
        fly::run(&config).await?;
    }
    if wanted("vercel") {
        vercel::run(&config).await?;
    }
    if wanted("sprites") {
        sprites::run(&config).await?;
    }
    if wanted("load") {
        load::run(&config).await?;
    }
    Ok(())
}
