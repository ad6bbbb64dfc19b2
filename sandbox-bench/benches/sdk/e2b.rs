//! The E2B adapter against a raw `reqwest` client doing the same control-plane and envd
//! exchanges on the same loopback server ([`crate::e2b_server`]) in the same run.

use crate::e2b_server::{self, CREATE_DELAY, SANDBOX};
use crate::harness::{
    self, Config, Record, Result, interleaved, median, mib, size_label, throughput_record,
};
use futures::StreamExt;
use sandbox_e2b::{CreateOptions, E2bBuilder, E2bProvider, E2bSandbox};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;
use tokio_util::io::ReaderStream;

const GROUP: &str = "e2b";
const RAW_CONNECT: &str = "raw reqwest, same Connect JSON exchange (envelope, decode, base64)";
const TOKEN: &str = "tok_envd_bench_123";

fn provider(addr: SocketAddr) -> Result<E2bProvider> {
    let url = format!("http://{addr}");
    Ok(E2bBuilder::new()
        .api_key("e2b_0123456789abcdef0123456789abcdef01234567")
        .api_url(&url)
        .sandbox_url(&url)
        .build()?)
}

async fn sandbox(addr: SocketAddr) -> Result<E2bSandbox> {
    Ok(provider(addr)?.connect_sandbox(SANDBOX, None).await?)
}

fn raw_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .use_rustls_tls()
        .http1_only()
        .build()?)
}

/// The envd request headers both official SDKs send.
fn envd(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request
        .header("E2b-Sandbox-Id", SANDBOX)
        .header("E2b-Sandbox-Port", "49983")
        .header("X-Access-Token", TOKEN)
}

/// Decodes standard base64 (padding allowed), what a raw client must do with `data` events.
fn unbase64(text: &str) -> Result<Vec<u8>> {
    let value = |c: u8| -> Result<u32> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err("bad base64".into()),
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for group in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in group.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let produced = group.len() * 6 / 8;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + produced]);
    }
    Ok(out)
}

/// `process.Process/Start` for `line` by hand: one enveloped JSON request, then the envelopes
/// of the answer decoded, `data` events base64-decoded; returns the stdout bytes seen.
async fn raw_run(client: &reqwest::Client, addr: SocketAddr, line: &str) -> Result<u64> {
    let json = serde_json::to_vec(&serde_json::json!({
        "process": {"cmd": "/bin/bash", "args": ["-l", "-c", line]},
        "stdin": false
    }))?;
    let mut body = vec![0u8];
    body.extend_from_slice(&(json.len() as u32).to_be_bytes());
    body.extend_from_slice(&json);
    let response = envd(client.post(format!("http://{addr}/process.Process/Start")))
        .header("content-type", "application/connect+json")
        .header("Connect-Protocol-Version", "1")
        .header("Keepalive-Ping-Interval", "50")
        .body(body)
        .send()
        .await?
        .error_for_status()?;
    let mut stream = response.bytes_stream();
    let mut buf = bytes::BytesMut::new();
    let mut stdout = 0u64;
    let mut exited = false;
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk?);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < 5 + len {
                break;
            }
            let frame = buf.split_to(5 + len);
            if frame[0] & 2 != 0 {
                continue;
            }
            let message: serde_json::Value = serde_json::from_slice(&frame[5..])?;
            let event = &message["event"];
            if let Some(data) = event["data"]["stdout"].as_str() {
                stdout += unbase64(data)?.len() as u64;
            } else if event.get("end").is_some() {
                exited = true;
            }
        }
    }
    if !exited {
        return Err("the raw stream ended without an end event".into());
    }
    Ok(stdout)
}

