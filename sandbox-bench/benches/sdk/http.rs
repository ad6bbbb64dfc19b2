//! `sandbox_sdk_core::http` against raw `reqwest`, both talking to the loopback server.

use crate::harness::{
    self, Config, Result, interleaved, latency_record, mib, size_label, throughput_record,
};
use crate::server;
use futures::StreamExt;
use sandbox_sdk_core::UploadBody;
use sandbox_sdk_core::http::{HttpClient, Method};
use std::net::SocketAddr;
use std::path::Path;
use tokio_util::io::ReaderStream;

const GROUP: &str = "HTTP";
const RAW: &str = "raw reqwest";

fn sdk_client(addr: SocketAddr) -> Result<HttpClient> {
    Ok(HttpClient::builder("bench", &format!("http://{addr}")).build()?)
}

fn raw_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder().use_rustls_tls().build()?)
}

/// Downloads `/bytes/{n}` through `Response::bytes_stream`; returns (bytes, chunks).
async fn sdk_download(client: &HttpClient, n: u64) -> Result<(u64, u64)> {
    let response = client
        .request(Method::Get, &format!("/bytes/{n}"))
        .no_timeout()
        .send()
        .await?;
    let mut stream = response.bytes_stream();
    let (mut bytes, mut chunks) = (0, 0);
    while let Some(chunk) = stream.next().await {
        bytes += chunk?.len() as u64;
        chunks += 1;
    }
    check_len(bytes, n)?;
    Ok((bytes, chunks))
}

/// The same download with reqwest's own `bytes_stream`.
async fn raw_download(client: &reqwest::Client, addr: SocketAddr, n: u64) -> Result<(u64, u64)> {
    let response = client
        .get(format!("http://{addr}/bytes/{n}"))
        .send()
        .await?
        .error_for_status()?;
    let mut stream = response.bytes_stream();
    let (mut bytes, mut chunks) = (0, 0);
    while let Some(chunk) = stream.next().await {
        bytes += chunk?.len() as u64;
        chunks += 1;
    }
    check_len(bytes, n)?;
    Ok((bytes, chunks))
}

/// Buffers the whole body with reqwest (the memory a non-streaming download needs, for scale).
async fn raw_buffered(client: &reqwest::Client, addr: SocketAddr, n: u64) -> Result {
    let body = client
        .get(format!("http://{addr}/bytes/{n}"))
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    check_len(body.len() as u64, n)
}

fn check_len(got: u64, want: u64) -> Result {
    if got == want {
        Ok(())
    } else {
        Err(format!("downloaded {got} bytes, expected {want}").into())
    }
}

/// Throughput of a big download, and requests per second of small JSON GETs.
pub async fn run(config: &Config) -> Result {
    let addr = server::start().await?;
    let sdk = sdk_client(addr)?;
    let raw = raw_client()?;
    let n = config.big;

    let mut sdk_chunks = 0;
    let mut raw_chunks = 0;
    let timings = interleaved(
        config,
        async || {
            sdk_chunks = sdk_download(&sdk, n).await?.1;
            Ok(())
        },
        async || {
            raw_chunks = raw_download(&raw, addr, n).await?.1;
            Ok(())
        },
    )
    .await?;
    throughput_record(
        GROUP,
        format!("download {} (`Response::bytes_stream`)", size_label(n)),
        RAW,
        n,
        &timings,
        format!(
            "loopback server streaming zeros; both paths yield reqwest's chunks as they arrive \
             ({sdk_chunks} vs {raw_chunks} in the last download, depending on timing): the SDK \
             only maps each chunk's error type and copies nothing"
        ),
    )
    .emit();

    let requests = config.requests;
    let timings = interleaved(
        config,
        async || {
            for _ in 0..requests {
                let value: serde_json::Value = sdk
                    .request(Method::Get, "/json")
                    .operation("get")
                    .send_json()
                    .await?;
                std::hint::black_box(value);
            }
            Ok(())
        },
        async || {
            for _ in 0..requests {
                let value: serde_json::Value = raw
                    .get(format!("http://{addr}/json"))
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                std::hint::black_box(value);
            }
            Ok(())
        },
    )
    .await?;
    latency_record(
        GROUP,
        format!("{requests} sequential small JSON GETs (`send_json`)"),
        RAW,
        requests,
        &timings,
        format!(
            "one keep-alive connection; {}-byte JSON body decoded to `serde_json::Value` on both \
             paths; the SDK adds URL joining and checks, header assembly, a call-site record for \
             errors and a `tracing` event per request",
            server::JSON_BODY.len()
        ),
    )
    .emit();

    upload(config, &sdk, &raw, addr).await?;
    memory(config)?;
    Ok(())
}

/// Chunk size of the raw upload baseline.
const RAW_UPLOAD_CHUNK: usize = 256 * 1024;

