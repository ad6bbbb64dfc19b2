//! Cancellation leaves nothing behind: against each provider simulator, thousands of calls
//! through the adapter are dropped at pseudo-random points (a future before it answers, a
//! `Process` mid-stream, a download or an upload mid-transfer), and afterwards the client's
//! runtime has no more live tasks and the process no more open file descriptors than before.
//!
//! The simulator runs on a runtime of its own, so the client runtime's task count is the
//! adapter's alone; file descriptors are process-wide (the simulator's sockets and its
//! commands' pipes count too), so the baseline is taken with the simulator and its sandbox up
//! and the adapter not yet built, and the check waits (bounded) for the simulator to close its
//! side of the connections the dropped calls left. One test runs the adapters one after the
//! other: `/proc/self/fd` is shared by every test in a binary.
//!
//! `CANCEL_OPS` sets the calls per adapter (default 2,000; Fly makes a twentieth as many),
//! `CANCEL_PROVIDERS` (comma-separated) limits the adapters.

use futures::StreamExt;
use sandbox_sdk_core::{
    Command, CreateSpec, ListFilter, Provider, Sandbox, SandboxExt, upload_body,
};
use sandbox_sim::{FaultPlan, Simulator};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The adapter pointed at `sim` as its `tests/conformance_sim.rs` builds it.
fn adapter(sim: &dyn Simulator) -> Arc<dyn Provider> {
    sandbox_bench::adapter_for(sim).unwrap()
}

/// The open file descriptors, without the simulator's command output files (`local`
/// sandboxes under a `sandbox-sim-*` directory) and pipes (its commands' and sessions'): those
/// are the server's, kept while its sandbox lives (counted apart by [`sim_output_files`]); the
/// adapters open neither.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| !is_sim_file(&e.path()))
        .count()
}

fn is_sim_file(fd: &std::path::Path) -> bool {
    std::fs::read_link(fd).is_ok_and(|t| {
        let t = t.to_string_lossy();
        t.contains("/sandbox-sim-") || t.starts_with("pipe:")
    })
}

/// The simulator's command output files and pipes open now.
fn sim_output_files() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| is_sim_file(&e.path()))
        .count()
}

/// The open descriptors by kind: sockets of the client (to `port`), of the server (on
/// `port`), other sockets, pipes, other files; for the failure message.
fn fd_kinds(port: u16) -> String {
    let mut sockets = std::collections::HashMap::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        for line in std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 10 {
                continue;
            }
            let port_of = |addr: &str| {
                addr.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            sockets.insert(
                cols[9].to_owned(),
                (port_of(cols[1]), port_of(cols[2]), cols[3].to_owned()),
            );
        }
    }
    let mut counts = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let target = std::fs::read_link(entry.path())
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        let kind = if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            match sockets.get(inode) {
                Some((_, Some(remote), state)) if *remote == port => {
                    format!("client socket (state {state})")
                }
                Some((Some(local), _, state)) if *local == port => {
                    format!("server socket (state {state})")
                }
                _ => "other socket".to_owned(),
            }
        } else if target.starts_with("pipe:") {
            "pipe".to_owned()
        } else {
            format!("file {target}")
        };
        if !target.contains("/sandbox-sim-") && !target.starts_with("pipe:") {
            *counts.entry(kind).or_insert(0usize) += 1;
        }
    }
    format!("{counts:?}")
}

/// A small deterministic generator (xorshift64*), so a failing run can be repeated.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Commands carry a timeout: Fly runs one without it through a slower launch-and-poll path.
const MAX: Duration = Duration::from_secs(60);

const FILE: &str = "cancel/data.bin";
const FILE_SIZE: usize = 256 * 1024;

