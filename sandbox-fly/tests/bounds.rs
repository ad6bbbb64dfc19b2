//! Slow, silent and failing servers (issue 9), against wiremock: every call ends in bounded time
//! with the right error kind, and an ambiguous create never makes a second machine.

use sandbox_fly::{FlyBuilder, FlySandbox};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const APP: &str = "bounds-app";
const ID: &str = "1857156b526dd8";

fn machine(id: &str, state: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "name": "sandbox",
        "state": state,
        "region": "ord",
        "instance_id": "01HEPA330HZ37A78TK080NAK1M",
        "config": {"image": "ubuntu:24.04", "metadata": {"sandbox_sdk": "1"}},
    })
}

fn machine_path(suffix: &str) -> String {
    format!("/v1/apps/{APP}/machines/{ID}{suffix}")
}

fn builder(server: &MockServer) -> FlyBuilder {
    FlyBuilder::new()
        .token("bounds-token")
        .app(APP)
        .base_url(server.uri())
        .poll_interval(Duration::ZERO)
}

async fn connected(server: &MockServer, b: FlyBuilder) -> FlySandbox {
    Mock::given(method("GET"))
        .and(path(machine_path("")))
        .respond_with(ResponseTemplate::new(200).set_body_json(machine(ID, "started")))
        .mount(server)
        .await;
    b.build().unwrap().connect_machine(ID).await.unwrap()
}

/// Fly answers 412 to `/exec` on a machine that is not started: that is `NotRunning` (as on
/// every adapter), not the `Conflict` other 412s are.
#[tokio::test]
async fn exec_on_a_stopped_machine_is_not_running() {
    let server = MockServer::start().await;
    let sandbox = connected(&server, builder(&server)).await;
    Mock::given(method("POST"))
        .and(path(machine_path("/exec")))
        .respond_with(
            ResponseTemplate::new(412)
                .set_body_json(serde_json::json!({"error": "machine is not started"})),
        )
        .mount(&server)
        .await;
    for command in [
        Command::shell("echo hi").timeout(Duration::from_secs(5)),
        Command::shell("echo hi"),
    ] {
        let err = sandbox.run(&command).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
        assert_eq!(err.status(), Some(412));
    }
    let err = sandbox.stat("/etc/hostname").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
}
