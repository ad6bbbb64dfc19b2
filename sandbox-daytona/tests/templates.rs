//! Snapshots a create uses (PROTOCOL.md's snapshot flow) against wiremock on loopback: prepared
//! once by content hash, activated when inactive, and a failed build's reason.

mod common;

use common::*;
use sandbox_daytona::{SnapshotSize, snapshot_name};
use sandbox_sdk_core::ErrorKind;
use serde_json::json;
use wiremock::matchers::{body_json, method, path};
use wiremock::{Mock, MockServer};

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
