//! `faults [--check]` (run by `cargo xtask faults`): the reliability matrix. Every fault the simulators can
//! inject, against every operation, through every adapter, one fresh simulator per cell;
//! the answers are written to RELIABILITY.md (`--check` fails when the file is stale, which is
//! also how CI notices a cell that regressed).
//!
//! A cell sets its sandbox up with no fault, then turns the fault on for every request of the
//! simulator operation the adapter's call starts with (found by a clean run of the call, so the
//! matrix follows the adapter's routes) and makes the call once, through the adapter with the
//! conformance kit's short timeouts and no client layer. It records:
//! - the outcome: `ok` (the fault never reached a request), `recovered` (it did, and the call
//!   still succeeded: a retry or another route) or the error's kind;
//! - the time to answer, in buckets wide enough to be the same run to run, `hang` past
//!   [`HANG`];
//! - the requests the call sent (every operation, from the simulator's log);
//! - the sandboxes left behind, against what the outcome says should exist: a duplicate from a
//!   create, or an orphan from a create that failed after the sandbox was made;
//! - the secrets (the API key, tokens the simulator handed out) in the error's Display and
//!   Debug: always 0, or the cell is a defect.

use futures::TryStreamExt;
use sandbox_sdk_core::{Command, CreateSpec, ListFilter, Provider, Sandbox, SandboxExt};
use sandbox_sim::{FaultPlan, FaultRule, Simulator};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// The command that regenerates RELIABILITY.md.
const FIX: &str = "cargo xtask faults";

/// What the matrix fails with: a message for the terminal.
type Result<T = ()> = std::result::Result<T, String>;

/// How long one call may take before its cell says `hang`.
const HANG: Duration = Duration::from_secs(30);

/// Cells run at once (each is a simulator and a few real processes).
const CONCURRENCY: usize = 12;

use sandbox_bench::ADAPTERS;

/// Every fault, as SPEC text (see `sandbox_sim::faults`), and what it stands for.
const FAULTS: &[(&str, &str)] = &[
    ("429:1", "rate limited, `Retry-After: 1`"),
    ("500", "internal error"),
    ("502", "bad gateway"),
    ("503", "unavailable"),
    ("reset", "connection reset before the server acts"),
    (
        "reset-after",
        "connection reset after the server acted (the ambiguous case)",
    ),
    (
        "cut:8",
        "answer cut after 8 bytes of body (of frames, on a WebSocket)",
    ),
    (
        "malformed",
        "answer whose body is not valid JSON (no effect on a WebSocket's `101`)",
    ),
    (
        "silence",
        "head sent, then never a body byte (nor a frame, on a WebSocket)",
    ),
    (
        "delay:3000",
        "answered 3 s late, past the 2 s request timeout",
    ),
    ("401", "unauthorized"),
    ("404", "not found"),
    ("409", "conflict"),
];

/// A call the matrix makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `Provider::create` with an idempotency key.
    CreateKeyed,
    /// `Provider::create` without one.
    CreateKeyless,
    /// `Provider::connect` to an existing sandbox.
    Connect,
    /// `Provider::list`, collected.
    List,
    /// `Provider::list` of two sandboxes from a server answering one per page, collected; the
    /// fault lets the first list request through and hits the second page's.
    ListSecondPage,
    /// `Sandbox::run` of `echo hi`.
    Run,
    /// `Sandbox::exec` of a command printing twice with a pause between, its events read as
    /// they come.
    Stream,
    /// `Sandbox::exec` of `cat` with stdin written, then closed.
    Stdin,
    /// `Sandbox::read_file` of an existing file.
    Read,
    /// `Sandbox::write_file`.
    Write,
    /// `Sandbox::upload` of [`BIG`] bytes streamed from a reader.
    Upload,
    /// `Sandbox::download` of [`BIG`] bytes, read as a stream.
    Download,
    /// `Sandbox::run_code` of a cell with a result, collected.
    RunCode,
    /// `Sandbox::destroy`.
    Destroy,
}

/// Every call, in the file's order.
const OPS: &[Op] = &[
    Op::CreateKeyed,
    Op::CreateKeyless,
    Op::Connect,
    Op::List,
    Op::ListSecondPage,
    Op::Run,
    Op::Stream,
    Op::Stdin,
    Op::Read,
    Op::Write,
    Op::Upload,
    Op::Download,
    Op::RunCode,
    Op::Destroy,
];

