//! The embedded `local` provider against raw `tokio::process` and `tokio::fs`.

use crate::harness::{
    self, Config, Result, interleaved, latency_record, mib, size_label, throughput_record,
};
use futures::StreamExt;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent, Sandbox};
use std::path::Path;
use std::process::Stdio;
use tokio::io::AsyncReadExt;

const EXEC: &str = "local exec";
const FILES: &str = "local files";

/// `head -c N /dev/zero`: a child that writes `n` bytes to stdout as fast as it can.
fn head_args(n: u64) -> [String; 3] {
    ["-c".to_owned(), n.to_string(), "/dev/zero".to_owned()]
}

/// Runs `head` through the sandbox and drains its events; returns (stdout bytes, stdout events).
async fn sdk_exec(sandbox: &dyn Sandbox, n: u64) -> Result<(u64, u64)> {
    let mut process = sandbox
        .exec(&Command::new("head").args(head_args(n)))
        .await?;
    let (mut bytes, mut events) = (0, 0);
    while let Some(event) = process.next_event().await {
        match event? {
            ProcessEvent::Stdout(chunk) => {
                bytes += chunk.len() as u64;
                events += 1;
            }
            ProcessEvent::Stderr(chunk) => {
                return Err(format!("head wrote to stderr: {:?}", chunk).into());
            }
            ProcessEvent::Exit(status) if status.success() => break,
            ProcessEvent::Exit(status) => return Err(format!("head failed: {status}").into()),
        }
    }
    check_len(bytes, n)?;
    Ok((bytes, events))
}

/// Runs `head` with `tokio::process` and reads its stdout pipe into one reused buffer.
async fn raw_exec(n: u64) -> Result {
    let mut child = tokio::process::Command::new("head")
        .args(head_args(n))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no stdout pipe")?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0;
    loop {
        let read = stdout.read(&mut buf).await?;
        if read == 0 {
            break;
        }
        bytes += read as u64;
    }
    let status = child.wait().await?;
    if !status.success() {
        return Err(format!("head failed: {status}").into());
    }
    check_len(bytes, n)
}

fn check_len(got: u64, want: u64) -> Result {
    if got == want {
        Ok(())
    } else {
        Err(format!("moved {got} bytes, expected {want}").into())
    }
}

/// Drains a sandbox download; returns (bytes, chunks).
async fn sdk_download(sandbox: &dyn Sandbox, path: &str) -> Result<(u64, u64)> {
    let mut download = sandbox.download(path).await?;
    let (mut bytes, mut chunks) = (0, 0);
    while let Some(chunk) = download.next().await {
        bytes += chunk?.len() as u64;
        chunks += 1;
    }
    Ok((bytes, chunks))
}

/// Reads a file with `tokio::fs` into one reused 64 KiB buffer.
async fn raw_read(path: &Path) -> Result<u64> {
    let mut file = tokio::fs::File::open(path).await?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0;
    loop {
        let read = file.read(&mut buf).await?;
        if read == 0 {
            return Ok(bytes);
        }
        bytes += read as u64;
    }
}

/// Copies `from` to `to` with `tokio::io::copy` between two `tokio::fs::File`s.
async fn raw_copy(from: &Path, to: &Path) -> Result<u64> {
    let mut source = tokio::fs::File::open(from).await?;
    let mut target = tokio::fs::File::create(to).await?;
    let n = tokio::io::copy(&mut source, &mut target).await?;
    tokio::io::AsyncWriteExt::flush(&mut target).await?;
    Ok(n)
}

/// Like [`raw_copy`], through a 1 MiB buffer.
async fn raw_copy_1mib(from: &Path, to: &Path) -> Result<u64> {
    let source = tokio::fs::File::open(from).await?;
    let mut source = tokio::io::BufReader::with_capacity(1 << 20, source);
    let mut target = tokio::fs::File::create(to).await?;
    let n = tokio::io::copy_buf(&mut source, &mut target).await?;
    tokio::io::AsyncWriteExt::flush(&mut target).await?;
    Ok(n)
}

/// A sandbox in a private root that is removed afterwards.
struct Bench {
    _root: tempfile::TempDir,
    sandbox: Box<dyn Sandbox>,
    dir: std::path::PathBuf,
}

impl Bench {
    async fn new() -> Result<Bench> {
        let root = tempfile::tempdir()?;
        let provider = LocalProvider::with_root(root.path());
        let local = provider.create_local(&CreateSpec::new()).await?;
        let dir = local.dir().to_owned();
        Ok(Bench {
            _root: root,
            sandbox: Box::new(local),
            dir,
        })
    }
}

/// Exec streaming and spawn overhead, file download and upload.
pub async fn run(config: &Config) -> Result {
    let bench = Bench::new().await?;
    let result = run_in(config, &bench).await;
    bench.sandbox.destroy().await?;
    result
}

