//! `sandbox-fly` against raw `reqwest` speaking the same Machines API exchange, both on the Fly
//! simulator (served from a child process) in the same run: machines that take a real while to
//! start, `/exec` run for real, and Fly's exec rate limit (1/s sustained, bursts of 3 per
//! machine) on the simulator the transfer and stream rows use.

use crate::adapter::{self, Raw, Transfer, check_len};
use crate::harness::{Config, Result, latency_rows};
use crate::sim::SimChild;
use base64::Engine as _;
use sandbox_fly::{DEFAULT_LAUNCH_WAIT, DOWNLOAD_CHUNK, FlyBuilder, UPLOAD_CHUNK};
use sandbox_sdk_core::emulate::files as scripts;
use sandbox_sdk_core::{CreateSpec, Provider};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const GROUP: &str = "fly";
/// Sustained exec calls per second per machine (PROTOCOL.md §3).
const EXEC_RATE: f64 = 1.0;
/// Exec calls a machine may make at once (PROTOCOL.md §3).
const EXEC_BURST: f64 = 3.0;
/// The rest before each rate-limited run: long enough for the machine's bucket to refill.
const REST: Duration = Duration::from_secs(3);

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    // Rate limits off for the latency rows, whose loops would otherwise measure the limit.
    let sim = SimChild::start(GROUP, false, "")?;
    let var = |name: &str| sim.var(name);
    let provider = FlyBuilder::from_lookup(var).build()?;
    let sandbox = provider.create(&CreateSpec::new()).await?;
    let raw = FlyRaw::connect(&var, sandbox.id()).await?;
    // Each run after a rest that refills the machine's exec bucket: the adapter paces /exec to
    // Fly's limit per machine whatever the server does, so back to back its runs would measure
    // the limit (1/s), not the run.
    let rest = Duration::from_secs_f64(1.0 / EXEC_RATE);
    let runs = Config {
        warmup: 2,
        iterations: if config.iterations <= 3 { 10 } else { 60 },
        ..*config
    };
    sim.requests()?;
    let timings = adapter::run_timings(&runs, rest, &*sandbox, &raw).await?;
    let runs = (runs.warmup + runs.iterations) as u64;
    let per = (sim.requests()? - runs) as f64 / runs as f64;
    latency_rows(
        GROUP,
        "`run(\"echo hi\")`",
        "raw reqwest: one direct /exec of [sh, -c, echo hi]",
        &timings,
        &format!(
            "{per:.2} requests per run (the baseline: 1); each run after a {} s rest (untimed), \
             as a one-off run on an idle machine: in a loop on one machine Fly's exec limit \
             holds any client to 1 call/s (the adapter paces to it, a raw client draws 429s); \
             a command without a timeout runs \
             through the adapter's launch path (started detached so its output and exit code \
             outlive Fly's 30 s exec deadline; the adapter's launch wait is {} ms), the direct \
             call starts one process. The ratio depends on what the server's own /exec costs \
             (here the simulator runs each command through a local sandbox): the launch adds \
             a fixed few process starts in the machine (a shell, an exit-recording subshell, \
             setsid, a sleep timer and wc; base64 only for binary output); measured piece by \
             piece, a shell and the command alone cost 2.1x a bare direct exec, so against a \
             fast /exec the 2x goal is out of reach by the protocol (sandbox-fly/README.md)",
            rest.as_secs(),
            DEFAULT_LAUNCH_WAIT.as_millis()
        ),
    );
    adapter::first_exec_row(
        GROUP,
        config,
        &provider,
        &raw,
        "raw reqwest: POST machines, GET /wait?state=started, POST /exec",
        "the simulator starts a machine 50 ms after create (live Fly takes seconds, which \
         both paths wait out the same way); both wait with one /wait call, which answers the \
         moment the machine starts, so neither polls; create's idempotency look-up is only \
         made with a key"
            .to_owned(),
    )
    .await?;
    sandbox.destroy().await?;
    drop(sim);

    let sim = SimChild::start(GROUP, true, "")?;
    let var = |name: &str| sim.var(name);
    let provider = FlyBuilder::from_lookup(var).build()?;
    let sandbox = provider.create(&CreateSpec::new()).await?;
    let raw = FlyRaw::connect(&var, sandbox.id()).await?;
    let limited = Config {
        iterations: config.iterations.min(5),
        warmup: 1,
        ..*config
    };
    adapter::stream_row(
        GROUP,
        &limited,
        REST,
        config.big / 16,
        &*sandbox,
        &raw,
        "raw reqwest: one direct /exec of the command, its output whole in the JSON answer",
        "under Fly's exec limit, each run after a 3 s rest; Fly's /exec has no stream, so the \
         raw baseline is the protocol's one-call way to the output (buffered whole, within the \
         30 s exec deadline); the SDK's exec streams through its launch and poll calls, paced to \
         the limit"
            .to_owned(),
    )
    .await?;

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("bench.bin");
    let transfer = Transfer {
        path: file.to_str().ok_or("temporary path is not UTF-8")?,
        n: if config.big <= 8 << 20 {
            4 << 20
        } else {
            8 << 20
        },
        rest: REST,
    };
    adapter::transfer_rows(
        GROUP,
        &limited,
        &transfer,
        &*sandbox,
        &raw,
        (
            "raw reqwest: the same UPLOAD script per 760 KiB chunk, base64 stdin, paced to Fly's bucket",
            format!(
                "Fly has no file API: both send {} chunks of 760 KiB as base64 through /exec \
                 stdin under Fly's exec limit (1/s sustained, bursts of 3); the raw client's \
                 bucket mirrors the server's (the whole burst at once, then one call a second), \
                 the SDK's calls go through its own per-machine pacer. The rate limit, not the \
                 client, sets the speed, so no goal relative to a native file API is reachable. \
                 Each run starts on an idle machine (3 s rest, untimed)",
                transfer.n.div_ceil(UPLOAD_CHUNK as u64)
            ),
        ),
        (
            "raw reqwest: the same DOWNLOAD script per 736 KiB block, paced to Fly's bucket",
            format!(
                "{} blocks of 736 KiB as base64 in /exec stdout, one call each under Fly's exec \
                 limit; the SDK first stats the file (one more call of the burst: it must tell a \
                 missing file and a directory from an empty file before streaming), the raw \
                 client knows the size. As for uploads, the rate limit sets the speed",
                transfer.n.div_ceil(DOWNLOAD_CHUNK)
            ),
        ),
    )
    .await?;
    adapter::memory_rows(
        GROUP,
        &limited,
        &sim,
        sandbox.id(),
        &transfer,
        "raw reqwest, same exec calls",
        "the same calls as the rows above, each run after a 3 s rest",
    )?;
    sandbox.destroy().await?;
    Ok(())
}

