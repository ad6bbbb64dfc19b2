//! The Daytona adapter against raw `reqwest` doing the same protocol exchange, both on the
//! Daytona simulator (served from a child process) in the same run: real state transitions
//! (`DEFAULT_TRANSITION` each), sessions that are real shells, and the log WebSocket that
//! closes only about a second after the command's end, as Daytona's does.

use crate::adapter::{self, Raw, Transfer, check_len};
use crate::harness::{
    Config, Result, interleaved, latency_record, latency_rows, memory_record, memory_runs,
    probe_runs,
};
use crate::sim::SimChild;
use futures::StreamExt;
use sandbox_daytona::{DEFAULT_SDK_VERSION, DaytonaBuilder, LogFollow};
use sandbox_sdk_core::emulate::{KEY_PROLOGUE, KeyedEnd, KeyedMarks};
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent, Provider};
use sandbox_sim::daytona::{DEFAULT_FOLLOW_LINGER, DEFAULT_TRANSITION};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const GROUP: &str = "daytona";
const RAW_EXEC: &str = "raw reqwest: one synchronous session exec of the same line";
/// The file the transfer rows move (relative: the sandbox's working directory).
const FILE: &str = "bench.bin";
/// Output of the poll-mode memory probe's command.
const FOLLOWED: u64 = 32 << 20;

/// Stdout's reader for the adapter's end marks (`exec/marks.rs`): core's keyed marks, the key
/// line first and the mark with the status at the end.
fn stdout_marks() -> KeyedMarks {
    KeyedMarks::new(|v, whole| {
        v.len() <= 10 && v.iter().all(u8::is_ascii_digit) && !(whole && v.is_empty())
    })
    .at_end()
}

/// `line` as the adapter sends it (`exec/marks.rs`), so the raw baseline sends the same line
/// and the sandbox does the same work: a no-op label, core's key prologue, the command, then
/// the keyed end marks on both streams, built from core's pieces rather than their text.
fn wrapped(line: &str) -> String {
    format!(
        "(: sdk-cmd-1; {KEY_PROLOGUE}; ({line}\n); s=$?; {}; {} >&2; exit $s)",
        stdout_marks().mark_line("\"$s\""),
        KeyedEnd::mark_line(),
    )
}

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    let sim = SimChild::start(GROUP, false, "")?;
    let builder = || DaytonaBuilder::from_lookup(|name| sim.var(name));
    let provider = builder().build()?;
    let sandbox = provider.create(&CreateSpec::new()).await?;
    let var = |name: &str| sim.var(name);
    let raw = DaytonaRaw::connect(&var, sandbox.id()).await?;
    let runs = adapter::per_run(config);

    let modes: [(&str, DaytonaBuilder, String); 3] = [
        (
            "direct window (default)",
            builder(),
            "the command ends within the 1 s direct window, so run() is one synchronous \
             session exec in a pooled session, like the baseline: the fewest requests that \
             keep stdout and stderr apart (a bare POST /process/execute is one request too, \
             without the daemon's session wrapper, but answers both streams merged, so run() \
             cannot use it; sandbox-daytona's daytona_run_latency example measures the two)"
                .to_owned(),
        ),
        (
            "followed over the log WebSocket",
            builder().direct_window(Duration::ZERO),
            format!(
                "async exec, then the log WebSocket until both end marks (the simulator closes \
                 it only {} ms after the end, as Daytona does; the end marks make that wait \
                 unnecessary)",
                DEFAULT_FOLLOW_LINGER.as_millis()
            ),
        ),
        (
            "followed by polling (LogFollow::Poll)",
            builder()
                .direct_window(Duration::ZERO)
                .log_follow(LogFollow::Poll),
            "async exec, then polls of the command and its log until the end marks".to_owned(),
        ),
    ];
    for (mode, builder, how) in modes {
        let sandbox = builder.build()?.connect(sandbox.id()).await?;
        sim.requests()?;
        let timings = adapter::run_timings(&runs, Duration::ZERO, &*sandbox, &raw).await?;
        let runs = (runs.warmup + runs.iterations) as u64;
        let per = (sim.requests()? - runs) as f64 / runs as f64;
        latency_rows(
            GROUP,
            &format!("run(\"echo hi\"), {mode}"),
            RAW_EXEC,
            &timings,
            &format!("{how}; {per:.2} requests per run (the baseline: 1)"),
        );
    }

    adapter::stream_row(
        GROUP,
        config,
        Duration::ZERO,
        config.big / 16,
        &*sandbox,
        &raw,
        "raw reqwest: one synchronous session exec, the output whole in its JSON answer",
        "the SDK streams: async exec, then the log WebSocket (≤ 1 KiB binary frames, each \
         line behind its 3-byte stream marker) until both end marks; a raw client cannot \
         demultiplex that stream without writing the adapter again, so its baseline is the \
         protocol's one-request way to the same output (buffered whole, no stream)"
            .to_owned(),
    )
    .await?;

    let transfer = Transfer {
        path: FILE,
        n: config.big,
        rest: Duration::ZERO,
    };
    adapter::transfer_rows(
        GROUP,
        config,
        &transfer,
        &*sandbox,
        &raw,
        (
            "raw reqwest: the same multipart `POST /files/bulk-upload`, the file streamed",
            "both send one multipart form (`files[0].path`, then `files[0].file` streamed from \
             the file) and read the daemon's answer"
                .to_owned(),
        ),
        (
            "raw reqwest `GET /files/download`, `bytes_stream`",
            "`GET /files/download?path=` streamed; the SDK adds the transfer idle bound per chunk"
                .to_owned(),
        ),
    )
    .await?;
    adapter::same_exchange_memory_rows(GROUP, config, &sim, sandbox.id(), transfer)?;
    poll_memory(config, &sim, sandbox.id())?;

    lifecycle(config, &provider, &raw).await?;
    adapter::first_exec_row(
        GROUP,
        config,
        &provider,
        &raw,
        "raw reqwest: create, look until started, make a session, one synchronous exec",
        format!(
            "the simulator takes {} ms to create a sandbox and answers the create only then \
             (with the state from before: a look must follow); then the pooled session and \
             run(\"echo hi\") in the direct window",
            DEFAULT_TRANSITION.as_millis()
        ),
    )
    .await?;
    sandbox.destroy().await?;
    Ok(())
}

