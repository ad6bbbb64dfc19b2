//! `sandbox-fly` against raw `reqwest` speaking the same Machines API exchange, both talking to
//! the loopback stand-in of `fly_server.rs` (real start delay, exec run with this host's tools,
//! Fly's exec rate limit of 1/s sustained with bursts of 3).

use crate::fly_server::{self, EXEC_BURST, EXEC_RATE};
use crate::harness::{
    Config, Result, Timings, interleaved, latency_record, size_label, throughput_record,
};
use base64::Engine as _;
use futures::StreamExt;
use sandbox_fly::{DOWNLOAD_CHUNK, FlyProvider, UPLOAD_CHUNK};
use sandbox_sdk_core::emulate::files as scripts;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, UploadBody};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const GROUP: &str = "fly";
const APP: &str = "bench-app";
/// How long a created machine takes to start on the bench server.
const START_DELAY: Duration = Duration::from_millis(500);

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn provider(addr: SocketAddr) -> Result<FlyProvider> {
    Ok(FlyProvider::builder()
        .token("bench-token")
        .app(APP)
        .base_url(format!("http://{addr}"))
        .build()?)
}

fn raw_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder().use_rustls_tls().build()?)
}

fn spec(limited: bool) -> CreateSpec {
    let spec = CreateSpec::new().metadata("purpose", "bench");
    if limited {
        spec
    } else {
        spec.metadata("bench_rate_limit", "off")
    }
}

/// The raw client's side of the exchange: one app on one server.
struct Raw {
    client: reqwest::Client,
    base: String,
}

