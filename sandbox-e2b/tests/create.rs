//! Creating sandboxes against a loopback control plane: the body sent, E2B's own create options, and
//! idempotent create (the label looked up first and adopted only when this create made it, the
//! `Idempotency-Key` header, an ambiguous create settled by looking the label up).

use sandbox_sdk_core::idempotency::{FINGERPRINT_LABEL, create_fingerprint};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{CreateSpec, ErrorKind};
use std::time::Duration;
use wiremock::matchers::{body_json, body_string_contains, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod support;
use support::*;

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

/// The labels a keyed create of `spec` puts on its sandbox: the key and the create fingerprint.
fn keyed_labels(spec: &CreateSpec) -> serde_json::Value {
    let key = spec.idempotency_key.clone().unwrap();
    let fingerprint = create_fingerprint(spec).unwrap();
    serde_json::json!({"sandbox-sdk-idempotency-key": key, FINGERPRINT_LABEL: fingerprint})
}

#[tokio::test]
async fn create_with_idempotency_key_reuses_an_existing_sandbox() {
    let server = MockServer::start().await;
    let spec = CreateSpec::new()
        .idempotency_key("job-42")
        .timeout(Duration::from_secs(60));
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .and(query_param(
            "metadata",
            "sandbox-sdk-idempotency-key=job-42",
        ))
        .and(query_param("state", "running,paused"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            {"sandboxID": SB, "templateID": "t", "state": "paused", "metadata": keyed_labels(&spec)}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    // The TTL the create asked for applies to the reused sandbox too, shorter or not.
    mount_connect_with_ttl(&server, 60, 201).await;
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let sandbox = provider(&server).create(&spec).await.unwrap();
    assert_eq!(sandbox.id(), SB);
}

#[tokio::test]
async fn a_sandbox_someone_else_made_under_the_key_is_a_conflict_and_left_alone() {
    // Someone made a sandbox carrying the key's label first (without this create's
    // fingerprint), or one of another owner: it is not connected to (a paused one would be
    // resumed), not destroyed, and no create is sent in its place.
    let spec = CreateSpec::new()
        .metadata("sandbox_sdk_owner", "me")
        .idempotency_key("sandbox_sdk:me/job-42");
    let mut other_owner = keyed_labels(&spec);
    other_owner["sandbox_sdk_owner"] = "them".into();
    for theirs in [
        serde_json::json!({"sandbox-sdk-idempotency-key": "sandbox_sdk:me/job-42", "sandbox_sdk_owner": "me"}),
        other_owner,
    ] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/v2/sandboxes"))
            // The `metadata` value is itself form-encoded (PROTOCOL.md §2.3).
            .and(query_param(
                "metadata",
                "sandbox-sdk-idempotency-key=sandbox_sdk%3Ame%2Fjob-42",
            ))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
                {"sandboxID": SB, "templateID": "t", "state": "paused", "metadata": theirs}
            ])))
            .expect(1)
            .mount(&server)
            .await;
        let e = provider(&server).create(&spec).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
        assert!(!e.is_retryable());
        assert_eq!(e.provider(), Some("e2b"));
        assert!(e.to_string().contains("\"sandbox_sdk:me/job-42\""), "{e}");
        // Nothing but the look-up was sent: no connect, no create, no kill.
        let sent = server.received_requests().await.unwrap();
        assert_eq!(sent.len(), 1, "{sent:?}");
    }
}

#[tokio::test]
async fn create_sends_the_fingerprint_as_the_idempotency_key_header() {
    // E2B answers a repeated Idempotency-Key with the sandbox it made: a header anyone knowing
    // the key could have sent first must not be the key itself.
    for key in ["job-42", "Job 42"] {
        let spec = CreateSpec::new().idempotency_key(key);
        let fingerprint = create_fingerprint(&spec).unwrap();
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/v2/sandboxes"))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/v2/sandboxes"))
            .and(header("idempotency-key", fingerprint.as_str()))
            // The label keeps the key as the caller gave it, beside the fingerprint.
            .and(body_string_contains(format!(
                r#""sandbox-sdk-idempotency-key":"{key}""#
            )))
            .and(body_string_contains(format!(
                r#""{FINGERPRINT_LABEL}":"{fingerprint}""#
            )))
            .respond_with(ResponseTemplate::new(201).set_body_json(created_body(SB)))
            .expect(1)
            .mount(&server)
            .await;
        let sandbox = provider(&server).create(&spec).await.unwrap();
        assert_eq!(sandbox.id(), SB);
    }
}

/// The look-up of the idempotency label: `[]` for the first `misses` calls, then `SB` as a
/// create of `CreateSpec::new().idempotency_key(key)` made it.
async fn label_lookup(server: &MockServer, key: &str, misses: u64) {
    let labels = keyed_labels(&CreateSpec::new().idempotency_key(key));
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
            {"sandboxID": SB, "templateID": "t", "state": "running", "metadata": labels}
        ])))
        .mount(server)
        .await;
}

#[tokio::test]
async fn a_create_answered_after_the_timeout_is_adopted_not_sent_again() {
    let server = MockServer::start().await;
    // Not there before the create, nor at the first look-up after it; then it is.
    label_lookup(&server, "job-7", 2).await;
    let fingerprint = create_fingerprint(&CreateSpec::new().idempotency_key("job-7")).unwrap();
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .and(header("idempotency-key", fingerprint.as_str()))
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
    let provider = builder(&server)
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
    let provider = builder(&server)
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
