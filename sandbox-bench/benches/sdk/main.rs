//! `cargo xtask bench`: the SDK's speed and memory against raw baselines measured in the same
//! run, on loopback only. Prints one JSON line per measurement on stdout (collected into
//! `BENCHMARKS.md` by `cargo xtask bench`) and a readable summary on stderr.
//!
//! ```sh
//! cargo bench -p sandbox-bench --bench sdk -- [--quick] [http] [local] [daytona]
//! ```
//!
//! `--quick` uses small sizes and few iterations; naming groups runs only those.

mod daytona;
mod daytona_server;
mod harness;
mod http;
mod local;
mod server;

use harness::{Config, PROBE_FLAG, Result};

#[tokio::main]
async fn main() -> Result {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == PROBE_FLAG) {
        let case = args.get(i + 1).ok_or("--probe needs a case")?;
        let n: u64 = args.get(i + 2).ok_or("--probe needs a size")?.parse()?;
        let growth = match http::probe(case, n).await? {
            Some(growth) => growth,
            None => match daytona::probe(case, n).await? {
                Some(growth) => growth,
                None => local::probe(case, n)
                    .await?
                    .ok_or_else(|| format!("unknown probe {case:?}"))?,
            },
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
        if !matches!(*group, "http" | "local" | "daytona") {
            return Err(format!("unknown group {group:?} (expected http, local, daytona)").into());
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
    if wanted("daytona") {
        daytona::run(&config).await?;
    }
    Ok(())
}
