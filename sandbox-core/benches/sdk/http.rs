//! `sandbox_sdk_core::http` against raw `reqwest`, both talking to the loopback server.

use crate::harness::{
    self, Config, Record, Result, interleaved, latency_record, mib, size_label, throughput_record,
};
use crate::server;
use futures::StreamExt;
use sandbox_sdk_core::http::{HttpClient, Method};
use std::net::SocketAddr;

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
            "loopback server streaming zeros; both paths see the same chunks \
             ({sdk_chunks} vs {raw_chunks} per download): the SDK maps each chunk's error type \
             and copies nothing"
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
        format!("{requests} sequential small JSON GETs (`send_json`)",),
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

    memory(config)?;
    Ok(())
}

/// Peak RSS growth of streaming downloads of two sizes, each in a fresh process.
fn memory(config: &Config) -> Result {
    let buffered = harness::probe_in_child("http-buffered", config.big)?;
    for n in [config.big, config.bigger] {
        let sdk = harness::probe_in_child("http-sdk", n)?;
        let raw = harness::probe_in_child("http-raw", n)?;
        let mut notes = format!(
            "peak RSS growth (`VmHWM` after a reset, fresh process per path) while streaming a {} \
             body, {:.1}% of its size",
            size_label(n),
            mib(sdk) / mib(n) * 100.0
        );
        if n == config.big {
            notes.push_str(&format!(
                "; for scale, buffering it with reqwest's `Response::bytes` grows by {:.1} MiB",
                mib(buffered)
            ));
        } else {
            notes.push_str(&format!(
                "; {}x the body of the row above, about the same memory: the stream is \
                 constant-memory",
                n / config.big
            ));
        }
        Record {
            group: GROUP,
            name: format!("peak memory, download {} (`bytes_stream`)", size_label(n)),
            baseline_name: RAW,
            unit: "MiB",
            higher_is_better: false,
            sdk: mib(sdk),
            baseline: mib(raw),
            iterations: 1,
            spread_percent: 0.0,
            notes,
        }
        .emit();
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
