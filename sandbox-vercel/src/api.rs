//! The REST calls the adapter makes (PROTOCOL.md §4–§10), one method per endpoint, over the
//! shared [`HttpClient`]. Every request carries `teamId` (§2); errors all go through
//! [`crate::error::map_error`]. Nothing here retries: the client layer does, and a create or a
//! command is never sent twice by the adapter.

use crate::config::{MAX_JSON, MAX_LIST_JSON, PAGE_LIMIT, PROVIDER, REQUEST_ID_HEADER, Settings};
use crate::error::{FailedResponse, map_error};
use crate::wire::{
    CommandEnvelope, CommandList, CreateBody, RunBody, SandboxEnvelope, SandboxPage,
    SessionEnvelope, SnapshotEnvelope, SnapshotPage, StdinAnswer, StdinBody,
};
use sandbox_sdk_core::ByteStream;
use sandbox_sdk_core::Result;
use sandbox_sdk_core::http::{HttpClient, Method, Request, Response, encode_path_segment};
use serde_json::json;
use std::sync::Arc;

/// The API client of one team and project.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    pub http: HttpClient,
    pub settings: Arc<Settings>,
}

/// Which create endpoint (PROTOCOL.md §4.1): v2 takes a `runtime`, v3 an `image` (or the
/// default universal image); they differ in nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreateVersion {
    V2,
    V3,
}

impl Api {
    pub fn new(settings: Settings) -> Result<Api> {
        let http = HttpClient::builder(PROVIDER, &settings.base_url)
            .bearer(settings.token.clone())
            .header("accept", "application/json")
            .request_id_header(REQUEST_ID_HEADER)
            .timeout(settings.request_timeout)
            .error_mapper(|r| {
                map_error(FailedResponse {
                    status: r.status,
                    body: &r.body,
                    request_id: r.request_id.as_deref(),
                    retry_after: r.retry_after(),
                    operation: Some(r.operation.as_str()),
                    sandbox_id: r.sandbox_id.as_deref(),
                })
            })
            .build()?;
        Ok(Api {
            http,
            settings: Arc::new(settings),
        })
    }

    /// The credential an answer may echo, to scrub from text quoted in errors.
    pub fn secrets(&self) -> Vec<String> {
        sandbox_sdk_core::redact::bearer_secrets(&self.settings.token)
    }

    /// A request with `teamId`, the operation and the sandbox (by name) for errors.
    fn req(&self, method: Method, path: &str, op: &str, name: Option<&str>) -> Request {
        let req = self
            .http
            .request(method, path)
            .operation(op)
            .query("teamId", &self.settings.team_id);
        match name {
            Some(name) => req.sandbox_id(name),
            None => req,
        }
    }

    fn sandbox_path(name: &str) -> String {
        format!("/v2/sandboxes/{}", encode_path_segment(name))
    }

    fn session_path(session: &str) -> String {
        format!("/v2/sandboxes/sessions/{}", encode_path_segment(session))
    }

    fn command_path(session: &str, command: &str) -> String {
        format!(
            "{}/cmd/{}",
            Self::session_path(session),
            encode_path_segment(command)
        )
    }

