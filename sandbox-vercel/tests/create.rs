//! Creates (PROTOCOL.md §4.1–§4.2): bodies, endpoints, and keyed creates that adopt only a
//! sandbox this create made.

mod common;

use common::*;
use sandbox_sdk_core::idempotency::{FINGERPRINT_LABEL, create_fingerprint};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{CreateSpec, ErrorKind, Resources};
use sandbox_vercel::{VercelCreate, idempotency_name};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn keyed() -> CreateSpec {
    CreateSpec::new()
        .metadata("sandbox_sdk_owner", "ci")
        .idempotency_key("sandbox_sdk:ci/job-7")
}

fn duplicate() -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(error_json(
        "bad_request",
        "A sandbox with the name 'x' already exists for this project. Use GET /sandboxes/:name to resume it or delete it first.",
    ))
}

async fn mount_create(server: &MockServer, version: &str, answer: ResponseTemplate, times: u64) {
    Mock::given(method("POST"))
        .and(path(format!("/{version}/sandboxes")))
        .respond_with(answer)
        .expect(times)
        .mount(server)
        .await;
}

#[tokio::test]
async fn create_sends_the_region() {
    let server = MockServer::start().await;
    mount_create(
        &server,
        "v3",
        ResponseTemplate::new(200).set_body_json(envelope(NAME, "pending", json!({}))),
        1,
    )
    .await;
    let sb = builder(&server.uri())
        .expose_port(3000)
        .build()
        .unwrap()
        .create(
            &CreateSpec::new()
                .region("fra1")
                .env("A", "1")
                .timeout(Duration::from_secs(90))
                .resources(Resources {
                    cpus: Some(4),
                    memory_mb: Some(8192),
                    ..Resources::default()
                }),
        )
        .await
        .unwrap();
    assert_eq!(sb.id(), NAME);
    let sent = bodies(&server, "POST", "/v3/sandboxes").await;
    assert_eq!(
        sent[0],
        json!({"projectId": PROJECT, "region": "fra1", "env": {"A": "1"}, "timeout": 90000,
               "ports": [3000], "resources": {"vcpus": 4, "memory": 8192}})
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests[0].url.query(), Some("teamId=team_t"));
    assert_eq!(
        requests[0]
            .headers
            .get("authorization")
            .unwrap()
            .to_str()
            .unwrap(),
        format!("Bearer {TOKEN}")
    );
}

#[tokio::test]
async fn a_runtime_goes_to_v2_and_a_snapshot_is_a_source() {
    let server = MockServer::start().await;
    mount_create(
        &server,
        "v2",
        ResponseTemplate::new(200).set_body_json(envelope(NAME, "running", json!({}))),
        1,
    )
    .await;
    mount_create(
        &server,
        "v3",
        ResponseTemplate::new(200).set_body_json(envelope(NAME, "running", json!({}))),
        1,
    )
    .await;
    let vercel = provider(&server);
    vercel
        .create(&CreateSpec::new().template("node24"))
        .await
        .unwrap();
    vercel
        .create(&CreateSpec::new().template("snap_abc"))
        .await
        .unwrap();
    assert_eq!(
        bodies(&server, "POST", "/v2/sandboxes").await[0]["runtime"],
        "node24"
    );
    assert_eq!(
        bodies(&server, "POST", "/v3/sandboxes").await[0]["source"],
        json!({"type": "snapshot", "snapshotId": "snap_abc"})
    );
}

/// A keyed create looks its name up first, sends the name and the fingerprint tag, once.
#[tokio::test]
async fn a_keyed_create_is_named_after_the_key_and_tagged_with_its_fingerprint() {
    let server = MockServer::start().await;
    let spec = keyed();
    let name = idempotency_name("sandbox_sdk:ci/job-7");
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{name}")))
        .respond_with(
            ResponseTemplate::new(404).set_body_json(error_json("not_found", "Sandbox not found")),
        )
        .expect(1)
        .mount(&server)
        .await;
    mount_create(
        &server,
        "v3",
        ResponseTemplate::new(200).set_body_json(envelope(&name, "running", json!({}))),
        1,
    )
    .await;
    let sb = provider(&server).create(&spec).await.unwrap();
    assert_eq!(sb.id(), name);
    let body = &bodies(&server, "POST", "/v3/sandboxes").await[0];
    assert_eq!(body["name"], name.as_str());
    assert_eq!(body["tags"]["sandbox_sdk_owner"], "ci");
    assert_eq!(
        body["tags"][FINGERPRINT_LABEL],
        create_fingerprint(&spec).unwrap().as_str()
    );
}

