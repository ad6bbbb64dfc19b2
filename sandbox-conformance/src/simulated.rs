//! Scenarios only a live, stateful server can show, run by [`Suite::simulated`] against a
//! provider simulator: they inject faults through the simulator's [`FaultPlan`](sandbox_sim::FaultPlan) and count the
//! sandboxes it holds, which neither a cassette nor a real service allows.
//!
//! The adapter under test is built by the suite's factory for the simulator's URL, with the
//! kit's short timeouts: [`REPLAY_REQUEST_TIMEOUT`](crate::REPLAY_REQUEST_TIMEOUT) per request,
//! [`REPLAY_CREATE_LOOKUP`](crate::REPLAY_CREATE_LOOKUP) for ambiguous creates, and a stream idle
//! bound of at most [`SIM_STREAM_IDLE`].
//!
//! [`Suite::simulated`]: crate::Suite::simulated

use sandbox_sdk_core::client::Client;
use sandbox_sdk_core::{Capability, Command, CreateSpec, ProcessEvent, Provider, SandboxExt};
use sandbox_sim::{Fault, FaultRule, Simulator};
use std::sync::Arc;
use std::time::Duration;

/// The longest stream idle bound a simulated suite's adapter may be built with.
pub const SIM_STREAM_IDLE: Duration = Duration::from_secs(5);

/// How many sandboxes `sim_thousand_sandboxes` holds at once, unless the suite says otherwise
/// ([`Suite::load_sandboxes`](crate::Suite::load_sandboxes)).
pub const LOAD_SANDBOXES: usize = 1_000;

/// How many requests `sim_thousand_sandboxes` has in flight at a time: every sandbox exists at
/// once, but each create, command and destroy is real work on this machine, under the kit's
/// short request timeout.
pub const LOAD_CONCURRENCY: usize = 8;

/// How long any one wait inside a scenario may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(30);

/// The load scenario's name: generated `#[ignore]`d and run alone by `cargo xtask conformance`.
pub const LOAD_SCENARIO: &str = "sim_thousand_sandboxes";

/// How long the load scenario may run (it runs alone, so it may take longer than the others'
/// [`SCENARIO_TIMEOUT`](crate::SCENARIO_TIMEOUT)).
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// A simulator-only scenario.
pub struct SimScenario {
    /// Its name: its test name.
    pub name: &'static str,
    /// The capability it needs (skipped when unsupported).
    pub requires: Option<Capability>,
    /// One line on what it checks.
    pub summary: &'static str,
}

/// Every simulator-only scenario, in the order `sim_conformance_tests!` lists them.
pub const SIM_SCENARIOS: &[SimScenario] = &[
    SimScenario {
        name: "sim_concurrent_creates",
        requires: None,
        summary: "eight concurrent creates with one idempotency key make exactly one sandbox",
    },
    SimScenario {
        name: "sim_slow_create",
        requires: None,
        summary: "a create answered after the request timeout is looked up, not re-sent: one sandbox",
    },
    SimScenario {
        name: "sim_silent_stream",
        requires: None,
        summary: "a command whose answer goes silent fails within the idle bound (or recovers) instead of hanging",
    },
    SimScenario {
        name: "sim_kill_while_streaming",
        requires: Some(Capability::KillProcess),
        summary: "killing a command mid-stream ends its stream with a failed exit",
    },
    SimScenario {
        name: "sim_reattach",
        requires: Some(Capability::Background),
        summary: "a background command is reattached from a fresh adapter and killed",
    },
    SimScenario {
        name: "sim_thousand_sandboxes",
        requires: None,
        summary: "1,000 sandboxes created at once through Client, each runs a command, all destroyed: no error, none left",
    },
];

/// The simulator-only scenario named `name`.
pub fn sim_scenario(name: &str) -> Option<&'static SimScenario> {
    SIM_SCENARIOS.iter().find(|s| s.name == name)
}