/// Create, stop and destroy with every state wait, against the same calls and looks by hand.
async fn lifecycle(config: &Config, provider: &dyn Provider, raw: &DaytonaRaw) -> Result {
    let timings = interleaved(
        config,
        async || {
            let sandbox = provider.create(&CreateSpec::new()).await?;
            sandbox.stop().await?;
            sandbox.destroy().await?;
            Ok(())
        },
        async || {
            let id = raw.create().await?;
            raw.api(reqwest::Method::POST, &format!("sandbox/{id}/stop"))
                .await?;
            raw.until(&id, Some("stopped")).await?;
            raw.api(reqwest::Method::DELETE, &format!("sandbox/{id}"))
                .await?;
            raw.until(&id, None).await
        },
    )
    .await?;
    latency_record(
        GROUP,
        "create + stop + destroy".into(),
        "raw reqwest: the same create/stop/destroy calls, looking at the state back to back",
        1,
        &timings,
        format!(
            "each transition takes {} ms in the simulator; the raw client looks at the state \
             again the moment an answer comes, the SDK looks at once after each call and then \
             backs off from 25 ms (never a whole poll interval); real Daytona's create takes \
             seconds, which no client can shorten",
            DEFAULT_TRANSITION.as_millis()
        ),
    )
    .emit();
    Ok(())
}

fn poll_memory(config: &Config, sim: &SimChild, id: &str) -> Result {
    let runs = memory_runs(config);
    let mut env = sim.vars().to_vec();
    env.push(("BENCH_SANDBOX".to_owned(), id.to_owned()));
    let sdk = probe_runs("daytona-poll", FOLLOWED, runs, &env)?;
    let baseline = probe_runs("daytona-raw-poll", FOLLOWED, runs, &env)?;
    memory_record(
        GROUP,
        format!(
            "peak RSS growth following {} MiB of output in poll mode",
            FOLLOWED >> 20
        ),
        "raw reqwest: poll the command, then read its JSON logs whole",
        &sdk,
        &baseline,
        "each in a fresh process, the simulator in its own; the SDK's events are counted, not \
         kept; the baseline reads the finished log's JSON whole, as a client without a \
         streaming parser must"
            .into(),
    )
    .emit();
    Ok(())
}