impl Raw {
    async fn create(&self, limited: bool) -> Result<String> {
        let mut metadata = serde_json::json!({"purpose": "bench"});
        if !limited {
            metadata["bench_rate_limit"] = "off".into();
        }
        let machine: serde_json::Value = self
            .client
            .post(format!("{}/machines", self.base))
            .json(&serde_json::json!({"config": {"image": "ubuntu:24.04", "metadata": metadata}}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let id = machine["id"].as_str().ok_or("create answered without id")?;
        self.client
            .get(format!(
                "{}/machines/{id}/wait?state=started&timeout=60",
                self.base
            ))
            .send()
            .await?
            .error_for_status()?;
        Ok(id.to_owned())
    }

    /// One `/exec`; `None` when the server answered 429.
    async fn exec(
        &self,
        id: &str,
        command: &[&str],
        stdin: Option<&str>,
    ) -> Result<Option<serde_json::Value>> {
        let mut body = serde_json::json!({"command": command, "timeout": 30});
        if let Some(stdin) = stdin {
            body["stdin"] = stdin.into();
        }
        let response = self
            .client
            .post(format!("{}/machines/{id}/exec", self.base))
            .json(&body)
            .send()
            .await?;
        if response.status() == 429 {
            return Ok(None);
        }
        let answer: serde_json::Value = response.error_for_status()?.json().await?;
        if answer["exit_code"] != 0 {
            return Err(format!("exec failed: {answer}").into());
        }
        Ok(Some(answer))
    }

    /// One script through `/exec` at the pace of the server's bucket, retried after a 429.
    async fn script(
        &self,
        id: &str,
        bucket: &mut Bucket,
        script: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<serde_json::Value> {
        let mut command = vec!["sh", "-c", script, "sh"];
        command.extend_from_slice(args);
        loop {
            bucket.take().await;
            if let Some(answer) = self.exec(id, &command, stdin).await? {
                return Ok(answer);
            }
        }
    }
}

/// The client-side mirror of the server's exec bucket: the most a raw client can get out of
/// Fly's limit (3 calls at once, then 1 per second).
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl Bucket {
    fn full() -> Bucket {
        Bucket {
            tokens: EXEC_BURST,
            refilled: Instant::now(),
        }
    }

    async fn take(&mut self) {
        loop {
            let now = Instant::now();
            let refill = now.duration_since(self.refilled).as_secs_f64() * EXEC_RATE;
            self.tokens = (self.tokens + refill).min(EXEC_BURST);
            self.refilled = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                return;
            }
            // A little past the refill, so the server's bucket has it too.
            let wait = (1.0 - self.tokens) / EXEC_RATE + 0.01;
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
    }
}

fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    let addr = fly_server::start(START_DELAY).await?;
    let fly = provider(addr)?;
    let raw = Raw {
        client: raw_client()?,
        base: format!("http://{addr}/v1/apps/{APP}"),
    };
    run_latency(config, &fly, &raw).await?;
    transfers(config, &fly, &raw).await?;
    create_to_first_exec(config, &fly, &raw).await?;
    Ok(())
}

/// `run("echo hi")` against one direct `/exec` of `sh -c 'echo hi'`.
async fn run_latency(config: &Config, fly: &FlyProvider, raw: &Raw) -> Result {
    let sandbox = fly.create(&spec(false)).await?;
    let raw_id = raw.create(false).await?;
    let ops = (config.requests / 10).max(10);
    let (mut sdk_ops, mut raw_ops) = (Vec::new(), Vec::new());
    let command = Command::shell("echo hi");
    let timings = interleaved(
        config,
        async || {
            for _ in 0..ops {
                let started = Instant::now();
                let out = sandbox.run(&command).await?;
                sdk_ops.push(started.elapsed().as_secs_f64() * 1e3);
                if &out.stdout[..] != b"hi\n" {
                    return Err(format!("run answered {out:?}").into());
                }
            }
            Ok(())
        },
        async || {
            for _ in 0..ops {
                let started = Instant::now();
                let answer = raw
                    .exec(&raw_id, &["sh", "-c", "echo hi"], None)
                    .await?
                    .ok_or("429 on an unlimited machine")?;
                raw_ops.push(started.elapsed().as_secs_f64() * 1e3);
                if answer["stdout"] != "hi\n" {
                    return Err(format!("exec answered {answer}").into());
                }
            }
            Ok(())
        },
    )
    .await?;
    let record = latency_record(
        GROUP,
        "`run(\"echo hi\")`".to_owned(),
        "raw reqwest: one direct /exec of [sh, -c, echo hi]",
        ops,
        &timings,
        format!(
            "p95 {:.2} ms vs {:.2} ms ({} runs each, warm-up included); both make one /exec on a \
             machine without the exec rate limit (with it, any loop is held to 1 call/s). The \
             ≤ 2x goal is out of reach by the protocol: Fly's /exec has no stream, background \
             or exit-wait of its own, so `run` starts the command detached through the adapter's \
             launch script (the script's sh, mkdir, setsid and the wrapper sh, the command, the \
             sleep it waits on, wc, base64 and a detached rm: about 9 process starts where the \
             direct call starts 1) to keep output and exit code reachable past the exec \
             deadline; the gap is those processes, in the machine (slower on a loaded host: \
             7.5x measured on an idle one), not the SDK's client side. A command with a timeout \
             within 30 s takes the direct exec and costs what the baseline does",
            quantile(&sdk_ops, 0.95),
            quantile(&raw_ops, 0.95),
            sdk_ops.len(),
        ),
    );
    record.emit();
    sandbox.destroy().await?;
    Ok(())
}

/// Upload and download throughput over exec, Fly's exec rate limit in force, against raw calls
/// of the adapter's own chunk scripts paced by the same bucket.
async fn transfers(config: &Config, fly: &FlyProvider, raw: &Raw) -> Result {
    // A few chunks: enough for the rate limit to dominate, few enough to finish.
    let n: u64 = if config.big <= 8 << 20 {
        4 << 20
    } else {
        8 << 20
    };
    let runs = Config {
        iterations: config.iterations.min(5),
        ..*config
    };
    let dir = tempfile::tempdir()?;
    let data = bytes::Bytes::from(
        (0..n)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    );
    let sdk_path = dir.path().join("sdk.bin");
    let raw_path = dir.path().join("raw.bin");
    let (sdk_path, raw_path) = (
        sdk_path.to_str().ok_or("path")?.to_owned(),
        raw_path.to_str().ok_or("path")?.to_owned(),
    );
    // One machine per path: each has its own bucket, refilled while the other path runs.
    let sandbox = fly.create(&spec(true)).await?;
    let raw_id = raw.create(true).await?;

    let timings = rested(
        &runs,
        async || {
            let body: UploadBody = Box::pin(std::io::Cursor::new(data.clone()));
            sandbox.upload(&sdk_path, body).await?;
            Ok(())
        },
        async || raw_upload(raw, &raw_id, &raw_path, &data).await,
    )
    .await?;
    if std::fs::read(&sdk_path)? != data || std::fs::read(&raw_path)? != data {
        return Err("an upload did not arrive whole".into());
    }
    throughput_record(
        GROUP,
        format!("upload {} over /exec (`upload`)", size_label(n)),
        "raw reqwest: the same UPLOAD script per 760 KiB chunk, base64 stdin, paced to Fly's bucket",
        n,
        &timings,
        format!(
            "Fly has no file API: both send {} chunks of 760 KiB as base64 through /exec stdin \
             on a machine under Fly's exec limit (1/s sustained, bursts of 3); the raw client \
             spends the whole burst of 3 at once, the SDK 2 (it leaves one for the caller's \
             other calls) and then one per poll_interval (1 s). The rate limit, not the client, \
             sets the speed: about 0.7 MiB/s sustained is all the protocol allows per transfer, \
             so no goal relative to a native file API is reachable. Each run starts on an idle \
             machine (3 s rest, untimed): the adapter paces each operation with its own bucket, \
             so two transfers back to back on one machine draw a 429 at the second one's burst \
             (seen in this bench before the rest was added)",
            n.div_ceil(UPLOAD_CHUNK as u64)
        ),
    )
    .emit();

    let timings = rested(
        &runs,
        async || {
            let mut stream = sandbox.download(&sdk_path).await?.into_stream();
            let mut got = 0u64;
            while let Some(chunk) = stream.next().await {
                got += chunk?.len() as u64;
            }
            check_len(got, n)
        },
        async || raw_download(raw, &raw_id, &raw_path, n).await,
    )
    .await?;
    throughput_record(
        GROUP,
        format!("download {} over /exec (`download`)", size_label(n)),
        "raw reqwest: the same DOWNLOAD script per 736 KiB block, paced to Fly's bucket",
        n,
        &timings,
        format!(
            "{} blocks of 736 KiB as base64 in /exec stdout, one call each under Fly's exec limit; \
             the SDK first stats the file (one more call of the burst: it must tell a missing \
             file and a directory from an empty file before streaming), the raw client knows the \
             size. As for uploads, the rate limit sets the speed",
            n.div_ceil(DOWNLOAD_CHUNK)
        ),
    )
    .emit();
    sandbox.destroy().await?;
    Ok(())
}

/// Like `harness::interleaved`, but every run starts on a machine whose exec bucket is full
/// again (an untimed rest of [`EXEC_BURST`] seconds before it): a transfer on an idle machine.
/// Back to back, a new operation's pacer would start with a full burst while Fly's bucket is
/// still low from the last one, and draw a 429 (the adapter paces each operation, not the
/// machine; see the notes).
async fn rested(
    config: &Config,
    mut sdk: impl AsyncFnMut() -> Result,
    mut baseline: impl AsyncFnMut() -> Result,
) -> Result<Timings> {
    let rest = Duration::from_secs_f64(EXEC_BURST / EXEC_RATE);
    let mut timings = Timings::default();
    for i in 0..config.warmup + config.iterations {
        for sdk_turn in [i % 2 == 0, i % 2 == 1] {
            tokio::time::sleep(rest).await;
            let started = Instant::now();
            if sdk_turn {
                sdk().await?;
            } else {
                baseline().await?;
            }
            let seconds = started.elapsed().as_secs_f64();
            if i >= config.warmup {
                if sdk_turn {
                    timings.sdk.push(seconds);
                } else {
                    timings.baseline.push(seconds);
                }
            }
        }
    }
    Ok(timings)
}

async fn raw_upload(raw: &Raw, id: &str, path: &str, data: &[u8]) -> Result {
    let mut bucket = Bucket::full();
    let part = format!("{path}.raw-upload");
    let chunks: Vec<&[u8]> = data.chunks(UPLOAD_CHUNK).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let first = if i == 0 { "1" } else { "0" };
        let last = if i + 1 == chunks.len() { "1" } else { "0" };
        let encoded = b64().encode(chunk);
        raw.script(
            id,
            &mut bucket,
            scripts::UPLOAD,
            &[&part, path, first, last],
            Some(&encoded),
        )
        .await?;
    }
    Ok(())
}

async fn raw_download(raw: &Raw, id: &str, path: &str, n: u64) -> Result {
    let mut bucket = Bucket::full();
    let block = DOWNLOAD_CHUNK.to_string();
    let mut got = 0u64;
    let mut index = 0u64;
    while got < n {
        let answer = raw
            .script(
                id,
                &mut bucket,
                scripts::DOWNLOAD,
                &[path, &block, &index.to_string()],
                None,
            )
            .await?;
        let text: String = answer["stdout"]
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        got += b64().decode(text)?.len() as u64;
        index += 1;
    }
    check_len(got, n)
}

fn check_len(got: u64, want: u64) -> Result {
    if got == want {
        Ok(())
    } else {
        Err(format!("downloaded {got} bytes, expected {want}").into())
    }
}

/// Create, wait until started, first exec: `create` + `run` against POST, `/wait`, `/exec`.
async fn create_to_first_exec(config: &Config, fly: &FlyProvider, raw: &Raw) -> Result {
    let runs = Config {
        iterations: config.iterations.min(5),
        ..*config
    };
    let command = Command::shell("echo hi");
    let timings = interleaved(
        &runs,
        async || {
            let sandbox = fly.create(&spec(false)).await?;
            sandbox.run(&command).await?;
            Ok(())
        },
        async || {
            let id = raw.create(false).await?;
            raw.exec(&id, &["sh", "-c", "echo hi"], None)
                .await?
                .ok_or("429 on an unlimited machine")?;
            Ok(())
        },
    )
    .await?;
    latency_record(
        GROUP,
        "create to first exec (`create` + `run(\"echo hi\")`)".to_owned(),
        "raw reqwest: POST machines, GET /wait?state=started, POST /exec",
        1,
        &timings,
        format!(
            "the bench server starts a machine {} ms after create (live Fly takes seconds, which \
             both paths wait out the same way); both wait with one /wait call, which answers \
             the moment the machine starts, so neither polls. The SDK's extra time is its \
             launch-script `run` (see the `run` row); create's idempotency look-up is only made \
             with a key",
            START_DELAY.as_millis()
        ),
    )
    .emit();
    Ok(())
}
