//! The Fly Sprites adapter against a raw client doing the same exchanges (sandbox-sprites/
//! PROTOCOL.md §4, §5, §7): `tokio-tungstenite` on the exec WebSocket, `reqwest` for the rest,
//! on the same Sprites simulator (served from a child process) in the same run.

use crate::adapter::{self, Raw, Transfer};
use crate::harness::{Config, Result, latency_rows};
use crate::sim::SimChild;
use futures::StreamExt;
use sandbox_sdk_core::{CreateSpec, Provider};
use sandbox_sprites::SpritesBuilder;
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const GROUP: &str = "sprites";
const RAW_WS: &str =
    "raw tokio-tungstenite, the same exec WebSocket, frames read by stream id to the exit frame";
/// The file the transfer rows move, in the sprite user's home.
const FILE: &str = "/home/sprite/bench.bin";

/// Every row of the group.
pub async fn run(config: &Config) -> Result {
    let sim = SimChild::start(GROUP, false, "")?;
    let var = |name: &str| sim.var(name);
    let provider = SpritesBuilder::from_lookup(var).build()?;
    let sandbox = provider.create(&CreateSpec::new()).await?;
    let raw = SpritesRaw::connect(&var, sandbox.id()).await?;

    let timings =
        adapter::run_timings(&adapter::per_run(config), Duration::ZERO, &*sandbox, &raw).await?;
    latency_rows(
        GROUP,
        "`run(\"echo hi\")`",
        RAW_WS,
        &timings,
        "each run opens the exec WebSocket (`GET …/exec?cmd=…` upgraded), reads `session_info`, \
         the stdout frame and the exit frame, and closes, while the simulator runs the command \
         for real; the SDK adds command validation, the follower task with its idle bound and \
         re-attach bookkeeping, event mapping and collecting the output",
    );

    adapter::stream_row(
        GROUP,
        config,
        Duration::ZERO,
        config.big,
        &*sandbox,
        &raw,
        RAW_WS,
        "the simulator sends each read of the command's pipe as one binary frame with its \
         stream id; both paths strip the id byte and count, the SDK through its bounded event \
         channel"
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
            "raw reqwest `PUT fs/write?mkdirParents=true` of the file read whole",
            "`fs/write` takes the raw bytes: the SDK streams them from the file as it reads it, \
             the baseline reads the file whole first; the simulator writes them aside and \
             renames into place"
                .to_owned(),
        ),
        (
            "raw reqwest `GET fs/read`, `bytes_stream`",
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
        "raw reqwest: POST /v1/sprites, then the same exec WebSocket",
        "a create answers with the sprite made (`cold`, waking on its first command), so \
         neither path polls; what is left above the baseline is the SDK's own cost"
            .to_owned(),
    )
    .await?;
    sandbox.destroy().await?;
    Ok(())
}

/// The raw client: the token and one sprite's name.
struct SpritesRaw {
    client: reqwest::Client,
    api_url: String,
    token: String,
    name: String,
}

impl SpritesRaw {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.api_url))
            .bearer_auth(&self.token)
    }

    /// Runs `sh -c line` in sprite `name` over the exec WebSocket; returns the stdout length
    /// once the exit frame came.
    async fn exec(&self, name: &str, line: &str) -> Result<u64> {
        let ws = self.api_url.replacen("http", "ws", 1);
        let query: String = ["sh", "-c", line]
            .iter()
            .map(|arg| format!("cmd={}&", urlencode(arg)))
            .collect();
        let url = format!("{ws}/v1/sprites/{name}/exec?{query}path=sh&stdin=false");
        let mut request = url.into_client_request()?;
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {}", self.token).parse()?);
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
        let mut stdout = 0u64;
        while let Some(message) = socket.next().await {
            if let Message::Binary(data) = message? {
                match data.first() {
                    Some(1) => stdout += data.len() as u64 - 1,
                    Some(3) => {
                        let _ = socket.close(None).await;
                        return Ok(stdout);
                    }
                    _ => {}
                }
            }
        }
        Err("the raw exec socket ended without the exit frame".into())
    }

    fn fs(&self, method: reqwest::Method, call: &str, path: &str) -> reqwest::RequestBuilder {
        self.request(method, &format!("/v1/sprites/{}/fs/{call}", self.name))
            .query(&[("path", path), ("workingDir", "/home/sprite")])
    }
}

/// Percent-encodes a query value.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Raw for SpritesRaw {
    async fn connect(var: &dyn Fn(&str) -> Option<String>, id: &str) -> Result<Self> {
        let need = |name: &str| var(name).ok_or_else(|| format!("{name} is not set"));
        Ok(SpritesRaw {
            client: reqwest::Client::builder()
                .use_rustls_tls()
                .http1_only()
                .build()?,
            api_url: need("SPRITES_API_URL")?,
            token: need("SPRITES_TOKEN")?,
            name: id.to_owned(),
        })
    }

    async fn run(&self, line: &str) -> Result<u64> {
        self.exec(&self.name, line).await
    }

    async fn upload(&self, path: &str, source: &Path) -> Result {
        let data = tokio::fs::read(source).await?;
        self.fs(reqwest::Method::PUT, "write", path)
            .query(&[("mode", "0644"), ("mkdirParents", "true")])
            .header("content-type", "application/octet-stream")
            .body(data)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    async fn download(&self, path: &str) -> Result<u64> {
        let response = self
            .fs(reqwest::Method::GET, "read", path)
            .send()
            .await?
            .error_for_status()?;
        adapter::count_bytes(response.bytes_stream()).await
    }

    async fn first_exec(&self) -> Result<String> {
        let name = format!("raw-{}", uuid_like());
        self.request(reqwest::Method::POST, "/v1/sprites")
            .json(&json!({ "name": name }))
            .send()
            .await?
            .error_for_status()?;
        adapter::check_len(self.exec(&name, "echo hi").await?, 3)?;
        Ok(name)
    }
}

/// A name suffix unique in this run.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
