//! Developer and CI entry points for the sandbox SDK workspace, run as `cargo xtask <task>`.
//!
//! One module per task. To add a task, write `src/<task>.rs` with a
//! `pub fn run(args: Args) -> Result<()>`, declare the module below and add one line to [`TASKS`];
//! to make CI run it too, add one line to `ci::steps`.
//!
//! xtask keeps few dependencies: arguments are parsed by the small [`args::Args`] helper, not clap.

mod args;
mod bench;
mod capabilities;
mod ci;
mod conformance;
mod deps;
mod disk;
mod faults;
mod fixtures;
mod fuzz;
mod mcp;
mod outside;
mod readme;
mod record;
mod shell;
mod sim;
mod skeleton;

use args::Args;
use std::process::ExitCode;

/// What a task returns: `Err` carries a message for the user, printed as `error: ...`.
pub type Result<T = ()> = std::result::Result<T, String>;

/// A task: its name on the command line, its usage line, and what it does.
struct Task {
    name: &'static str,
    usage: &'static str,
    about: &'static str,
    run: fn(Args) -> Result,
}

/// Every task, in the order `cargo xtask help` lists them.
const TASKS: &[Task] = &[
    Task {
        name: "ci",
        usage: "ci",
        about: "everything CI checks: fmt, clippy, tests, doc tests, no-default-features build, cargo package, docs, examples, README table, adapter skeleton, conformance (replayed and simulated), fixtures, dependencies, MCP client, official SDKs vs simulators, outside adapter",
        run: ci::run,
    },
    Task {
        name: "capabilities",
        usage: "capabilities [--json]",
        about: "print every provider's capability map (Markdown table, or JSON)",
        run: capabilities::run,
    },
    Task {
        name: "conformance",
        usage: "conformance [--provider NAME]",
        about: "run the conformance suite; ends with `conformance: N passed, N not supported, N skipped, N failed`",
        run: conformance::run,
    },
    Task {
        name: "fixtures",
        usage: "fixtures",
        about: "check cassettes for secrets, provenance and (with ../shared/specs) OpenAPI bodies",
        run: fixtures::run,
    },
    Task {
        name: "deps",
        usage: "deps",
        about: "dependency check: known advisories (offline), cargo audit when reachable, duplicate major versions",
        run: deps::run,
    },
    Task {
        name: "mcp-check",
        usage: "mcp-check",
        about: "the official MCP TypeScript SDK client (tools/mcp-client) drives `sbox mcp --provider local` over stdio and HTTP; the @modelcontextprotocol/conformance server checks (tools/mcp-conformance) run against `--http`",
        run: mcp::run,
    },
    Task {
        name: "outside-check",
        usage: "outside-check",
        about: "the out-of-workspace example adapter (examples/outside-adapter): record from its live service, derive, replay, tamper checks",
        run: outside::run,
    },
    Task {
        name: "sim",
        usage: "sim --provider NAME [--port N] [--faults SPEC] [--page-cap N]",
        about: "serve a provider simulator on loopback (faults: sandbox_sim::faults)",
        run: sim::run,
    },
    Task {
        name: "sim-check",
        usage: "sim-check",
        about: "the official SDKs (tools/sim-check/<provider>) drive the provider simulators",
        run: sim::run_check,
    },
    Task {
        name: "record",
        usage: "record --provider NAME [--scenario S]",
        about: "record cassettes from the live service through a scrubbing proxy",
        run: record::run,
    },
    Task {
        name: "fuzz",
        usage: "fuzz [--secs N] [TARGET...]",
        about: "run each fuzz target (cargo-fuzz) for N seconds (default 30) from its checked-in corpus; fails on a crash",
        run: fuzz::run,
    },
    Task {
        name: "skeleton",
        usage: "skeleton",
        about: "every adapter has the one file skeleton and its imports point one way (no arrow up, no circle)",
        run: skeleton::run,
    },
    Task {
        name: "readme",
        usage: "readme [--check]",
        about: "regenerate the capability and cost tables in README.md (--check: fail if either is stale)",
        run: readme::run,
    },
    Task {
        name: "faults",
        usage: "faults [--check]",
        about: "the reliability matrix: faults x operations x adapters against the simulators, into RELIABILITY.md (--check: fail if it is stale)",
        run: faults::run,
    },
    Task {
        name: "bench",
        usage: "bench [--quick] [GROUP...]",
        about: "speed and memory against raw baselines, in release mode, into BENCHMARKS.md (groups named: only their sections are replaced)",
        run: bench::run,
    },
];

fn main() -> ExitCode {
    let mut args = Args::from_env();
    let Some(name) = args.subcommand() else {
        print_help();
        return ExitCode::FAILURE;
    };
    if matches!(name.as_str(), "help" | "-h" | "--help") {
        print_help();
        return ExitCode::SUCCESS;
    }
    let Some(task) = TASKS.iter().find(|t| t.name == name) else {
        eprintln!("error: unknown task `{name}`\n");
        print_help();
        return ExitCode::FAILURE;
    };
    match (task.run)(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn print_help() {
    eprintln!("usage: cargo xtask <task> [options]\n\ntasks:");
    let width = TASKS.iter().map(|t| t.usage.len()).max().unwrap_or(0);
    for task in TASKS {
        eprintln!("  {:width$}  {}", task.usage, task.about);
    }
}
