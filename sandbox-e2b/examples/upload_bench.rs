//! Measures a streamed upload from a file to a loopback envd, for comparing with `curl -T`.
//!
//! ```text
//! # a server that answers envd's POST /files (and the control plane's connect), discarding bytes
//! cargo run --release -p sandbox-e2b --example upload_bench -- serve 127.0.0.1:7711
//! # upload FILE through the adapter (Sandbox::upload, a file reader); prints MB/s and peak RSS
//! cargo run --release -p sandbox-e2b --example upload_bench -- upload http://127.0.0.1:7711 FILE
//! # the same exchange with curl, chunked
//! curl -sS -T FILE -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/octet-stream' \
//!     'http://127.0.0.1:7711/files?path=/home/user/big.bin'
//! ```
//!
//! The server prints the bytes and throughput of every upload it receives, so both clients are
//! measured by the same clock at the receiving end as well as by their own.

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use sandbox_e2b::E2bBuilder;
use sandbox_sdk_core::prelude::*;
use std::time::Instant;

const SANDBOX: &str = "ibenchbenchbenchbench";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", addr] => serve(addr).await,
        ["upload", url, file] => upload(url, file).await,
        _ => Err("usage: upload_bench serve ADDR | upload URL FILE".into()),
    }
}

async fn serve(addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("listening on {addr}");
    loop {
        let (tcp, _) = listener.accept().await?;
        tokio::spawn(async move {
            let service = hyper::service::service_fn(answer);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

async fn answer(
    request: hyper::Request<Incoming>,
) -> Result<hyper::Response<String>, hyper::Error> {
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let mut body = request.into_body();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame?.data_ref() {
            bytes += data.len() as u64;
        }
    }
    let reply = if path == "/files" {
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "server: received {bytes} bytes in {secs:.3} s = {:.0} MB/s",
            bytes as f64 / secs / 1e6
        );
        r#"[{"name":"big.bin","path":"/home/user/big.bin","type":"file"}]"#.to_owned()
    } else {
        format!(
            r#"{{"envdAccessToken":"tok_envd_123","envdVersion":"0.6.13","sandboxID":"{SANDBOX}","templateID":"base"}}"#
        )
    };
    let mut response = hyper::Response::new(reply);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

async fn upload(url: &str, file: &str) -> Result<(), Box<dyn std::error::Error>> {
    let sandbox = E2bBuilder::new()
        .api_key("e2b_0123456789abcdef0123456789abcdef01234567")
        .api_url(url)
        .sandbox_url(url)
        .build()?
        .connect_sandbox(SANDBOX, None)
        .await?;
    let reader = tokio::fs::File::open(file).await?;
    let started = Instant::now();
    let sent = sandbox
        .upload("/home/user/big.bin", Box::pin(reader))
        .await?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "client: uploaded {} bytes in {secs:.3} s = {:.0} MB/s, peak RSS {} KiB",
        sent.bytes,
        sent.bytes as f64 / secs / 1e6,
        peak_rss_kib().unwrap_or(0)
    );
    Ok(())
}

/// `VmHWM` of this process (Linux), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
