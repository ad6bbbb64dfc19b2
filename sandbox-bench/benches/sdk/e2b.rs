//! The E2B adapter against a raw `reqwest` client doing the same control-plane and envd
//! exchanges on the same E2B simulator (served from a child process) in the same run.

use crate::adapter::{self, Raw, Transfer};
use crate::harness::{Config, Result, latency_rows};
use crate::sim::SimChild;
use futures::StreamExt;
use sandbox_e2b::E2bBuilder;
use sandbox_sdk_core::{CreateSpec, Provider};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tokio_util::io::ReaderStream;

const GROUP: &str = "e2b";
const RAW_CONNECT: &str = "raw reqwest, same Connect JSON exchange (envelope, decode, base64)";
/// How long the simulator takes to answer a create: E2B's create answers once the sandbox
/// runs, which takes a real while; a fault-plan delay stands in for it.
const CREATE_DELAY_MS: u64 = 50;
/// The file the transfer rows move, in the sandbox user's home.
const FILE: &str = "/home/user/bench.bin";

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    let sim = SimChild::start("e2b", false, &format!("create=delay:{CREATE_DELAY_MS}"))?;
    let var = |name: &str| sim.var(name);
    let provider = E2bBuilder::from_lookup(var).build()?;
    let spec = CreateSpec::new().timeout(Duration::from_secs(3600));
    let sandbox = provider.create(&spec).await?;
    let raw = E2bRaw::connect(&var, sandbox.id()).await?;

    let timings =
        adapter::run_timings(&adapter::per_run(config), Duration::ZERO, &*sandbox, &raw).await?;
    latency_rows(
        GROUP,
        "`run(\"echo hi\")`",
        RAW_CONNECT,
        &timings,
        "one keep-alive HTTP/1.1 connection; each run is one `process.Process/Start` whose \
         answer streams start, data, end and end-of-stream while the simulator runs \
         `/bin/bash -l -c` for real; the SDK adds command validation, the Start request's JSON, \
         the frame decoder, event mapping and collecting the output",
    );

    adapter::stream_row(
        GROUP,
        config,
        Duration::ZERO,
        config.big,
        &*sandbox,
        &raw,
        RAW_CONNECT,
        "the simulator reads the command's pipe and sends each read as a base64 `data` event \
         in a Connect JSON stream (a third more bytes on the wire than the output); both paths \
         decode envelopes, JSON and base64 (the baseline into `serde_json::Value`, a plain raw \
         client, not a tuned one)"
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
            "raw reqwest, file read in 256 KiB chunks, sent chunked",
            "envd >= 0.5.7 takes a raw octet-stream body: both send the file chunked to \
             `POST /files` and read the written-entry answer; the simulator writes it to disk"
                .to_owned(),
        ),
        (
            "raw reqwest `GET /files`, `bytes_stream`",
            "`GET /files` answered from the file on disk with `Content-Length`; the SDK adds the \
             transfer idle bound per chunk"
                .to_owned(),
        ),
    )
    .await?;
    adapter::same_exchange_memory_rows(GROUP, config, &sim, sandbox.id(), transfer)?;

    adapter::first_exec_row(
        GROUP,
        config,
        &provider,
        &raw,
        "raw reqwest: POST /v2/sandboxes, then the Start exchange",
        format!(
            "the simulator answers the v2 create {CREATE_DELAY_MS} ms late (E2B's create \
             answers once the sandbox runs, so there is no state polling to shorten); what is \
             left above the baseline is the SDK's own cost"
        ),
    )
    .await?;
    sandbox.destroy().await?;
    Ok(())
}

/// One transfer memory probe of this group, in this fresh process.
pub async fn probe(case: &str, n: u64) -> Result<Option<u64>> {
    adapter::probe::<E2bRaw>(case, n, GROUP).await
}

/// The raw client: the control plane's key, and one sandbox's id and envd token.
struct E2bRaw {
    client: reqwest::Client,
    api_url: String,
    envd_url: String,
    api_key: String,
    id: String,
    token: String,
}

impl E2bRaw {
    /// The envd request headers both official SDKs send, for the sandbox `id`.
    fn envd(
        &self,
        request: reqwest::RequestBuilder,
        id: &str,
        token: &str,
    ) -> reqwest::RequestBuilder {
        request
            .header("E2b-Sandbox-Id", id)
            .header("E2b-Sandbox-Port", "49983")
            .header("X-Access-Token", token)
    }

