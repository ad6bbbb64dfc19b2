//! The Vercel Sandbox adapter against a raw `reqwest` client doing the same REST and NDJSON
//! exchanges (sandbox-vercel/PROTOCOL.md §4–§7) on the same Vercel simulator (served from a
//! child process) in the same run.

use crate::adapter::{self, Raw, Transfer};
use crate::harness::{Config, Result, latency_rows};
use crate::sim::SimChild;
use futures::StreamExt;
use sandbox_sdk_core::{CreateSpec, Provider};
use sandbox_vercel::VercelBuilder;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

const GROUP: &str = "vercel";
const RAW_NDJSON: &str =
    "raw reqwest, the same POST …/cmd with wait and logs, NDJSON read line by line";
/// The file the transfer rows move, in the sandbox's working directory.
const FILE: &str = "/vercel/sandbox/bench.bin";

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    let sim = SimChild::start(GROUP, false, "")?;
    let var = |name: &str| sim.var(name);
    let provider = VercelBuilder::from_lookup(var).build()?;
    let spec = CreateSpec::new().timeout(Duration::from_secs(3600));
    let sandbox = provider.create(&spec).await?;
    let raw = VercelRaw::connect(&var, sandbox.id()).await?;

    let timings =
        adapter::run_timings(&adapter::per_run(config), Duration::ZERO, &*sandbox, &raw).await?;
    latency_rows(
        GROUP,
        "`run(\"echo hi\")`",
        RAW_NDJSON,
        &timings,
        "one keep-alive HTTP/1.1 connection; each run is one `POST …/cmd` with `wait` and \
         `logs` whose NDJSON answer carries the started command, the output lines and the \
         finished command while the simulator runs `sh -c` for real; the SDK adds command \
         validation, the body's JSON, the line decoder with its caps, event mapping and \
         collecting the output",
    );

    adapter::stream_row(
        GROUP,
        config,
        Duration::ZERO,
        config.big,
        &*sandbox,
        &raw,
        RAW_NDJSON,
        "the simulator sends each read of the command's pipe as one `{\"stream\", \"data\"}` \
         JSON line (text, JSON-escaped); both paths split lines and decode JSON (the baseline \
         into `serde_json::Value`, a plain raw client, not a tuned one)"
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
            "raw reqwest: `fs/mkdir` of the parent, then `fs/write` of a gzip tar built in memory (as the JS SDK does)",
            "Vercel takes files only as a gzip-compressed tar (`x-cwd: /`): both gzip at the \
             fastest level and make the parent directory first; the SDK streams the archive \
             from the file as it reads it, the baseline builds it whole first; the simulator \
             unpacks it to disk"
                .to_owned(),
        ),
        (
            "raw reqwest `POST fs/read`, `bytes_stream`",
            "`fs/read` answered from the file on disk as a raw octet stream; the SDK adds the \
             stream idle bound per chunk"
                .to_owned(),
        ),
    )
    .await?;

    adapter::first_exec_row(
        GROUP,
        config,
        &provider,
        &raw,
        "raw reqwest: POST /v3/sandboxes, then the same POST …/cmd",
        "Vercel's create answers with the session already made, so neither path polls (the \
         simulator's session runs at once); what is left above the baseline is the SDK's own \
         cost"
            .to_owned(),
    )
    .await?;
    sandbox.destroy().await?;
    Ok(())
}

/// The raw client: the token, team and project, and one sandbox's current session.
struct VercelRaw {
    client: reqwest::Client,
    api_url: String,
    token: String,
    team: String,
    project: String,
    session: String,
}

impl VercelRaw {
    /// A request to `path` under the API with the bearer token and the team scope.
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.api_url))
            .bearer_auth(&self.token)
            .query(&[("teamId", &self.team)])
    }

    /// `POST …/sessions/{session}/cmd` of `sh -c line` with `wait` and `logs`, its NDJSON read
    /// line by line; returns the stdout length once the finished command line came.
    async fn cmd(&self, session: &str, line: &str) -> Result<u64> {
        let response = self
            .request(
                reqwest::Method::POST,
                &format!("/v2/sandboxes/sessions/{session}/cmd"),
            )
            .json(&json!({"command": "sh", "args": ["-c", line], "wait": true, "logs": true}))
            .send()
            .await?
            .error_for_status()?;
        let mut stream = response.bytes_stream();
        let mut buf = Vec::new();
        let mut stdout = 0u64;
        let mut exited = false;
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk?);
            while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let message: Value = serde_json::from_slice(&line)?;
                if message["stream"] == "stdout" {
                    stdout += message["data"].as_str().map_or(0, str::len) as u64;
                } else if message["command"]["exitCode"].is_i64() {
                    exited = true;
                }
            }
        }
        if !exited {
            return Err("the raw stream ended without the finished command".into());
        }
        Ok(stdout)
    }
}