    /// `POST /v2|v3/sandboxes` (§4.1).
    pub async fn create(
        &self,
        version: CreateVersion,
        body: &CreateBody,
    ) -> Result<SandboxEnvelope> {
        let path = match version {
            CreateVersion::V2 => "/v2/sandboxes",
            CreateVersion::V3 => "/v3/sandboxes",
        };
        self.req(Method::Post, path, "create", body.name.as_deref())
            .json(body)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `GET /v2/sandboxes/{name}?projectId&resume` (§4.3): `resume=true` starts a new session
    /// for a stopped sandbox.
    pub async fn get_sandbox(&self, name: &str, resume: bool, op: &str) -> Result<SandboxEnvelope> {
        self.req(Method::Get, &Self::sandbox_path(name), op, Some(name))
            .query("projectId", &self.settings.project_id)
            .query("resume", resume)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// One page of `GET /v2/sandboxes` (§4.4), newest first, filtered by one tag and a status.
    pub async fn list_sandboxes(
        &self,
        cursor: Option<&str>,
        tag: Option<&(String, String)>,
        status: Option<&str>,
    ) -> Result<SandboxPage> {
        let mut req = self
            .req(Method::Get, "/v2/sandboxes", "list", None)
            .query("project", &self.settings.project_id)
            .query("limit", PAGE_LIMIT);
        if let Some(cursor) = cursor {
            req = req.query("cursor", cursor);
        }
        if let Some((key, value)) = tag {
            req = req.query("tags", format!("{key}:{value}"));
        }
        if let Some(status) = status {
            req = req.query("status", status);
        }
        req.max_body(MAX_LIST_JSON).send_json().await
    }

    /// `DELETE /v2/sandboxes/{name}?projectId` (§4.6): stops any session, then deletes.
    pub async fn delete_sandbox(&self, name: &str) -> Result<()> {
        self.req(
            Method::Delete,
            &Self::sandbox_path(name),
            "destroy",
            Some(name),
        )
        .query("projectId", &self.settings.project_id)
        .max_body(MAX_JSON)
        .send_empty()
        .await
    }

    /// `POST /v2/sandboxes/{name}/fork?projectId` (§10.2).
    pub async fn fork(&self, name: &str, body: &CreateBody) -> Result<SandboxEnvelope> {
        let path = format!("{}/fork", Self::sandbox_path(name));
        self.req(Method::Post, &path, "fork", Some(name))
            .query("projectId", &self.settings.project_id)
            .json(body)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `GET /v2/sandboxes/sessions/{id}` (§5.1).
    pub async fn get_session(
        &self,
        name: &str,
        session: &str,
        op: &str,
    ) -> Result<SessionEnvelope> {
        self.req(Method::Get, &Self::session_path(session), op, Some(name))
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `GET /v2/sandboxes/sessions/{id}` with the server's clock: the answer's `Date` header,
    /// when it has a valid one.
    pub async fn get_session_dated(
        &self,
        name: &str,
        session: &str,
        op: &str,
    ) -> Result<(SessionEnvelope, Option<std::time::SystemTime>)> {
        let resp = self
            .req(Method::Get, &Self::session_path(session), op, Some(name))
            .max_body(MAX_JSON)
            .send()
            .await?;
        let date = resp
            .header("date")
            .and_then(|d| httpdate::parse_http_date(d).ok());
        Ok((resp.json().await?, date))
    }

    /// `POST /v2/sandboxes/sessions/{id}/stop` (§5.1).
    pub async fn stop_session(&self, name: &str, session: &str) -> Result<SessionEnvelope> {
        let path = format!("{}/stop", Self::session_path(session));
        self.req(Method::Post, &path, "stop", Some(name))
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `POST /v2/sandboxes/sessions/{id}/extend-timeout {"duration"}` (§5.1): adds `ms`.
    pub async fn extend_timeout(
        &self,
        name: &str,
        session: &str,
        ms: u64,
    ) -> Result<SessionEnvelope> {
        let path = format!("{}/extend-timeout", Self::session_path(session));
        self.req(Method::Post, &path, "set_timeout", Some(name))
            .json(&json!({ "duration": ms }))
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `POST /v2/sandboxes/sessions/{id}/snapshot` (§10.1): stops the session.
    pub async fn snapshot(&self, name: &str, session: &str) -> Result<SnapshotEnvelope> {
        let path = format!("{}/snapshot", Self::session_path(session));
        self.req(Method::Post, &path, "snapshot", Some(name))
            .json(&json!({}))
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// One page of `GET /v2/sandboxes/snapshots?project[&name]` (§10.1).
    pub async fn list_snapshots(
        &self,
        cursor: Option<&str>,
        name: Option<&str>,
    ) -> Result<SnapshotPage> {
        let mut req = self
            .req(
                Method::Get,
                "/v2/sandboxes/snapshots",
                "list_snapshots",
                name,
            )
            .query("project", &self.settings.project_id)
            .query("limit", PAGE_LIMIT);
        if let Some(cursor) = cursor {
            req = req.query("cursor", cursor);
        }
        if let Some(name) = name {
            req = req.query("name", name);
        }
        req.max_body(MAX_LIST_JSON).send_json().await
    }

    /// `DELETE /v2/sandboxes/snapshots/{id}` (§10.1).
    pub async fn delete_snapshot(&self, id: &str) -> Result<()> {
        let path = format!("/v2/sandboxes/snapshots/{}", encode_path_segment(id));
        self.req(Method::Delete, &path, "delete_snapshot", None)
            .max_body(MAX_JSON)
            .send_empty()
            .await
    }

    /// `POST …/cmd` (§6.1) answered at once with `{command}` (detached).
    pub async fn start_command(
        &self,
        name: &str,
        session: &str,
        body: &RunBody,
    ) -> Result<CommandEnvelope> {
        let path = format!("{}/cmd", Self::session_path(session));
        self.req(Method::Post, &path, "exec", Some(name))
            .json(body)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `POST …/cmd` with `wait` and `logs` (§6.2): the NDJSON stream, idle-bounded.
    pub async fn run_streamed(
        &self,
        name: &str,
        session: &str,
        body: &RunBody,
    ) -> Result<ByteStream> {
        let path = format!("{}/cmd", Self::session_path(session));
        let resp = self
            .req(Method::Post, &path, "exec", Some(name))
            .json(body)
            .idle_timeout(self.settings.stream_idle)
            .send()
            .await?;
        Ok(resp.bytes_stream())
    }

    /// `GET …/cmd/{id}[?wait=true]` (§6.4). A wait is a long poll bounded by the idle bound.
    pub async fn get_command(
        &self,
        name: &str,
        session: &str,
        command: &str,
        wait: bool,
    ) -> Result<CommandEnvelope> {
        let mut req = self.req(
            Method::Get,
            &Self::command_path(session, command),
            "wait",
            Some(name),
        );
        if wait {
            req = req.query("wait", "true").timeout(self.settings.stream_idle);
        }
        req.max_body(MAX_JSON).send_json().await
    }

    /// `GET …/cmd` (§6.4).
    pub async fn list_commands(&self, name: &str, session: &str) -> Result<CommandList> {
        let path = format!("{}/cmd", Self::session_path(session));
        self.req(Method::Get, &path, "processes", Some(name))
            .max_body(MAX_LIST_JSON)
            .send_json()
            .await
    }

    /// `POST …/cmd/{id}/kill {"signal"}` (§6.4).
    pub async fn kill_command(
        &self,
        name: &str,
        session: &str,
        command: &str,
        signal: i32,
    ) -> Result<()> {
        let path = format!("{}/kill", Self::command_path(session, command));
        self.req(Method::Post, &path, "kill_process", Some(name))
            .json(&json!({ "signal": signal }))
            .max_body(MAX_JSON)
            .send_empty()
            .await
    }

    /// `POST …/cmd/{id}/stdin {data?, offset, close?}` (PROTOCOL.md §6.6): one chunk of stdin, or the close.
    /// Safe to send again with the same offset (the server skips what it already has).
    pub async fn write_stdin(
        &self,
        name: &str,
        session: &str,
        command: &str,
        body: &StdinBody,
    ) -> Result<StdinAnswer> {
        let path = format!("{}/stdin", Self::command_path(session, command));
        self.req(Method::Post, &path, "stdin", Some(name))
            .json(body)
            .max_body(MAX_JSON)
            .send_json()
            .await
    }

    /// `GET …/cmd/{id}/logs` (§6.5): the NDJSON stream from the first byte, idle-bounded.
    pub async fn logs(&self, name: &str, session: &str, command: &str) -> Result<ByteStream> {
        let path = format!("{}/logs", Self::command_path(session, command));
        let resp = self
            .req(Method::Get, &path, "attach", Some(name))
            .idle_timeout(self.settings.stream_idle)
            .send()
            .await?;
        Ok(resp.bytes_stream())
    }

    /// `POST …/fs/write` (§7.1): a gzip tar extracted under `x-cwd: /`.
    pub async fn write_files(&self, name: &str, session: &str, archive: ByteStream) -> Result<()> {
        let path = format!("{}/fs/write", Self::session_path(session));
        self.req(Method::Post, &path, "write_file", Some(name))
            .header("x-cwd", "/")
            .body_stream(archive, "application/gzip")
            .idle_timeout(self.settings.stream_idle)
            .max_body(MAX_JSON)
            .send_empty()
            .await
    }

    /// `POST …/fs/read {"path"}` (§7.2): the file's bytes, streamed and idle-bounded.
    pub async fn read_file(&self, name: &str, session: &str, file: &str) -> Result<Response> {
        let path = format!("{}/fs/read", Self::session_path(session));
        self.req(Method::Post, &path, "read_file", Some(name))
            .json(&json!({ "path": file }))
            .idle_timeout(self.settings.stream_idle)
            .send()
            .await
    }

    /// `POST …/fs/mkdir {"path", "recursive": true}` (§7.3).
    pub async fn mkdir(&self, name: &str, session: &str, dir: &str) -> Result<()> {
        let path = format!("{}/fs/mkdir", Self::session_path(session));
        self.req(Method::Post, &path, "mkdir", Some(name))
            .json(&json!({ "path": dir, "recursive": true }))
            .max_body(MAX_JSON)
            .send_empty()
            .await
    }
}
