//! Shared helpers for the wiremock tests: a provider pointed at one loopback mock server, and
//! Daytona-shaped JSON bodies.
#![allow(dead_code)]

pub mod ws;

use sandbox_daytona::{DaytonaBuilder, DaytonaProvider, LogFollow};
use serde_json::{Value, json};
use std::time::Duration;
use wiremock::MockServer;

pub const KEY: &str = "dtn_test_key_0123456789";

/// A builder for `server`: API at `/api`, toolbox at `/toolbox`, fast polling.
pub fn builder(server: &MockServer) -> DaytonaBuilder {
    DaytonaBuilder::new()
        .api_key(KEY)
        .api_url(format!("{}/api", server.uri()))
        .toolbox_url(format!("{}/toolbox", server.uri()))
        .poll_interval(Duration::from_millis(1))
        .start_timeout(Duration::from_secs(10))
        .state_change_timeout(Duration::from_secs(10))
}

pub fn provider(server: &MockServer) -> DaytonaProvider {
    builder(server).build().unwrap()
}

pub fn polling_provider(server: &MockServer) -> DaytonaProvider {
    builder(server).log_follow(LogFollow::Poll).build().unwrap()
}

/// A `Sandbox` DTO as PROTOCOL.md §7.1 shows it.
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

pub fn with(mut value: Value, key: &str, field: Value) -> Value {
    value[key] = field;
    value
}

pub fn api_error(status: u16, error: &str, message: &str) -> Value {
    json!({"path": "/api/x", "timestamp": "2026-08-20T10:00:00.000Z", "statusCode": status, "error": error, "message": message})
}
