//! The one fixture style of the Vercel tests: a provider built for team `team_t` and project
//! `prj_t` against a wiremock server (or a scripted loopback server, `raw`, where a test needs
//! a stream cut or held silent), and the JSON of a sandbox, session, command and error as
//! PROTOCOL.md §4–§6 and §13 give them.

#![allow(dead_code)]

pub mod raw;

use sandbox_vercel::{VercelBuilder, VercelProvider, VercelSandbox};
use serde_json::{Value, json};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

pub const TOKEN: &str = "vercel-test-token-0123456789";
pub const TEAM: &str = "team_t";
pub const PROJECT: &str = "prj_t";
pub const NAME: &str = "box-1";
pub const SESSION: &str = "sbx_1";
pub const T0: u64 = 1_764_561_600_000;

pub fn builder(base_url: &str) -> VercelBuilder {
    VercelProvider::builder()
        .token(TOKEN)
        .team_id(TEAM)
        .project_id(PROJECT)
        .api_url(base_url)
}

pub fn provider(server: &MockServer) -> VercelProvider {
    builder(&server.uri()).build().unwrap()
}

pub fn sandbox_json(name: &str, status: &str, tags: Value) -> Value {
    json!({
        "name": name, "currentSessionId": SESSION, "persistent": true, "status": status,
        "statusUpdatedAt": T0, "createdAt": T0, "updatedAt": T0, "region": "iad1",
        "vcpus": 2, "memory": 4096, "timeout": 300000, "cwd": "/vercel/sandbox", "tags": tags
    })
}

pub fn session_json(id: &str, status: &str) -> Value {
    json!({
        "id": id, "projectId": PROJECT, "sourceSandboxName": NAME, "status": status,
        "memory": 4096, "vcpus": 2, "region": "iad1", "runtime": "node24", "timeout": 300000,
        "cwd": "/vercel/sandbox", "requestedAt": T0, "createdAt": T0, "updatedAt": T0,
        "startedAt": T0
    })
}

pub fn envelope(name: &str, status: &str, tags: Value) -> Value {
    json!({
        "sandbox": sandbox_json(name, if status == "stopped" { "stopped" } else { "running" }, tags),
        "session": session_json(SESSION, status),
        "routes": [{"url": "https://sb-1-3000.vercel.run", "port": 3000, "subdomain": "sb-1-3000"}]
    })
}

pub fn command_json(id: &str, exit: Option<i32>) -> Value {
    json!({"id": id, "name": "sh", "args": ["-c", "x"], "cwd": "/vercel/sandbox",
           "sessionId": SESSION, "exitCode": exit, "startedAt": T0})
}

pub fn error_json(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

/// NDJSON of `lines`.
pub fn ndjson(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

pub fn session_path(suffix: &str) -> String {
    format!("/v2/sandboxes/sessions/{SESSION}{suffix}")
}

/// Answers `GET /v2/sandboxes/{NAME}` (any `resume`) with a running sandbox.
pub async fn mount_get(server: &MockServer, body: Value) {
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{NAME}")))
        .and(query_param("teamId", TEAM))
        .and(query_param("projectId", PROJECT))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(server)
        .await;
}

/// A provider and a sandbox connected to `NAME`, running.
pub async fn connected(server: &MockServer) -> VercelSandbox {
    mount_get(server, envelope(NAME, "running", json!({}))).await;
    provider(server).connect_sandbox(NAME).await.unwrap()
}

/// The JSON bodies of the requests `server` received for `method path`.
pub async fn bodies(server: &MockServer, m: &str, p: &str) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.method.as_str() == m && r.url.path() == p)
        .map(|r| serde_json::from_slice(&r.body).unwrap_or(Value::Null))
        .collect()
}