/// `now()` once it has stopped changing (the same over 200 ms; bounded to 10 s).
fn steady(now: impl Fn() -> usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = now();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let value = now();
        if value != last {
            (last, since) = (value, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(200) {
            break;
        }
    }
    last
}

/// Waits (bounded) until `now()` is at most `limit`, and returns its last value.
fn settle(limit: usize, now: impl Fn() -> usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = now();
        if value <= limit || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One call, dropped after `budget` unless it ends first; what kind of call is `kind`.
async fn call(sandbox: &dyn Sandbox, provider: &dyn Provider, kind: u64, budget: Duration) {
    let work = async {
        match kind {
            0 => drop(provider.connect(sandbox.id()).await),
            1 => {
                let mut listed = provider.list(&ListFilter::new());
                while listed.next().await.is_some() {}
            }
            2 => drop(sandbox.run(&Command::shell("echo hi").timeout(MAX)).await),
            3 => {
                // A process dropped after a few events, whatever it was doing.
                if let Ok(mut p) = sandbox
                    .exec(&Command::shell("for i in 1 2 3 4 5; do echo $i; done").timeout(MAX))
                    .await
                {
                    let _ = p.next_event().await;
                    drop(p);
                }
            }
            4 => {
                // A download dropped after its first chunk.
                if let Ok(mut d) = sandbox.download(FILE).await {
                    let _ = d.next().await;
                }
            }
            5 => drop(sandbox.read_file(FILE).await),
            6 => {
                let body = upload_body(std::io::Cursor::new(vec![b'u'; FILE_SIZE]));
                drop(sandbox.upload("cancel/up.bin", body).await)
            }
            _ => drop(sandbox.write_file("cancel/small.txt", "x".into()).await),
        }
    };
    let _ = tokio::time::timeout(budget, work).await;
}

/// Runs `ops` dropped calls against `provider`'s simulator; returns what leaked.
fn leaks(provider: &str, ops: usize, seed: u64) -> Result<(), String> {
    let sim_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sim = sim_runtime
        .block_on(sandbox_sim::start(provider, 0, FaultPlan::new()))
        .unwrap();
    sim.set_rate_limits(false);
    let port: u16 = sim.url().rsplit(':').next().unwrap().parse().unwrap();
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The sandbox and its file, made by an adapter that is gone before the baseline.
    let id = client_runtime.block_on(async {
        let setup = adapter(sim.as_ref());
        let sb = setup
            .create(&CreateSpec::new().timeout(Duration::from_secs(600)))
            .await
            .unwrap();
        sb.write_file(FILE, vec![b'd'; FILE_SIZE].into())
            .await
            .unwrap();
        sb.id().to_owned()
    });
    let metrics = client_runtime.metrics();
    let tasks_before = steady(|| metrics.num_alive_tasks());
    let fds_before = steady(open_fds);

    let started = Instant::now();
    let mut rng = Rng(seed);
    let (completed, ok_after) = client_runtime.block_on(async {
        let provider = adapter(sim.as_ref());
        let sandbox = provider.connect(&id).await.unwrap();
        let mut completed = 0;
        for _ in 0..ops {
            let kind = rng.below(8);
            // One call in four runs to its end; the others are dropped within 0-15 ms, which
            // lands before the request, mid-request, mid-stream or after the answer.
            let budget = if rng.below(4) == 0 {
                Duration::from_secs(30)
            } else {
                Duration::from_micros(rng.below(15_000))
            };
            let t = Instant::now();
            call(sandbox.as_ref(), provider.as_ref(), kind, budget).await;
            if t.elapsed() < budget {
                completed += 1;
            }
        }
        // Still usable after all that.
        let out = sandbox.run(&Command::shell("echo ok").timeout(MAX)).await;
        let ok = matches!(&out, Ok(o) if o.stdout_lossy() == "ok\n");
        drop(sandbox);
        drop(provider);
        (completed, ok)
    });
    let elapsed = started.elapsed();
    let tasks_after = settle(tasks_before, || metrics.num_alive_tasks());
    let fds_after = settle(fds_before, open_fds);
    let kinds = fd_kinds(port);
    let held = sim_output_files();
    println!("{provider}: simulator output files and pipes held open: {held}");
    println!(
        "{provider}: {ops} calls ({completed} ended before their budget) in {:.1}s; tasks {tasks_before} -> {tasks_after}, fds {fds_before} -> {fds_after}",
        elapsed.as_secs_f64()
    );
    drop(client_runtime);
    drop(sim);
    drop(sim_runtime);
    let mut problems = Vec::new();
    if !ok_after {
        problems.push(format!(
            "{provider}: a command after the dropped calls failed"
        ));
    }
    if tasks_after > tasks_before {
        problems.push(format!(
            "{provider}: {} task(s) left alive by dropped calls ({tasks_before} -> {tasks_after})",
            tasks_after - tasks_before
        ));
    }
    if fds_after > fds_before {
        problems.push(format!(
            "{provider}: {} file descriptor(s) left open by dropped calls ({fds_before} -> {fds_after}): {kinds}",
            fds_after - fds_before
        ));
    }
    if completed == ops || completed == 0 {
        problems.push(format!(
            "{provider}: {completed} of {ops} calls ended before their budget: the drops did not land mid-call"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn dropped_calls_leave_no_task_and_no_file_descriptor() {
    let ops = std::env::var("CANCEL_OPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let mut problems = Vec::new();
    let only = std::env::var("CANCEL_PROVIDERS").unwrap_or_default();
    for (i, provider) in sandbox_bench::ADAPTERS.iter().copied().enumerate() {
        if !only.is_empty() && !only.split(',').any(|p| p == provider) {
            continue;
        }
        // A Fly call that runs to its end goes through the machine's exec (about 0.3 s each on
        // the simulator): a twentieth as many keeps the test near a minute.
        let ops = if provider == "fly" { ops / 20 } else { ops };
        if let Err(e) = leaks(provider, ops, 0x9E37_79B9_7F4A_7C15 + i as u64) {
            problems.push(e);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