/// Runs simulator-only scenario `name` against `raw` (the adapter, no client layer) and `sim`.
/// `rebuild` builds a second, fresh adapter for the same simulator.
pub(crate) async fn run(
    name: &str,
    load: usize,
    sim: &dyn Simulator,
    raw: Arc<dyn Provider>,
    rebuild: &(dyn Fn() -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync),
) -> Result<(), String> {
    let result = match name {
        "sim_concurrent_creates" => concurrent_creates(sim, &raw).await,
        "sim_slow_create" => slow_create(sim, &raw).await,
        "sim_silent_stream" => silent_stream(sim, &raw).await,
        "sim_kill_while_streaming" => kill_while_streaming(&raw).await,
        "sim_reattach" => reattach(&raw, rebuild).await,
        "sim_thousand_sandboxes" => thousand_sandboxes(load, sim, &raw).await,
        other => Err(format!("no simulator scenario named {other:?}")),
    };
    sim.server().faults().clear();
    sim.set_rate_limits(true);
    result
}

fn spec(key: Option<&str>) -> CreateSpec {
    let spec = crate::scenarios::conformance_spec();
    match key {
        Some(k) => spec.idempotency_key(k),
        None => spec,
    }
}

/// A key no other run of the scenario uses.
fn unique_key(what: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "sim-{what}-{}-{nanos}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(HANG, future)
        .await
        .map_err(|_| format!("{what} did not finish within {}s: a hang", HANG.as_secs()))
}

fn count_check(sim: &dyn Simulator, expected: usize, what: &str) -> Result<(), String> {
    let now = sim.sandboxes();
    if now == expected {
        Ok(())
    } else {
        Err(format!(
            "{what}: the simulator holds {now} sandboxes, expected {expected}"
        ))
    }
}

async fn concurrent_creates(sim: &dyn Simulator, raw: &Arc<dyn Provider>) -> Result<(), String> {
    // This is about one key making one sandbox; eight requests at once would otherwise meet
    // the provider's documented rate limits, which are not the point here.
    sim.set_rate_limits(false);
    let before = sim.sandboxes();
    let spec = spec(Some(&unique_key("concurrent")));
    let creates = (0..8).map(|_| raw.create(&spec));
    let results = within(
        "eight concurrent creates",
        futures::future::join_all(creates),
    )
    .await?;
    let mut ids = Vec::new();
    for result in results {
        ids.push(
            result
                .map_err(|e| format!("a create with the shared key failed: {e}"))?
                .id()
                .to_owned(),
        );
    }
    let first = ids[0].clone();
    let checked = if ids.iter().all(|id| *id == first) {
        count_check(sim, before + 1, "after eight creates with one key")
    } else {
        Err(format!(
            "creates with one key answered different sandboxes: {ids:?}"
        ))
    };
    for id in dedup(ids) {
        if let Ok(sb) = raw.connect(&id).await {
            let _ = sb.destroy().await;
        }
    }
    checked
}

fn dedup(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids.dedup();
    ids
}

async fn slow_create(sim: &dyn Simulator, raw: &Arc<dyn Provider>) -> Result<(), String> {
    let before = sim.sandboxes();
    let late = crate::REPLAY_REQUEST_TIMEOUT + Duration::from_secs(1);
    sim.server()
        .faults()
        .add(FaultRule::new("create", Fault::Delay(late)).times(1));
    let created = within(
        "a create answered late",
        raw.create(&spec(Some(&unique_key("slow")))),
    )
    .await?
    .map_err(|e| format!("a create answered after the request timeout failed: {e}"))?;
    let checked = count_check(sim, before + 1, "after one late-answered create");
    let _ = created.destroy().await;
    checked
}

