//! The one fixture style of the Daytona tests: a provider pointed at one loopback mock server,
//! Daytona-shaped JSON bodies, and the toolbox's session exec as the adapter sends it (with
//! `ws`, a WebSocket front for the log follower).
#![allow(dead_code)]

pub mod ws;

use sandbox_daytona::{DaytonaBuilder, DaytonaProvider, DaytonaSandbox, LogFollow};
use sandbox_sdk_core::emulate::KEY_PROLOGUE;
use sandbox_sdk_core::{Command, Sandbox};
use serde_json::{Value, json};
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path, path_regex};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

pub const KEY: &str = "dtn_test_key_0123456789";

/// A builder for `server`: API at `/api`, toolbox at `/toolbox`, fast polling, and every
/// command sent asynchronously and followed (no direct window; the direct path has its own
/// tests).
pub fn builder(server: &MockServer) -> DaytonaBuilder {
    DaytonaProvider::builder()
        .api_key(KEY)
        .api_url(format!("{}/api", server.uri()))
        .toolbox_url(format!("{}/toolbox", server.uri()))
        .poll_interval(Duration::from_millis(1))
        .start_timeout(Duration::from_secs(10))
        .state_change_timeout(Duration::from_secs(10))
        .direct_window(Duration::ZERO)
}

pub fn provider(server: &MockServer) -> DaytonaProvider {
    builder(server).build().unwrap()
}

pub fn polling_provider(server: &MockServer) -> DaytonaProvider {
    builder(server).log_follow(LogFollow::Poll).build().unwrap()
}

/// A `Sandbox` DTO as PROTOCOL.md §2.3 shows it.
pub fn sandbox(id: &str, state: &str) -> Value {
    json!({
        "id": id,
        "organizationId": "3f1b2c4d-0000-4000-8000-000000000001",
        "name": id,
        "target": "us",
        "snapshot": "daytonaio/sandbox:0.5.0",
        "user": "daytona",
        "env": {},
        "cpu": 1, "gpu": 0, "memory": 1, "disk": 3,
        "public": false,
        "networkBlockAll": false,
        "networkAllowList": null,
        "labels": {"team": "infra"},
        "volumes": [],
        "state": state,
        "desiredState": "started",
        "errorReason": null,
        "recoverable": false,
        "autoStopInterval": 15,
        "createdAt": "2026-08-20T10:00:00.000Z",
        "updatedAt": "2026-08-20T10:00:00.000Z",
        "toolboxProxyUrl": "https://proxy.app.daytona.io/toolbox",
        "kvm": false
    })
}

/// [`sandbox`] with `desiredState` set: a sandbox on its way to, or resting at, `desired`.
pub fn sandbox_toward(id: &str, state: &str, desired: &str) -> Value {
    with(sandbox(id, state), "desiredState", json!(desired))
}

pub fn with(mut value: Value, key: &str, field: Value) -> Value {
    value[key] = field;
    value
}

pub fn api_error(status: u16, error: &str, message: &str) -> Value {
    json!({"path": "/api/x", "timestamp": "2026-08-20T10:00:00.000Z", "statusCode": status, "error": error, "message": message})
}

/// A 200 answer with `body` as JSON.
pub fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

/// The 409 the API answers while another state change of the sandbox runs.
pub fn state_change_in_progress() -> ResponseTemplate {
    ResponseTemplate::new(409).set_body_json(api_error(
        409,
        "Conflict",
        "Sandbox state change in progress",
    ))
}

/// A 404 in the API's error shape, saying `message`.
pub fn not_found(message: &str) -> ResponseTemplate {
    ResponseTemplate::new(404).set_body_json(api_error(404, "Not Found", message))
}

/// `GET /api/sandbox/sb1` answers sb1 in `state`, as often as asked.
pub async fn mount_sandbox(server: &MockServer, state: &str) {
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox("sb1", state)))
        .mount(server)
        .await;
}

// The toolbox fixture: session exec as the adapter sends it, and the sandbox it runs in.

pub const SID_RE: &str = r"sdk-exec-[0-9]+";

/// The session command the adapter sends for `inner` (the quoted argv) as the handle's first
/// command: a subshell labelled `sdk-cmd-1` that makes the key and announces it (core's
/// prologue), runs `inner`, and ends both streams with a keyed mark printed by the builtin
/// `printf` (stdout's with the status), keeping the exit status.
pub fn wrapped(inner: &str) -> String {
    wrapped_nth(inner, 1)
}

/// [`wrapped`] for the handle's `n`th command.
pub fn wrapped_nth(inner: &str, n: u64) -> String {
    format!(
        "(: sdk-cmd-{n}; {KEY_PROLOGUE}; {inner}; s=$?; \
         [ -z \"$__sandbox_k\" ] || printf '__sandbox_mark_%s:%s\\n' \"$__sandbox_k\" \"$s\"; \
         [ -z \"$__sandbox_k\" ] || printf '__sandbox_mark_%s:%s\\n' \"$__sandbox_k\" '' >&2; \
         exit $s)"
    )
}

/// Session create + async exec answering `cmd-1`; returns nothing, asserts via expect().
pub async fn mount_session_exec(server: &MockServer, inner: &str) {
    let expected_command = wrapped(inner);
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session"))
        .and(header("x-daytona-sdk-version", "0.218.0"))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(format!(
            "^/toolbox/sb1/process/session/{SID_RE}/exec$"
        )))
        .and(body_json(
            json!({"command": expected_command, "runAsync": true}),
        ))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "cmd-1"})))
        .expect(1)
        .mount(server)
        .await;
}

/// The foreground session's `DELETE` (whatever its number), answered 204.
pub fn session_deleted() -> Mock {
    Mock::given(method("DELETE"))
        .and(path_regex(format!(
            "^/toolbox/sb1/process/session/{SID_RE}$"
        )))
        .respond_with(ResponseTemplate::new(204))
}

pub async fn sandbox_on(builder: DaytonaBuilder) -> DaytonaSandbox {
    builder.build().unwrap().get("sb1").await.unwrap()
}

/// `true` started in a sandbox whose log stream goes through a scriptable WebSocket front:
/// the server, the front, the process, and the log path for the front to script.
pub async fn true_behind_a_scripted_front()
-> (MockServer, ws::Front, sandbox_sdk_core::Process, String) {
    let server = MockServer::start().await;
    let front = ws::start(*server.address()).await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "'true'").await;
    session_deleted().mount(&server).await;
    let builder = builder(&server).toolbox_url(format!("{}/toolbox", front.uri()));
    let process = sandbox_on(builder)
        .await
        .exec(&Command::new("true"))
        .await
        .unwrap();
    let sid = session_of(&server.received_requests().await.unwrap());
    let logs = format!("/toolbox/sb1/process/session/{sid}/command/cmd-1/logs");
    (server, front, process, logs)
}

pub fn session_of(requests: &[Request]) -> String {
    let req = requests
        .iter()
        .find(|r| r.url.path() == "/toolbox/sb1/process/session" && r.method.as_str() == "POST")
        .expect("a session was created");
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    body["sessionId"].as_str().unwrap().to_owned()
}
