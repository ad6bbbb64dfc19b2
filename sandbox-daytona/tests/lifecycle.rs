//! Lifecycle against wiremock on loopback: list over both shapes, start/stop/destroy and the
//! waits around them (409 state changes, deadlines, back-off), resize, labels, archive, fork,
//! limits and usage.

mod common;

use common::*;
use futures::TryStreamExt;
use sandbox_sdk_core::{CreateSpec, ErrorKind, ListFilter, Provider, ProviderExt, SandboxState};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer};

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