async fn silent_stream(sim: &dyn Simulator, raw: &Arc<dyn Provider>) -> Result<(), String> {
    let sb = raw
        .create(&spec(None))
        .await
        .map_err(|e| format!("setup: create failed: {e}"))?;
    let faults = sim.server().faults();
    faults.add(FaultRule::new("exec", Fault::Silence).times(1));
    faults.add(FaultRule::new("exec.output", Fault::Silence).times(1));
    let silent = within(
        "a command whose answer went silent",
        sb.run(&Command::shell("echo hi")),
    )
    .await;
    faults.clear();
    let reached = sim
        .server()
        .log()
        .entries()
        .iter()
        .any(|e| e.fault.as_deref() == Some("silence"));
    let result = match silent {
        Err(hang) => Err(hang),
        _ if !reached => Err(
            "no request of the command was silenced: the simulator names \
             its command requests differently from `exec` / `exec.output`"
                .to_owned(),
        ),
        // Recovering (looking the command up another way) is as good as failing in time.
        Ok(Ok(out)) if out.stdout_lossy().trim() == "hi" => Ok(()),
        Ok(Ok(out)) => Err(format!(
            "after a silenced answer, `echo hi` printed {:?}",
            out.stdout_lossy()
        )),
        Ok(Err(_)) => match within(
            "a command after the silence",
            sb.run(&Command::shell("echo hi")),
        )
        .await?
        {
            Ok(out) if out.stdout_lossy().trim() == "hi" => Ok(()),
            Ok(out) => Err(format!(
                "after the silence, `echo hi` printed {:?}",
                out.stdout_lossy()
            )),
            Err(e) => Err(format!("after the silence, `echo hi` failed: {e}")),
        },
    };
    let _ = sb.destroy().await;
    result
}

async fn kill_while_streaming(raw: &Arc<dyn Provider>) -> Result<(), String> {
    let client = Client::new(raw.clone());
    let sb = client
        .create(&spec(None))
        .await
        .map_err(|e| format!("setup: create failed: {e}"))?;
    let result = async {
        let mut process = sb
            .exec(&Command::shell(
                "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done",
            ))
            .await
            .map_err(|e| format!("starting a ticking command failed: {e}"))?;
        first_stdout(&mut process).await?;
        let control = process.control();
        control
            .kill()
            .await
            .map_err(|e| format!("kill while streaming failed: {e}"))?;
        let status = exit_of(&mut process).await?;
        if status.success() {
            Err(format!("a killed command exited successfully: {status}"))
        } else {
            Ok(())
        }
    }
    .await;
    let _ = sb.destroy().await;
    result
}

async fn first_stdout(process: &mut sandbox_sdk_core::Process) -> Result<(), String> {
    within("the first line of output", async {
        loop {
            match process.next_event().await {
                Some(Ok(ProcessEvent::Stdout(b))) if !b.is_empty() => return Ok(()),
                Some(Ok(ProcessEvent::Exit(s))) => {
                    return Err(format!("the command ended before printing: {s}"));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("the stream failed before output: {e}")),
                None => return Err("the stream ended before output".to_owned()),
            }
        }
    })
    .await?
}

async fn exit_of(
    process: &mut sandbox_sdk_core::Process,
) -> Result<sandbox_sdk_core::ExitStatus, String> {
    within("the end of a killed command's stream", async {
        loop {
            match process.next_event().await {
                Some(Ok(ProcessEvent::Exit(s))) => return Ok(s),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("the stream failed after the kill: {e}")),
                None => return Err("the stream ended with no exit status".to_owned()),
            }
        }
    })
    .await?
}

async fn reattach(
    raw: &Arc<dyn Provider>,
    rebuild: &(dyn Fn() -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync),
) -> Result<(), String> {
    let sb = raw
        .create(&spec(None))
        .await
        .map_err(|e| format!("setup: create failed: {e}"))?;
    let result = async {
        let started = sb
            .exec(&Command::shell("while true; do echo tick; sleep 0.1; done").background())
            .await
            .map_err(|e| format!("starting a background command failed: {e}"))?;
        let pid = started.pid().to_owned();
        drop(started);
        let fresh = rebuild().map_err(|e| format!("building a second adapter failed: {e}"))?;
        let again = fresh
            .connect(sb.id())
            .await
            .map_err(|e| format!("connecting from a second adapter failed: {e}"))?;
        let mut attached = within("attach", again.attach(&pid))
            .await?
            .map_err(|e| format!("attaching to background process {pid} failed: {e}"))?;
        first_stdout(&mut attached).await?;
        again
            .kill_process(&pid)
            .await
            .map_err(|e| format!("killing the reattached process failed: {e}"))?;
        exit_of(&mut attached).await.map(drop)
    }
    .await;
    let _ = sb.destroy().await;
    result
}

