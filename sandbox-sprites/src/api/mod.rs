//! The only code that speaks to Sprites: the REST calls (PROTOCOL.md §4, §5.5, §7, §8), one
//! method per endpoint over the shared [`HttpClient`], and the exec WebSocket ([`exec`]).
//! Errors all go through [`crate::error::map_error`]. Nothing here retries: the client layer
//! does, and a create or a command is never sent twice by the adapter.

pub(crate) mod exec;

use crate::config::{HOME, MAX_JSON, PAGE_LIMIT, PROVIDER, Settings};
use crate::error::{MAX_TEXT, map_error, protocol_error};
use crate::wire::{
    Checkpoint, CreateBody, FsList, ProgressLine, SessionList, Sprite, SpritePage, UrlSettings,
};
use sandbox_sdk_core::http::{
    HttpClient, Method, Request, StreamBody, encode_path_segment, truncate,
};
use sandbox_sdk_core::redact::{bearer_secrets, scrub_text};
use sandbox_sdk_core::{ByteStream, Result};
use serde_json::json;
use std::sync::Arc;

/// The API client of one organisation.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    pub http: HttpClient,
    pub settings: Arc<Settings>,
}

impl Api {
    pub fn new(settings: Settings) -> Result<Api> {
        let http = HttpClient::builder(PROVIDER, &settings.base_url)
            .bearer(settings.token.clone())
            .header("accept", "application/json")
            .timeout(settings.request_timeout)
            .error_mapper(map_error)
            .build()?;
        Ok(Api {
            http,
            settings: Arc::new(settings),
        })
    }

    fn req(&self, method: Method, path: &str, op: &str, name: &str) -> Request {
        self.http
            .request(method, path)
            .operation(op)
            .sandbox_id(name)
    }

    /// `/v1/sprites/{name}` with the name encoded.
    pub fn sprite_path(name: &str) -> String {
        format!("/v1/sprites/{}", encode_path_segment(name))
    }

