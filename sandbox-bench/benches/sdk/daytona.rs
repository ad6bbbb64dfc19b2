//! The Daytona adapter against raw `reqwest` doing the same protocol exchange, both on the
//! loopback Daytona server of [`crate::daytona_server`] in the same run.

use crate::daytona_server;
use crate::harness::{
    Config, Record, Result, Timings, interleaved, iqr_percent, latency_record, memory_record,
    memory_runs, probe_runs,
};
use sandbox_daytona::{DaytonaBuilder, DaytonaProvider, DaytonaSandbox, LogFollow};
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent, Provider, Sandbox, SandboxExt};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

const GROUP: &str = "daytona";
const RAW_EXEC: &str = "raw reqwest: one synchronous session exec of the same line";
const RAW_LIFECYCLE: &str = "raw reqwest: the same create/stop/destroy calls and state looks";
const RAW_FIRST: &str = "raw reqwest: create, look, make a session, one synchronous exec";
const RAW_POLL: &str = "raw reqwest: poll the command, then read its JSON logs whole";
/// The line `run(Command::shell("echo hi"))` sends as a handle's first command: the raw
/// baseline sends this very line, so the sandbox does the same work and only the protocol
/// exchange differs.
const SAME_LINE: &str = "(: sdk-cmd-1; (echo hi\n); s=$?; printf '%s:%s\\n' __sandbox_sdk_end_of_output__ \"$s\"; printf '%s\\n' __sandbox_sdk_end_of_output__ >&2; exit $s)";
/// Output of the memory probe's command.
const FOLLOWED: u64 = 32 << 20;

fn builder(addr: SocketAddr) -> DaytonaBuilder {
    DaytonaProvider::builder()
        .api_key("dtn_loopback_bench")
        .api_url(format!("http://{addr}/api"))
        .toolbox_url(format!("http://{addr}/toolbox"))
}

async fn sandbox(builder: DaytonaBuilder) -> Result<DaytonaSandbox> {
    Ok(builder.build()?.get("sb-bench").await?)
}

fn raw_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder().use_rustls_tls().build()?)
}

async fn raw_json(request: reqwest::RequestBuilder) -> Result<Value> {
    let response = request
        .bearer_auth("dtn_loopback_bench")
        .send()
        .await?
        .error_for_status()?;
    let body = response.bytes().await?;
    Ok(if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)?
    })
}

/// One synchronous session exec of [`SAME_LINE`] in `session` (made by the caller).
async fn raw_exec(raw: &reqwest::Client, addr: SocketAddr, sb: &str, session: &str) -> Result {
    let answer = raw_json(
        raw.post(format!(
            "http://{addr}/toolbox/{sb}/process/session/{session}/exec"
        ))
        .json(&json!({"command": SAME_LINE, "runAsync": false})),
    )
    .await?;
    if !answer["stdout"].as_str().unwrap_or("").starts_with("hi\n") {
        return Err(format!("raw exec answered {answer}").into());
    }
    Ok(())
}

async fn raw_session(raw: &reqwest::Client, addr: SocketAddr, sb: &str, session: &str) -> Result {
    raw_json(
        raw.post(format!("http://{addr}/toolbox/{sb}/process/session"))
            .json(&json!({"sessionId": session})),
    )
    .await?;
    Ok(())
}

async fn sdk_run(sandbox: &DaytonaSandbox) -> Result {
    let out = sandbox.run(&Command::shell("echo hi")).await?;
    if out.stdout != b"hi\n"[..] || out.status.code != Some(0) {
        return Err(format!("run answered {out:?}").into());
    }
    Ok(())
}

/// The p95 of per-run seconds, in µs.
fn p95_us(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * 0.95).round() as usize] * 1e6
}

/// A p95 row beside the median row of the same timings (one run per timing).
fn p95_record<'a>(name: String, baseline_name: &'a str, t: &Timings, notes: String) -> Record<'a> {
    Record {
        group: GROUP,
        name,
        baseline_name,
        unit: "µs/op",
        higher_is_better: false,
        sdk: p95_us(&t.sdk),
        baseline: p95_us(&t.baseline),
        iterations: t.sdk.len(),
        iqr_percent: iqr_percent(&t.sdk).max(iqr_percent(&t.baseline)),
        notes,
    }
}

