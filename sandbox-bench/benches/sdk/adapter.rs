//! What the three adapter groups (`e2b`, `daytona`, `fly`) share: the SDK side of each row
//! (written once against `dyn Sandbox`), the [`Raw`] baseline each group implements for its own
//! protocol, the rows built from both, and the transfer memory probes run in fresh processes
//! against the group's simulator child ([`SimChild`]).

use crate::harness::{
    self, BoxError, Config, Result, Timings, latency_record, memory_record, mib, rested,
    size_label, throughput_record,
};
use crate::sim::SimChild;
use futures::StreamExt;
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent, Provider, Sandbox, SandboxExt};
use std::path::Path;
use std::time::Duration;

/// Environment variable naming the sandbox a memory probe works in.
const SANDBOX_VAR: &str = "BENCH_SANDBOX";
/// Environment variable naming the file a memory probe moves.
const PATH_VAR: &str = "BENCH_PATH";

/// A raw `reqwest` client speaking one provider's protocol to one sandbox, the way the adapter
/// does on the wire for the same operation: the baseline of every adapter row.
pub trait Raw: Sized {
    /// A client for the sandbox `id` on the server `var` points at (the provider's usual
    /// environment variables).
    async fn connect(var: &dyn Fn(&str) -> Option<String>, id: &str) -> Result<Self>;
    /// Runs the shell line `line` and returns how many bytes of stdout it printed.
    async fn run(&self, line: &str) -> Result<u64>;
    /// Writes the local file `source` to `path` in the sandbox.
    async fn upload(&self, path: &str, source: &Path) -> Result;
    /// Reads the file at `path` in the sandbox; returns its length.
    async fn download(&self, path: &str) -> Result<u64>;
    /// Creates a sandbox, waits until it runs and runs `echo hi` in it; returns its id.
    async fn first_exec(&self) -> Result<String>;
}

/// The command of the stream rows: `n` bytes of stdout in 64-byte lines of text (text, so a
/// protocol that carries output in JSON strings carries it unescaped).
pub fn printing(n: u64) -> String {
    format!("yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c {n}")
}

/// An error unless `got == want`.
pub fn check_len(got: u64, want: u64) -> Result {
    if got == want {
        Ok(())
    } else {
        Err(format!("moved {got} bytes, expected {want}").into())
    }
}

/// `run("echo hi")`, checked.
pub async fn sdk_run(sandbox: &dyn Sandbox) -> Result {
    let out = sandbox.run(&Command::shell("echo hi")).await?;
    if out.stdout != b"hi\n"[..] || out.status.code != Some(0) {
        return Err(format!("run answered {out:?}").into());
    }
    Ok(())
}

/// [`printing`]`(n)` through `Sandbox::exec`, counting stdout as the events come.
async fn sdk_stream(sandbox: &dyn Sandbox, n: u64) -> Result {
    let mut process = sandbox.exec(&Command::shell(printing(n))).await?;
    let mut stdout = 0u64;
    while let Some(event) = process.next_event().await {
        if let ProcessEvent::Stdout(bytes) = event? {
            stdout += bytes.len() as u64;
        }
    }
    check_len(stdout, n)
}

/// `Sandbox::upload` of the local file `source` (a file reader, streamed).
pub async fn sdk_upload(sandbox: &dyn Sandbox, path: &str, source: &Path) -> Result {
    let file = tokio::fs::File::open(source).await?;
    let sent = sandbox.upload(path, Box::pin(file)).await?;
    check_len(sent.bytes, std::fs::metadata(source)?.len())
}

/// `Sandbox::download` of `path`, counting the chunks as they come.
pub async fn sdk_download(sandbox: &dyn Sandbox, path: &str, n: u64) -> Result {
    check_len(
        count_bytes(sandbox.download(path).await?.into_stream()).await?,
        n,
    )
}

/// Reads a body stream to its end, counting its bytes (a download that keeps nothing).
pub async fn count_bytes<E: Into<BoxError>>(
    stream: impl futures::Stream<Item = std::result::Result<bytes::Bytes, E>>,
) -> Result<u64> {
    let mut stream = std::pin::pin!(stream);
    let mut got = 0u64;
    while let Some(chunk) = stream.next().await {
        got += chunk.map_err(Into::into)?.len() as u64;
    }
    Ok(got)
}