    /// `POST /v1/sprites` (§4.1): 201 with the sprite, `cold`.
    pub async fn create(&self, body: &CreateBody) -> Result<Sprite> {
        self.req(Method::Post, "/v1/sprites", "create", &body.name)
            .json(body)
            .timeout(self.settings.create_timeout)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `GET /v1/sprites/{name}` (§4.2).
    pub async fn get(&self, name: &str, op: &str) -> Result<Sprite> {
        self.req(Method::Get, &Self::sprite_path(name), op, name)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// One page of `GET /v1/sprites?max_results&continuation_token` (§4.2).
    pub async fn list(&self, token: Option<&str>) -> Result<SpritePage> {
        let mut req = self
            .http
            .request(Method::Get, "/v1/sprites")
            .operation("list")
            .query("max_results", PAGE_LIMIT);
        if let Some(token) = token {
            req = req.query("continuation_token", token);
        }
        req.max_body(MAX_JSON).send_json().await
    }

    /// `PUT /v1/sprites/{name}` with new URL settings (§4.3).
    pub async fn set_url_auth(&self, name: &str, auth: &str) -> Result<Sprite> {
        let body = json!({ "url_settings": UrlSettings { auth: Some(auth.to_owned()) } });
        self.req(Method::Put, &Self::sprite_path(name), "set_url_auth", name)
            .json(&body)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `DELETE /v1/sprites/{name}` (§4.3): the sprite with its sessions and checkpoints.
    pub async fn delete(&self, name: &str) -> Result<()> {
        self.req(Method::Delete, &Self::sprite_path(name), "destroy", name)
            .max_body(MAX_JSON)
            .send_empty()
            .await
    }

    /// `GET /v1/sprites/{name}/exec` (§5.5): the live sessions.
    pub async fn sessions(&self, name: &str, op: &str) -> Result<SessionList> {
        let path = format!("{}/exec", Self::sprite_path(name));
        self.req(Method::Get, &path, op, name)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `POST /v1/sprites/{name}/exec/{id}/kill?signal=` (§5.5), read to its `complete` line.
    /// An `error` line is a `Provider` error.
    pub async fn kill(&self, name: &str, session: &str, signal: &str) -> Result<()> {
        let path = format!(
            "{}/exec/{}/kill",
            Self::sprite_path(name),
            encode_path_segment(session)
        );
        let req = self
            .req(Method::Post, &path, "kill_process", name)
            .query("signal", signal);
        self.progress(req, "kill_process", name).await.map(drop)
    }

    /// Sends a progress-streaming request (kill, checkpoint, restore: §5.5, §8) and reads its
    /// NDJSON lines to the end: they answer 200 even when the work fails, so an `error` line is
    /// the failure. The lines are returned.
    async fn progress(&self, req: Request, op: &str, name: &str) -> Result<Vec<ProgressLine>> {
        let body = req
            .idle_timeout(self.settings.stream_idle)
            .max_body(MAX_JSON)
            .send()
            .await?
            .bytes()
            .await?;
        let mut lines = Vec::new();
        for raw in body.split(|b| *b == b'\n') {
            let raw = raw.trim_ascii();
            if raw.is_empty() {
                continue;
            }
            let line: ProgressLine = serde_json::from_slice(raw)
                .map_err(|_| protocol_error(op, name, "a progress line is not JSON"))?;
            if line.kind == "error" {
                let text = line
                    .error
                    .or(line.message)
                    .or(line.data)
                    .unwrap_or_else(|| "no reason given".into());
                // A 200 is not scrubbed by the transport: the decoded text is scrubbed here.
                let text = truncate(&scrub_text(&text, &self.secrets()), MAX_TEXT);
                return Err(protocol_error(op, name, format!("{op} failed: {text}")));
            }
            lines.push(line);
        }
        Ok(lines)
    }

    /// The credential an answer may echo, to scrub from text quoted in errors.
    pub fn secrets(&self) -> Vec<String> {
        bearer_secrets(&self.settings.token)
    }

    fn fs(&self, method: Method, call: &str, op: &str, name: &str, path: &str) -> Request {
        let url = format!("{}/fs/{call}", Self::sprite_path(name));
        self.req(method, &url, op, name)
            .query("path", path)
            .query("workingDir", HOME)
    }

    /// `GET fs/read?path` (§7): the file's bytes, streamed with the idle bound.
    pub async fn read(&self, name: &str, path: &str) -> Result<ByteStream> {
        Ok(self
            .fs(Method::Get, "read", "read_file", name, path)
            .idle_timeout(self.settings.stream_idle)
            .send()
            .await?
            .bytes_stream())
    }

    /// `PUT fs/write?path&mode=0644&mkdirParents=true` (§7), the body streamed.
    pub async fn write(
        &self,
        name: &str,
        path: &str,
        body: StreamBody,
        length: Option<u64>,
    ) -> Result<()> {
        let req = self
            .fs(Method::Put, "write", "write_file", name, path)
            .query("mode", "0644")
            .query("mkdirParents", true)
            .idle_timeout(self.settings.stream_idle)
            .max_body(MAX_JSON);
        let req = match length {
            Some(length) => req.body_stream_with_length(body, "application/octet-stream", length),
            None => req.body_stream(body, "application/octet-stream"),
        };
        req.send().await.map(drop)
    }

    /// `GET fs/list?path&recursive` (§7): a directory's entries, or a file as itself.
    pub async fn list_files(
        &self,
        name: &str,
        path: &str,
        recursive: bool,
        op: &str,
    ) -> Result<FsList> {
        let mut req = self.fs(Method::Get, "list", op, name, path);
        if recursive {
            req = req.query("recursive", true);
        }
        req.max_body(MAX_JSON).send_json().await
    }

    /// `DELETE fs/delete?path&recursive=true` (§7).
    pub async fn delete_file(&self, name: &str, path: &str, op: &str) -> Result<()> {
        self.fs(Method::Delete, "delete", op, name, path)
            .query("recursive", true)
            .max_body(MAX_JSON)
            .send()
            .await
            .map(drop)
    }

    /// `POST fs/rename {source, dest, workingDir}` (§7).
    pub async fn rename(&self, name: &str, from: &str, to: &str) -> Result<()> {
        let url = format!("{}/fs/rename", Self::sprite_path(name));
        self.req(Method::Post, &url, "rename", name)
            .json(&json!({"source": from, "dest": to, "workingDir": HOME}))
            .max_body(MAX_JSON)
            .send()
            .await
            .map(drop)
    }

    /// `POST …/checkpoint {comment}` (§8), read to `complete`.
    pub async fn checkpoint(&self, name: &str, comment: Option<&str>) -> Result<()> {
        let url = format!("{}/checkpoint", Self::sprite_path(name));
        let body = match comment {
            Some(comment) => json!({ "comment": comment }),
            None => json!({}),
        };
        let req = self.req(Method::Post, &url, "snapshot", name).json(&body);
        self.progress(req, "snapshot", name).await.map(drop)
    }

    /// `GET …/checkpoints` (§8).
    pub async fn checkpoints(&self, name: &str, op: &str) -> Result<Vec<Checkpoint>> {
        let url = format!("{}/checkpoints", Self::sprite_path(name));
        self.req(Method::Get, &url, op, name)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `POST …/checkpoints/{id}/restore` (§8), read to `complete`.
    pub async fn restore(&self, name: &str, checkpoint: &str) -> Result<()> {
        let url = format!(
            "{}/checkpoints/{}/restore",
            Self::sprite_path(name),
            encode_path_segment(checkpoint)
        );
        let req = self.req(Method::Post, &url, "restore", name);
        self.progress(req, "restore", name).await.map(drop)
    }
}