/// Runs a memory probe of this group (`daytona-poll`, `daytona-raw-poll` or a transfer probe)
/// for `n` bytes; `None` when `case` is not one of this group's.
pub async fn probe(case: &str, n: u64) -> Result<Option<u64>> {
    if !matches!(case, "daytona-poll" | "daytona-raw-poll") {
        return adapter::probe::<DaytonaRaw>(case, n, GROUP).await;
    }
    let var = |name: &str| std::env::var(name).ok();
    let id = var("BENCH_SANDBOX").ok_or("a poll probe needs BENCH_SANDBOX")?;
    let growth = if case == "daytona-poll" {
        let sandbox = DaytonaBuilder::from_lookup(var)
            .direct_window(Duration::ZERO)
            .log_follow(LogFollow::Poll)
            .build()?
            .connect(&id)
            .await?;
        crate::harness::peak_growth(async || {
            let mut process = sandbox.exec(&Command::shell(adapter::printing(n))).await?;
            let mut bytes = 0u64;
            while let Some(event) = process.next_event().await {
                if let ProcessEvent::Stdout(chunk) = event? {
                    bytes += chunk.len() as u64;
                }
            }
            check_len(bytes, n)
        })
        .await?
    } else {
        let raw = DaytonaRaw::connect(&var, &id).await?;
        crate::harness::peak_growth(async || check_len(raw.polled(&adapter::printing(n)).await?, n))
            .await?
    };
    Ok(Some(growth))
}

/// The headers the adapter sends on every request (the daemon keeps stdout and stderr apart
/// only for a recent enough `X-Daytona-SDK-Version`).
fn sdk_headers() -> Result<reqwest::header::HeaderMap> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("X-Daytona-Source", "sdk-rust".parse()?);
    headers.insert("X-Daytona-SDK-Version", DEFAULT_SDK_VERSION.parse()?);
    Ok(headers)
}

/// The raw client: the API key and one sandbox with a session of its own.
struct DaytonaRaw {
    client: reqwest::Client,
    /// The simulator's URL: the API under `/api`, the toolbox under `/toolbox`.
    url: String,
    key: String,
    id: String,
    session: String,
}

impl DaytonaRaw {
    async fn json(&self, request: reqwest::RequestBuilder) -> Result<Value> {
        let body = request
            .bearer_auth(&self.key)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body)?
        })
    }

    async fn api(&self, method: reqwest::Method, path: &str) -> Result<Value> {
        let url = format!("{}/api/{path}", self.url);
        self.json(self.client.request(method, url)).await
    }

    fn toolbox(&self, method: reqwest::Method, id: &str, path: &str) -> reqwest::RequestBuilder {
        let url = format!("{}/toolbox/{id}/{path}", self.url);
        self.client.request(method, url).bearer_auth(&self.key)
    }

    async fn state(&self, id: &str) -> Result<Option<String>> {
        let url = format!("{}/api/sandbox/{id}", self.url);
        let response = self.client.get(url).bearer_auth(&self.key).send().await?;
        if response.status() == 404 {
            return Ok(None);
        }
        let dto: Value = response.error_for_status()?.json().await?;
        Ok(dto["state"].as_str().map(str::to_owned))
    }

    /// Looks at the sandbox until `want` (`None`: gone), as quickly as the server answers.
    async fn until(&self, id: &str, want: Option<&str>) -> Result {
        for _ in 0..100_000 {
            if self.state(id).await?.as_deref() == want {
                return Ok(());
            }
        }
        Err(format!("sandbox {id} never reached {want:?}").into())
    }

    async fn create(&self) -> Result<String> {
        let url = format!("{}/api/sandbox", self.url);
        let dto = self
            .json(self.client.post(url).json(&json!({"labels": {}})))
            .await?;
        let id = dto["id"].as_str().ok_or("no id")?.to_owned();
        self.until(&id, Some("started")).await?;
        Ok(id)
    }

    async fn make_session(&self, id: &str, session: &str) -> Result {
        let request = self.toolbox(reqwest::Method::POST, id, "process/session");
        self.json(request.json(&json!({"sessionId": session})))
            .await?;
        Ok(())
    }

    /// One synchronous session exec of [`wrapped`]`(line)`; the length of stdout without the
    /// key line and the end mark (read by core's keyed marks).
    async fn exec(&self, id: &str, session: &str, line: &str) -> Result<u64> {
        let path = format!("process/session/{session}/exec");
        let request = self.toolbox(reqwest::Method::POST, id, &path);
        let answer = self
            .json(request.json(&json!({"command": wrapped(line), "runAsync": false})))
            .await?;
        let stdout = answer["stdout"].as_str().unwrap_or("");
        let mut marks = stdout_marks();
        let len = marks.push(stdout.as_bytes()).len() + marks.finish().len();
        if marks.value().is_none() {
            return Err(format!("no end mark in the exec answer {answer}").into());
        }
        Ok(len as u64)
    }

    /// Async exec of `line`, polls until it exits, then its JSON logs read whole; the stdout
    /// length.
    async fn polled(&self, line: &str) -> Result<u64> {
        let base = format!("process/session/{}", self.session);
        let request = self.toolbox(reqwest::Method::POST, &self.id, &format!("{base}/exec"));
        let answer = self
            .json(request.json(&json!({"command": line, "runAsync": true})))
            .await?;
        let cid = answer["cmdId"].as_str().ok_or("no cmdId")?.to_owned();
        loop {
            let path = format!("{base}/command/{cid}");
            let command = self
                .json(self.toolbox(reqwest::Method::GET, &self.id, &path))
                .await?;
            if !command["exitCode"].is_null() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let path = format!("{base}/command/{cid}/logs");
        let logs = self
            .json(self.toolbox(reqwest::Method::GET, &self.id, &path))
            .await?;
        Ok(logs["stdout"].as_str().map_or(0, str::len) as u64)
    }
}