/// One transfer memory probe of this group, in this fresh process.
pub async fn probe(case: &str, n: u64) -> Result<Option<u64>> {
    adapter::probe::<FlyRaw>(case, n, GROUP).await
}

/// The raw client's side of the exchange: one app, one machine.
struct FlyRaw {
    client: reqwest::Client,
    /// `{host}/v1/apps/{app}`.
    base: String,
    token: String,
    id: String,
}

impl FlyRaw {
    /// One `/exec` of `command` on the machine `id`; `None` when the server answered 429.
    async fn exec(&self, id: &str, command: &[&str], stdin: Option<&str>) -> Result<Option<Value>> {
        let mut body = json!({"command": command, "timeout": 30});
        if let Some(stdin) = stdin {
            body["stdin"] = stdin.into();
        }
        let response = self
            .client
            .post(format!("{}/machines/{id}/exec", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        if response.status() == 429 {
            return Ok(None);
        }
        let answer: Value = response.error_for_status()?.json().await?;
        if answer["exit_code"] != 0 {
            return Err(format!("exec failed: {answer}").into());
        }
        Ok(Some(answer))
    }

    /// One script through `/exec` at the pace of `bucket`, retried after a 429.
    async fn script(
        &self,
        bucket: &mut Bucket,
        script: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<Value> {
        let mut command = vec!["sh", "-c", script, "sh"];
        command.extend_from_slice(args);
        loop {
            bucket.take().await;
            if let Some(answer) = self.exec(&self.id, &command, stdin).await? {
                return Ok(answer);
            }
        }
    }
}

impl Raw for FlyRaw {
    async fn connect(var: &dyn Fn(&str) -> Option<String>, id: &str) -> Result<Self> {
        let need = |name: &str| var(name).ok_or_else(|| format!("{name} is not set"));
        Ok(FlyRaw {
            client: reqwest::Client::builder().use_rustls_tls().build()?,
            base: format!(
                "{}/v1/apps/{}",
                need("FLY_API_HOSTNAME")?,
                need("FLY_APP_NAME")?
            ),
            token: need("FLY_API_TOKEN")?,
            id: id.to_owned(),
        })
    }

    /// One direct `/exec` of `[sh, -c, line]`, waiting out a 429 (a rate limit's refill).
    async fn run(&self, line: &str) -> Result<u64> {
        loop {
            if let Some(answer) = self.exec(&self.id, &["sh", "-c", line], None).await? {
                return Ok(answer["stdout"].as_str().map_or(0, str::len) as u64);
            }
            tokio::time::sleep(Duration::from_secs_f64(1.0 / EXEC_RATE)).await;
        }
    }

    /// The adapter's UPLOAD script per chunk read from the file, base64 on stdin.
    async fn upload(&self, path: &str, source: &Path) -> Result {
        use tokio::io::AsyncReadExt as _;
        let size = tokio::fs::metadata(source).await?.len();
        let chunks = size.div_ceil(UPLOAD_CHUNK as u64).max(1);
        let mut file = tokio::fs::File::open(source).await?;
        let mut chunk = Vec::with_capacity(UPLOAD_CHUNK);
        let mut bucket = Bucket::full();
        let part = format!("{path}.raw-upload");
        for i in 0..chunks {
            chunk.clear();
            (&mut file)
                .take(UPLOAD_CHUNK as u64)
                .read_to_end(&mut chunk)
                .await?;
            let first = if i == 0 { "1" } else { "0" };
            let last = if i + 1 == chunks { "1" } else { "0" };
            let encoded = b64().encode(&chunk);
            let args = [part.as_str(), path, first, last];
            self.script(&mut bucket, scripts::UPLOAD, &args, Some(&encoded))
                .await?;
        }
        Ok(())
    }

    /// The adapter's DOWNLOAD script per block, until a short block.
    async fn download(&self, path: &str) -> Result<u64> {
        let mut bucket = Bucket::full();
        let block = DOWNLOAD_CHUNK.to_string();
        let mut got = 0u64;
        for index in 0u64.. {
            let args = [path, block.as_str(), &index.to_string()];
            let answer = self
                .script(&mut bucket, scripts::DOWNLOAD, &args, None)
                .await?;
            let text: String = answer["stdout"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let len = b64().decode(text)?.len() as u64;
            got += len;
            if len < DOWNLOAD_CHUNK {
                break;
            }
        }
        Ok(got)
    }

    async fn first_exec(&self) -> Result<String> {
        let config = json!({"image": "ubuntu:24.04", "init": {"exec": ["sleep", "inf"]}});
        let machine: Value = self
            .client
            .post(format!("{}/machines", self.base))
            .bearer_auth(&self.token)
            .json(&json!({"config": config}))
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
            .bearer_auth(&self.token)
            .send()
            .await?
            .error_for_status()?;
        let answer = self
            .exec(id, &["sh", "-c", "echo hi"], None)
            .await?
            .ok_or("429 on an unlimited machine")?;
        check_len(answer["stdout"].as_str().map_or(0, str::len) as u64, 3)?;
        Ok(id.to_owned())
    }
}

/// The client-side mirror of the machine's exec bucket: the most a raw client can get out of
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