impl Op {
    /// Its name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Op::CreateKeyed => "create (key)",
            Op::CreateKeyless => "create (no key)",
            Op::Connect => "connect",
            Op::List => "list",
            Op::ListSecondPage => "list (second page)",
            Op::Run => "run",
            Op::Stream => "exec stream",
            Op::Stdin => "stdin",
            Op::Read => "read",
            Op::Write => "write",
            Op::Upload => "streamed upload",
            Op::Download => "streamed download",
            Op::RunCode => "run_code",
            Op::Destroy => "destroy",
        }
    }

    /// The simulator operations the call may start with, in order of preference: the first one
    /// a clean run of the call sends is the one the fault is put on.
    fn targets(self) -> &'static [&'static str] {
        match self {
            Op::CreateKeyed | Op::CreateKeyless => &["create"],
            Op::Connect => &["connect", "get"],
            Op::List | Op::ListSecondPage => &["list"],
            Op::Run => &["exec"],
            Op::Stream => &["exec.output", "exec"],
            Op::Stdin => &["stdin", "exec"],
            Op::Read | Op::Download => &["files.read", "exec"],
            Op::Write | Op::Upload => &["files.write", "exec"],
            // The provider's interpreter, else the exec that starts the emulated kernel.
            Op::RunCode => &["run_code", "exec"],
            Op::Destroy => &["destroy"],
        }
    }

    fn creates(self) -> bool {
        matches!(self, Op::CreateKeyed | Op::CreateKeyless)
    }

    /// The sandboxes the setup makes, and the page cap it puts on the simulator.
    fn setup(self) -> (usize, Option<usize>) {
        match self {
            _ if self.creates() => (0, None),
            Op::ListSecondPage => (2, Some(1)),
            _ => (1, None),
        }
    }

    /// The matching requests the fault lets through first: the second page's fault skips the
    /// first page's request.
    fn skip(self) -> usize {
        usize::from(self == Op::ListSecondPage)
    }
}

const FILE: &str = "faults/data.txt";
const CONTENT: &str = "reliability\n";
/// The size of a streamed transfer: several of every adapter's chunks.
const BIG: usize = 3 * 1024 * 1024 + 7;

/// The bytes a streamed transfer moves (not one repeated byte, so a misplaced chunk shows).
fn big() -> Vec<u8> {
    (0..BIG).map(|i| (i % 251) as u8).collect()
}

/// One cell's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// `ok`, `recovered`, or the error's kind.
    pub outcome: String,
    /// The time bucket.
    pub time: &'static str,
    /// Requests the call sent to the faulted operation (the first try and its retries).
    pub requests: usize,
    /// Requests the call sent to other operations (look-ups, follow-ups).
    pub others: usize,
    /// Sandboxes left behind beyond what the outcome accounts for, described (`""` for none).
    pub left: String,
    /// Secrets found in the error's Display or Debug.
    pub secrets: usize,
}

