//! How long `run("echo hi")` takes against the Daytona simulator, beside the raw requests it
//! is measured against, interleaved in one run (issue 10 item 1):
//!
//! - one `POST /process/execute` of bare `echo hi`, and one of the line the official SDKs'
//!   `executeCommand` sends for it (`echo '<base64>' | base64 -d | sh`); stdout and stderr
//!   merged,
//! - one synchronous session exec of the same line in a kept session (stdout and stderr apart),
//! - the adapter's `run` with default settings (one synchronous session exec),
//! - the adapter's `run` with a zero direct window (an async exec followed over the log
//!   WebSocket until both end marks).
//!
//! ```sh
//! cargo run --release -p sandbox-daytona --example daytona_run_latency -- [RUNS]
//! ```

use sandbox_daytona::DaytonaProvider;
use sandbox_daytona::sandbox_sdk_core::{Command, CreateSpec, Provider, SandboxExt};
use sandbox_sim::Simulator;
use sandbox_sim::daytona::DaytonaSim;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// What the official TypeScript and Python SDKs' `executeCommand("echo hi")` sends.
const OFFICIAL_LINE: &str = "sh -c \"echo 'ZWNobyBoaQ==' | base64 -d | sh\"";

/// The line `run(Command::shell("echo hi"))` sends, so the raw session exec does the same work.
const SAME_LINE: &str = "(: sdk-cmd-1; (echo hi\n); s=$?; printf '%s:%s\\n' __sandbox_sdk_end_of_output__ \"$s\"; printf '%s\\n' __sandbox_sdk_end_of_output__ >&2; exit $s)";

fn median_ms(mut values: Vec<Duration>) -> f64 {
    values.sort();
    values[values.len() / 2].as_secs_f64() * 1e3
}

async fn post(raw: &reqwest::Client, key: &str, url: String, body: Value) -> Value {
    let answer = raw
        .post(url)
        .bearer_auth(key)
        .header("X-Daytona-SDK-Version", "0.218.0")
        .json(&body)
        .send()
        .await
        .expect("request")
        .error_for_status()
        .expect("2xx");
    let bytes = answer.bytes().await.expect("body");
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let sim = DaytonaSim::start().await?;
    let provider = DaytonaProvider::builder()
        .api_url(sim.api_url())
        .api_key(sim.api_key())
        .build()?;
    let sandbox = provider.create(&CreateSpec::new()).await?;
    let followed = DaytonaProvider::builder()
        .api_url(sim.api_url())
        .api_key(sim.api_key())
        .direct_window(std::time::Duration::ZERO)
        .build()?
        .connect(sandbox.id())
        .await?;
    let toolbox = format!("{}/toolbox/{}", sim.url(), sandbox.id());
    let key = sim.api_key().to_owned();
    let raw = reqwest::Client::new();
    post(
        &raw,
        &key,
        format!("{toolbox}/process/session"),
        json!({"sessionId": "raw"}),
    )
    .await;
    let (mut execute, mut official, mut session, mut run, mut follow) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs + 5 {
        let at = Instant::now();
        let answer = post(
            &raw,
            &key,
            format!("{toolbox}/process/execute"),
            json!({"command": "echo hi"}),
        )
        .await;
        let execute_time = at.elapsed();
        assert_eq!(answer["result"], "hi\n", "{answer}");
        let at = Instant::now();
        let answer = post(
            &raw,
            &key,
            format!("{toolbox}/process/execute"),
            json!({"command": OFFICIAL_LINE}),
        )
        .await;
        let official_time = at.elapsed();
        assert_eq!(answer["result"], "hi\n", "{answer}");
        let at = Instant::now();
        let answer = post(
            &raw,
            &key,
            format!("{toolbox}/process/session/raw/exec"),
            json!({"command": SAME_LINE, "runAsync": false}),
        )
        .await;
        let session_time = at.elapsed();
        assert!(answer["stdout"].as_str().unwrap_or("").starts_with("hi\n"));
        let at = Instant::now();
        let out = sandbox.run(&Command::shell("echo hi")).await?;
        let run_time = at.elapsed();
        assert_eq!(
            (out.stdout_lossy(), out.status.code),
            ("hi\n".into(), Some(0))
        );
        let at = Instant::now();
        let out = followed.run(&Command::shell("echo hi")).await?;
        let follow_time = at.elapsed();
        assert_eq!(out.stdout_lossy(), "hi\n");
        if i >= 5 {
            execute.push(execute_time);
            official.push(official_time);
            session.push(session_time);
            run.push(run_time);
            follow.push(follow_time);
        }
    }
    let (e, s, r) = (median_ms(execute), median_ms(session), median_ms(run));
    let f = median_ms(follow);
    let o = median_ms(official);
    println!("runs: {runs} (interleaved, after 5 warm-up rounds)");
    println!("raw POST /process/execute (merged output): median {e:.2} ms");
    println!("  the same with the official SDKs' line:   median {o:.2} ms");
    println!("raw sync session exec (apart):             median {s:.2} ms");
    println!("adapter run(\"echo hi\") (apart):            median {r:.2} ms");
    println!("adapter run, followed over the WebSocket: median {f:.2} ms");
    println!(
        "run / execute = {:.2}x, run / official execute = {:.2}x, run / session exec = {:.2}x",
        r / e,
        r / o,
        r / s
    );
    sandbox.destroy().await?;
    Ok(())
}
