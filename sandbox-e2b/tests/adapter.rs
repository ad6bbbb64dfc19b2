//! The adapter against a wiremock server on loopback: control plane and envd both served by it
//! (envd through the single sandbox-URL override, told apart by routing headers).

use base64::Engine as _;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use sandbox_e2b::{E2bBuilder, E2bProvider, E2bSandbox, TemplateSpec};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{
    Command, CreateSpec, ErrorKind, FileEventKind, FileKind, ListFilter, ListOptions, ProcessEvent,
    PtySize, SandboxState,
};
use std::time::Duration;
use wiremock::matchers::{body_json, body_string_contains, header, method, path, query_param};
use wiremock::{Mock, MockBuilder, MockServer, Request, ResponseTemplate};

mod support;
use support::{accept_stream, envelope, stalled_envd, write_chunk};

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef01234567";
const SB: &str = "ilxb3ba8bnc0gpyx3i8ax";
const TOKEN: &str = "tok_envd_123";

fn provider(server: &MockServer) -> E2bProvider {
    E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(server.uri())
        .build()
        .unwrap()
}

/// A provider that polls template builds without waiting (the mock answers at once).
fn fast_polling(server: &MockServer) -> E2bProvider {
    E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(server.uri())
        .template_poll_interval(Duration::ZERO)
        .build()
        .unwrap()
}

fn created_body(id: &str) -> serde_json::Value {
    serde_json::json!({
        "alias": "base",
        "clientID": "6532622b",
        "envdAccessToken": TOKEN,
        "envdVersion": "0.6.13",
        "sandboxID": id,
        "templateID": "rki5dems9wqfm4r03t7g"
    })
}

async fn connected(server: &MockServer) -> E2bSandbox {
    connect_call()
        .and(header("x-api-key", KEY))
        .and(body_json(serde_json::json!({})))
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .expect(1)
        .mount(server)
        .await;
    provider(server).connect_sandbox(SB, None).await.unwrap()
}

fn stream_body(messages: &[&str], end: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for m in messages {
        body.extend(envelope(0, m));
    }
    body.extend(envelope(2, end));
    body
}

fn connect_response(body: Vec<u8>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "application/connect+json")
}

/// A Connect stream answering `messages` in order, then a clean end of stream.
fn events(messages: &[&str]) -> ResponseTemplate {
    connect_response(stream_body(messages, "{}"))
}

/// A mock of the control plane's `POST /v2/sandboxes/{SB}/connect`.
fn connect_call() -> MockBuilder {
    Mock::given(method("POST")).and(path(format!("/v2/sandboxes/{SB}/connect")))
}

/// A mock of the control plane's `POST /sandboxes/{SB}/timeout` asking for a TTL of `seconds`.
fn set_ttl_call(seconds: u64) -> MockBuilder {
    Mock::given(method("POST"))
        .and(path(format!("/sandboxes/{SB}/timeout")))
        .and(body_json(serde_json::json!({ "timeout": seconds })))
}

/// A mock of envd's `POST /process.Process/Start` (exec's Connect stream).
fn process_start() -> MockBuilder {
    Mock::given(method("POST")).and(path("/process.Process/Start"))
}

fn request_envelope_json(req: &Request) -> serde_json::Value {
    let body = &req.body;
    assert!(body.len() >= 5, "request is not enveloped");
    assert_eq!(body[0], 0);
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(body.len(), 5 + len);
    serde_json::from_slice(&body[5..]).unwrap()
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

// ---------------------------------------------------------------------------------------------
// lifecycle
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn create_sends_only_what_was_asked_and_keeps_the_returned_id() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .and(header("x-api-key", KEY))
        .and(body_json(serde_json::json!({
            "templateID": "base",
            "metadata": {"k": "v"},
            "envVars": {"A": "1"},
            "timeout": 120
        })))
        .respond_with(ResponseTemplate::new(201).set_body_json(created_body(SB)))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server)
        .create(
            &CreateSpec::new()
                .template("base")
                .metadata("k", "v")
                .env("A", "1")
                .timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap();
    assert_eq!(sandbox.id(), SB);
    assert_eq!(sandbox.provider(), "e2b");
}

/// Proves `egress_control` and `volumes` (marked `covered_elsewhere` in conformance.rs).
#[tokio::test]
async fn create_options_send_egress_rules_and_volumes() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/volumes"))
        .and(body_json(serde_json::json!({"name": "data-vol"})))
        .respond_with(ResponseTemplate::new(201).set_body_json(
            serde_json::json!({"volumeID": "vol1", "name": "data-vol", "token": "volume-content-token"}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/volumes"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!([{"volumeID": "vol1", "name": "data-vol"}])),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/volumes/vol1"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .and(body_json(serde_json::json!({
            "templateID": "base",
            "autoPause": true,
            "autoResume": {"enabled": true},
            "allow_internet_access": false,
            "network": {"allowPublicTraffic": false, "allowOut": ["api.example.com"], "denyOut": ["0.0.0.0/0"]},
            "volumeMounts": [{"name": "data-vol", "path": "/data"}]
        })))
        .respond_with(ResponseTemplate::new(201).set_body_json(created_body(SB)))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(&server);
    let volume = p.create_volume("data-vol").await.unwrap();
    assert_eq!(volume.volume_id, "vol1");
    assert!(!format!("{volume:?}").contains("volume-content-token"));
    assert_eq!(
        p.list_volumes().await.unwrap(),
        std::slice::from_ref(&volume)
    );
    assert_eq!(
        p.create_volume("bad name").await.unwrap_err().kind(),
        ErrorKind::Validation
    );
    let options = sandbox_e2b::CreateOptions {
        auto_pause: Some(true),
        auto_resume: Some(true),
        allow_internet_access: Some(false),
        network: Some(sandbox_e2b::NetworkConfig {
            allow_public_traffic: Some(false),
            allow_out: vec!["api.example.com".into()],
            deny_out: vec!["0.0.0.0/0".into()],
            ..Default::default()
        }),
        volume_mounts: vec![sandbox_e2b::VolumeMount {
            name: volume.name.clone(),
            path: "/data".into(),
        }],
        ..Default::default()
    };
    let sandbox = p
        .create_sandbox(&CreateSpec::new(), &options)
        .await
        .unwrap();
    assert_eq!(sandbox.id(), SB);
    p.delete_volume("vol1").await.unwrap();
}

#[tokio::test]
async fn create_with_idempotency_key_reuses_an_existing_sandbox() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .and(query_param("metadata", "sandbox-sdk-idempotency-key=job-42"))
        .and(query_param("state", "running,paused"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            {"sandboxID": SB, "templateID": "t", "state": "paused", "metadata": {"sandbox-sdk-idempotency-key": "job-42"}}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    connect_call()
        .and(body_json(serde_json::json!({"timeout": 60})))
        .respond_with(ResponseTemplate::new(201).set_body_json(created_body(SB)))
        .expect(1)
        .mount(&server)
        .await;
    // The TTL the create asked for applies to the reused sandbox too, shorter or not.
    set_ttl_call(60)
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let sandbox = provider(&server)
        .create(
            &CreateSpec::new()
                .idempotency_key("job-42")
                .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(sandbox.id(), SB);
}

#[tokio::test]
async fn create_sends_the_idempotency_key_header_mapped_when_needed() {
    for (key, header_value) in [
        ("job-42", "job-42".to_owned()),
        (
            "Job 42",
            sandbox_e2b::testing::idempotency_header_value("Job 42"),
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/v2/sandboxes"))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/v2/sandboxes"))
            .and(header("idempotency-key", header_value.as_str()))
            // The label keeps the key as the caller gave it.
            .and(body_string_contains(format!(
                r#""sandbox-sdk-idempotency-key":"{key}""#
            )))
            .respond_with(ResponseTemplate::new(201).set_body_json(created_body(SB)))
            .expect(1)
            .mount(&server)
            .await;
        let sandbox = provider(&server)
            .create(&CreateSpec::new().idempotency_key(key))
            .await
            .unwrap();
        assert_eq!(sandbox.id(), SB);
    }
}

/// The look-up of the idempotency label: `[]` for the first `misses` calls, then `SB`.
async fn label_lookup(server: &MockServer, key: &str, misses: u64) {
    let by_label = || {
        Mock::given(method("GET"))
            .and(path("/v2/sandboxes"))
            .and(query_param(
                "metadata",
                format!("sandbox-sdk-idempotency-key={key}"),
            ))
    };
    if misses > 0 {
        by_label()
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
            .up_to_n_times(misses)
            .expect(misses)
            .mount(server)
            .await;
    }
    by_label()
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            {"sandboxID": SB, "templateID": "t", "state": "running", "metadata": {"sandbox-sdk-idempotency-key": key}}
        ])))
        .mount(server)
        .await;
}