impl Cell {
    /// Whether the cell shows an adapter defect: a hang, a duplicate, a secret, or an orphan
    /// from a create with an idempotency key (the key was there to find it by).
    pub fn defect(&self, op: Op) -> Option<String> {
        let mut why = Vec::new();
        if op == Op::CreateKeyed && self.left.contains("orphan") {
            why.push(format!("{} despite the idempotency key", self.left));
        }
        if self.time == "hang" {
            why.push("hang".to_owned());
        }
        if self.left.contains("duplicate") {
            why.push(self.left.clone());
        }
        if self.secrets > 0 {
            why.push(format!("{} secret(s) in the error", self.secrets));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    fn text(&self) -> String {
        let mut text = format!("{} · {} · {} req", self.outcome, self.time, self.requests);
        match self.others {
            0 => {}
            n if n >= MANY => {
                let _ = write!(text, " +≥{MANY}");
            }
            n => {
                let _ = write!(text, " +{n}");
            }
        }
        if !self.left.is_empty() {
            let _ = write!(text, " · **{}**", self.left);
        }
        if self.secrets > 0 {
            let _ = write!(text, " · **{} secret(s)**", self.secrets);
        }
        if self.time == "hang" {
            text = format!("**{text}**");
        }
        text
    }
}

/// From this many requests to other operations on, the file says `+≥2` rather than the count:
/// look-ups that back off through a time window number one more or less run to run.
const MANY: usize = 2;

fn bucket(elapsed: Duration) -> &'static str {
    if elapsed < Duration::from_secs(2) {
        "<2s"
    } else if elapsed < Duration::from_secs(10) {
        "<10s"
    } else if elapsed < HANG {
        "<30s"
    } else {
        "hang"
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [] => write(),
        [flag] if flag == "--check" => check(),
        _ => Err("usage: faults [--check]".to_owned()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faults: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Writes RELIABILITY.md.
fn write() -> Result {
    let started = Instant::now();
    let fresh = generate()?;
    let path = path();
    std::fs::write(&path, &fresh).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!(
        "RELIABILITY.md written in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Fails when RELIABILITY.md is not what the matrix answers now.
fn check() -> Result {
    let path = path();
    let current =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let fresh = generate()?;
    if fresh == current {
        return Ok(());
    }
    let changed: Vec<String> = current
        .lines()
        .zip(fresh.lines())
        .filter(|(a, b)| a != b)
        .take(5)
        .map(|(a, b)| format!("  was: {a}\n  now: {b}"))
        .collect();
    Err(format!(
        "RELIABILITY.md is stale (a cell changed); run `{FIX}` and commit the result\n{}",
        changed.join("\n")
    ))
}

fn path() -> PathBuf {
    // This crate's directory is one below the workspace root.
    let manifest_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .unwrap_or(manifest_dir)
        .join("RELIABILITY.md")
}

/// Runs the whole matrix and renders the file.
fn generate() -> Result<String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting a tokio runtime: {e}"))?;
    let results = runtime.block_on(async {
        let results = matrix().await;
        // A simulator may finish destroying a sandbox's processes after it answered; let that
        // end before the runtime does (bounded: a task that never ends is not waited for).
        let metrics = tokio::runtime::Handle::current().metrics();
        let deadline = Instant::now() + Duration::from_secs(5);
        while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        results
    })?;
    Ok(render(&results))
}

/// `(adapter, op, target, cells in FAULTS order)`.
type Row = (&'static str, Op, Target, Vec<Cell>);

/// What a row's faults are put on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// This simulator operation.
    Operation(&'static str),
    /// Nothing: the adapter does not support the call (no cell is run).
    Unsupported,
    /// Nothing: the call's list has no second page to fault, as the provider's list does not
    /// page (a clean run sent one list request for a server capping pages at one item).
    OnePage,
}

async fn matrix() -> Result<Vec<Row>> {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut rows = Vec::new();
    for adapter in ADAPTERS {
        for op in OPS {
            rows.push((*adapter, *op));
        }
    }
    let targets =
        futures::future::join_all(rows.iter().map(|(a, op)| target_of(a, *op, &permits))).await;
    let mut jobs = Vec::new();
    for ((adapter, op), target) in rows.iter().zip(&targets) {
        if let Target::Operation(target) = target.clone()? {
            for (fault, _) in FAULTS {
                jobs.push(cell(adapter, *op, target, fault, &permits));
            }
        }
    }
    let mut cells = futures::future::join_all(jobs).await.into_iter();
    let mut out = Vec::new();
    for ((adapter, op), target) in rows.into_iter().zip(targets) {
        match target? {
            Target::Operation(target) => {
                let row: Vec<Cell> = cells.by_ref().take(FAULTS.len()).collect::<Result<_>>()?;
                out.push((adapter, op, Target::Operation(target), row));
            }
            other => out.push((adapter, op, other, Vec::new())),
        }
    }
    Ok(out)
}

/// The adapter pointed at `sim` as its `tests/conformance_sim.rs` builds it (and E2B's transfer
/// idle bound as short as its stream idle bound).
fn adapter(sim: &dyn Simulator) -> Result<Arc<dyn Provider>> {
    sandbox_bench::adapter_for(sim)
        .map_err(|e| format!("building the {} adapter: {e}", sim.provider()))
}

fn spec(key: Option<&str>) -> CreateSpec {
    let spec = CreateSpec::new()
        .metadata("suite", "faults")
        .timeout(Duration::from_secs(300));
    match key {
        Some(k) => spec.idempotency_key(k),
        None => spec,
    }
}

/// A fresh simulator (rate limits off: faults are what is under test) and its adapter, with
/// the sandbox (and file) the call needs made with no fault.
struct Setup {
    sim: Box<dyn Simulator>,
    provider: Arc<dyn Provider>,
    sandbox: Option<Box<dyn Sandbox>>,
}

/// [`setup_once`], tried three times: the setup is not under test, and on a loaded machine a
/// create can pass the kit's 2 s request timeout.
async fn setup(adapter_name: &str, op: Op) -> Result<Setup> {
    let mut last = String::new();
    for _ in 0..3 {
        match setup_once(adapter_name, op).await {
            Ok(setup) => return Ok(setup),
            Err(e) => last = e,
        }
    }
    Err(last)
}

async fn setup_once(adapter_name: &str, op: Op) -> Result<Setup> {
    let sim = sandbox_sim::start(adapter_name, 0, FaultPlan::new()).await?;
    sim.set_rate_limits(false);
    let provider = adapter(sim.as_ref())?;
    let (count, page_cap) = op.setup();
    let mut made = Vec::new();
    for _ in 0..count {
        made.push(
            provider
                .create(&spec(None))
                .await
                .map_err(|e| format!("{adapter_name} {}: setup create: {e}", op.name()))?,
        );
    }
    sim.server().set_page_cap(page_cap);
    let sandbox = match made.pop() {
        None => None,
        Some(sb) => {
            let content = match op {
                Op::Read => Some(bytes::Bytes::from(CONTENT)),
                Op::Download => Some(big().into()),
                _ => None,
            };
            if let Some(content) = content {
                sb.write_file(FILE, content)
                    .await
                    .map_err(|e| format!("{adapter_name} {}: setup write: {e}", op.name()))?;
            }
            Some(sb)
        }
    };
    sim.server().log().clear();
    sim.server().log().capture_bodies(false);
    Ok(Setup {
        sim,
        provider,
        sandbox,
    })
}

/// Makes the call once; `Ok` when it did what it should.
async fn call(setup: &Setup, op: Op, key: &str) -> sandbox_sdk_core::Result<()> {
    let provider = &setup.provider;
    let sandbox = || setup.sandbox.as_deref().expect("the setup made a sandbox");
    match op {
        Op::CreateKeyed => provider.create(&spec(Some(key))).await.map(drop),
        Op::CreateKeyless => provider.create(&spec(None)).await.map(drop),
        Op::Connect => provider.connect(sandbox().id()).await.map(drop),
        Op::List | Op::ListSecondPage => {
            let found: Vec<_> = provider
                .list(&ListFilter::new().metadata("suite", "faults"))
                .try_collect()
                .await?;
            let expected = op.setup().0;
            if found.len() == expected {
                Ok(())
            } else {
                Err(sandbox_sdk_core::Error::new(
                    sandbox_sdk_core::ErrorKind::Provider,
                    format!("list found {} sandboxes, expected {expected}", found.len()),
                ))
            }
        }
        Op::Run => {
            let out = sandbox().run(&Command::shell("echo hi")).await?;
            wrong_unless(out.stdout_lossy() == "hi\n", "run printed the wrong output")
        }
        Op::Read => {
            let data = sandbox().read_file(FILE).await?;
            wrong_unless(&data[..] == CONTENT.as_bytes(), "read the wrong bytes")
        }
        Op::Stream => {
            let command = Command::shell("echo a; sleep 0.3; echo b");
            let out = sandbox().exec(&command).await?.output().await?;
            wrong_unless(
                out.stdout_lossy() == "a\nb\n",
                "the stream printed the wrong output",
            )
        }
        Op::Stdin => {
            let mut process = sandbox().exec(&Command::new("cat").stdin()).await?;
            let mut stdin = process.take_stdin().ok_or_else(|| {
                sandbox_sdk_core::Error::new(
                    sandbox_sdk_core::ErrorKind::Provider,
                    "a process started with stdin has none",
                )
            })?;
            // An adapter's error comes back whole from inside the io error (a 401 stays
            // `Unauthorized`); a plain io error gets the nearest kind.
            let io = sandbox_sdk_core::Error::from;
            stdin.write_all(b"fed\n").await.map_err(io)?;
            stdin.shutdown().await.map_err(io)?;
            let out = process.output().await?;
            wrong_unless(out.stdout_lossy() == "fed\n", "cat echoed the wrong input")
        }
        Op::Write => sandbox().write_file(FILE, CONTENT.into()).await.map(drop),
        Op::Upload => {
            let reader = std::io::Cursor::new(big());
            sandbox()
                .upload(FILE, sandbox_sdk_core::upload_body(reader))
                .await
                .map(drop)
        }
        Op::Download => {
            let stream = sandbox().download(FILE).await?.into_stream();
            let chunks: Vec<bytes::Bytes> = stream.try_collect().await?;
            let data: Vec<u8> = chunks.concat();
            wrong_unless(data == big(), "the download has the wrong bytes")
        }
        Op::RunCode => {
            let run = sandbox()
                .run_code(&sandbox_sdk_core::code::RunCode::python("x = 6\nx * 7"))
                .await?;
            let done = run.execution().await?;
            wrong_unless(done.text() == Some("42"), "the cell gave the wrong result")
        }
        Op::Destroy => sandbox().destroy().await,
    }
}

fn wrong_unless(ok: bool, what: &str) -> sandbox_sdk_core::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(sandbox_sdk_core::Error::new(
            sandbox_sdk_core::ErrorKind::Provider,
            what.to_owned(),
        ))
    }
}

/// The simulator operation `op` starts with on `adapter`, from a clean run;
/// [`Target::Unsupported`] when the adapter does not support the call (it fails `NotSupported`
/// with no fault), [`Target::OnePage`] when the call has a second page to fault but the clean
/// run listed everything in one request.
async fn target_of(
    adapter: &'static str,
    op: Op,
    permits: &tokio::sync::Semaphore,
) -> Result<Target> {
    let _permit = permits.acquire().await.map_err(|e| e.to_string())?;
    let setup = setup(adapter, op).await?;
    match call(&setup, op, "faults-target").await {
        Err(e) if e.kind() == sandbox_sdk_core::ErrorKind::NotSupported => {
            teardown(setup).await;
            return Ok(Target::Unsupported);
        }
        Err(e) => return Err(format!("{adapter} {} fails with no fault: {e}", op.name())),
        Ok(()) => {}
    }
    let seen = setup.sim.server().log().entries();
    let found = op
        .targets()
        .iter()
        .find(|t| seen.iter().any(|e| e.operation == **t))
        .copied();
    teardown(setup).await;
    if let Some(target) = found
        && op.skip() > 0
        && seen.iter().filter(|e| e.operation == target).count() <= op.skip()
    {
        return Ok(Target::OnePage);
    }
    found.map(Target::Operation).ok_or_else(|| {
        format!(
            "{adapter} {} sent none of {:?}: {:?}",
            op.name(),
            op.targets(),
            seen.iter().map(|e| e.operation).collect::<Vec<_>>()
        )
    })
}

/// Destroys every sandbox the simulator holds (those the call made too), so no local process
/// or task outlives the cell.
async fn teardown(setup: Setup) {
    setup.sim.server().faults().clear();
    let provider = &setup.provider;
    let _ = tokio::time::timeout(HANG, async {
        let listed: Vec<_> = provider
            .list(&ListFilter::new())
            .try_collect()
            .await
            .unwrap_or_default();
        for info in listed {
            if let Ok(sb) = provider.connect(&info.id).await {
                let _ = sb.destroy().await;
            }
        }
    })
    .await;
}

async fn cell(
    adapter: &'static str,
    op: Op,
    target: &'static str,
    fault: &'static str,
    permits: &tokio::sync::Semaphore,
) -> Result<Cell> {
    let _permit = permits.acquire().await.map_err(|e| e.to_string())?;
    let setup = setup(adapter, op).await?;
    let before = setup.sim.sandboxes();
    setup.sim.server().log().capture_bodies(true);
    let rule: FaultRule = match op.skip() {
        0 => format!("{target}={fault}"),
        skip => format!("{target}={fault}@{skip}"),
    }
    .parse()?;
    setup.sim.server().faults().add(rule);
    let started = Instant::now();
    let answer = tokio::time::timeout(HANG, call(&setup, op, &format!("faults-{fault}"))).await;
    let elapsed = started.elapsed();
    setup.sim.server().faults().clear();
    let log = setup.sim.server().log().entries();
    let reached = log.iter().any(|e| e.fault.is_some());
    let (outcome, error) = match &answer {
        Err(_) => ("hang".to_owned(), None),
        Ok(Ok(())) if reached => ("recovered".to_owned(), None),
        Ok(Ok(())) => ("ok".to_owned(), None),
        Ok(Err(e)) => (e.kind().as_str().to_owned(), Some(e)),
    };
    let secrets = match error {
        Some(e) => {
            let shown = format!("{e} {e:?}");
            secrets_of(setup.sim.as_ref(), &log)
                .iter()
                .filter(|s| shown.contains(s.as_str()))
                .count()
        }
        None => 0,
    };
    // Wait for a create or destroy acted on before a reset (or answered late) to land, then
    // count.
    let settle = Instant::now();
    let mut after = setup.sim.sandboxes();
    let succeeded = matches!(answer, Ok(Ok(())));
    let expected = match op {
        _ if op.creates() => before + usize::from(succeeded),
        Op::Destroy => before - usize::from(succeeded),
        _ => before,
    };
    // (A destroy's effect shows once the simulator's state transition is over.)
    let changes = op.creates() || op == Op::Destroy;
    while changes && after == before && settle.elapsed() < Duration::from_millis(1500) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = setup.sim.sandboxes();
    }
    let left = match (op, after.cmp(&expected)) {
        (_, std::cmp::Ordering::Equal) => String::new(),
        (Op::CreateKeyless | Op::CreateKeyed, std::cmp::Ordering::Greater) if succeeded => {
            format!("{} duplicate(s)", after - expected)
        }
        (Op::CreateKeyless | Op::CreateKeyed, std::cmp::Ordering::Greater) => {
            format!("{} orphan(s)", after - expected)
        }
        (Op::Destroy, std::cmp::Ordering::Less) => "destroyed anyway".to_owned(),
        (_, std::cmp::Ordering::Greater) => format!("{} extra", after - expected),
        (_, std::cmp::Ordering::Less) => format!("{} missing", expected - after),
    };
    teardown(setup).await;
    Ok(Cell {
        outcome,
        time: bucket(elapsed),
        requests: log.iter().filter(|e| e.operation == target).count(),
        others: log.iter().filter(|e| e.operation != target).count(),
        left,
        secrets,
    })
}

/// The API key and every token the simulator handed out in a JSON answer (a value of a field
/// whose name ends in `token`, of 8 characters or more).
fn secrets_of(sim: &dyn Simulator, log: &[sandbox_sim::LogEntry]) -> Vec<String> {
    let mut found = vec![sim.api_key().to_owned()];
    for body in log.iter().filter_map(|e| e.response_body.as_deref()) {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(body) {
            collect_tokens(&value, &mut found);
        }
    }
    found.sort();
    found.dedup();
    found
}

fn collect_tokens(value: &serde_json::Value, into: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match v {
                    serde_json::Value::String(s)
                        if k.to_ascii_lowercase().ends_with("token") && s.len() >= 8 =>
                    {
                        into.push(s.clone())
                    }
                    _ => collect_tokens(v, into),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_tokens(v, into)),
        _ => {}
    }
}

fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Reliability matrix\n\n<!-- generated by `{FIX}`; do not edit by hand (`cargo xtask faults --check` in CI fails when it is stale) -->\n"
    );
    out.push_str(
        "Every fault the provider simulators inject (`sandbox_sim::faults`), on every \
         request of the simulator operation a call starts with (named after the call), through \
         each adapter built as its `tests/conformance_sim.rs` builds it (2 s request timeout, \
         2 s create look-up, 5 s stream idle bound; E2B's transfer idle bound, 60 s by default, \
         set to the same 5 s; no client layer). One fresh simulator per \
         cell; the call is made once.\n\n\
         A call the adapter does not support reads `not supported · no request` across its row. \
         `list (second page)` lists two sandboxes from a simulator that answers one per page \
         (`SimServer::set_page_cap`), its fault letting the first list request through \
         (`list=FAULT@1`); a provider whose list has no pages reads `one page · not paged` \
         across that row. A cell reads `outcome · time · requests`: the outcome is `ok` (the fault reached no \
         request), `recovered` (it did and the call still succeeded) or the error's kind; the \
         time to answer is bucketed (`<2s`, `<10s`, `<30s`, `hang` past 30 s); requests are \
         those the call sent to the faulted operation, then (`+N`) to any other (look-ups, \
         follow-ups; `+≥2` from 2 on, as look-ups backing off through a time window vary by one run to run). Then, in bold, sandboxes left behind beyond what the \
         outcome accounts for (a create's duplicate or orphan, a destroy that failed but \
         destroyed) and secrets (the API key, tokens the simulator issued) found in the \
         error's Display or Debug.\n\n",
    );
    out.push_str("Faults:\n\n");
    for (fault, about) in FAULTS {
        let _ = writeln!(out, "- `{fault}`: {about}");
    }
    let defects: Vec<String> = rows
        .iter()
        .flat_map(|(adapter, op, _, cells)| {
            cells.iter().zip(FAULTS).filter_map(move |(cell, (f, _))| {
                cell.defect(*op)
                    .map(|d| format!("- {adapter} {} under `{f}`: {d}", op.name()))
            })
        })
        .collect();
    let orphans: Vec<String> = rows
        .iter()
        .flat_map(|(adapter, op, _, cells)| {
            cells
                .iter()
                .zip(FAULTS)
                .filter(|(cell, _)| cell.left.contains("orphan"))
                .map(move |(cell, (f, _))| {
                    format!("- {adapter} {} under `{f}`: {}", op.name(), cell.left)
                })
        })
        .collect();
    out.push_str("\n## Defects (hangs, duplicates, secrets, orphans despite a key)\n\n");
    if defects.is_empty() {
        out.push_str("None.\n");
    } else {
        out.push_str(&defects.join("\n"));
        out.push('\n');
    }
    out.push_str("\n## Orphans (a create failed after the sandbox was made)\n\n");
    if orphans.is_empty() {
        out.push_str("None.\n");
    } else {
        out.push_str(&orphans.join("\n"));
        out.push('\n');
    }
    for adapter in ADAPTERS {
        let _ = writeln!(out, "\n## {adapter}\n");
        out.push_str("| call (faulted operation) |");
        for (fault, _) in FAULTS {
            let _ = write!(out, " `{fault}` |");
        }
        out.push_str("\n| --- |");
        out.push_str(&" --- |".repeat(FAULTS.len()));
        out.push('\n');
        for (_, op, target, cells) in rows.iter().filter(|r| r.0 == *adapter) {
            let target = match target {
                Target::Operation(target) => target,
                Target::Unsupported => {
                    let _ = write!(out, "| {} (none) |", op.name());
                    out.push_str(&" not supported · no request |".repeat(FAULTS.len()));
                    out.push('\n');
                    continue;
                }
                Target::OnePage => {
                    let _ = write!(out, "| {} (none) |", op.name());
                    out.push_str(&" one page · not paged |".repeat(FAULTS.len()));
                    out.push('\n');
                    continue;
                }
            };
            let _ = write!(out, "| {} (`{target}`) |", op.name());
            for cell in cells {
                let _ = write!(out, " {} |", cell.text());
            }
            out.push('\n');
        }
    }
    out.push_str(
        "\n## local\n\nThe embedded `local` provider sends no request, so none of these faults \
         applies to it: it has no column.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_wide_and_hang_is_the_bound() {
        assert_eq!(bucket(Duration::from_millis(10)), "<2s");
        assert_eq!(bucket(Duration::from_millis(2_100)), "<10s");
        assert_eq!(bucket(Duration::from_secs(12)), "<30s");
        assert_eq!(bucket(HANG), "hang");
    }

