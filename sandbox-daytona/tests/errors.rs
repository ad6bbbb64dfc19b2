//! Error mapping against wiremock on loopback: rate limits, refused WebSocket upgrades, empty
//! 502s from the proxy, and a stopped sandbox.

mod common;

use common::ws::Script;
use common::*;
use sandbox_sdk_core::{CreateSpec, ErrorKind, Provider, Sandbox, SandboxExt};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn a_rate_limited_create_carries_the_named_retry_after() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("X-RateLimit-Limit-sandbox-create", "300")
                .insert_header("Retry-After-sandbox-create", "12")
                .set_body_json(json!({"statusCode": 429, "message": "Rate limit exceeded", "error": "Too Many Requests"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let err = provider(&server)
        .create(&CreateSpec::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(12)));
    assert!(!err.to_string().contains(KEY));
}

#[tokio::test]
async fn a_refused_upgrade_goes_through_the_error_mapping() {
    let (_server, front, process, logs) = true_behind_a_scripted_front().await;
    front.script(
        &logs,
        Script::Refuse(401, r#"{"statusCode":401,"message":"authentication failed: Bearer token is invalid","code":"UNAUTHORIZED"}"#.into()),
    );
    let err = process.output().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_eq!(err.status(), Some(401));
    assert!(!format!("{err} {err:?}").contains(KEY));
}

/// Runs `true` with the log-stream upgrade refused by an empty-body 502, with the sandbox
/// `state` the check after the failure reads, and returns the error.
async fn refused_upgrade_with_empty_502(state: &str) -> sandbox_sdk_core::Error {
    let (server, front, process, logs) = true_behind_a_scripted_front().await;
    front.script(&logs, Script::Refuse(502, String::new()));
    // From here on the sandbox reads as `state`.
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox_toward("sb1", state, state)))
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    let err = process.output().await.unwrap_err();
    assert_eq!(front.upgrades().len(), 1);
    err
}

#[tokio::test]
async fn a_refused_upgrade_with_an_empty_502_is_not_running_when_the_sandbox_stopped() {
    // The same mapping and state check as the HTTP path (an_empty_502_from_the_proxy_...).
    let err = refused_upgrade_with_empty_502("stopped").await;
    assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
    assert_eq!(err.status(), Some(502));
    assert!(err.to_string().contains("stopped"), "{err}");
}

#[tokio::test]
async fn a_refused_upgrade_with_an_empty_502_on_a_running_sandbox_stays_transport() {
    let err = refused_upgrade_with_empty_502("started").await;
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert_eq!(err.status(), Some(502));
    assert!(err.is_retryable());
}

#[tokio::test]
async fn an_empty_502_from_the_proxy_is_not_running_when_the_sandbox_stopped() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox("sb1", "started")))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox_toward("sb1", "stopped", "stopped")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/files/info"))
        .respond_with(ResponseTemplate::new(502))
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let err = sandbox.stat("a.txt").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning);
    assert_eq!(err.status(), Some(502));
}

#[tokio::test]
async fn an_empty_502_on_a_running_sandbox_stays_a_retryable_transport_error() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/files/info"))
        .respond_with(ResponseTemplate::new(502))
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let err = sandbox.stat("a.txt").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert!(err.is_retryable());
}

/// Exec on a stopped sandbox is `NotRunning`: the proxy's 400 "no IP address found. Is the
/// Sandbox started?", and any other 400 from a sandbox the state check finds stopped.
#[tokio::test]
async fn exec_on_a_stopped_sandbox_is_not_running() {
    for (message, state) in [
        (
            "bad request: no IP address found. Is the Sandbox started?",
            "started",
        ),
        ("bad request", "stopped"),
    ] {
        let server = MockServer::start().await;
        mount_sandbox(&server, "started").await;
        Mock::given(method("POST"))
            .and(path("/toolbox/sb1/process/session"))
            .respond_with(ResponseTemplate::new(400).set_body_json(json!({
                "statusCode": 400, "message": message, "code": "BAD_REQUEST", "source": "DAYTONA_PROXY"
            })))
            .mount(&server)
            .await;
        let sandbox = provider(&server).get("sb1").await.unwrap();
        Mock::given(method("GET"))
            .and(path("/api/sandbox/sb1"))
            .respond_with(ok(sandbox_toward("sb1", state, state)))
            .with_priority(1)
            .mount(&server)
            .await;
        let err = sandbox.run_shell("true").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRunning, "{message}: {err}");
        assert_eq!(err.status(), Some(400));
    }
}

/// A refused log-stream upgrade whose body and headers echo the bearer credential: the error
/// (and the fallback warning, built from the same mapped error) never shows it.
#[tokio::test]
async fn a_refused_upgrade_that_echoes_the_key_does_not_leak_it() {
    let (_server, front, process, logs) = true_behind_a_scripted_front().await;
    front.script(
        &logs,
        Script::Refuse(
            403,
            format!(r#"{{"statusCode":403,"message":"token Bearer {KEY} (that is {KEY}) is not allowed here","code":"FORBIDDEN"}}"#),
        ),
    );
    let err = process.output().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("is not allowed here"), "{shown}");
}