async fn run_in(config: &Config, bench: &Bench) -> Result {
    let sandbox = bench.sandbox.as_ref();
    let n = config.big;

    let mut events = 0;
    let timings = interleaved(
        config,
        async || {
            events = sdk_exec(sandbox, n).await?.1;
            Ok(())
        },
        async || raw_exec(n).await,
    )
    .await?;
    throughput_record(
        EXEC,
        format!("stdout of `head -c {n} /dev/zero` ({})", size_label(n)),
        "raw tokio::process, one reused 64 KiB buffer",
        n,
        &timings,
        format!(
            "{events} `Stdout` events per run, {:.0} KiB on average (pipe reads of up to 64 KiB, \
             each a fresh `Bytes`, no copy); the SDK also runs the child in its own process \
             group and watches stderr",
            n as f64 / events.max(1) as f64 / 1024.0
        ),
    )
    .emit();

    let spawns = config.spawns;
    let timings = interleaved(
        config,
        async || {
            for _ in 0..spawns {
                let status = sandbox.exec(&Command::new("true")).await?.wait().await?;
                if !status.success() {
                    return Err(format!("true failed: {status}").into());
                }
            }
            Ok(())
        },
        async || {
            for _ in 0..spawns {
                let output = tokio::process::Command::new("true")
                    .stdin(Stdio::null())
                    .output()
                    .await?;
                if !output.status.success() {
                    return Err(format!("true failed: {}", output.status).into());
                }
            }
            Ok(())
        },
    )
    .await?;
    latency_record(
        EXEC,
        format!("spawn and wait, `true` x{spawns}"),
        "raw tokio::process `output()`",
        spawns,
        &timings,
        "both pipe stdout and stderr; the SDK also checks the working directory, starts the \
         child in its own process group and registers it in the sandbox's process table"
            .to_owned(),
    )
    .emit();

    exec_memory(config)?;

    // Files: one source file of `n` bytes in the sandbox.
    let source = bench.dir.join("source.bin");
    harness::write_file(&source, n)?;

    let mut chunks = 0;
    let timings = interleaved(
        config,
        async || {
            let (bytes, c) = sdk_download(sandbox, "source.bin").await?;
            chunks = c;
            check_len(bytes, n)
        },
        async || check_len(raw_read(&source).await?, n),
    )
    .await?;
    throughput_record(
        FILES,
        format!("download {} (`Sandbox::download`)", size_label(n)),
        "raw tokio::fs::File reads, one reused 64 KiB buffer",
        n,
        &timings,
        format!(
            "file in the page cache; {chunks} chunks of {:.0} KiB",
            n as f64 / chunks.max(1) as f64 / 1024.0
        ),
    )
    .emit();

    let sdk_target = bench.dir.join("upload-sdk.bin");
    let raw_target = bench.dir.join("upload-raw.bin");
    let timings = interleaved(
        config,
        async || {
            let body = tokio::fs::File::open(&source).await?;
            let transfer = sandbox.upload("upload-sdk.bin", Box::pin(body)).await?;
            check_len(transfer.bytes, n)
        },
        async || check_len(raw_copy_1mib(&source, &raw_target).await?, n),
    )
    .await?;
    // For scale: the same copy through `tokio::io::copy`'s own buffer, and the kernel's copy.
    let mut small_buffer = Vec::new();
    for _ in 0..config.iterations {
        let started = std::time::Instant::now();
        check_len(raw_copy(&source, &raw_target).await?, n)?;
        small_buffer.push(harness::mib_per_s(n, started.elapsed().as_secs_f64()));
    }
    let small_buffer = harness::median(&small_buffer);
    let kernel_copy = {
        let started = std::time::Instant::now();
        tokio::fs::copy(&source, &raw_target).await?;
        harness::mib_per_s(n, started.elapsed().as_secs_f64())
    };
    let mut record = throughput_record(
        FILES,
        format!("upload {} (`Sandbox::upload` from a file)", size_label(n)),
        "raw tokio::io::copy_buf through a 1 MiB BufReader, tokio::fs::File to File",
        n,
        &timings,
        String::new(),
    );
    record.notes = format!(
        "the SDK copies through one 1 MiB buffer, like the baseline; for scale, raw \
         `tokio::io::copy` (8 KiB buffer, one blocking-pool read and write per 8 KiB) between \
         the same files runs at {small_buffer:.0} MiB/s (median of {}), and `tokio::fs::copy` \
         (kernel copy) ran at {kernel_copy:.0} MiB/s once",
        config.iterations,
    );
    record.emit();
    std::fs::remove_file(&sdk_target)?;
    std::fs::remove_file(&raw_target)?;
    std::fs::remove_file(&source)?;
    Ok(())
}

/// Peak RSS growth of streaming a command's stdout, each run in a fresh process.
fn exec_memory(config: &Config) -> Result {
    let n = config.big;
    let runs = harness::memory_runs(config);
    let sdk = harness::probe_runs("exec-sdk", n, runs, &[])?;
    let raw = harness::probe_runs("exec-raw", n, runs, &[])?;
    let mut record = harness::memory_record(
        EXEC,
        format!("peak memory, stdout of {}", size_label(n)),
        "raw tokio::process, one reused 64 KiB buffer",
        &sdk,
        &raw,
        String::new(),
    );
    record.notes = format!(
        "peak RSS growth while draining the events (one fresh process per run): {:.1}% of the \
         output; the baseline reuses one buffer that is already resident, so it grows by about \
         nothing",
        record.sdk / mib(n) * 100.0
    );
    record.emit();
    Ok(())
}

/// One memory probe case, run in this (fresh) process: prints the peak growth in bytes.
pub async fn probe(case: &str, n: u64) -> Result<Option<u64>> {
    let growth = match case {
        "exec-sdk" => {
            let bench = Bench::new().await?;
            let sandbox = bench.sandbox.as_ref();
            sdk_exec(sandbox, 1024).await?;
            let growth = harness::peak_growth(async || sdk_exec(sandbox, n).await.map(drop)).await;
            sandbox.destroy().await?;
            growth?
        }
        "exec-raw" => {
            raw_exec(1024).await?;
            harness::peak_growth(async || raw_exec(n).await).await?
        }
        _ => return Ok(None),
    };
    Ok(Some(growth))
}