    #[test]
    fn every_fault_parses_as_a_rule() {
        for (fault, _) in FAULTS {
            let rule: FaultRule = format!("create={fault}").parse().unwrap();
            assert_eq!(rule.to_string(), format!("create={fault}"));
        }
    }

    #[test]
    fn tokens_are_found_at_any_depth() {
        let body = serde_json::json!({
            "envdAccessToken": "abcdefgh1234",
            "nested": [{"trafficAccessToken": "zyxwvuts9876", "tokenless": "x"}],
            "shortToken": "abc"
        });
        let mut found = Vec::new();
        collect_tokens(&body, &mut found);
        found.sort();
        assert_eq!(found, ["abcdefgh1234", "zyxwvuts9876"]);
    }

    #[test]
    fn defects_are_hangs_duplicates_and_secrets_only() {
        let cell = |time, left: &str, secrets| Cell {
            outcome: "transport error".into(),
            time,
            requests: 1,
            others: 0,
            left: left.into(),
            secrets,
        };
        assert_eq!(cell("<2s", "", 0).defect(Op::Run), None);
        assert_eq!(
            cell("<2s", "1 orphan(s)", 0).defect(Op::CreateKeyless),
            None
        );
        assert!(
            cell("<2s", "1 orphan(s)", 0)
                .defect(Op::CreateKeyed)
                .is_some()
        );
        assert!(cell("hang", "", 0).defect(Op::Run).is_some());
        assert!(cell("<2s", "1 duplicate(s)", 0).defect(Op::Run).is_some());
        assert!(cell("<2s", "", 1).defect(Op::Run).is_some());
    }
}