async fn thousand_sandboxes(
    load: usize,
    sim: &dyn Simulator,
    raw: &Arc<dyn Provider>,
) -> Result<(), String> {
    sim.set_rate_limits(false);
    let before = sim.sandboxes();
    let client = Client::new(raw.clone());
    let deadline = tokio::time::Instant::now() + LOAD_TIMEOUT - Duration::from_secs(10);
    let started = std::time::Instant::now();
    let mut phases: Vec<String> = Vec::new();
    let late = |what: &str, phases: &[String]| {
        format!(
            "{load} sandboxes: {what} did not finish in time (so far: {})",
            phases.join(", ")
        )
    };
    // Every sandbox exists at once; requests go LOAD_CONCURRENCY at a time.
    let load_spec = spec(None);
    let permits = tokio::sync::Semaphore::new(LOAD_CONCURRENCY);
    let creates =
        futures::future::join_all((0..load).map(|_| create_with(&client, &load_spec, &permits)));
    let created = tokio::time::timeout_at(deadline, creates)
        .await
        .map_err(|_| late("the creates", &phases))?;
    phases.push(format!("creates {:.1}s", started.elapsed().as_secs_f64()));
    let mut sandboxes = Vec::new();
    let mut errors = Vec::new();
    for result in created {
        match result {
            Ok(sb) => sandboxes.push(sb),
            Err(e) => errors.push(format!("create: {e}")),
        }
    }
    let peak = sim.sandboxes();
    let runs = futures::future::join_all(
        sandboxes
            .iter()
            .enumerate()
            .map(|(i, sb)| echo_in(i, sb.as_ref(), &permits)),
    );
    let ran = tokio::time::timeout_at(deadline, runs)
        .await
        .map_err(|_| late("the commands", &phases))?;
    phases.push(format!("commands {:.1}s", started.elapsed().as_secs_f64()));
    errors.extend(ran.into_iter().filter_map(Result::err));
    let destroys = futures::future::join_all(
        sandboxes
            .iter()
            .map(|sb| destroy_with(sb.as_ref(), &permits)),
    );
    let destroyed = tokio::time::timeout_at(deadline, destroys)
        .await
        .map_err(|_| late("the destroys", &phases))?;
    errors.extend(destroyed.into_iter().filter_map(Result::err));
    if let Some(first) = errors.first() {
        return Err(format!(
            "{} of {load} sandboxes failed; the first: {first}",
            errors.len()
        ));
    }
    if peak != before + load {
        return Err(format!(
            "with every load sandbox created the simulator held {peak}, expected {}",
            before + load
        ));
    }
    count_check(sim, before, "after destroying every load sandbox")
}

/// Creates one load sandbox once a permit is free.
async fn create_with(
    client: &Client,
    spec: &CreateSpec,
    permits: &tokio::sync::Semaphore,
) -> sandbox_sdk_core::Result<Box<dyn sandbox_sdk_core::Sandbox>> {
    let _permit = permits.acquire().await;
    client.create(spec).await
}

/// Destroys one load sandbox once a permit is free.
async fn destroy_with(
    sandbox: &dyn sandbox_sdk_core::Sandbox,
    permits: &tokio::sync::Semaphore,
) -> Result<(), String> {
    let _permit = permits.acquire().await.map_err(|e| e.to_string())?;
    sandbox.destroy().await.map_err(|e| format!("destroy: {e}"))
}

/// Runs `echo i` in `sandbox` once a permit is free and checks what it printed.
async fn echo_in(
    i: usize,
    sandbox: &dyn sandbox_sdk_core::Sandbox,
    permits: &tokio::sync::Semaphore,
) -> Result<(), String> {
    let _permit = permits.acquire().await.map_err(|e| e.to_string())?;
    // With a timeout, as a load of short commands would be run: on a provider that runs
    // commands without one through a slower path (Fly's launch-and-poll), this takes the
    // direct one.
    let command = Command::shell(format!("echo {i}")).timeout(Duration::from_secs(60));
    match sandbox.run(&command).await {
        Ok(out) if out.stdout_lossy().trim() == i.to_string() => Ok(()),
        Ok(out) => Err(format!("sandbox {i} printed {:?}", out.stdout_lossy())),
        Err(e) => Err(format!("run: {e}")),
    }
}
