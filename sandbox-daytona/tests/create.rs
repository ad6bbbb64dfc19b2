//! Creates against wiremock on loopback: the SDK headers and the create body, create-then-wait,
//! failed starts, and keyed creates (the name a key makes, adoption of only the sandbox this
//! create made, ambiguous creates settled by looking the name up).

mod common;

use common::*;
use sandbox_daytona::{DaytonaCreate, IDEMPOTENCY_LABEL, idempotency_name};
use sandbox_sdk_core::fleet::Owner;
use sandbox_sdk_core::idempotency::{CreateLookup, FINGERPRINT_LABEL, create_fingerprint};
use sandbox_sdk_core::{CreateSpec, ErrorKind, Provider, SandboxState};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path};
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
