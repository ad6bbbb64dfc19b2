//! `sandbox-sim --provider NAME [--port N] [--faults SPEC] [--page-cap N]`: serves one provider
//! simulator on `127.0.0.1` until interrupted, printing its URL and the environment that points
//! the provider's official SDK (and the adapter's `from_env`) at it, then the request log as
//! JSON lines.
//!
//! The key is new for each start, and only loopback names (`127.0.0.1`, `localhost`) are
//! served. `--faults` takes a fault plan (`create=delay:3000#1;exec=429:1`, see
//! `sandbox_sim::faults`); `--page-cap N` answers list pages of at most N items.

use sandbox_sim::FaultPlan;
use std::process::ExitCode;

const USAGE: &str = "usage: sandbox-sim --provider NAME [--port N] [--faults SPEC] [--page-cap N]";

/// What the command line asked for.
#[derive(Debug)]
struct Options {
    provider: String,
    port: u16,
    faults: FaultPlan,
    page_cap: Option<usize>,
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("sandbox-sim: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("sandbox-sim: starting a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(options: Options) -> Result<(), String> {
    let sim = sandbox_sim::start(&options.provider, options.port, options.faults).await?;
    sim.server().set_page_cap(options.page_cap);
    println!("{} simulator on {}", sim.provider(), sim.url());
    println!("# the key is new for each start; loopback names only (127.0.0.1, localhost)");
    for (name, value) in sim.env() {
        println!("export {name}={value}");
    }
    println!("(Ctrl-C stops it)");
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
    print!("{}", sim.server().log().to_json_lines());
    Ok(())
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut provider = None;
    let mut options = Options {
        provider: String::new(),
        port: 0,
        faults: FaultPlan::new(),
        page_cap: None,
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--provider" => provider = Some(value),
            "--port" => {
                options.port = value
                    .parse()
                    .map_err(|_| format!("--port {value:?} is not a port"))?;
            }
            "--faults" => options.faults = FaultPlan::parse(&value)?,
            "--page-cap" => {
                let cap = value.parse::<usize>().ok().filter(|n| *n > 0);
                options.page_cap =
                    Some(cap.ok_or_else(|| {
                        format!("--page-cap {value:?} is not a count of at least 1")
                    })?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    options.provider = provider.ok_or("--provider NAME is required")?;
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn the_command_line_is_read_whole_or_refused() {
        let options = parse(args("--provider fly --port 4280 --page-cap 2")).unwrap();
        assert_eq!((options.provider.as_str(), options.port), ("fly", 4280));
        assert_eq!(options.page_cap, Some(2));
        assert!(parse(args("--port 1")).unwrap_err().contains("--provider"));
        assert!(parse(args("--provider e2b --port x")).is_err());
        assert!(parse(args("--provider e2b --page-cap 0")).is_err());
        assert!(parse(args("--provider e2b --faults nonsense")).is_err());
        assert!(parse(args("--provider e2b --what 1")).is_err());
        assert!(parse(args("--provider")).is_err());
    }
}