impl Raw for VercelRaw {
    async fn connect(var: &dyn Fn(&str) -> Option<String>, id: &str) -> Result<Self> {
        let need = |name: &str| var(name).ok_or_else(|| format!("{name} is not set"));
        let mut raw = VercelRaw {
            client: reqwest::Client::builder()
                .use_rustls_tls()
                .http1_only()
                .build()?,
            api_url: need("VERCEL_API_URL")?,
            token: need("VERCEL_TOKEN")?,
            team: need("VERCEL_TEAM_ID")?,
            project: need("VERCEL_PROJECT_ID")?,
            session: String::new(),
        };
        let answer: Value = raw
            .request(reqwest::Method::GET, &format!("/v2/sandboxes/{id}"))
            .query(&[("projectId", raw.project.as_str()), ("resume", "false")])
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        raw.session = answer["session"]["id"]
            .as_str()
            .ok_or_else(|| format!("the sandbox answer has no session: {answer}"))?
            .to_owned();
        Ok(raw)
    }

    async fn run(&self, line: &str) -> Result<u64> {
        self.cmd(&self.session, line).await
    }

    /// `fs/mkdir` of the parent, then `fs/write` of a one-entry gzip tar built in memory.
    async fn upload(&self, path: &str, source: &Path) -> Result {
        let sessions = format!("/v2/sandboxes/sessions/{}", self.session);
        let parent = Path::new(path).parent().ok_or("a path without a parent")?;
        self.request(reqwest::Method::POST, &format!("{sessions}/fs/mkdir"))
            .json(&json!({"path": parent, "recursive": true}))
            .send()
            .await?
            .error_for_status()?;
        let data = tokio::fs::read(source).await?;
        let name = path.trim_start_matches('/');
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&ustar_header(name, data.len() as u64)?)?;
        gz.write_all(&data)?;
        gz.write_all(&vec![0; (512 - data.len() % 512) % 512 + 1024])?;
        self.request(reqwest::Method::POST, &format!("{sessions}/fs/write"))
            .header("content-type", "application/gzip")
            .header("x-cwd", "/")
            .body(gz.finish()?)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    async fn download(&self, path: &str) -> Result<u64> {
        let response = self
            .request(
                reqwest::Method::POST,
                &format!("/v2/sandboxes/sessions/{}/fs/read", self.session),
            )
            .json(&json!({ "path": path }))
            .send()
            .await?
            .error_for_status()?;
        adapter::count_bytes(response.bytes_stream()).await
    }

    async fn first_exec(&self) -> Result<String> {
        let answer: Value = self
            .request(reqwest::Method::POST, "/v3/sandboxes")
            .json(&json!({"projectId": self.project, "timeout": 300_000}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let field = |pointer: &str| {
            answer
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("the create answer has no {pointer}: {answer}"))
        };
        adapter::check_len(self.cmd(&field("/session/id")?, "echo hi").await?, 3)?;
        Ok(field("/sandbox/name")?)
    }
}

/// A ustar header for one regular file `name` of `size` bytes (mode 0644).
fn ustar_header(name: &str, size: u64) -> Result<[u8; 512]> {
    if name.len() > 100 {
        return Err(format!("{name:?} is longer than a ustar name").into());
    }
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |h: &mut [u8; 512], at: usize, width: usize, value: u64| {
        let text = format!("{value:0w$o}\0", w = width - 1);
        h[at..at + width].copy_from_slice(text.as_bytes());
    };
    octal(&mut h, 100, 8, 0o644);
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, size);
    octal(&mut h, 136, 12, 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    octal(&mut h, 148, 7, sum);
    h[155] = b' ';
    Ok(h)
}