/// Enough single runs for a p95 (fewer with `--quick`).
pub fn per_run(config: &Config) -> Config {
    Config {
        warmup: 3,
        iterations: if config.iterations <= 3 { 40 } else { 300 },
        ..*config
    }
}

/// Timings of single `run("echo hi")`s against the raw client's, `runs` of each (see
/// [`per_run`]), with an untimed `rest` before each (zero for none).
pub async fn run_timings(
    runs: &Config,
    rest: Duration,
    sandbox: &dyn Sandbox,
    raw: &impl Raw,
) -> Result<Timings> {
    rested(
        runs,
        rest,
        async || sdk_run(sandbox).await,
        async || check_len(raw.run("echo hi").await?, 3),
    )
    .await
}

/// The exec stream row: [`printing`]`(n)` through `exec`'s events against the raw client's run
/// of the same command.
#[allow(clippy::too_many_arguments)]
pub async fn stream_row(
    group: &str,
    config: &Config,
    rest: Duration,
    n: u64,
    sandbox: &dyn Sandbox,
    raw: &impl Raw,
    baseline_name: &str,
    notes: String,
) -> Result {
    let timings = rested(
        config,
        rest,
        async || sdk_stream(sandbox, n).await,
        async || check_len(raw.run(&printing(n)).await?, n),
    )
    .await?;
    throughput_record(
        group,
        format!(
            "exec stdout stream {} (`Process::next_event`)",
            size_label(n)
        ),
        baseline_name,
        n,
        &timings,
        notes,
    )
    .emit();
    Ok(())
}

/// Where a transfer row moves its file.
pub struct Transfer<'a> {
    /// The sandbox's file path (the SDK's; the raw client's is this with `.raw` appended).
    pub path: &'a str,
    /// Bytes moved.
    pub n: u64,
    /// An untimed rest before every run (a rate limit to refill), or zero.
    pub rest: Duration,
}

/// The peak-memory rows of `t`'s exchange at `config.bigger` bytes, against a raw client making
/// the same requests as the throughput rows.
pub fn same_exchange_memory_rows(
    group: &str,
    config: &Config,
    sim: &SimChild,
    id: &str,
    t: Transfer<'_>,
) -> Result {
    let bigger = Transfer {
        n: config.bigger,
        ..t
    };
    memory_rows(
        group,
        config,
        sim,
        id,
        &bigger,
        "raw reqwest, same exchange",
        "the same requests as the rows above",
    )
}

/// Upload and download throughput rows: one run through the SDK, one through the raw client,
/// alternating; `upload` and `download` are each row's (baseline name, notes).
pub async fn transfer_rows(
    group: &str,
    config: &Config,
    t: &Transfer<'_>,
    sandbox: &dyn Sandbox,
    raw: &impl Raw,
    upload: (&str, String),
    download: (&str, String),
) -> Result {
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("upload.bin");
    harness::write_file(&source, t.n)?;
    let raw_path = format!("{}.raw", t.path);
    let timings = rested(
        config,
        t.rest,
        async || sdk_upload(sandbox, t.path, &source).await,
        async || raw.upload(&raw_path, &source).await,
    )
    .await?;
    let n = t.n;
    let label = size_label(n);
    throughput_record(
        group,
        format!("upload {label} from a file (`Sandbox::upload`)"),
        upload.0,
        n,
        &timings,
        upload.1,
    )
    .emit();
    let timings = rested(
        config,
        t.rest,
        async || sdk_download(sandbox, t.path, n).await,
        async || check_len(raw.download(&raw_path).await?, n),
    )
    .await?;
    throughput_record(
        group,
        format!("download {label} (`Sandbox::download`)"),
        download.0,
        n,
        &timings,
        download.1,
    )
    .emit();
    Ok(())
}