/// Config for rows of single runs: enough runs for a p95.
fn per_run(config: &Config) -> Config {
    Config {
        warmup: 3,
        iterations: if config.iterations <= 3 { 40 } else { 300 },
        ..*config
    }
}

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    let addr = daytona_server::start().await?;
    let raw = raw_client()?;
    raw_session(&raw, addr, "sb-bench", "raw-run").await?;
    let runs = per_run(config);

    let modes: [(&str, DaytonaBuilder, &str); 3] = [
        (
            "direct window (default)",
            builder(addr),
            "the command ends within the 1 s direct window, so run() is one synchronous \
             session exec in a pooled session, like the baseline",
        ),
        (
            "followed over the log WebSocket",
            builder(addr).direct_window(Duration::ZERO),
            "async exec, then the log WebSocket until both end marks (the server would close \
             only ~1 s after the end, §4.2; the end marks make that wait unnecessary)",
        ),
        (
            "followed by polling (LogFollow::Poll)",
            builder(addr)
                .direct_window(Duration::ZERO)
                .log_follow(LogFollow::Poll),
            "async exec, then polls of the command and its whole JSON log (the endpoint has \
             no offset) until the end marks",
        ),
    ];
    for (mode, builder, how) in modes {
        let sandbox = sandbox(builder).await?;
        let before = daytona_server::requests();
        let mut sdk_runs = 0u64;
        let timings = interleaved(
            &runs,
            async || {
                sdk_runs += 1;
                sdk_run(&sandbox).await
            },
            async || raw_exec(&raw, addr, "sb-bench", "raw-run").await,
        )
        .await?;
        let baseline_requests = timings.baseline.len() as u64 + runs.warmup as u64;
        let sdk_requests = daytona_server::requests() - before - baseline_requests;
        let per = sdk_requests as f64 / sdk_runs as f64;
        let notes = format!("{how}; {per:.2} requests per run (the baseline: 1)");
        latency_record(
            GROUP,
            format!("run(\"echo hi\"), {mode}: median"),
            RAW_EXEC,
            1,
            &timings,
            notes.clone(),
        )
        .emit();
        p95_record(
            format!("run(\"echo hi\"), {mode}: p95"),
            RAW_EXEC,
            &timings,
            notes,
        )
        .emit();
    }

    lifecycle(config, addr, &raw).await?;
    first_exec(config, addr, &raw).await?;
    memory(config, addr)?;
    Ok(())
}

async fn raw_state(raw: &reqwest::Client, addr: SocketAddr, id: &str) -> Result<Option<String>> {
    let response = raw
        .get(format!("http://{addr}/api/sandbox/{id}"))
        .bearer_auth("dtn_loopback_bench")
        .send()
        .await?;
    if response.status() == 404 {
        return Ok(None);
    }
    let dto: Value = response.error_for_status()?.json().await?;
    Ok(dto["state"].as_str().map(str::to_owned))
}

/// Looks at the sandbox until `want` (`None`: gone), as quickly as the server answers.
async fn raw_until(
    raw: &reqwest::Client,
    addr: SocketAddr,
    id: &str,
    want: Option<&str>,
) -> Result {
    for _ in 0..1000 {
        if raw_state(raw, addr, id).await?.as_deref() == want {
            return Ok(());
        }
    }
    Err(format!("sandbox {id} never reached {want:?}").into())
}

async fn raw_create(raw: &reqwest::Client, addr: SocketAddr) -> Result<String> {
    let dto = raw_json(
        raw.post(format!("http://{addr}/api/sandbox"))
            .json(&json!({"labels": {}})),
    )
    .await?;
    let id = dto["id"].as_str().ok_or("no id")?.to_owned();
    raw_until(raw, addr, &id, Some("started")).await?;
    Ok(id)
}

async fn lifecycle(config: &Config, addr: SocketAddr, raw: &reqwest::Client) -> Result {
    let provider = builder(addr).build()?;
    let timings = interleaved(
        config,
        async || {
            let sandbox = provider.create(&CreateSpec::new()).await?;
            sandbox.stop().await?;
            sandbox.destroy().await?;
            Ok(())
        },
        async || {
            let id = raw_create(raw, addr).await?;
            raw_json(raw.post(format!("http://{addr}/api/sandbox/{id}/stop"))).await?;
            raw_until(raw, addr, &id, Some("stopped")).await?;
            raw_json(raw.delete(format!("http://{addr}/api/sandbox/{id}"))).await?;
            raw_until(raw, addr, &id, None).await
        },
    )
    .await?;
    latency_record(
        GROUP,
        "create + stop + destroy (instant server)".into(),
        RAW_LIFECYCLE,
        1,
        &timings,
        "the server finishes every transition at once, so this is the adapter's own cost: \
         each state wait looks at once after the call's answer (then 25 ms doubling), never a \
         whole poll interval; real Daytona's create takes seconds, which no client can shorten"
            .into(),
    )
    .emit();
    Ok(())
}