#[tokio::test]
async fn a_create_answered_after_the_timeout_is_adopted_not_sent_again() {
    let server = MockServer::start().await;
    // Not there before the create, nor at the first look-up after it; then it is.
    label_lookup(&server, "job-7", 2).await;
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .and(header("idempotency-key", "job-7"))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(created_body(SB))
                .set_delay(Duration::from_secs(2)),
        )
        .expect(1)
        .mount(&server)
        .await;
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .expect(1)
        .mount(&server)
        .await;
    let provider = E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(server.uri())
        .request_timeout(Duration::from_millis(300))
        .create_lookup(sandbox_sdk_core::idempotency::CreateLookup::new(
            Duration::from_secs(20),
        ))
        .build()
        .unwrap();
    let sandbox = provider
        .create(&CreateSpec::new().idempotency_key("job-7"))
        .await
        .unwrap();
    assert_eq!(sandbox.id(), SB);
    // wiremock checks on drop: exactly one POST, two misses, one connect.
}

#[tokio::test]
async fn a_lost_create_is_reported_once_the_look_up_window_passes() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .respond_with(ResponseTemplate::new(201).set_delay(Duration::from_secs(5)))
        .expect(1)
        .mount(&server)
        .await;
    let provider = E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .request_timeout(Duration::from_millis(200))
        .create_lookup(sandbox_sdk_core::idempotency::CreateLookup::new(
            Duration::from_millis(300),
        ))
        .build()
        .unwrap();
    let e = provider
        .create(&CreateSpec::new().idempotency_key("job-8"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.is_ambiguous());
    assert!(e.to_string().contains("idempotency key"), "{e}");
}

#[tokio::test]
async fn info_destroy_and_already_gone() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("GET"))
        .and(path(format!("/sandboxes/{SB}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "t", "sandboxID": SB, "clientID": "6532622b",
            "startedAt": "2026-01-01T00:00:00Z", "endAt": "2026-01-01T00:05:00Z",
            "state": "running", "metadata": {"suite": "x"}, "cpuCount": 2, "memoryMB": 512,
            "diskSizeMB": 1024, "envdVersion": "0.6.13"
        })))
        .expect(1)
        .mount(&server)
        .await;
    let info = sandbox.info().await.unwrap();
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.metadata["suite"], "x");

    Mock::given(method("DELETE"))
        .and(path(format!("/sandboxes/{SB}")))
        .respond_with(ResponseTemplate::new(204))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    sandbox.destroy().await.unwrap();
    Mock::given(method("DELETE"))
        .and(path(format!("/sandboxes/{SB}")))
        .respond_with(ResponseTemplate::new(404).set_body_string(format!(
            r#"{{"code":404,"message":"Sandbox \"{SB}\" doesn't exist or you don't have access to it"}}"#
        )))
        .expect(2)
        .mount(&server)
        .await;
    let e = sandbox.destroy().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.message().contains("already gone"), "{e}");
    assert!(!sandbox.kill().await.unwrap());
}

#[tokio::test]
async fn pause_resume_reapplies_the_ttl_and_set_timeout() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    set_ttl_call(600)
        .respond_with(ResponseTemplate::new(204))
        // Once by set_timeout, once after resume reapplies the TTL through connect.
        .expect(2)
        .mount(&server)
        .await;
    sandbox.set_timeout(Duration::from_secs(600)).await.unwrap();
    Mock::given(method("POST"))
        .and(path(format!("/sandboxes/{SB}/pause")))
        .and(body_json(serde_json::json!({"memory": true})))
        .respond_with(ResponseTemplate::new(204))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    sandbox.pause().await.unwrap();
    Mock::given(method("POST"))
        .and(path(format!("/sandboxes/{SB}/pause")))
        .and(body_json(serde_json::json!({"memory": false})))
        .respond_with(
            ResponseTemplate::new(409)
                .set_body_string(r#"{"code":409,"message":"Sandbox is already paused"}"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    assert!(
        !sandbox
            .pause_with(sandbox_e2b::PauseMode::FilesystemOnly)
            .await
            .unwrap()
    );
    connect_call()
        .and(body_json(serde_json::json!({"timeout": 600})))
        .respond_with(ResponseTemplate::new(201).set_body_json(created_body(SB)))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.resume().await.unwrap();
}

/// The methods and paths the server saw, in order.
async fn seen(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect()
}

#[tokio::test]
async fn connect_with_a_ttl_then_sets_exactly_that_ttl() {
    // Connect only ever extends the TTL (PROTOCOL.md §1.2), so a shorter TTL than the sandbox
    // has left would be ignored; the follow-up `POST /sandboxes/{id}/timeout` applies it.
    let server = MockServer::start().await;
    connect_call()
        .and(body_json(serde_json::json!({"timeout": 60})))
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .expect(1)
        .mount(&server)
        .await;
    set_ttl_call(60)
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server)
        .connect_sandbox(SB, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(sandbox.id(), SB);
    assert_eq!(
        seen(&server).await,
        [
            format!("POST /v2/sandboxes/{SB}/connect"),
            format!("POST /sandboxes/{SB}/timeout"),
        ]
    );
}