/// Uploads a file of `n` bytes with `Content-Length` through `Request::body_stream_with_length`.
async fn sdk_upload(client: &HttpClient, source: &Path, n: u64) -> Result {
    let file = tokio::fs::File::open(source).await?;
    let body: UploadBody = Box::pin(file);
    client
        .request(Method::Put, "/upload")
        .body_stream_with_length(body, "application/octet-stream", n)
        .no_timeout()
        .send_empty()
        .await?;
    Ok(())
}

/// The same upload with raw reqwest, reading the file in chunks of `chunk` bytes (`None`:
/// reqwest's own `Body::from(tokio::fs::File)`).
async fn raw_upload(
    client: &reqwest::Client,
    addr: SocketAddr,
    source: &Path,
    n: u64,
    chunk: Option<usize>,
) -> Result {
    let file = tokio::fs::File::open(source).await?;
    let body = match chunk {
        Some(chunk) => reqwest::Body::wrap_stream(ReaderStream::with_capacity(file, chunk)),
        None => reqwest::Body::from(file),
    };
    client
        .put(format!("http://{addr}/upload"))
        .header("content-type", "application/octet-stream")
        .header("content-length", n)
        .body(body)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    Ok(())
}

/// Upload throughput of a file in the page cache.
async fn upload(
    config: &Config,
    sdk: &HttpClient,
    raw: &reqwest::Client,
    addr: SocketAddr,
) -> Result {
    let n = config.big;
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("upload.bin");
    harness::write_file(&source, n)?;
    let timings = interleaved(
        config,
        async || sdk_upload(sdk, &source, n).await,
        async || raw_upload(raw, addr, &source, n, Some(RAW_UPLOAD_CHUNK)).await,
    )
    .await?;
    let mut from_file = Vec::new();
    for _ in 0..config.iterations {
        let started = std::time::Instant::now();
        raw_upload(raw, addr, &source, n, None).await?;
        from_file.push(harness::mib_per_s(n, started.elapsed().as_secs_f64()));
    }
    let from_file = harness::median(&from_file);
    let mut record = throughput_record(
        GROUP,
        format!(
            "upload {} from a file (`body_stream_with_length`)",
            size_label(n)
        ),
        "raw reqwest, file read in 256 KiB chunks",
        n,
        &timings,
        String::new(),
    );
    record.notes = format!(
        "a `tokio::fs::File` as `UploadBody`, sent with `Content-Length` to the loopback server; \
         the SDK reads an `UploadBody` in 256 KiB chunks like the baseline (before commit \
         4e721d1 it read 4 KiB chunks and ran about 12x slower); for scale, reqwest's own \
         `Body::from(tokio::fs::File)` (4 KiB chunks, one blocking-pool read each) runs at \
         {from_file:.0} MiB/s (median of {})",
        config.iterations
    );
    record.emit();
    Ok(())
}

/// Peak RSS growth of streaming downloads of two sizes, each run in fresh processes.
fn memory(config: &Config) -> Result {
    let runs = harness::memory_runs(config);
    let buffered = harness::median(&harness::probe_runs(
        "http-buffered",
        config.big,
        runs,
        &[],
    )?);
    for n in [config.big, config.bigger] {
        let sdk = harness::probe_runs("http-sdk", n, runs, &[])?;
        let raw = harness::probe_runs("http-raw", n, runs, &[])?;
        let mut record = harness::memory_record(
            GROUP,
            format!("peak memory, download {} (`bytes_stream`)", size_label(n)),
            RAW,
            &sdk,
            &raw,
            String::new(),
        );
        record.notes = format!(
            "peak RSS growth while streaming a {} body (`VmHWM` reset before the transfer, one \
             fresh process per run): {:.1}% of the body; differences under ~1 MiB are allocator \
             and socket-buffer noise",
            size_label(n),
            record.sdk / mib(n) * 100.0
        );
        if n == config.big {
            record.notes.push_str(&format!(
                "; for scale, buffering the body with reqwest's `Response::bytes` grows by \
                 {buffered:.1} MiB"
            ));
        } else {
            record.notes.push_str(&format!(
                "; {}x the body of the row above in about the same memory: the stream is \
                 constant-memory",
                n / config.big
            ));
        }
        record.emit();
    }
    Ok(())
}

/// One memory probe case, run in this (fresh) process: prints the peak growth in bytes.
pub async fn probe(case: &str, n: u64) -> Result<Option<u64>> {
    if !case.starts_with("http-") {
        return Ok(None);
    }
    let addr = server::start().await?;
    let growth = match case {
        "http-sdk" => {
            let client = sdk_client(addr)?;
            sdk_download(&client, 1024).await?;
            harness::peak_growth(async || sdk_download(&client, n).await.map(drop)).await?
        }
        "http-raw" => {
            let client = raw_client()?;
            raw_download(&client, addr, 1024).await?;
            harness::peak_growth(async || raw_download(&client, addr, n).await.map(drop)).await?
        }
        "http-buffered" => {
            let client = raw_client()?;
            raw_buffered(&client, addr, 1024).await?;
            harness::peak_growth(async || raw_buffered(&client, addr, n).await).await?
        }
        _ => return Ok(None),
    };
    Ok(Some(growth))
}