    /// `process.Process/Start` for `line` by hand: one enveloped JSON request, then the
    /// envelopes of the answer decoded, `data` events base64-decoded; returns the stdout length.
    async fn start(&self, id: &str, token: &str, line: &str) -> Result<u64> {
        let json = serde_json::to_vec(&json!({
            "process": {"cmd": "/bin/bash", "args": ["-l", "-c", line]},
            "stdin": false
        }))?;
        let mut body = vec![0u8];
        body.extend_from_slice(&(json.len() as u32).to_be_bytes());
        body.extend_from_slice(&json);
        let url = format!("{}/process.Process/Start", self.envd_url);
        let response = self
            .envd(self.client.post(url), id, token)
            .header("content-type", "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .header("Keepalive-Ping-Interval", "50")
            .body(body)
            .send()
            .await?
            .error_for_status()?;
        let mut stream = response.bytes_stream();
        let mut buf = bytes::BytesMut::new();
        let mut stdout = 0u64;
        let mut exited = false;
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk?);
            while buf.len() >= 5 {
                let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if buf.len() < 5 + len {
                    break;
                }
                let frame = buf.split_to(5 + len);
                if frame[0] & 2 != 0 {
                    continue;
                }
                let message: Value = serde_json::from_slice(&frame[5..])?;
                let event = &message["event"];
                if let Some(data) = event["data"]["stdout"].as_str() {
                    stdout += unbase64(data)?.len() as u64;
                } else if event.get("end").is_some() {
                    exited = true;
                }
            }
        }
        if !exited {
            return Err("the raw stream ended without an end event".into());
        }
        Ok(stdout)
    }

    /// A control-plane call answering a sandbox: (id, envd token).
    async fn sandbox(
        &self,
        request: reqwest::RequestBuilder,
        body: Value,
    ) -> Result<(String, String)> {
        let answer: Value = request
            .header("X-API-Key", &self.api_key)
            .json(&body)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let field = |name: &str| {
            answer[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the sandbox answer has no {name}: {answer}"))
        };
        Ok((field("sandboxID")?, field("envdAccessToken")?))
    }
}

impl Raw for E2bRaw {
    async fn connect(var: &dyn Fn(&str) -> Option<String>, id: &str) -> Result<Self> {
        let need = |name: &str| var(name).ok_or_else(|| format!("{name} is not set"));
        let mut raw = E2bRaw {
            client: reqwest::Client::builder()
                .use_rustls_tls()
                .http1_only()
                .build()?,
            api_url: need("E2B_API_URL")?,
            envd_url: need("E2B_SANDBOX_URL")?,
            api_key: need("E2B_API_KEY")?,
            id: id.to_owned(),
            token: String::new(),
        };
        let url = format!("{}/v2/sandboxes/{id}/connect", raw.api_url);
        let (_, token) = raw
            .sandbox(raw.client.post(url), json!({"timeout": 3600}))
            .await?;
        raw.token = token;
        Ok(raw)
    }

    async fn run(&self, line: &str) -> Result<u64> {
        self.start(&self.id, &self.token, line).await
    }

    /// The same `POST /files` as the SDK: the file read 256 KiB at a time, sent chunked.
    async fn upload(&self, path: &str, source: &Path) -> Result {
        let file = tokio::fs::File::open(source).await?;
        let body = reqwest::Body::wrap_stream(ReaderStream::with_capacity(file, 256 * 1024));
        let url = format!("{}/files", self.envd_url);
        self.envd(self.client.post(url), &self.id, &self.token)
            .query(&[("path", path)])
            .header("content-type", "application/octet-stream")
            .body(body)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(())
    }

    async fn download(&self, path: &str) -> Result<u64> {
        let url = format!("{}/files", self.envd_url);
        let response = self
            .envd(self.client.get(url), &self.id, &self.token)
            .query(&[("path", path)])
            .send()
            .await?
            .error_for_status()?;
        adapter::count_bytes(response.bytes_stream()).await
    }

    async fn first_exec(&self) -> Result<String> {
        let url = format!("{}/v2/sandboxes", self.api_url);
        let (id, token) = self
            .sandbox(
                self.client.post(url),
                json!({"templateID": "base", "timeout": 300}),
            )
            .await?;
        adapter::check_len(self.start(&id, &token, "echo hi").await?, 3)?;
        Ok(id)
    }
}

/// Decodes standard base64 (padding allowed), what a raw client must do with `data` events.
fn unbase64(text: &str) -> Result<Vec<u8>> {
    use base64::Engine as _;
    Ok(base64::engine::general_purpose::STANDARD.decode(text)?)
}