async fn first_exec(config: &Config, addr: SocketAddr, raw: &reqwest::Client) -> Result {
    let provider = builder(addr).build()?;
    let timings = interleaved(
        config,
        async || {
            let sandbox = provider.create(&CreateSpec::new()).await?;
            let out = sandbox.run(&Command::shell("echo hi")).await?;
            if out.stdout != b"hi\n"[..] {
                return Err("wrong output".into());
            }
            Ok(())
        },
        async || {
            let id = raw_create(raw, addr).await?;
            // The server's session names are global, like a sandbox's: one per sandbox.
            let session = format!("raw-first-{id}");
            raw_session(raw, addr, &id, &session).await?;
            raw_exec(raw, addr, &id, &session).await
        },
    )
    .await?;
    latency_record(
        GROUP,
        "create-to-first-exec (instant server)".into(),
        RAW_FIRST,
        1,
        &timings,
        "create, wait for started, make the pooled session, run(\"echo hi\") in the direct \
         window; sandboxes are left to the server"
            .into(),
    )
    .emit();
    Ok(())
}

/// The probe case name for one path against the parent's server at `addr`.
fn case(path: &str, addr: SocketAddr) -> String {
    format!("daytona-{path}@{addr}")
}

fn memory(config: &Config, addr: SocketAddr) -> Result {
    let runs = memory_runs(config);
    let sdk = probe_runs(&case("poll", addr), FOLLOWED, runs)?;
    let baseline = probe_runs(&case("raw-poll", addr), FOLLOWED, runs)?;
    memory_record(
        GROUP,
        format!(
            "peak RSS growth following {} MiB of output in poll mode",
            FOLLOWED >> 20
        ),
        RAW_POLL,
        &sdk,
        &baseline,
        "each in a fresh process against the parent's server; the SDK's events are counted, \
         not kept, and every poll's whole log is scanned as it streams (one chunk held); the \
         baseline reads the finished log's JSON whole, as a client without a streaming parser \
         must"
            .into(),
    )
    .emit();
    Ok(())
}

/// The command of the memory probe: `n` bytes of 64-byte lines on stdout.
fn printing(n: u64) -> String {
    format!("yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c {n}")
}

/// Runs the memory probe `case` (`daytona-poll@ADDR` or `daytona-raw-poll@ADDR`) for `n`
/// bytes; `None` when `case` is not one of this group's.
pub async fn probe(case: &str, n: u64) -> Result<Option<u64>> {
    let Some(rest) = case.strip_prefix("daytona-") else {
        return Ok(None);
    };
    let (path, addr) = rest
        .split_once('@')
        .ok_or("a daytona probe names its server")?;
    let addr: SocketAddr = addr.parse()?;
    let growth = match path {
        "poll" => {
            let sandbox = sandbox(
                builder(addr)
                    .direct_window(Duration::ZERO)
                    .log_follow(LogFollow::Poll),
            )
            .await?;
            crate::harness::peak_growth(async || {
                let mut process = sandbox.exec(&Command::shell(printing(n))).await?;
                let mut bytes = 0u64;
                while let Some(event) = process.next_event().await {
                    if let ProcessEvent::Stdout(chunk) = event? {
                        bytes += chunk.len() as u64;
                    }
                }
                if bytes != n {
                    return Err(format!("followed {bytes} bytes, expected {n}").into());
                }
                Ok(())
            })
            .await?
        }
        "raw-poll" => {
            let raw = raw_client()?;
            let session = format!("raw-mem-{}", std::process::id());
            raw_session(&raw, addr, "sb-bench", &session).await?;
            let base = format!("http://{addr}/toolbox/sb-bench/process/session/{session}");
            crate::harness::peak_growth(async || {
                let answer = raw_json(
                    raw.post(format!("{base}/exec"))
                        .json(&json!({"command": printing(n), "runAsync": true})),
                )
                .await?;
                let cid = answer["cmdId"].as_str().ok_or("no cmdId")?.to_owned();
                loop {
                    let command = raw_json(raw.get(format!("{base}/command/{cid}"))).await?;
                    if !command["exitCode"].is_null() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let logs = raw_json(raw.get(format!("{base}/command/{cid}/logs"))).await?;
                let got = logs["stdout"].as_str().map_or(0, str::len) as u64;
                if got != n {
                    return Err(format!("read {got} bytes, expected {n}").into());
                }
                Ok(())
            })
            .await?
        }
        _ => return Ok(None),
    };
    Ok(Some(growth))
}