/// `head -c N /dev/zero` through `Sandbox::exec`, reading events as they come.
async fn sdk_stream(sandbox: &E2bSandbox, n: u64) -> Result<u64> {
    let mut process = sandbox
        .exec(&Command::shell(format!("head -c {n} /dev/zero")))
        .await?;
    let mut stdout = 0u64;
    while let Some(event) = process.next_event().await {
        if let ProcessEvent::Stdout(bytes) = event? {
            stdout += bytes.len() as u64;
        }
    }
    check_len(stdout, n)
}

fn check_len(got: u64, want: u64) -> Result<u64> {
    if got == want {
        Ok(got)
    } else {
        Err(format!("moved {got} bytes, expected {want}").into())
    }
}

/// The `q` quantile of `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Runs both once per sample, alternating, and returns per-operation times in µs.
async fn samples(
    count: usize,
    mut sdk: impl AsyncFnMut() -> Result,
    mut raw: impl AsyncFnMut() -> Result,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut s, mut r) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for i in 0..count {
        for first in [i % 2 == 0, i % 2 != 0] {
            let started = Instant::now();
            if first {
                sdk().await?;
                s.push(started.elapsed().as_secs_f64() * 1e6);
            } else {
                raw().await?;
                r.push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    Ok((s, r))
}

fn latency_rows(name: &str, baseline_name: &'static str, sdk: &[f64], raw: &[f64], notes: &str) {
    for (label, q) in [("median", 0.5), ("p95", 0.95)] {
        let (a, b) = (quantile(sdk, q), quantile(raw, q));
        Record {
            group: GROUP,
            name: format!("{name}, {label}"),
            baseline_name,
            unit: "µs/op",
            higher_is_better: false,
            sdk: a,
            baseline: b,
            iterations: sdk.len(),
            iqr_percent: harness::iqr_percent(sdk).max(harness::iqr_percent(raw)),
            notes: format!("{:+.1} µs against the baseline; {notes}", a - b),
        }
        .emit();
    }
}

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    let addr = e2b_server::start().await?;
    let sandbox = sandbox(addr).await?;
    let raw = raw_client()?;

    // run("echo hi")
    let count = config.requests;
    for _ in 0..config.warmup * 10 {
        sandbox.run_shell("echo hi").await?;
        raw_run(&raw, addr, "echo hi").await?;
    }
    let (s, r) = samples(
        count,
        async || {
            let out = sandbox.run_shell("echo hi").await?;
            if out.stdout.as_ref() != b"hi\n" {
                return Err("echo hi did not say hi".into());
            }
            Ok(())
        },
        async || {
            check_len(raw_run(&raw, addr, "echo hi").await?, 3)?;
            Ok(())
        },
    )
    .await?;
    latency_rows(
        &format!("`run(\"echo hi\")`, {count} sequential"),
        RAW_CONNECT,
        &s,
        &r,
        "one keep-alive HTTP/1.1 connection; the server answers start, one data event, end and \
         end-of-stream at once; the SDK adds command validation, the Start request's JSON, the \
         frame decoder, event mapping and collecting the output",
    );

    // stdout stream throughput
    let n = config.big;
    let timings = interleaved(
        config,
        async || sdk_stream(&sandbox, n).await.map(drop),
        async || {
            check_len(
                raw_run(&raw, addr, &format!("head -c {n} /dev/zero")).await?,
                n,
            )
            .map(drop)
        },
    )
    .await?;
    throughput_record(
        GROUP,
        format!(
            "exec stdout stream {} (`Process::next_event`)",
            size_label(n)
        ),
        RAW_CONNECT,
        n,
        &timings,
        format!(
            "Connect JSON stream of {} KiB base64 `data` events (a third more bytes on the wire \
             than the output); both paths decode envelopes, JSON and base64, but the baseline decodes \
             into `serde_json::Value` with a hand-written base64 decoder (this crate has no base64 \
             dependency), so it is a plain raw client, not a tuned one; the protocol's base64 in \
             JSON is the ceiling for both",
            e2b_server::DATA_CHUNK / 1024
        ),
    )
    .emit();

    transfers(config, &sandbox, &raw, addr).await?;
    memory(config)?;
    create_to_first_exec(config, addr, &raw).await?;
    Ok(())
}

/// Uploads `source` through `Sandbox::upload` (a file reader, streamed).
async fn sdk_upload(sandbox: &E2bSandbox, source: &Path, n: u64) -> Result {
    let file = tokio::fs::File::open(source).await?;
    let sent = sandbox.upload("/home/user/big.bin", Box::pin(file)).await?;
    check_len(sent.bytes, n).map(drop)
}

/// The same `POST /files` with raw reqwest: the file read 256 KiB at a time, sent chunked.
async fn raw_upload(client: &reqwest::Client, addr: SocketAddr, source: &Path) -> Result {
    let file = tokio::fs::File::open(source).await?;
    let body = reqwest::Body::wrap_stream(ReaderStream::with_capacity(file, 256 * 1024));
    envd(client.post(format!("http://{addr}/files")))
        .query(&[("path", "/home/user/big.bin")])
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    Ok(())
}

async fn sdk_download(sandbox: &E2bSandbox, n: u64) -> Result {
    let mut stream = sandbox
        .download(&format!("/bytes/{n}"))
        .await?
        .into_stream();
    let mut got = 0u64;
    while let Some(chunk) = stream.next().await {
        got += chunk?.len() as u64;
    }
    check_len(got, n).map(drop)
}

async fn raw_download(client: &reqwest::Client, addr: SocketAddr, n: u64) -> Result {
    let response = envd(client.get(format!("http://{addr}/files")))
        .query(&[("path", format!("/bytes/{n}"))])
        .send()
        .await?
        .error_for_status()?;
    let mut stream = response.bytes_stream();
    let mut got = 0u64;
    while let Some(chunk) = stream.next().await {
        got += chunk?.len() as u64;
    }
    check_len(got, n).map(drop)
}

async fn transfers(
    config: &Config,
    sandbox: &E2bSandbox,
    raw: &reqwest::Client,
    addr: SocketAddr,
) -> Result {
    let n = config.big.max(64 << 20);
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("upload.bin");
    harness::write_file(&source, n)?;
    let timings = interleaved(
        config,
        async || sdk_upload(sandbox, &source, n).await,
        async || raw_upload(raw, addr, &source).await,
    )
    .await?;
    throughput_record(
        GROUP,
        format!("upload {} from a file (`Sandbox::upload`)", size_label(n)),
        "raw reqwest, file read in 256 KiB chunks, sent chunked",
        n,
        &timings,
        "envd >= 0.5.7 takes a raw octet-stream body: both send the file chunked to `POST /files` \
         and read the written-entry answer; the SDK counts bytes through its 256 KiB reader path \
         (examples/upload_bench.rs measured 1.3-1.6 GB/s against curl -T's 0.94-1.16 GB/s)"
            .to_owned(),
    )
    .emit();

    let n = config.big;
    let timings = interleaved(
        config,
        async || sdk_download(sandbox, n).await,
        async || raw_download(raw, addr, n).await,
    )
    .await?;
    throughput_record(
        GROUP,
        format!("download {} (`Sandbox::download`)", size_label(n)),
        "raw reqwest `GET /files`, `bytes_stream`",
        n,
        &timings,
        "`GET /files` with `Content-Length`; the SDK adds the transfer idle bound per chunk"
            .to_owned(),
    )
    .emit();
    Ok(())
}

/// Peak RSS growth of a download and an upload, each in fresh processes.
fn memory(config: &Config) -> Result {
    let runs = harness::memory_runs(config);
    let n = config.bigger;
    for (what, sdk_case, raw_case) in [
        ("download", "e2b-download-sdk", "e2b-download-raw"),
        ("upload", "e2b-upload-sdk", "e2b-upload-raw"),
    ] {
        let sdk = harness::probe_runs(sdk_case, n, runs)?;
        let raw = harness::probe_runs(raw_case, n, runs)?;
        let mut record = harness::memory_record(
            GROUP,
            format!("peak memory, {what} {}", size_label(n)),
            "raw reqwest, same exchange",
            &sdk,
            &raw,
            String::new(),
        );
        record.notes = format!(
            "peak RSS growth during the transfer (`VmHWM` reset first, one fresh process per \
             run, the client and the loopback server in it): {:.2}% of the body",
            record.sdk / mib(n) * 100.0
        );
        record.emit();
    }
    Ok(())
}

/// One memory probe case, in this fresh process: the peak growth in bytes.
pub async fn probe(case: &str, n: u64) -> Result<Option<u64>> {
    if !case.starts_with("e2b-") {
        return Ok(None);
    }
    let addr = e2b_server::start().await?;
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("upload.bin");
    if case.starts_with("e2b-upload") {
        harness::write_file(&source, n)?;
    }
    let growth = match case {
        "e2b-download-sdk" => {
            let sandbox = sandbox(addr).await?;
            sdk_download(&sandbox, 1024).await?;
            harness::peak_growth(async || sdk_download(&sandbox, n).await).await?
        }
        "e2b-download-raw" => {
            let client = raw_client()?;
            raw_download(&client, addr, 1024).await?;
            harness::peak_growth(async || raw_download(&client, addr, n).await).await?
        }
        "e2b-upload-sdk" => {
            let sandbox = sandbox(addr).await?;
            sandbox.run_shell("echo hi").await?;
            harness::peak_growth(async || sdk_upload(&sandbox, &source, n).await).await?
        }
        "e2b-upload-raw" => {
            let client = raw_client()?;
            raw_download(&client, addr, 1024).await?;
            harness::peak_growth(async || raw_upload(&client, addr, &source).await).await?
        }
        _ => return Ok(None),
    };
    Ok(Some(growth))
}

/// `create` then the first `run("echo hi")`, against `POST /v2/sandboxes` and a Start by hand.
async fn create_to_first_exec(config: &Config, addr: SocketAddr, raw: &reqwest::Client) -> Result {
    let provider = provider(addr)?;
    let timings = interleaved(
        config,
        async || {
            let sandbox = provider
                .create_sandbox(&CreateSpec::new(), &CreateOptions::default())
                .await?;
            sandbox.run_shell("echo hi").await?;
            Ok(())
        },
        async || {
            let created: serde_json::Value = raw
                .post(format!("http://{addr}/v2/sandboxes"))
                .header("X-API-Key", "e2b_0123456789abcdef0123456789abcdef01234567")
                .json(&serde_json::json!({"templateID": "base", "timeout": 300}))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            if created["sandboxID"].as_str() != Some(SANDBOX) {
                return Err("no sandbox id".into());
            }
            check_len(raw_run(raw, addr, "echo hi").await?, 3).map(drop)
        },
    )
    .await?;
    let ms = |t: &[f64]| t.iter().map(|s| s * 1e3).collect::<Vec<_>>();
    let (sdk, base) = (ms(&timings.sdk), ms(&timings.baseline));
    Record {
        group: GROUP,
        name: "create to first `run(\"echo hi\")`".to_owned(),
        baseline_name: "raw reqwest: POST /v2/sandboxes, then the Start exchange",
        unit: "ms",
        higher_is_better: false,
        sdk: median(&sdk),
        baseline: median(&base),
        iterations: sdk.len(),
        iqr_percent: harness::iqr_percent(&sdk).max(harness::iqr_percent(&base)),
        notes: format!(
            "the server answers the v2 create once the sandbox is running, {} ms after the \
             request (E2B's create blocks until running, so there is no state polling to \
             shorten); what is left above the baseline is the SDK's own cost",
            CREATE_DELAY.as_millis()
        ),
    }
    .emit();
    Ok(())
}
