//! Shared helpers for the wiremock tests: a provider pointed at one loopback mock server, and
//! Daytona-shaped JSON bodies.
#![allow(dead_code)]

pub mod ws;

use sandbox_daytona::{DaytonaBuilder, DaytonaProvider, LogFollow};
use serde_json::{Value, json};
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

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