#[tokio::test]
async fn resume_with_a_ttl_then_sets_exactly_that_ttl() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    connect_call()
        .and(body_json(serde_json::json!({"timeout": 30})))
        .respond_with(ResponseTemplate::new(201).set_body_json(created_body(SB)))
        .expect(1)
        .mount(&server)
        .await;
    set_ttl_call(30)
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    sandbox
        .resume_with(Some(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(
        seen(&server).await[1..],
        [
            format!("POST /v2/sandboxes/{SB}/connect"),
            format!("POST /sandboxes/{SB}/timeout"),
        ]
    );
}

/// The connect answer for `id` with its own domain and envd token.
fn resumed_body(id: &str, domain: &str, token: &str) -> serde_json::Value {
    let mut body = created_body(id);
    body["domain"] = domain.into();
    body["envdAccessToken"] = token.into();
    body
}

/// Mounts a MakeDir that only answers envd requests for `id` carrying `token`.
async fn mkdir_for(server: &MockServer, id: &str, token: &str) {
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/MakeDir"))
        .and(header("e2b-sandbox-id", id))
        .and(header("x-access-token", token))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(server)
        .await;
}

#[tokio::test]
async fn resume_picks_up_a_new_domain_and_envd_token() {
    // PROTOCOL.md §0: a `domain` in the connect answer replaces the client's for envd; the
    // envd token is the one the answer carries.
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    assert_eq!(sandbox.domain(), "e2b.app");
    connect_call()
        .respond_with(ResponseTemplate::new(201).set_body_json(resumed_body(
            SB,
            "eu.e2b.dev",
            "tok_new",
        )))
        // Ahead of the first connect's mock, which matches the same request.
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    sandbox.resume().await.unwrap();
    assert_eq!(sandbox.domain(), "eu.e2b.dev");
    assert_eq!(
        sandbox.preview_link(8080).await.unwrap().url,
        format!("https://8080-{SB}.eu.e2b.dev")
    );
    mkdir_for(&server, SB, "tok_new").await;
    sandbox.mkdir("/home/user/d").await.unwrap();
}

#[tokio::test]
async fn resume_keeps_the_id_the_service_returns() {
    const NEW: &str = "inew00000000000000001";
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    connect_call()
        .respond_with(ResponseTemplate::new(201).set_body_json(resumed_body(
            NEW,
            "eu.e2b.dev",
            "tok_new",
        )))
        // Ahead of the first connect's mock, which matches the same request.
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    let resumed = sandbox.resume_with(None).await.unwrap();
    assert_eq!(resumed.id(), NEW);
    assert_eq!(resumed.domain(), "eu.e2b.dev");
    mkdir_for(&server, NEW, "tok_new").await;
    resumed.mkdir("/home/user/d").await.unwrap();
}

#[tokio::test]
async fn trait_resume_under_another_id_fails_naming_it() {
    const NEW: &str = "inew00000000000000001";
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    connect_call()
        .respond_with(ResponseTemplate::new(201).set_body_json(created_body(NEW)))
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox.resume().await.unwrap_err();
    assert!(e.message().contains(NEW), "{e}");
    assert_eq!(sandbox.id(), SB);
}

#[tokio::test]
async fn connect_without_a_ttl_leaves_the_ttl_alone() {
    let server = MockServer::start().await;
    let _sandbox = connected(&server).await;
    assert_eq!(
        seen(&server).await,
        [format!("POST /v2/sandboxes/{SB}/connect")]
    );
}

#[tokio::test]
async fn pause_conflicts_other_than_already_paused_are_errors() {
    // PROTOCOL.md §1.2: a 409 on pause means "already paused" (SDK returns false), but a 409
    // also comes for a sandbox still changing state (§0's "still transitioning"): that pause
    // did not happen, so it is an error, not `false`.
    for body in [
        format!(r#"{{"code":409,"message":"Sandbox {SB} state change in progress"}}"#),
        format!(
            r#"{{"sandboxId":"{SB}","message":"The sandbox is still transitioning. Try again in a moment.","code":409}}"#
        ),
    ] {
        let server = MockServer::start().await;
        let sandbox = connected(&server).await;
        Mock::given(method("POST"))
            .and(path(format!("/sandboxes/{SB}/pause")))
            .respond_with(
                ResponseTemplate::new(409)
                    .set_body_raw(body.clone(), "application/json; charset=utf-8"),
            )
            .expect(2)
            .mount(&server)
            .await;
        let e = sandbox
            .pause_with(sandbox_e2b::PauseMode::Memory)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{body}");
        assert_eq!(
            sandbox.pause().await.unwrap_err().kind(),
            ErrorKind::Conflict
        );
    }
}

#[tokio::test]
async fn list_follows_next_token_lazily_and_filters() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .and(|r: &Request| !r.url.query().unwrap_or("").contains("nextToken"))
        .and(query_param("state", "running"))
        .and(query_param("metadata", "suite=conformance"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("x-next-token", "page2")
                .set_body_json(serde_json::json!([
                    {"sandboxID": "a1", "templateID": "t", "state": "running", "metadata": {"suite": "conformance"}}
                ])),
        )
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .and(query_param("nextToken", "page2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            {"sandboxID": "a2", "templateID": "t", "state": "running", "metadata": {"suite": "conformance"}},
            {"sandboxID": "a3", "templateID": "t", "state": "running", "metadata": null}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(&server);
    let filter = ListFilter::new()
        .metadata("suite", "conformance")
        .state(SandboxState::Running);
    // Lazily: the first item comes from page one, and page two is not asked for until needed.
    let mut stream = p.list(&filter);
    assert_eq!(stream.try_next().await.unwrap().unwrap().id, "a1");
    drop(stream);
    let page_two_asked = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .any(|r| r.url.query().unwrap_or("").contains("nextToken"));
    assert!(!page_two_asked, "page two was fetched before it was needed");
    let ids: Vec<String> = p
        .list(&filter)
        .map_ok(|i| i.id)
        .try_collect()
        .await
        .unwrap();
    // a3 lacks the label: filtered client-side as well.
    assert_eq!(ids, ["a1", "a2"]);
    // States E2B never reports give an empty list without a request.
    let none: Vec<_> = p
        .list(&ListFilter::new().state(SandboxState::Stopped))
        .try_collect()
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn rate_limit_is_quota_exceeded_with_retry_after_and_sent_once() {
    let server = MockServer::start().await;
    connect_call()
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "7")
                .set_body_string(r#"{"code":429,"message":"Rate limit exceeded"}"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let e = provider(&server).connect(SB).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QuotaExceeded);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
    assert_eq!(e.status(), Some(429));
    assert!(!format!("{e:?}{e}").contains(KEY));
}

#[tokio::test]
async fn should_retry_header_reaches_the_error_mapper() {
    // E2B SDK 2.63 retry.py: the header decides; without it 429/502/503/504 retry.
    for (status, header_value, retryable) in [
        (429, Some("false"), false),
        (503, Some("false"), false),
        (500, Some("true"), true),
        (503, None, true),
        (500, None, false),
    ] {
        let server = MockServer::start().await;
        let mut answer = ResponseTemplate::new(status)
            .set_body_string(format!(r#"{{"code":{status},"message":"x"}}"#));
        if let Some(value) = header_value {
            answer = answer.insert_header("Should-Retry", value);
        }
        connect_call()
            .respond_with(answer)
            .expect(1)
            .mount(&server)
            .await;
        let e = provider(&server).connect(SB).await.unwrap_err();
        assert_eq!(
            e.is_retryable(),
            retryable,
            "{status} {header_value:?}: {e}"
        );
    }
}

#[tokio::test]
async fn fork_reports_each_child_and_partial_failures() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(format!("/sandboxes/{SB}/fork")))
        // Opened with `connect(id)` and no TTL: the children get the create default (300 s),
        // never the fork endpoint's own default of 15 s.
        .and(body_json(serde_json::json!({"count": 2, "timeout": 300})))
        .respond_with(ResponseTemplate::new(201).set_body_json(serde_json::json!([
            {"sandbox": created_body("ichild0000000000000001")},
            {"error": {"code": 503, "message": "no capacity"}}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let children = sandbox.fork_many(2).await.unwrap();
    assert_eq!(children.len(), 2);
    assert_eq!(children[0].as_ref().unwrap().id(), "ichild0000000000000001");
    let e = children[1].as_ref().unwrap_err();
    assert_eq!(e.status(), Some(503));
    assert!(e.message().contains("no capacity"));
}

#[tokio::test]
async fn fork_gives_children_the_ttl_the_caller_asked_for_the_parent() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    set_ttl_call(45)
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.set_timeout(Duration::from_secs(45)).await.unwrap();
    Mock::given(method("POST"))
        .and(path(format!("/sandboxes/{SB}/fork")))
        .and(body_json(serde_json::json!({"count": 1, "timeout": 45})))
        .respond_with(ResponseTemplate::new(201).set_body_json(serde_json::json!([
            {"sandbox": created_body("ichild0000000000000001")}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let children = sandbox.fork_many(1).await.unwrap();
    assert_eq!(children[0].as_ref().unwrap().id(), "ichild0000000000000001");
}

#[tokio::test]
async fn snapshots_metrics_logs_network() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(format!("/sandboxes/{SB}/snapshots")))
        .and(body_json(serde_json::json!({"name": "snap"})))
        .respond_with(ResponseTemplate::new(201).set_body_json(
            serde_json::json!({"snapshotID": "team/snap:default", "names": ["team/snap:default"]}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    let snap = sandbox.snapshot(Some("snap")).await.unwrap();
    assert_eq!(snap.id, "team/snap:default");
    Mock::given(method("GET"))
        .and(path(format!("/sandboxes/{SB}/metrics")))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            {"timestampUnix": 1, "cpuCount": 2, "cpuUsedPct": 1.0, "memUsed": 1, "memTotal": 2, "diskUsed": 3, "diskTotal": 4},
            {"timestampUnix": 2, "cpuCount": 2, "cpuUsedPct": 50.0, "memUsed": 1, "memTotal": 2, "diskUsed": 3, "diskTotal": 4}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let m = sandbox.metrics().await.unwrap();
    assert_eq!(m.cpu_percent, Some(50.0));
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{SB}/logs")))
        .and(query_param("level", "error"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "logs": [{"timestamp": "2026-01-01T00:00:00Z", "level": "error", "message": "boom", "fields": {}}]
        })))
        .expect(1)
        .mount(&server)
        .await;
    let logs = sandbox
        .logs(&sandbox_e2b::LogQuery {
            level: Some("error".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(logs[0].message, "boom");
    Mock::given(method("PUT"))
        .and(path(format!("/sandboxes/{SB}/network")))
        .and(body_json(serde_json::json!({"denyOut": ["0.0.0.0/0"]})))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    sandbox
        .update_network(&sandbox_e2b::NetworkUpdate {
            deny_out: vec!["0.0.0.0/0".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    Mock::given(method("GET"))
        .and(path("/snapshots"))
        .and(query_param("sandboxID", SB))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!([{"snapshotID": "a:default", "names": ["a"]}])),
        )
        .expect(1)
        .mount(&server)
        .await;
    let snaps: Vec<_> = provider(&server)
        .list_snapshots(Some(SB))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(snaps[0].id, "a:default");
}

// ---------------------------------------------------------------------------------------------
// exec
// ---------------------------------------------------------------------------------------------

/// Example A of PROTOCOL.md: headers, enveloped body, stdout, exit 0.
#[tokio::test]
async fn exec_streams_stdout_and_sends_no_deadline_by_default() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("content-type", "application/connect+json"))
        .and(header("connect-protocol-version", "1"))
        .and(header("e2b-sandbox-id", SB))
        .and(header("e2b-sandbox-port", "49983"))
        .and(header("x-access-token", TOKEN))
        .and(|r: &Request| {
            !r.headers.contains_key("connect-timeout-ms")
                && !r.headers.contains_key("x-api-key")
                && !r.headers.contains_key("authorization")
                && !r.headers.contains_key("accept-encoding")
                && request_envelope_json(r)
                    == serde_json::json!({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false})
        })
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":412}}}"#,
            r#"{"event":{"data":{"stdout":"aGkK"}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let out = sandbox
        .run(&Command::new("/bin/bash").args(["-l", "-c", "echo hi"]))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "hi\n");
    assert_eq!(out.stderr_lossy(), "");
    assert_eq!(out.status.code, Some(0));
}

/// Example B: stderr apart, non-zero exit, spaced JSON.
#[tokio::test]
async fn exec_keeps_stderr_apart_and_reports_exit_code() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("connect-timeout-ms", "60000"))
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":413}}}"#,
            r#"{"event":{"data":{"stdout":"b3V0"}}}"#,
            r#"{"event":{"data":{"stderr":"b29wcwo="}}}"#,
            r#"{"event":{"keepalive":{}}}"#,
            r#"{"event":{"end":{"exitCode":3, "exited":true, "status":"exit status 3", "error":"exit status 3"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let out = sandbox
        .run(&Command::shell("exit 3").timeout(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "out");
    assert_eq!(out.stderr_lossy(), "oops\n");
    assert_eq!(out.status.code, Some(3));
}

/// Example C: an error before the first event, on HTTP 200.
#[tokio::test]
async fn exec_error_before_first_event_fails_exec() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("authorization", "Basic cm9vdDo="))
        .respond_with(connect_response(envelope(
            2,
            r#"{"error":{"code":"invalid_argument","message":"cwd '/nope' does not exist"}}"#,
        )))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox
        .exec(&Command::shell("ls").cwd("/nope").user("root"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Validation);
    assert!(e.message().contains("cwd '/nope' does not exist"), "{e}");
    assert_eq!(e.sandbox_id(), Some(SB));
}

#[tokio::test]
async fn exec_deadline_exceeded_is_a_timeout() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("connect-timeout-ms", "1000"))
        .respond_with(connect_response(stream_body(
            &[
                r#"{"event":{"start":{"pid":9}}}"#,
                r#"{"event":{"keepalive":{}}}"#,
            ],
            r#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#,
        )))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox
        .run(
            &Command::new("sleep")
                .arg("30")
                .timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
}

#[tokio::test]
async fn utf8_split_across_frames_is_kept_byte_exact() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let text = "héllo→wörld";
    let bytes = text.as_bytes();
    // Split inside the two-byte é and inside the three-byte arrow.
    let parts = [&bytes[..2], &bytes[2..7], &bytes[7..]];
    let messages: Vec<String> = parts
        .iter()
        .map(|p| format!(r#"{{"event":{{"data":{{"stdout":"{}"}}}}}}"#, b64(p)))
        .collect();
    let mut all = vec![r#"{"event":{"start":{"pid":1}}}"#.to_owned()];
    all.extend(messages);
    all.push(r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#.into());
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    process_start()
        .respond_with(events(&refs))
        .mount(&server)
        .await;
    let mut p = sandbox.exec(&Command::new("cat").arg("x")).await.unwrap();
    let mut chunks = Vec::new();
    while let Some(ev) = p.next_event().await {
        match ev.unwrap() {
            ProcessEvent::Stdout(b) => chunks.push(b),
            ProcessEvent::Exit(s) => assert!(s.success()),
            ProcessEvent::Stderr(_) => panic!("no stderr expected"),
        }
    }
    assert_eq!(chunks.len(), 3);
    assert_eq!(&chunks[0][..], &bytes[..2]);
    let joined: Vec<u8> = chunks.concat();
    assert_eq!(joined, bytes);
}

#[tokio::test]
async fn killed_process_reports_the_signal_and_kill_is_unary() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/process.Process/SendSignal"))
        .and(header("content-type", "application/json"))
        .and(header("x-access-token", TOKEN))
        .and(body_json(
            serde_json::json!({"process":{"pid":77},"signal":"SIGNAL_SIGKILL"}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(2)
        .mount(&server)
        .await;
    process_start()
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":77}}}"#,
            r#"{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}"#,
        ]))
        .mount(&server)
        .await;
    let p = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    assert_eq!(p.pid(), "77");
    sandbox.kill_process("77").await.unwrap();
    p.kill().await.unwrap();
    let status = p.wait().await.unwrap();
    assert_eq!(status.signal, Some(9));
    assert!(!status.success());
}

#[tokio::test]
async fn stdin_is_sent_as_input_then_closed() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(|r: &Request| request_envelope_json(r)["stdin"] == serde_json::json!(true))
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":5}}}"#,
            r#"{"event":{"data":{"stdout":"aGVsbG8="}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/process.Process/SendInput"))
        .and(body_json(
            serde_json::json!({"process":{"pid":5},"input":{"stdin":"aGVsbG8="}}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/process.Process/CloseStdin"))
        .and(body_json(serde_json::json!({"process":{"pid":5}})))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    let mut p = sandbox.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = p.take_stdin().unwrap();
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"hello").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    // The exit waits for the queued input and the close to be sent: no polling needed.
    let out = p.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "hello");
}

#[tokio::test]
async fn pty_exec_and_resize() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(|r: &Request| {
            request_envelope_json(r)["pty"] == serde_json::json!({"size":{"cols":100,"rows":30}})
        })
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":6}}}"#,
            r#"{"event":{"data":{"pty":"MzAgMTAwDQo="}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/process.Process/Update"))
        .and(body_json(
            serde_json::json!({"process":{"pid":6},"pty":{"size":{"cols":120,"rows":40}}}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    let p = sandbox
        .exec(&Command::shell("stty size").pty(PtySize {
            cols: 100,
            rows: 30,
        }))
        .await
        .unwrap();
    p.resize(PtySize {
        cols: 120,
        rows: 40,
    })
    .await
    .unwrap();
    let out = p.output().await.unwrap();
    assert!(out.stdout_lossy().contains("30 100"));
}

#[tokio::test]
async fn attach_by_tag_and_list_processes() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/process.Process/List"))
        .and(body_json(serde_json::json!({})))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "processes": [{"config": {"cmd": "sh", "args": ["-c", "sleep 2"]}, "pid": 12, "tag": "bg"}]
        })))
        .expect(1)
        .mount(&server)
        .await;
    let list = sandbox.processes().await.unwrap();
    assert_eq!(list[0].pid, "12");
    assert_eq!(list[0].argv, ["sh", "-c", "sleep 2"]);
    Mock::given(method("POST"))
        .and(path("/process.Process/Connect"))
        .and(|r: &Request| request_envelope_json(r) == serde_json::json!({"process":{"tag":"bg"}}))
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":12}}}"#,
            r#"{"event":{"data":{"stdout":"ZG9uZQ=="}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let out = sandbox.attach("bg").await.unwrap().output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "done");
    Mock::given(method("POST"))
        .and(path("/process.Process/Connect"))
        .and(|r: &Request| request_envelope_json(r) == serde_json::json!({"process":{"pid":999}}))
        .respond_with(connect_response(envelope(
            2,
            r#"{"error":{"code":"not_found","message":"process with pid 999 not found"}}"#,
        )))
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(
        sandbox.attach("999").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn edge_proxy_sandbox_not_found_is_not_running() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .respond_with(ResponseTemplate::new(502).set_body_raw(
            format!(r#"{{"sandboxId":"{SB}","message":"The sandbox was not found","code":502}}"#),
            "application/json; charset=utf-8",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotRunning);
    assert_eq!(e.status(), Some(502));
}

#[tokio::test]
async fn envd_plain_401_on_an_rpc_path_is_unauthorized() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .respond_with(ResponseTemplate::new(401).set_body_raw(
            "{\"code\":401,\"message\":\"unauthorized access, please provide a valid access token or method signing if supported\"}\n",
            "application/json; charset=utf-8",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized);
    assert!(!format!("{e:?}{e}").contains(TOKEN));
}

/// A sandbox whose envd is `envd_url` (a raw loopback server) and whose control plane is `server`.
async fn connected_to(server: &MockServer, envd_url: &str) -> E2bSandbox {
    connected_with_timeout(server, envd_url, None).await
}

#[tokio::test]
async fn dropping_a_process_closes_its_stream() {
    use tokio::io::AsyncReadExt;
    let server = MockServer::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let envd_url = format!("http://{}", listener.local_addr().unwrap());
    // envd sends `start` and then nothing: the stream stays open until the client goes away.
    let envd = tokio::spawn(async move {
        let (mut conn, head) = accept_stream(&listener).await;
        assert!(head.starts_with("post /process.process/start "), "{head}");
        write_chunk(&mut conn, &envelope(0, r#"{"event":{"start":{"pid":3}}}"#)).await;
        let mut buf = [0u8; 256];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    let sandbox = connected_to(&server, &envd_url).await;
    let p = sandbox
        .exec(&Command::new("sleep").arg("99"))
        .await
        .unwrap();
    assert_eq!(p.pid(), "3");
    let weak = std::sync::Arc::downgrade(&p.control());
    drop(p);
    // No reader task holds the process's parts once the handle is gone...
    assert!(weak.upgrade().is_none());
    // ...and the connection is closed: envd sees the client go away (a task left reading the
    // stream would keep it open; the limit only guards against hanging).
    tokio::time::timeout(Duration::from_secs(30), envd)
        .await
        .expect("the Start stream stayed open after the process handle was dropped")
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// files
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn write_file_is_multipart_with_the_full_path_as_filename() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(query_param("path", "/home/user/a.txt"))
        .and(header("x-access-token", TOKEN))
        .and(body_string_contains(
            r#"Content-Disposition: form-data; name="file"; filename="/home/user/a.txt""#,
        ))
        .and(body_string_contains("hello"))
        .and(|r: &Request| {
            r.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("multipart/form-data; boundary="))
        })
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(r#"[{"name":"a.txt","path":"/home/user/a.txt","type":"file"}]"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let t = sandbox
        .write_file("/home/user/a.txt", Bytes::from_static(b"hello"))
        .await
        .unwrap();
    assert_eq!(t.bytes, 5);
    assert!(!t.emulated);
}

#[tokio::test]
async fn upload_streams_raw_octets_and_download_streams_back() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let expected = data.clone();
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(query_param("path", "big.bin"))
        .and(header("content-type", "application/octet-stream"))
        .and(move |r: &Request| r.body == expected)
        .respond_with(
            ResponseTemplate::new(200).set_body_string(
                r#"[{"name":"big.bin","path":"/home/user/big.bin","type":"file"}]"#,
            ),
        )
        .expect(1)
        .mount(&server)
        .await;
    let reader: sandbox_sdk_core::UploadBody = Box::pin(std::io::Cursor::new(data.clone()));
    let t = sandbox.upload("big.bin", reader).await.unwrap();
    assert_eq!(t.bytes, 100_000);
    Mock::given(method("GET"))
        .and(path("/files"))
        .and(query_param("path", "big.bin"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(data.clone(), "application/octet-stream"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let got = sandbox.read_file("big.bin").await.unwrap();
    assert_eq!(&got[..], &data[..]);
}

#[tokio::test]
async fn upload_to_an_old_envd_streams_one_multipart_part() {
    let server = MockServer::start().await;
    let mut body = created_body(SB);
    body["envdVersion"] = "0.5.6".into();
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(query_param("path", "/home/user/s.txt"))
        .and(body_string_contains(
            r#"name="file"; filename="/home/user/s.txt""#,
        ))
        .and(body_string_contains("streamed text"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(r#"[{"name":"s.txt","path":"/home/user/s.txt","type":"file"}]"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server).connect(SB).await.unwrap();
    let reader: sandbox_sdk_core::UploadBody =
        Box::pin(std::io::Cursor::new(b"streamed text".to_vec()));
    let t = sandbox.upload("/home/user/s.txt", reader).await.unwrap();
    assert_eq!(t.bytes, 13);
}

#[tokio::test]
async fn write_files_sends_one_part_per_file_and_sigterm_by_tag() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/files"))
        .and(|r: &Request| r.url.query().is_none())
        .and(body_string_contains(r#"filename="/tmp/a.txt""#))
        .and(body_string_contains(r#"filename="/tmp/b.txt""#))
        .respond_with(ResponseTemplate::new(200).set_body_string(
            r#"[{"name":"a.txt","path":"/tmp/a.txt","type":"file"},{"name":"b.txt","path":"/tmp/b.txt","type":"file"}]"#,
        ))
        .expect(1)
        .mount(&server)
        .await;
    let t = sandbox
        .write_files(vec![
            ("/tmp/a.txt".into(), Bytes::from_static(b"aa")),
            ("/tmp/b.txt".into(), Bytes::from_static(b"bbb")),
        ])
        .await
        .unwrap();
    assert_eq!(t.bytes, 5);
    Mock::given(method("POST"))
        .and(path("/process.Process/SendSignal"))
        .and(body_json(
            serde_json::json!({"process":{"tag":"web"},"signal":"SIGNAL_SIGTERM"}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.signal_process("web", true).await.unwrap();
}

#[tokio::test]
async fn missing_files_are_not_found_in_both_dialects() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("GET"))
        .and(path("/files"))
        .respond_with(ResponseTemplate::new(404).set_body_raw(
            "{\"code\":404,\"message\":\"path '/home/user/missing' does not exist\"}\n",
            "application/json; charset=utf-8",
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Stat"))
        .and(body_json(serde_json::json!({"path":"/home/user/missing"})))
        .respond_with(ResponseTemplate::new(404).set_body_raw(
            r#"{"code":"not_found","message":"file not found: stat /home/user/missing: no such file or directory"}"#,
            "application/json",
        ))
        .expect(2)
        .mount(&server)
        .await;
    assert_eq!(
        sandbox.read_file("missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        sandbox.stat("/home/user/missing").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(!sandbox.exists("/home/user/missing").await.unwrap());
}

#[tokio::test]
async fn list_dir_mkdir_move_remove() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/ListDir"))
        .and(body_json(serde_json::json!({"path":"/home/user","depth":2})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            r#"{"entries":[{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"5","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2026-01-01T00:00:00.123456789Z"},{"name":"d","type":"FILE_TYPE_DIRECTORY","path":"/home/user/d","size":"4096","mode":2147484141}]}"#,
            "application/json",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let entries = sandbox
        .list_files("/home/user", ListOptions { depth: 2 })
        .await
        .unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].kind, FileKind::File);
    assert_eq!(entries[0].size, 5);
    assert_eq!(entries[0].mode, Some(0o644));
    assert_eq!(entries[1].kind, FileKind::Dir);
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/MakeDir"))
        .respond_with(ResponseTemplate::new(409).set_body_raw(
            r#"{"code":"already_exists","message":"directory already exists"}"#,
            "application/json",
        ))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.mkdir("/home/user/d").await.unwrap();
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Move"))
        .and(body_json(
            serde_json::json!({"source":"a","destination":"b"}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            serde_json::json!({"entry":{"name":"b","type":"FILE_TYPE_FILE","path":"/home/user/b"}}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.rename("a", "b").await.unwrap();
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Stat"))
        .and(body_json(serde_json::json!({"path":"b"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            serde_json::json!({"entry":{"name":"b","type":"FILE_TYPE_FILE","path":"/home/user/b"}}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Remove"))
        .and(body_json(serde_json::json!({"path":"b"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    sandbox.remove("b").await.unwrap();
}

#[tokio::test]
async fn removing_a_missing_path_is_not_found() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Stat"))
        .and(body_json(serde_json::json!({"path":"/home/user/nope"})))
        .respond_with(ResponseTemplate::new(404).set_body_raw(
            r#"{"code":"not_found","message":"file not found: stat /home/user/nope: no such file or directory"}"#,
            "application/json",
        ))
        .expect(1)
        .mount(&server)
        .await;
    // envd's Remove is os.RemoveAll: it answers {} for a path that does not exist.
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Remove"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(0)
        .mount(&server)
        .await;
    let e = sandbox.remove("/home/user/nope").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert_eq!(e.operation(), Some("remove"));
}

#[tokio::test]
async fn watch_streams_events_after_start() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/WatchDir"))
        .and(|r: &Request| {
            request_envelope_json(r) == serde_json::json!({"path":"/home/user","recursive":true})
        })
        .respond_with(events(&[
            r#"{"start":{}}"#,
            r#"{"filesystem":{"name":"a.txt","type":"EVENT_TYPE_CREATE"}}"#,
            r#"{"keepalive":{}}"#,
            r#"{"filesystem":{"name":"a.txt","type":"EVENT_TYPE_WRITE"}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let events: Vec<_> = sandbox
        .watch("/home/user", true)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].path, "/home/user/a.txt");
    assert_eq!(events[0].kind, FileEventKind::Create);
    assert_eq!(events[1].kind, FileEventKind::Write);
}

#[tokio::test]
async fn signed_urls_and_preview_links_use_the_port_host() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let url = sandbox.download_url("/home/user/a.txt", None).unwrap();
    assert_eq!(
        url,
        format!(
            "https://49983-{SB}.e2b.app/files?path=%2Fhome%2Fuser%2Fa.txt&signature=v1_zpcfuBvTQ7Iw5iRRDlW6Y7v3hP25%2FWWkbW2cRaNfI4I"
        )
    );
    let link = sandbox.preview_link(8080).await.unwrap();
    assert_eq!(link.url, format!("https://8080-{SB}.e2b.app"));
    assert!(link.headers.is_empty());
}

#[tokio::test]
async fn absurd_durations_saturate_instead_of_panicking() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let url = sandbox.download_url("/a.txt", Some(Duration::MAX)).unwrap();
    assert!(
        url.contains(&format!("signature_expiration={}", u64::MAX)),
        "{url}"
    );
    set_ttl_call(u64::MAX)
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_string(r#"{"code":400,"message":"timeout out of range"}"#),
        )
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox.set_timeout(Duration::MAX).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Validation);
}

#[tokio::test]
async fn upload_urls_carry_user_and_expiration() {
    let server = MockServer::start().await;
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .mount(&server)
        .await;
    let sandbox = E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(server.uri())
        .user("root")
        .build()
        .unwrap()
        .connect_sandbox(SB, None)
        .await
        .unwrap();
    let url = url::Url::parse(
        &sandbox
            .upload_url("/tmp/x", Some(Duration::from_secs(60)))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(url.host_str(), Some(format!("49983-{SB}.e2b.app").as_str()));
    let q: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q["path"], "/tmp/x");
    assert_eq!(q["username"], "root");
    let exp: u64 = q["signature_expiration"].parse().unwrap();
    assert_eq!(
        q["signature"],
        sandbox_e2b::testing::file_signature("/tmp/x", "write", "root", TOKEN, Some(exp))
    );
}

#[tokio::test]
async fn metrics_of_several_sandboxes_in_one_call() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/sandboxes/metrics"))
        .and(query_param("sandbox_ids", "a,b"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "sandboxes": {
                "a": {"cpuCount": 2, "cpuUsedPct": 5.0, "memUsed": 1, "memTotal": 2, "diskUsed": 3, "diskTotal": 4, "timestampUnix": 1},
                "b": {"cpuCount": 4, "cpuUsedPct": 9.5, "memUsed": 1, "memTotal": 2, "diskUsed": 3, "diskTotal": 4, "timestampUnix": 1}
            }
        })))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(&server);
    let m = p.metrics_many(&["a", "b"]).await.unwrap();
    assert_eq!(m["b"].cpu_percent, Some(9.5));
    assert_eq!(m["a"].cpu_count, Some(2));
    assert!(p.metrics_many(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn delete_snapshot_uses_the_templates_route() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/templates/team%2Fsnap%3Adefault"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    provider(&server)
        .delete_snapshot("team/snap:default")
        .await
        .unwrap();
}

#[tokio::test]
async fn private_preview_carries_the_traffic_token() {
    let server = MockServer::start().await;
    let mut body = created_body(SB);
    body["trafficAccessToken"] = "traffic-secret".into();
    body["domain"] = "example.test".into();
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    let sandbox = provider(&server).connect(SB).await.unwrap();
    let link = sandbox.preview_link(3000).await.unwrap();
    assert_eq!(link.url, format!("https://3000-{SB}.example.test"));
    assert_eq!(link.headers["e2b-traffic-access-token"], "traffic-secret");
    assert!(!format!("{link:?}{sandbox:?}").contains("traffic-secret"));
}

// ---------------------------------------------------------------------------------------------
// templates
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn prepare_builds_once_then_reuses_by_content_hash() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04")
        .run("apt-get install -y curl")
        .cpu_count(2)
        .memory_mb(2048);
    let name = spec.template_name();
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_string(r#"{"code":404,"message":"template not found"}"#),
        )
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .and(body_json(
            serde_json::json!({"name": name, "cpuCount": 2, "memoryMB": 2048}),
        ))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl1", "buildID": "b1", "public": false, "names": [name], "tags": [], "aliases": [name]
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl1/builds/b1"))
        .and(body_json(serde_json::json!({
            "fromImage": "ubuntu:24.04",
            "steps": [{"type": "RUN", "args": ["apt-get install -y curl"]}]
        })))
        .respond_with(ResponseTemplate::new(202))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl1/builds/b1/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl1", "buildID": "b1", "status": "building", "logs": [], "logEntries": []
        })))
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl1/builds/b1/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl1", "buildID": "b1", "status": "ready", "logs": [], "logEntries": []
        })))
        .expect(1)
        .mount(&server)
        .await;
    let p = fast_polling(&server);
    assert_eq!(p.prepare_template(&spec).await.unwrap(), "tpl1");
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"templateID": "tpl1", "public": false})),
        )
        .expect(1)
        .mount(&server)
        .await;
    // The reused template's latest build is checked: ready, so nothing is built.
    Mock::given(method("GET"))
        .and(path("/templates/tpl1"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(template_with_builds(
                "tpl1",
                &[("b1", "ready", "2026-12-01T00:00:00Z")],
            )),
        )
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(p.prepare_template(&spec).await.unwrap(), "tpl1");
}

/// A `TemplateWithBuilds` answer with `(buildID, status, createdAt)` builds.
fn template_with_builds(id: &str, builds: &[(&str, &str, &str)]) -> serde_json::Value {
    serde_json::json!({
        "templateID": id, "public": false, "aliases": [], "names": [],
        "createdAt": "2026-12-01T00:00:00Z", "updatedAt": "2026-12-01T00:00:00Z",
        "lastSpawnedAt": null, "spawnCount": 0,
        "builds": builds.iter().map(|(b, status, at)| serde_json::json!({
            "buildID": b, "status": status, "createdAt": at, "updatedAt": at,
            "cpuCount": 2, "memoryMB": 2048
        })).collect::<Vec<_>>()
    })
}

#[tokio::test]
async fn a_template_whose_latest_build_failed_is_built_again_not_reused() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("echo again");
    let name = spec.template_name();
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"templateID": "tpl4", "public": false})),
        )
        .expect(1)
        .mount(&server)
        .await;
    // An older ready build does not make the template usable: the latest one failed.
    Mock::given(method("GET"))
        .and(path("/templates/tpl4"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(template_with_builds(
                "tpl4",
                &[
                    ("old", "ready", "2026-11-01T00:00:00Z"),
                    ("bad", "error", "2026-11-30T00:00:00Z"),
                ],
            )),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .and(body_json(serde_json::json!({"name": name})))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl4", "buildID": "new", "public": false, "names": [name], "tags": [], "aliases": [name]
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl4/builds/new"))
        .respond_with(ResponseTemplate::new(202))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl4/builds/new/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl4", "buildID": "new", "status": "ready", "logs": [], "logEntries": []
        })))
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(
        fast_polling(&server).prepare_template(&spec).await.unwrap(),
        "tpl4"
    );
}

#[tokio::test]
async fn a_build_in_progress_is_waited_for_not_started_again() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("echo wait");
    let name = spec.template_name();
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{name}")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"templateID": "tpl5", "public": false})),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl5"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(template_with_builds(
                "tpl5",
                &[("b5", "building", "2026-12-01T00:00:00Z")],
            )),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl5/builds/b5/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl5", "buildID": "b5", "status": "building", "logs": [], "logEntries": []
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl5/builds/b5/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl5", "buildID": "b5", "status": "ready", "logs": [], "logEntries": []
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    assert_eq!(
        fast_polling(&server).prepare_template(&spec).await.unwrap(),
        "tpl5"
    );
}

#[tokio::test]
async fn prepare_raises_the_build_failure_reason() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("false");
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{}", spec.template_name())))
        .respond_with(
            ResponseTemplate::new(404).set_body_string(r#"{"code":404,"message":"nope"}"#),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl2", "buildID": "b2", "public": false, "names": [], "tags": [], "aliases": []
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl2/builds/b2"))
        .respond_with(ResponseTemplate::new(202))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl2/builds/b2/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl2", "buildID": "b2", "status": "error",
            "reason": {"message": "step 1 failed: exit code 1"}, "logs": [], "logEntries": []
        })))
        .mount(&server)
        .await;
    let e = fast_polling(&server)
        .prepare_template(&spec)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    assert!(e.message().contains("step 1 failed"), "{e}");
}

#[tokio::test]
async fn a_build_is_checked_with_backoff_not_once_per_poll_interval() {
    let server = MockServer::start().await;
    let spec = TemplateSpec::from_image("ubuntu:24.04").run("sleep 999");
    Mock::given(method("GET"))
        .and(path(format!("/templates/aliases/{}", spec.template_name())))
        .respond_with(
            ResponseTemplate::new(404).set_body_string(r#"{"code":404,"message":"nope"}"#),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/templates"))
        .respond_with(ResponseTemplate::new(202).set_body_json(serde_json::json!({
            "templateID": "tpl3", "buildID": "b3", "public": false, "names": [], "tags": [], "aliases": []
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v2/templates/tpl3/builds/b3"))
        .respond_with(ResponseTemplate::new(202))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/templates/tpl3/builds/b3/status"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "templateID": "tpl3", "buildID": "b3", "status": "building", "logs": [], "logEntries": []
        })))
        .mount(&server)
        .await;
    // A long poll interval and a short build timeout: a fixed sleep would check twice (at once
    // and after 30 s); the backoff checks at 0, 25, 75, 175 ms and at the 300 ms deadline.
    let provider = E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .template_poll_interval(Duration::from_secs(30))
        .template_build_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(20), provider.prepare_template(&spec))
        .await
        .expect("the build wait slept a whole poll interval")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    let checks = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path().ends_with("/status"))
        .count();
    assert!(checks >= 4, "{checks} checks");
}

#[tokio::test]
async fn streamed_events_arrive_before_the_stream_ends() {
    // A process handle is a lazy stream: events are decoded as they arrive, not at the end.
    let server = MockServer::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let envd_url = format!("http://{}", listener.local_addr().unwrap());
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let envd = tokio::spawn(async move {
        let (mut conn, _) = accept_stream(&listener).await;
        write_chunk(&mut conn, &envelope(0, r#"{"event":{"start":{"pid":2}}}"#)).await;
        write_chunk(
            &mut conn,
            &envelope(0, r#"{"event":{"data":{"stdout":"b25l"}}}"#),
        )
        .await;
        // The rest is only sent once the client has seen "one".
        wait.await.unwrap();
        let mut rest = envelope(0, r#"{"event":{"data":{"stdout":"dHdv"}}}"#);
        rest.extend(envelope(
            0,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ));
        rest.extend(envelope(2, "{}"));
        // Split inside an envelope, so the decoder has to join chunks.
        write_chunk(&mut conn, &rest[..7]).await;
        write_chunk(&mut conn, &rest[7..]).await;
        write_chunk(&mut conn, b"").await;
    });
    let sandbox = connected_to(&server, &envd_url).await;
    let mut p = sandbox
        .exec(&Command::shell("printf one; sleep 1; printf two"))
        .await
        .unwrap();
    assert!(!p.is_streaming_emulated());
    let first = p.next().await.unwrap().unwrap();
    assert!(
        matches!(&first, ProcessEvent::Stdout(b) if &b[..] == b"one"),
        "{first:?}"
    );
    go.send(()).unwrap();
    let events: Vec<_> = p.collect().await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(&events[0], Ok(ProcessEvent::Stdout(b)) if &b[..] == b"two"));
    assert!(matches!(&events[1], Ok(ProcessEvent::Exit(s)) if s.code == Some(0)));
    envd.await.unwrap();
}

/// A sandbox whose envd is `envd_url`, with a client request timeout of `timeout`.
async fn connected_with_timeout(
    server: &MockServer,
    envd_url: &str,
    timeout: Option<Duration>,
) -> E2bSandbox {
    connect_call()
        .respond_with(ResponseTemplate::new(200).set_body_json(created_body(SB)))
        .expect(1)
        .mount(server)
        .await;
    let mut builder = E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(envd_url);
    if let Some(timeout) = timeout {
        builder = builder.request_timeout(timeout);
    }
    builder
        .build()
        .unwrap()
        .connect_sandbox(SB, None)
        .await
        .unwrap()
}

#[tokio::test]
async fn opening_a_stream_is_bounded_by_the_request_timeout() {
    let limit = Duration::from_millis(200);
    for head in [false, true] {
        for operation in ["exec", "attach", "watch"] {
            let server = MockServer::start().await;
            let envd = stalled_envd(head).await;
            let sandbox = connected_with_timeout(&server, &envd, Some(limit)).await;
            let open = async {
                match operation {
                    "exec" => sandbox.exec(&Command::new("true")).await.map(|_| ()),
                    "attach" => sandbox.attach("7").await.map(|_| ()),
                    _ => sandbox.watch("/home/user", false).await.map(|_| ()),
                }
            };
            // A guard far above the limit, so a missing bound fails instead of hanging.
            let e = tokio::time::timeout(Duration::from_secs(30), open)
                .await
                .unwrap_or_else(|_| panic!("{operation} (head: {head}) never gave up"))
                .unwrap_err();
            assert_eq!(
                e.kind(),
                ErrorKind::Timeout,
                "{operation} (head: {head}): {e}"
            );
            assert_eq!(e.operation(), Some(operation), "{e}");
            assert_eq!(e.sandbox_id(), Some(SB));
            assert!(e.message().contains("within 200ms"), "{e}");
            assert!(e.to_string().contains(operation), "{e}");
        }
    }
}

#[tokio::test]
async fn a_download_whose_answer_never_starts_is_a_timeout() {
    let server = MockServer::start().await;
    let envd = stalled_envd(false).await;
    let sandbox = connected_with_timeout(&server, &envd, Some(Duration::from_millis(200))).await;
    let open = sandbox.download("/home/user/a.txt");
    let e = tokio::time::timeout(Duration::from_secs(30), open)
        .await
        .expect("download never gave up")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.operation(), Some("download"));
    assert!(e.message().contains("no response within 200ms"), "{e}");
}

#[tokio::test]
async fn a_command_request_timeout_bounds_the_start_of_exec() {
    // The client default (60 s) would hang the test; the command's own limit applies instead.
    let server = MockServer::start().await;
    let envd = stalled_envd(true).await;
    let sandbox = connected_with_timeout(&server, &envd, None).await;
    let e = sandbox
        .exec(&Command::new("true").request_timeout(Duration::from_millis(200)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.operation(), Some("exec"));
    assert!(e.message().contains("did not start within 200ms"), "{e}");
}

#[tokio::test]
async fn an_open_watch_outlives_the_request_timeout() {
    let server = MockServer::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let envd_url = format!("http://{}", listener.local_addr().unwrap());
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let envd = tokio::spawn(async move {
        let (mut conn, head) = accept_stream(&listener).await;
        assert!(
            head.starts_with("post /filesystem.filesystem/watchdir "),
            "{head}"
        );
        write_chunk(&mut conn, &envelope(0, r#"{"start":{}}"#)).await;
        // The first change only comes after the client has waited past its request timeout.
        wait.await.unwrap();
        let mut rest = envelope(
            0,
            r#"{"filesystem":{"name":"a.txt","type":"EVENT_TYPE_CREATE"}}"#,
        );
        rest.extend(envelope(2, "{}"));
        write_chunk(&mut conn, &rest).await;
        write_chunk(&mut conn, b"").await;
    });
    let limit = Duration::from_millis(200);
    let sandbox = connected_with_timeout(&server, &envd_url, Some(limit)).await;
    let watch = sandbox.watch("/home/user", false).await.unwrap();
    tokio::time::sleep(limit * 2).await;
    go.send(()).unwrap();
    let events: Vec<_> = watch.try_collect().await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].path, "/home/user/a.txt");
    envd.await.unwrap();
}
