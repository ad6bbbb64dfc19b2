//! `run("echo hi")` latency against a loopback stand-in for the Machines API whose `/exec` runs
//! the command for real with this machine's `/bin/sh` (as Fly runs it in the machine), next to
//! one direct `/exec` of the same command through the same client.
//!
//! ```sh
//! cargo run -p sandbox-fly --release --example fly_run_latency [ITERATIONS]
//! ```
//!
//! Prints median and p95 of each path and the number of `/exec` calls per `run`. Nothing leaves
//! the loopback interface.

use sandbox_fly::FlyProvider;
use sandbox_sdk_core::Command;
use sandbox_sdk_core::prelude::*;
use std::io::Write;
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const APP: &str = "bench-app";
const ID: &str = "1857156b526dd8";

/// Runs an `/exec` request body's argv with its stdin, killing it at its timeout, and answers
/// like Fly: `{stdout, stderr, exit_code}`.
struct LocalExec;

impl Respond for LocalExec {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: serde_json::Value = serde_json::from_slice(&request.body).expect("json body");
        let argv: Vec<String> = serde_json::from_value(body["command"].clone()).expect("argv");
        let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(30));
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(text) = body["stdin"].as_str() {
            stdin.write_all(text.as_bytes()).expect("write stdin");
        }
        drop(stdin);
        let started = Instant::now();
        loop {
            if child.try_wait().expect("wait").is_some() || started.elapsed() > timeout {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
            "exit_code": out.status.code().unwrap_or(-1),
        }))
    }
}

async fn exec_calls(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path().ends_with("/exec"))
        .count()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(name: &str, mut times: Vec<Duration>, calls: usize) {
    times.sort();
    println!(
        "{name:<32} median {:>8.2} ms  p95 {:>8.2} ms  /exec calls per run {:.2}",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.95).as_secs_f64() * 1e3,
        calls as f64 / times.len() as f64,
    );
}

#[tokio::main]
async fn main() -> sandbox_sdk_core::Result<()> {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let server = MockServer::start().await;
    let machine = format!("/v1/apps/{APP}/machines/{ID}");
    Mock::given(method("GET"))
        .and(path(machine.as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": ID, "state": "started", "config": {"image": "ubuntu:24.04"}
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(format!("{machine}/exec")))
        .respond_with(LocalExec)
        .mount(&server)
        .await;
    let fly = FlyProvider::builder()
        .token("bench-token")
        .app(APP)
        .api_url(server.uri())
        // Latency of one call, not Fly's exec rate: the stand-in has no rate limit, and with the
        // default pace every call after the first three would wait its 1 s turn.
        .poll_interval(Duration::ZERO)
        .build()?;
    let sandbox = fly.connect_machine(ID).await?;
    let direct = Command::shell("echo hi").timeout(Duration::from_secs(10));
    let emulated = Command::shell("echo hi");
    for _ in 0..3 {
        sandbox.exec_buffered(&direct).await?;
        sandbox.run(&emulated).await?;
    }
    // Interleaved, so both paths see the same load on a shared machine.
    let (mut direct_times, mut run_times) = (Vec::new(), Vec::new());
    let (mut direct_calls, mut run_calls) = (0, 0);
    for _ in 0..iterations {
        let before = exec_calls(&server).await;
        let started = Instant::now();
        let out = sandbox.exec_buffered(&direct).await?;
        direct_times.push(started.elapsed());
        assert_eq!(out.stdout_lossy(), "hi\n");
        let middle = exec_calls(&server).await;
        let started = Instant::now();
        let out = sandbox.run(&emulated).await?;
        run_times.push(started.elapsed());
        assert_eq!(out.stdout_lossy(), "hi\n");
        let after = exec_calls(&server).await;
        direct_calls += middle - before;
        run_calls += after - middle;
    }
    let ratio = {
        let (mut d, mut r) = (direct_times.clone(), run_times.clone());
        d.sort();
        r.sort();
        percentile(&r, 0.5).as_secs_f64() / percentile(&d, 0.5).as_secs_f64()
    };
    report("direct /exec (sh -c 'echo hi')", direct_times, direct_calls);
    report("run(\"echo hi\"), no timeout", run_times, run_calls);
    println!("median ratio run / direct: {ratio:.2}");
    Ok(())
}
