//! The lifecycle of a sandbox against a loopback control plane: info, destroy, pause and resume with
//! the time to live, connect, list, error mapping of control-plane answers, fork, snapshots,
//! metrics, logs and network rules.

use futures::TryStreamExt;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{ErrorKind, ListFilter, SandboxState};
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

mod support;
use support::*;

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
    // Once by set_timeout, once after resume reapplies the TTL through connect.
    mount_ttl(&server, 600, 2).await;
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

#[tokio::test]
async fn connect_with_a_ttl_then_sets_exactly_that_ttl() {
    // Connect only ever extends the TTL (PROTOCOL.md §2.3), so a shorter TTL than the sandbox
    // has left would be ignored; the follow-up `POST /sandboxes/{id}/timeout` applies it.
    let server = MockServer::start().await;
    mount_connect_with_ttl(&server, 60, 200).await;
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
    mount_connect_with_ttl(&server, 30, 201).await;
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
    // PROTOCOL.md §3.2: a `domain` in the connect answer replaces the client's for envd; the
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
    // PROTOCOL.md §2.3: a 409 on pause means "already paused" (SDK returns false), but a 409
    // also comes for a sandbox still changing state (§3.5's "still transitioning"): that pause
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
async fn a_next_token_cycle_ends_the_listing_and_reap_ends() {
    let server = MockServer::start().await;
    // A broken (or hostile) server hands out a, then b, then a again, forever.
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .respond_with(|r: &Request| {
            let next = if r.url.query().unwrap_or("").contains("nextToken=a") {
                "b"
            } else {
                "a"
            };
            ResponseTemplate::new(200)
                .insert_header("x-next-token", next)
                .set_body_json(serde_json::json!([
                    {"sandboxID": "a1", "templateID": "t", "state": "running",
                     "metadata": {"sandbox_sdk_owner": "me"}}
                ]))
        })
        .mount(&server)
        .await;
    let p = provider(&server);
    let listed = p.list_all(&ListFilter::new()).await.unwrap();
    // The first page, a and b; b's "a" was already asked for.
    assert_eq!(listed.len(), 3);
    let owner = sandbox_sdk_core::fleet::Owner::new("me").unwrap();
    let policy = sandbox_sdk_core::fleet::ReapPolicy::new()
        .failed()
        .dry_run(true);
    sandbox_sdk_core::fleet::reap(&p, &owner, &policy)
        .await
        .unwrap();
    assert_eq!(server.received_requests().await.unwrap().len(), 6);
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
    mount_ttl(&server, 45, 1).await;
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