/// The name is taken (400, not 409: PROTOCOL.md §4.2) by a sandbox carrying this create's
/// fingerprint and labels: an earlier attempt made it, and it is adopted.
#[tokio::test]
async fn a_duplicate_name_made_by_this_create_is_adopted() {
    let server = MockServer::start().await;
    let spec = keyed();
    let name = idempotency_name("sandbox_sdk:ci/job-7");
    let tags =
        json!({"sandbox_sdk_owner": "ci", FINGERPRINT_LABEL: create_fingerprint(&spec).unwrap()});
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{name}")))
        .respond_with(ResponseTemplate::new(404).set_body_json(error_json("not_found", "no")))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{name}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(envelope(&name, "running", tags)))
        .mount(&server)
        .await;
    mount_create(&server, "v3", duplicate(), 1).await;
    let sb = provider(&server).create(&spec).await.unwrap();
    assert_eq!(sb.id(), name);
}

/// A duplicate name whose sandbox lacks our labels is someone else's: `Conflict`, nothing
/// adopted, deleted or created in its place.
#[tokio::test]
async fn a_duplicate_name_without_our_labels_is_a_conflict_and_is_not_adopted() {
    for theirs in [
        json!({}),
        json!({"sandbox_sdk_owner": "ci"}),
        json!({"sandbox_sdk_owner": "someone-else", FINGERPRINT_LABEL: "0".repeat(32)}),
    ] {
        let server = MockServer::start().await;
        let spec = keyed();
        let name = idempotency_name("sandbox_sdk:ci/job-7");
        Mock::given(method("GET"))
            .and(path(format!("/v2/sandboxes/{name}")))
            .respond_with(ResponseTemplate::new(200).set_body_json(envelope(
                &name,
                "running",
                theirs.clone(),
            )))
            .mount(&server)
            .await;
        mount_create(&server, "v3", duplicate(), 0).await;
        Mock::given(method("DELETE"))
            .respond_with(ResponseTemplate::new(200))
            .expect(0)
            .mount(&server)
            .await;
        let err = provider(&server).create(&spec).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{theirs}: {err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains(FINGERPRINT_LABEL), "{err}");
    }
}

/// The race: the look-up found nothing, the create answers "already exists", and what is
/// there is not ours: the create's `Conflict` (or the adoption check's) goes back.
#[tokio::test]
async fn a_duplicate_name_answered_to_the_create_itself_is_checked_before_adoption() {
    let server = MockServer::start().await;
    let name = idempotency_name("sandbox_sdk:ci/job-7");
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{name}")))
        .respond_with(ResponseTemplate::new(404).set_body_json(error_json("not_found", "no")))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{name}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(envelope(
            &name,
            "running",
            json!({"x": "y"}),
        )))
        .mount(&server)
        .await;
    mount_create(&server, "v3", duplicate(), 1).await;
    let err = provider(&server).create(&keyed()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
}

/// Without a key, a duplicate name the caller chose is a plain `Conflict`, sent once.
#[tokio::test]
async fn an_unkeyed_duplicate_name_is_a_conflict() {
    let server = MockServer::start().await;
    mount_create(&server, "v3", duplicate(), 1).await;
    let err = provider(&server)
        .create(&CreateSpec::new().name("taken"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.status(), Some(400));
}

#[tokio::test]
async fn what_vercel_refuses_is_refused_before_anything_is_sent() {
    let server = MockServer::start().await;
    let vercel = provider(&server);
    let mut spec = CreateSpec::new().idempotency_key("k");
    for i in 0..5 {
        spec = spec.metadata(format!("t{i}"), "v");
    }
    for bad in [
        spec,
        CreateSpec::new().name("has space"),
        CreateSpec::new().env("1BAD", "x"),
    ] {
        let err = vercel.create(&bad).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Validation, "{bad:?}: {err}");
    }
    let mut options = VercelCreate::default();
    options.runtime = Some("node24".into());
    options.image = Some("img".into());
    assert!(vercel.create_sandbox(&options).await.is_err());
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_key_finds_the_sandbox_named_after_it_without_resuming_it() {
    let server = MockServer::start().await;
    let key = "sandbox_sdk:ci/job-7";
    let name = idempotency_name(key);
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{name}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(envelope(
            &name,
            "stopped",
            json!({}),
        )))
        .expect(1)
        .mount(&server)
        .await;
    let found = provider(&server)
        .find_by_idempotency_key(key)
        .await
        .unwrap()
        .expect("the sandbox named after the key");
    assert_eq!(found.id, name);
    let requests = server.received_requests().await.unwrap();
    assert!(
        requests[0].url.query().unwrap().contains("resume=false"),
        "{:?}",
        requests[0].url
    );

    // No sandbox under that name: nothing found, not an error.
    let empty = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(404).set_body_json(error_json("not_found", "Sandbox not found")),
        )
        .mount(&empty)
        .await;
    assert!(
        provider(&empty)
            .find_by_idempotency_key(key)
            .await
            .unwrap()
            .is_none()
    );
}