impl Raw for DaytonaRaw {
    async fn connect(var: &dyn Fn(&str) -> Option<String>, id: &str) -> Result<Self> {
        let api = var("DAYTONA_API_URL").ok_or("DAYTONA_API_URL is not set")?;
        let raw = DaytonaRaw {
            client: reqwest::Client::builder()
                .use_rustls_tls()
                .default_headers(sdk_headers()?)
                .build()?,
            url: api.trim_end_matches("/api").to_owned(),
            key: var("DAYTONA_API_KEY").ok_or("DAYTONA_API_KEY is not set")?,
            id: id.to_owned(),
            session: format!("raw-{}", std::process::id()),
        };
        raw.make_session(id, &raw.session).await?;
        Ok(raw)
    }

    async fn run(&self, line: &str) -> Result<u64> {
        self.exec(&self.id, &self.session, line).await
    }

    /// The adapter's multipart form by hand: `files[0].path`, then `files[0].file` streamed.
    async fn upload(&self, path: &str, source: &Path) -> Result {
        let boundary = "raw-bench-boundary-7d3f";
        let name = path.rsplit('/').next().unwrap_or(path);
        let head = format!(
            "--{boundary}\r\ncontent-disposition: form-data; name=\"files[0].path\"\r\n\r\n{path}\r\n\
             --{boundary}\r\ncontent-disposition: form-data; name=\"files[0].file\"; filename=\"{name}\"\r\n\
             content-type: application/octet-stream\r\n\r\n"
        );
        let tail = format!("\r\n--{boundary}--\r\n");
        let file = tokio::fs::File::open(source).await?;
        let body = futures::stream::once(async move { Ok(bytes::Bytes::from(head)) })
            .chain(tokio_util::io::ReaderStream::with_capacity(
                file,
                256 * 1024,
            ))
            .chain(futures::stream::once(async move {
                Ok(bytes::Bytes::from(tail))
            }));
        self.toolbox(reqwest::Method::POST, &self.id, "files/bulk-upload")
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(())
    }

    async fn download(&self, path: &str) -> Result<u64> {
        let response = self
            .toolbox(reqwest::Method::GET, &self.id, "files/download")
            .query(&[("path", path)])
            .send()
            .await?
            .error_for_status()?;
        adapter::count_bytes(response.bytes_stream()).await
    }

    async fn first_exec(&self) -> Result<String> {
        let id = self.create().await?;
        let session = format!("raw-first-{id}");
        self.make_session(&id, &session).await?;
        check_len(self.exec(&id, &session, "echo hi").await?, 3)?;
        Ok(id)
    }
}