/// Peak-memory rows of an upload and a download of `t.n` bytes, each run in a fresh process
/// (the client alone: the simulator is `sim`'s child) in the sandbox `id`. The download reads
/// the file the upload probes write.
pub fn memory_rows(
    group: &str,
    config: &Config,
    sim: &SimChild,
    id: &str,
    t: &Transfer<'_>,
    baseline_name: &str,
    notes: &str,
) -> Result {
    let mut env = sim.vars().to_vec();
    env.push((SANDBOX_VAR.to_owned(), id.to_owned()));
    env.push((PATH_VAR.to_owned(), t.path.to_owned()));
    let runs = harness::memory_runs(config);
    for what in ["upload", "download"] {
        let probe = |path: &str| -> Result<Vec<f64>> {
            (0..runs)
                .map(|_| {
                    std::thread::sleep(t.rest);
                    harness::probe_in_child(&format!("{group}-{what}-{path}"), t.n, &env).map(mib)
                })
                .collect()
        };
        let sdk = probe("sdk")?;
        let baseline = probe("raw")?;
        let mut record = memory_record(
            group,
            format!("peak memory, {what} {}", size_label(t.n)),
            baseline_name,
            &sdk,
            &baseline,
            String::new(),
        );
        record.notes = format!(
            "peak RSS growth of the client during the transfer (`VmHWM` reset first, one fresh \
             process per run, the simulator in its own process): {:.2}% of the body; {notes}",
            record.sdk / mib(t.n) * 100.0
        );
        record.emit();
    }
    Ok(())
}

/// One transfer memory probe (`{group}-{upload|download}-{sdk|raw}`) in this fresh process,
/// pointed at the simulator and sandbox by its environment; `None` when `case` is not one.
pub async fn probe<R: Raw>(case: &str, n: u64, group: &str) -> Result<Option<u64>> {
    let Some(rest) = case
        .strip_prefix(group)
        .and_then(|rest| rest.strip_prefix('-'))
    else {
        return Ok(None);
    };
    let Some((what, side)) = rest.split_once('-') else {
        return Ok(None);
    };
    if !matches!(what, "upload" | "download") || !matches!(side, "sdk" | "raw") {
        return Ok(None);
    }
    let var = |name: &str| std::env::var(name).ok();
    let id = var(SANDBOX_VAR).ok_or("a transfer probe needs BENCH_SANDBOX")?;
    let path = var(PATH_VAR).ok_or("a transfer probe needs BENCH_PATH")?;
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("upload.bin");
    if what == "upload" {
        harness::write_file(&source, n)?;
    }
    let growth = if side == "sdk" {
        let provider = sandbox_sdk::provider_from_lookup(group, var)?;
        let sandbox = provider.connect(&id).await?;
        sandbox.info().await?;
        if what == "upload" {
            harness::peak_growth(async || sdk_upload(&*sandbox, &path, &source).await).await?
        } else {
            harness::peak_growth(async || sdk_download(&*sandbox, &path, n).await).await?
        }
    } else {
        let raw = R::connect(&var, &id).await?;
        let raw_path = format!("{path}.raw");
        if what == "upload" {
            harness::peak_growth(async || raw.upload(&raw_path, &source).await).await?
        } else {
            harness::peak_growth(async || check_len(raw.download(&raw_path).await?, n)).await?
        }
    };
    Ok(Some(growth))
}

/// The create-to-first-exec row: `create` then `run("echo hi")` against the raw client's
/// [`Raw::first_exec`]; every sandbox made is destroyed after the row (untimed).
pub async fn first_exec_row(
    group: &str,
    config: &Config,
    provider: &dyn Provider,
    raw: &impl Raw,
    baseline_name: &str,
    notes: String,
) -> Result {
    let (mut made, mut raw_made) = (Vec::new(), Vec::new());
    let timings = harness::interleaved(
        config,
        async || {
            let sandbox = provider.create(&CreateSpec::new()).await?;
            made.push(sandbox.id().to_owned());
            sdk_run(&*sandbox).await
        },
        async || {
            raw_made.push(raw.first_exec().await?);
            Ok(())
        },
    )
    .await?;
    latency_record(
        group,
        "create to first `run(\"echo hi\")`".to_owned(),
        baseline_name,
        1,
        &timings,
        notes,
    )
    .emit();
    for id in made.into_iter().chain(raw_made) {
        provider.destroy(&id).await?;
    }
    Ok(())
}
