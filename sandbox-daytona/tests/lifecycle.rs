//! Lifecycle against wiremock on loopback: create-then-wait, failed starts, idempotent create,
//! list over both shapes, 409 waits, destroy, rate limits, snapshots, limits, SSH tokens.

mod common;

use common::*;
use futures::TryStreamExt;
use sandbox_daytona::{
    DaytonaCreate, IDEMPOTENCY_LABEL, SnapshotSize, idempotency_name, snapshot_name,
};
use sandbox_sdk_core::fleet::Owner;
use sandbox_sdk_core::idempotency::{CreateLookup, FINGERPRINT_LABEL, create_fingerprint};
use sandbox_sdk_core::{CreateSpec, ErrorKind, ListFilter, Provider, ProviderExt, SandboxState};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn create_sends_the_sdk_headers_then_polls_until_started() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(header("x-daytona-source", "sdk-rust"))
        .and(header("x-daytona-sdk-version", "0.218.0"))
        .and(header("user-agent", "sdk-rust/0.218.0"))
        .and(body_json(
            json!({"snapshot": "snap", "labels": {"suite": "c"}, "target": "eu", "ttlMinutes": 5}),
        ))
        .respond_with(ok(sandbox("sb1", "creating")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox("sb1", "pulling_snapshot")))
        .up_to_n_times(2)
        .with_priority(1)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox("sb1", "started")))
        .expect(2)
        .mount(&server)
        .await;
    let provider = common::builder(&server).target("eu").build().unwrap();
    let spec = CreateSpec::new()
        .template("snap")
        .metadata("suite", "c")
        .timeout(Duration::from_secs(300));
    let sandbox = provider.create(&spec).await.unwrap();
    assert_eq!(sandbox.id(), "sb1");
    let info = sandbox.info().await.unwrap();
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.raw_state.as_deref(), Some("started"));
    assert_eq!(info.region.as_deref(), Some("us"));
    assert_eq!(info.metadata["team"], "infra");
    assert!(info.created_at.is_some());
}

#[tokio::test]
async fn a_failed_start_reports_the_servers_reason() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .respond_with(ok(sandbox("sb1", "pending_build")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(with(
            sandbox("sb1", "build_failed"),
            "errorReason",
            json!("Dockerfile step 3 failed"),
        )))
        .mount(&server)
        .await;
    let provider = provider(&server);
    let err = provider
        .create_sandbox(&DaytonaCreate {
            image: Some("python:3.12".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(err.message().contains("build_failed"), "{err}");
    assert!(err.message().contains("Dockerfile step 3 failed"), "{err}");
}

#[tokio::test]
async fn waiting_for_start_is_bounded() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .respond_with(ok(sandbox("sb1", "creating")))
        .mount(&server)
        .await;
    mount_sandbox(&server, "creating").await;
    let provider = common::builder(&server)
        .poll_interval(Duration::from_millis(5))
        .start_timeout(Duration::from_millis(30))
        .build()
        .unwrap();
    let err = provider.create(&CreateSpec::new()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(err.sandbox_id(), Some("sb1"));
}

/// A sandbox a create of `CreateSpec::new().idempotency_key(key)` made: named as the key
/// maps, carrying its label and the create fingerprint.
fn keyed(id: &str, key: &str, state: &str) -> serde_json::Value {
    let named = with(sandbox(id, state), "name", json!(idempotency_name(key)));
    with(
        named,
        "labels",
        keyed_labels(&CreateSpec::new().idempotency_key(key)),
    )
}

/// The labels a keyed create of `spec` sends: the spec's, the key and the create fingerprint.
fn keyed_labels(spec: &CreateSpec) -> serde_json::Value {
    let mut labels = json!(spec.metadata);
    labels[IDEMPOTENCY_LABEL] = json!(spec.idempotency_key);
    labels[FINGERPRINT_LABEL] = json!(create_fingerprint(spec));
    labels
}

/// Someone made a sandbox with the key's name and label first (not this create's fingerprint;
/// or this create's labels but another owner's): it is a Conflict naming the key, neither
/// adopted nor destroyed, and no create is sent in its place.
#[tokio::test]
async fn a_sandbox_someone_else_made_under_the_keys_name_is_a_conflict_and_left_alone() {
    let mine = Owner::new("me").unwrap();
    let spec = mine
        .label(&CreateSpec::new().idempotency_key("job-sq"))
        .unwrap();
    let key = spec.idempotency_key.clone().unwrap();
    let mut other_owner = keyed_labels(&spec);
    other_owner["sandbox_sdk_owner"] = json!("them");
    for labels in [
        json!({IDEMPOTENCY_LABEL: key, "sandbox_sdk_owner": "me"}),
        other_owner,
        json!({}),
    ] {
        let server = MockServer::start().await;
        let squat = with(
            sandbox("squat", "stopped"),
            "name",
            json!(idempotency_name(&key)),
        );
        mount_name_lookups(&server, &key, vec![ok(with(squat, "labels", labels))]).await;
        let e = provider(&server).create(&spec).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
        assert!(!e.is_retryable());
        assert_eq!(e.sandbox_id(), Some("squat"));
        assert!(e.to_string().contains(&format!("{key:?}")), "{e}");
        // The name look-up only: no create, no start, no delete.
        let sent = server.received_requests().await.unwrap();
        assert_eq!(sent.len(), 1, "{sent:?}");
    }
}

#[test]
fn the_same_key_under_two_owners_is_two_names() {
    let spec = CreateSpec::new().idempotency_key("job-1");
    let name = |owner: &str| {
        let labelled = Owner::new(owner).unwrap().label(&spec).unwrap();
        DaytonaCreate::from_spec(&labelled).name.unwrap()
    };
    assert_ne!(name("alice"), name("bob"));
}

/// `GET /api/sandbox/{name}` answers from `answers` in turn, the last one from then on.
async fn mount_name_lookups(server: &MockServer, key: &str, answers: Vec<ResponseTemplate>) {
    let answers = std::sync::Arc::new(std::sync::Mutex::new(answers));
    Mock::given(method("GET"))
        .and(path(format!("/api/sandbox/{}", idempotency_name(key))))
        .respond_with(move |_: &wiremock::Request| {
            let mut answers = answers.lock().unwrap();
            if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers[0].clone()
            }
        })
        .mount(server)
        .await;
}

#[tokio::test]
async fn an_idempotency_key_finds_the_sandbox_a_first_attempt_made() {
    let server = MockServer::start().await;
    mount_name_lookups(&server, "job-7", vec![ok(keyed("sb9", "job-7", "started"))]).await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .respond_with(ok(sandbox("other", "started")))
        .expect(0)
        .mount(&server)
        .await;
    let sandbox = provider(&server)
        .create(&CreateSpec::new().idempotency_key("job-7"))
        .await
        .unwrap();
    assert_eq!(sandbox.id(), "sb9");
}

/// The create is answered only after the request timeout; the sandbox it made shows up under
/// the key's name a little later. The adapter must wait for it rather than send again, and
/// hand the caller that one sandbox.
#[tokio::test]
async fn a_create_answered_after_the_timeout_is_found_by_name_not_sent_again() {
    let server = MockServer::start().await;
    let name = idempotency_name("job-slow");
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .and(body_json(json!({
            "name": name,
            "labels": keyed_labels(&CreateSpec::new().idempotency_key("job-slow")),
        })))
        .respond_with(
            ok(keyed("sb1", "job-slow", "creating")).set_delay(Duration::from_millis(800)),
        )
        .expect(1)
        .mount(&server)
        .await;
    // Not there before the send, nor at the first two looks after the timeout.
    mount_name_lookups(
        &server,
        "job-slow",
        vec![
            not_found("Sandbox with ID or name x not found"),
            not_found("Sandbox with ID or name x not found"),
            not_found("Sandbox with ID or name x not found"),
            ok(keyed("sb1", "job-slow", "creating")),
        ],
    )
    .await;
    mount_sandbox(&server, "started").await;
    let provider = common::builder(&server)
        .request_timeout(Duration::from_millis(200))
        .create_lookup(CreateLookup::new(Duration::from_secs(10)))
        .build()
        .unwrap();
    let sandbox = provider
        .create(&CreateSpec::new().idempotency_key("job-slow"))
        .await
        .unwrap();
    assert_eq!(sandbox.id(), "sb1");
    let requests = server.received_requests().await.unwrap();
    let posts = requests
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .count();
    assert_eq!(posts, 1, "the create was sent again");
}

/// With the window over and nothing found, the original (ambiguous) error comes back, saying
/// it looked; nothing is sent a second time inside the adapter.
#[tokio::test]
async fn an_ambiguous_create_with_nothing_found_returns_its_error_after_the_window() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .respond_with(ok(sandbox("sb1", "creating")).set_delay(Duration::from_millis(600)))
        .expect(1)
        .mount(&server)
        .await;
    mount_name_lookups(&server, "job-x", vec![not_found("Sandbox not found")]).await;
    let provider = common::builder(&server)
        .request_timeout(Duration::from_millis(100))
        .create_lookup(CreateLookup::new(Duration::from_millis(150)))
        .build()
        .unwrap();
    let err = provider
        .create(&CreateSpec::new().idempotency_key("job-x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("idempotency key"), "{err}");
}

/// A 409 "name exists" for a sandbox this create made is the sandbox an earlier attempt made:
/// adopted. The same 409 for someone else's sandbox of that name is a Conflict naming the key.
#[tokio::test]
async fn a_409_for_the_keys_name_adopts_the_sandbox_an_earlier_attempt_made() {
    for (owner_key, adopted) in [("job-409", true), ("someone-else", false)] {
        let server = MockServer::start().await;
        let name = idempotency_name("job-409");
        Mock::given(method("POST"))
            .and(path("/api/sandbox"))
            .respond_with(ResponseTemplate::new(409).set_body_json(api_error(
                409,
                "Conflict",
                &format!("Sandbox with name {name} already exists"),
            )))
            .expect(1)
            .mount(&server)
            .await;
        let theirs = with(keyed("sb1", owner_key, "started"), "name", json!(name));
        mount_name_lookups(
            &server,
            "job-409",
            vec![not_found("Sandbox not found"), ok(theirs)],
        )
        .await;
        mount_sandbox(&server, "started").await;
        let result = provider(&server)
            .create(&CreateSpec::new().idempotency_key("job-409"))
            .await;
        match result {
            Ok(sandbox) => {
                assert!(adopted);
                assert_eq!(sandbox.id(), "sb1");
            }
            Err(e) => {
                assert!(!adopted, "{e}");
                assert_eq!(e.kind(), ErrorKind::Conflict);
                assert!(e.to_string().contains("\"job-409\""), "{e}");
            }
        }
    }
}

/// A sandbox of the key's name that is being destroyed is not adopted: a new one is made.
#[tokio::test]
async fn a_destroying_sandbox_under_the_keys_name_is_not_adopted() {
    let server = MockServer::start().await;
    mount_name_lookups(
        &server,
        "job-d",
        vec![ok(with(
            keyed("old", "job-d", "destroying"),
            "desiredState",
            json!("destroyed"),
        ))],
    )
    .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .respond_with(ok(keyed("sb1", "job-d", "started")))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server)
        .create(&CreateSpec::new().idempotency_key("job-d"))
        .await
        .unwrap();
    assert_eq!(sandbox.id(), "sb1");
}

#[tokio::test]
async fn list_follows_cursors_and_reads_the_old_bare_array() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox"))
        .and(query_param("cursor", "c2"))
        .respond_with(ok(
            json!({"items": [sandbox("b", "stopped")], "nextCursor": null}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox"))
        .respond_with(ok(
            json!({"items": [sandbox("a", "started")], "nextCursor": "c2"}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    let all = provider(&server)
        .list_all(&ListFilter::new())
        .await
        .unwrap();
    let ids: Vec<_> = all.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(all[1].state, SandboxState::Stopped);

    let old = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox"))
        .respond_with(ok(json!([
            sandbox("a", "started"),
            sandbox("b", "archived")
        ])))
        .expect(1)
        .mount(&old)
        .await;
    let provider = provider(&old);
    let running: Vec<_> = provider
        .list(&ListFilter::new().state(SandboxState::Running))
        .try_collect()
        .await
        .unwrap();
    // The old API ignores the filter; the adapter applies it.
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].id, "a");
}

#[tokio::test]
async fn list_sends_label_and_state_filters() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox"))
        .and(query_param("labels", r#"{"suite":"conformance"}"#))
        .and(query_param("states", "started"))
        .and(query_param("limit", "100"))
        .respond_with(ok(json!({"items": [], "nextCursor": null})))
        .expect(1)
        .mount(&server)
        .await;
    let found = provider(&server)
        .list_all(
            &ListFilter::new()
                .metadata("suite", "conformance")
                .state(SandboxState::Running),
        )
        .await
        .unwrap();
    assert!(found.is_empty());
}

#[tokio::test]
async fn stop_waits_out_a_state_change_in_progress() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox("sb1", "started")))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/stop"))
        .respond_with(state_change_in_progress())
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/stop"))
        .respond_with(ok(sandbox_toward("sb1", "stopping", "stopped")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox_toward("sb1", "stopped", "stopped")))
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    use sandbox_sdk_core::Sandbox;
    sandbox.stop().await.unwrap();
}

/// sb1 stays `starting`, and every `POST /api/sandbox/sb1/{action}` answers that another state
/// change is in progress.
async fn mount_endless_state_change(server: &MockServer, action: &str) {
    mount_sandbox(server, "starting").await;
    Mock::given(method("POST"))
        .and(path(format!("/api/sandbox/sb1/{action}")))
        .respond_with(state_change_in_progress())
        .mount(server)
        .await;
}

#[tokio::test]
async fn a_state_change_that_never_ends_fails_as_conflict_within_the_deadline() {
    let server = MockServer::start().await;
    mount_endless_state_change(&server, "pause").await;
    let provider = common::builder(&server)
        .state_change_timeout(Duration::from_millis(40))
        .poll_interval(Duration::from_millis(5))
        .build()
        .unwrap();
    let sandbox = provider.get("sb1").await.unwrap();
    use sandbox_sdk_core::Sandbox;
    let err = sandbox.pause().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.status(), Some(409));
}

#[tokio::test]
async fn destroy_waits_for_404_and_a_second_destroy_is_not_found() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox("sb1", "started")))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(with(
            sandbox_toward("sb1", "destroying", "destroyed"),
            "name",
            json!("DESTROYED_sb1_1787220000000"),
        )))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(not_found("Sandbox with ID or name sb1 not found"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(not_found("Sandbox with ID or name sb1 not found"))
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    use sandbox_sdk_core::Sandbox;
    sandbox.destroy().await.unwrap();
    assert_eq!(
        sandbox.info().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        sandbox.destroy().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

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
async fn prepare_is_idempotent_by_content_hash() {
    let server = MockServer::start().await;
    let size = SnapshotSize {
        cpu: 2,
        memory_gb: 4,
        disk_gb: 10,
    };
    let name = snapshot_name("ubuntu:24.04", size, Some("us"), Some("linux-vm"));
    let snap_path = format!("/api/snapshots/{name}");
    Mock::given(method("GET"))
        .and(path(snap_path.as_str()))
        .respond_with(not_found("Snapshot not found"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/snapshots"))
        .and(body_json(json!({"name": name, "imageName": "ubuntu:24.04", "cpu": 2, "memory": 4, "disk": 10, "regionId": "us", "sandboxClass": "linux-vm"})))
        .respond_with(ok(json!({"id": "snap-1", "name": name, "state": "pending"})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(snap_path.as_str()))
        .respond_with(ok(
            json!({"id": "snap-1", "name": name, "state": "building"}),
        ))
        .up_to_n_times(1)
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(snap_path.as_str()))
        .respond_with(ok(
            json!({"id": "snap-1", "name": name, "state": "active", "mem": 4}),
        ))
        .with_priority(3)
        .mount(&server)
        .await;
    let provider = provider(&server);
    let got = provider
        .prepare("ubuntu:24.04", size, Some("us"), Some("linux-vm"))
        .await
        .unwrap();
    assert_eq!(got, name);
    // A second prepare finds it active and creates nothing (POST expect(1) holds).
    let again = provider
        .prepare("ubuntu:24.04", size, Some("us"), Some("linux-vm"))
        .await
        .unwrap();
    assert_eq!(again, name);
}

#[tokio::test]
async fn prepare_raises_a_failed_builds_reason() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex_snapshot())
        .respond_with(ok(
            json!({"id": "s", "state": "build_failed", "errorReason": "image not found"}),
        ))
        .mount(&server)
        .await;
    let err = provider(&server)
        .prepare("nope:1", SnapshotSize::default(), None, None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider);
    assert!(err.message().contains("image not found"));
}

fn path_regex_snapshot() -> wiremock::matchers::PathRegexMatcher {
    wiremock::matchers::path_regex(r"^/api/snapshots/sdk-[0-9a-f]{16}$")
}

#[tokio::test]
async fn limits_come_from_the_usage_endpoint() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/organizations/org-1/usage"))
        .respond_with(ok(json!({
            "regionUsage": [{
                "regionId": "us", "sandboxClass": "container",
                "totalCpuQuota": 100, "currentCpuUsage": 3,
                "totalMemoryQuota": 200, "currentMemoryUsage": 6,
                "totalDiskQuota": 500, "currentDiskUsage": 30,
                "totalGpuQuota": 0, "currentGpuUsage": 0,
                "maxCpuPerSandbox": 4, "maxMemoryPerSandbox": 8, "maxDiskPerSandbox": 10,
                "maxDiskPerNonEphemeralSandbox": null, "maxCpuPerGpu": null, "maxMemoryPerGpu": null, "maxDiskPerGpu": null
            }],
            "totalSnapshotQuota": 10, "currentSnapshotUsage": 1, "totalVolumeQuota": 10, "currentVolumeUsage": 0
        })))
        .expect(1)
        .mount(&server)
        .await;
    let provider = common::builder(&server)
        .organization_id("org-1")
        .build()
        .unwrap();
    let limits = provider.limits().await.unwrap();
    assert_eq!(limits.len(), 1);
    assert_eq!(limits[0].region, "us");
    assert_eq!(limits[0].max_cpu, Some(4.0));
    assert_eq!(limits[0].max_memory_gb, Some(8.0));
    assert_eq!(limits[0].max_disk_gb, Some(10.0));
    assert_eq!(limits[0].cpu_used, Some(3.0));
}

#[tokio::test]
async fn limits_read_the_organization_from_a_sandbox_when_unset() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox"))
        .and(query_param("limit", "1"))
        .respond_with(ok(
            json!({"items": [sandbox("a", "started")], "nextCursor": null}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/organizations/3f1b2c4d-0000-4000-8000-000000000001/usage"))
        .respond_with(ok(json!({"regionUsage": [], "totalSnapshotQuota": 0, "currentSnapshotUsage": 0, "totalVolumeQuota": 0, "currentVolumeUsage": 0})))
        .expect(1)
        .mount(&server)
        .await;
    assert!(provider(&server).limits().await.unwrap().is_empty());
}

#[tokio::test]
async fn ssh_tokens_are_shared_and_renewed_before_expiry() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb-ssh"))
        .respond_with(ok(sandbox("sb-ssh", "started")))
        .mount(&server)
        .await;
    // The first token expires in 30 minutes, the second in years.
    let soon = std::time::SystemTime::now() + Duration::from_secs(30 * 60);
    let soon = format_rfc3339(soon);
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb-ssh/ssh-access"))
        .respond_with(ok(json!({"id": "a1", "sandboxId": "sb-ssh", "token": "tokenAAAA", "expiresAt": soon, "createdAt": soon, "updatedAt": soon, "sshCommand": "ssh -p 2222 tokenAAAA@gw.example"})))
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb-ssh/ssh-access"))
        .respond_with(ok(json!({"id": "a2", "sandboxId": "sb-ssh", "token": "tokenBBBB", "expiresAt": "2099-01-01T00:00:00.000Z", "createdAt": soon, "updatedAt": soon, "sshCommand": "ssh tokenBBBB@gw.example"})))
        .expect(1)
        .mount(&server)
        .await;
    use sandbox_sdk_core::Sandbox;
    let provider = provider(&server);
    let a = provider.get("sb-ssh").await.unwrap();
    let b = provider.get("sb-ssh").await.unwrap();
    let first = a.ssh_access(Duration::from_secs(600)).await.unwrap();
    assert_eq!(
        (first.host.as_str(), first.port, first.user.as_str()),
        ("gw.example", 2222, "tokenAAAA")
    );
    assert!(!format!("{first:?}").contains("tokenAAAA"));
    // Another handle asking for 10 minutes reuses the token (no second POST yet).
    let shared = b.ssh_access(Duration::from_secs(600)).await.unwrap();
    assert_eq!(shared.token.as_deref(), Some("tokenAAAA"));
    // Asking for an hour renews it: the kept one would expire first.
    let renewed = b.ssh_access(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(renewed.token.as_deref(), Some("tokenBBBB"));
    assert_eq!(renewed.port, 22);
    let kept = a.ssh_access(Duration::from_secs(600)).await.unwrap();
    assert_eq!(kept.token.as_deref(), Some("tokenBBBB"));
}

fn format_rfc3339(t: std::time::SystemTime) -> String {
    sandbox_sdk_core::time::format_rfc3339_millis(t)
}

#[tokio::test]
async fn create_sends_region_resources_volumes_and_network_rules() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .and(body_json(json!({
            "name": "gpu-box",
            "labels": {"team": "ml"},
            "target": "eu",
            "cpu": 4, "gpu": 1, "memory": 16, "disk": 50,
            "networkBlockAll": false,
            "networkAllowList": "10.0.0.0/8,192.168.1.0/24",
            "domainAllowList": "pypi.org,*.github.com",
            "volumes": [{"volumeId": "vol-data", "mountPath": "/data", "subpath": "team-ml"}],
            "autoStopInterval": 0,
            "autoDeleteInterval": -1,
            "public": false,
            "buildInfo": {"dockerfileContent": "FROM pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime\n"}
        })))
        .respond_with(ok(sandbox("sb-gpu", "started")))
        .expect(1)
        .mount(&server)
        .await;
    let provider = provider(&server);
    let created = provider
        .create_sandbox(&DaytonaCreate {
            name: Some("gpu-box".into()),
            image: Some("pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime".into()),
            labels: [("team".to_owned(), "ml".to_owned())].into_iter().collect(),
            cpu: Some(4),
            gpu: Some(1),
            memory_gb: Some(16),
            disk_gb: Some(50),
            target: Some("eu".into()),
            network_block_all: Some(false),
            network_allow_list: vec!["10.0.0.0/8".into(), "192.168.1.0/24".into()],
            domain_allow_list: vec!["pypi.org".into(), "*.github.com".into()],
            volumes: vec![sandbox_daytona::VolumeMount {
                volume_id: "vol-data".into(),
                mount_path: "/data".into(),
                subpath: Some("team-ml".into()),
            }],
            auto_stop_minutes: Some(0),
            auto_delete_minutes: Some(-1),
            public: Some(false),
            ..Default::default()
        })
        .await
        .unwrap();
    use sandbox_sdk_core::Sandbox;
    assert_eq!(created.id(), "sb-gpu");
    // The core spec's region and resources take the same route.
    let spec = CreateSpec::new()
        .region("us")
        .resources(sandbox_sdk_core::Resources {
            cpus: Some(2),
            memory_mb: Some(3000),
            disk_gb: Some(10),
            gpus: Some(1),
        });
    let body =
        serde_json::to_value(sandbox_daytona::DaytonaCreate::from_spec(&spec).memory_gb).unwrap();
    assert_eq!(body, json!(3));
}

#[tokio::test]
async fn sandbox_usage_comes_from_the_analytics_api_named_by_config() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/config"))
        .respond_with(ok(json!({"version": "0.190.0", "analyticsApiUrl": format!("{}/analytics", server.uri()), "proxyToolboxUrl": "https://proxy.app.daytona.io/toolbox"})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/analytics/organization/org-1/sandbox/sb1/usage"))
        .and(query_param("from", "2026-08-20T00:00:00Z"))
        .and(query_param("to", "2026-08-21T00:00:00Z"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ok(json!([
            {"startAt": "2026-08-20T10:00:00Z", "endAt": "2026-08-20T11:00:00Z", "cpu": 2, "gpu": 0, "ramGB": 4, "diskGB": 10, "price": 0.12},
            {"startAt": "2026-08-20T11:00:00Z", "endAt": null, "cpu": 0, "gpu": 0, "ramGB": 0, "diskGB": 10, "price": 0.01}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let provider = common::builder(&server)
        .organization_id("org-1")
        .build()
        .unwrap();
    let day = std::time::UNIX_EPOCH + Duration::from_secs(1_787_184_000);
    let periods = provider
        .sandbox_usage("sb1", day, day + Duration::from_secs(86_400))
        .await
        .unwrap();
    assert_eq!(periods.len(), 2);
    assert_eq!(periods[0].cpu, 2.0);
    assert_eq!(periods[0].memory_gb, 4.0);
    assert_eq!(periods[0].price, Some(0.12));
    assert!(periods[1].end.is_none());
}

#[tokio::test]
async fn sandbox_usage_without_an_analytics_api_is_not_supported() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/config"))
        .respond_with(ok(json!({"version": "0.190.0"})))
        .mount(&server)
        .await;
    let provider = common::builder(&server)
        .organization_id("org-1")
        .build()
        .unwrap();
    let now = std::time::SystemTime::now();
    let err = provider.sandbox_usage("sb1", now, now).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSupported);
}

#[tokio::test]
async fn resize_labels_archive_and_recover() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox_toward("sb1", "stopped", "stopped")))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/resize"))
        .and(body_json(json!({"cpu": 2, "disk": 20})))
        .respond_with(ok(sandbox_toward("sb1", "resizing", "resized")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/sandbox/sb1/labels"))
        .and(body_json(json!({"labels": {"a": "b"}})))
        .respond_with(ok(json!({"labels": {"a": "b"}})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/archive"))
        .respond_with(ok(sandbox_toward("sb1", "archiving", "archived")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/recover"))
        .respond_with(ok(sandbox("sb1", "started")))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    sandbox.resize(Some(2), None, Some(20)).await.unwrap();
    let labels = sandbox
        .set_labels([("a".to_owned(), "b".to_owned())].into_iter().collect())
        .await
        .unwrap();
    assert_eq!(labels["a"], "b");
    // Archive polls until "archived"; the mock keeps answering "stopped", which is a resting
    // state the archive cannot reach without another call: NotRunning, not a hang.
    let err = sandbox.archive().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning);
    sandbox.recover().await.unwrap();
}

#[tokio::test]
async fn a_handle_deadline_bounds_the_state_change_wait() {
    let server = MockServer::start().await;
    mount_endless_state_change(&server, "stop").await;
    // The builder allows an hour; this caller allows 30 ms. The guard only keeps a broken
    // deadline from hanging the suite.
    let provider = common::builder(&server)
        .poll_interval(Duration::from_millis(5))
        .state_change_timeout(Duration::from_secs(3600))
        .build()
        .unwrap();
    let sandbox = provider.get("sb1").await.unwrap();
    use sandbox_sdk_core::Sandbox;
    let bounded = sandbox.with_deadline(Duration::from_millis(30));
    let err = tokio::time::timeout(Duration::from_secs(60), bounded.stop())
        .await
        .expect("the handle's deadline was not applied")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(
        err.message()
            .to_ascii_lowercase()
            .contains("state change in progress"),
        "{err}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn huge_durations_from_the_caller_do_not_panic() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox_toward("sb1", "stopped", "stopped")))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/stop"))
        .respond_with(ok(sandbox_toward("sb1", "stopping", "stopped")))
        .expect(1)
        .mount(&server)
        .await;
    // An answer without `expiresAt`: the expiry is computed from the time asked for.
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/ssh-access"))
        .respond_with(ok(json!({"id": "a1", "sandboxId": "sb1", "token": "tokenHUGE", "sshCommand": "ssh tokenHUGE@gw.example"})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(wiremock::matchers::path_regex(
            r"^/api/sandbox/sb1/ttl/\d+$",
        ))
        .respond_with(ok(sandbox("sb1", "started")))
        .expect(1)
        .mount(&server)
        .await;
    // "No deadline" spelled as Duration::MAX, in the builder and per handle.
    let provider = common::builder(&server)
        .start_timeout(Duration::MAX)
        .state_change_timeout(Duration::MAX)
        .build()
        .unwrap();
    let sandbox = provider.get("sb1").await.unwrap();
    use sandbox_sdk_core::Sandbox;
    sandbox.with_deadline(Duration::MAX).stop().await.unwrap();
    let access = sandbox.ssh_access(Duration::MAX).await.unwrap();
    assert_eq!(access.token.as_deref(), Some("tokenHUGE"));
    sandbox.set_timeout(Duration::MAX).await.unwrap();
}

#[tokio::test]
async fn fork_waits_out_a_state_change_in_progress_then_waits_for_the_fork() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/fork"))
        .respond_with(state_change_in_progress())
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/fork"))
        .and(body_json(json!({"name": "f1"})))
        .respond_with(ok(sandbox("sb2", "forking")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb2"))
        .respond_with(ok(sandbox("sb2", "started")))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let fork = sandbox.fork_named(Some("f1")).await.unwrap();
    use sandbox_sdk_core::Sandbox;
    assert_eq!(fork.id(), "sb2");
}

#[tokio::test]
async fn prepare_activates_an_inactive_snapshot_once_and_waits() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex_snapshot())
        .respond_with(ok(json!({"id": "snap-1", "state": "inactive"})))
        .up_to_n_times(3)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex_snapshot())
        .respond_with(ok(json!({"id": "snap-1", "state": "active"})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/snapshots/snap-1/activate"))
        .respond_with(ok(json!({"id": "snap-1", "state": "active"})))
        .expect(1)
        .mount(&server)
        .await;
    provider(&server)
        .prepare("ubuntu:24.04", SnapshotSize::default(), None, None)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_template_with_resources_is_refused_before_anything_is_sent() {
    // Daytona answers 400 "Cannot specify Sandbox resources when using a snapshot"
    // (PROTOCOL.md §2.1); the adapter says so itself, naming both fields and the way out.
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ok(sandbox("sb1", "started")))
        .expect(0)
        .mount(&server)
        .await;
    let provider = provider(&server);
    let spec = CreateSpec::new()
        .template("snap")
        .resources(sandbox_sdk_core::Resources {
            cpus: Some(2),
            memory_mb: Some(4096),
            ..Default::default()
        });
    let err = provider.create(&spec).await.map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    let message = err.to_string();
    for needle in ["template", "resources.cpus", "resources.memory_mb", "image"] {
        assert!(message.contains(needle), "{needle} missing from: {message}");
    }
    // The same with Daytona's own options: a snapshot fixes the size.
    let err = provider
        .create_sandbox(&DaytonaCreate {
            snapshot: Some("snap".into()),
            disk_gb: Some(20),
            gpu: Some(1),
            ..Default::default()
        })
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    let message = err.to_string();
    for needle in ["snapshot", "disk_gb", "gpu", "image"] {
        assert!(message.contains(needle), "{needle} missing from: {message}");
    }
    // A snapshot and an image at once is refused too.
    let err = provider
        .create_sandbox(&DaytonaCreate {
            snapshot: Some("snap".into()),
            image: Some("python:3.12".into()),
            ..Default::default()
        })
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
}

/// Every state wait looks at once and then backs off from 25 ms: with a poll interval of an
/// hour, create, stop, start and destroy on a server whose transitions finish at once still
/// return (a wait that slept a whole interval before its first look would not).
#[tokio::test]
async fn state_waits_look_at_once_and_back_off_instead_of_sleeping_an_interval() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .respond_with(ok(sandbox("sb1", "creating")))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/stop"))
        .respond_with(ok(sandbox_toward("sb1", "stopping", "stopped")))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/sandbox/sb1/start"))
        .respond_with(ok(sandbox_toward("sb1", "starting", "started")))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(ok(sandbox_toward("sb1", "destroying", "destroyed")))
        .mount(&server)
        .await;
    // The first look after each call finds the transition done.
    let responses = std::sync::Arc::new(std::sync::Mutex::new(
        vec![
            ok(sandbox("sb1", "started")),
            ok(sandbox_toward("sb1", "stopped", "stopped")),
            ok(sandbox("sb1", "started")),
            not_found("Sandbox with ID or name sb1 not found"),
        ]
        .into_iter(),
    ));
    Mock::given(method("GET"))
        .and(path("/api/sandbox/sb1"))
        .respond_with(move |_: &wiremock::Request| responses.lock().unwrap().next().unwrap())
        .expect(4)
        .mount(&server)
        .await;
    let provider = common::builder(&server)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    let lifecycle = async {
        let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
        sandbox.stop().await.unwrap();
        sandbox.resume().await.unwrap();
        sandbox.destroy().await.unwrap();
    };
    // A generous guard, not a timing assertion: the old waits would sleep for an hour.
    tokio::time::timeout(Duration::from_secs(30), lifecycle)
        .await
        .expect("a state wait slept a whole poll interval before looking");
}
