//! Lifecycle (PROTOCOL.md §4.3–§5): states, stop and its wait, resume, set_timeout, list
//! pages and filters, delete, and calls on a stopped sandbox.

mod common;

use common::raw::{self, Reply};
use common::*;
use futures::TryStreamExt;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind, ListFilter, SandboxState};
use serde_json::json;
use std::time::{Duration, SystemTime};
use wiremock::matchers::{method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// `stop` waits (backing off, paused clock: the scripted server runs in the test's runtime)
/// until the session is `stopped`.
#[tokio::test(start_paused = true)]
async fn stop_waits_until_the_session_is_stopped() {
    let session = |status| Reply::json(json!({"session": session_json(SESSION, status)}));
    let server = raw::serve(vec![
        (
            "GET /v2/sandboxes/box-1?",
            Reply::json(envelope(NAME, "running", json!({}))),
            1,
        ),
        (
            "POST /v2/sandboxes/sessions/sbx_1/stop?",
            session("stopping"),
            1,
        ),
        ("GET /v2/sandboxes/sessions/sbx_1?", session("stopping"), 2),
        ("GET /v2/sandboxes/sessions/sbx_1?", session("stopped"), 1),
    ])
    .await;
    let sb = builder(&server.url)
        .build()
        .unwrap()
        .connect_sandbox(NAME)
        .await
        .unwrap();
    sb.stop().await.unwrap();
    assert_eq!(sb.session().unwrap().status.as_deref(), Some("stopped"));
    assert_eq!(server.requests().len(), 5);
    // A stopped sandbox runs nothing until it is resumed, and says so without a request.
    let err = sb.run(&Command::shell("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
    assert!(err.to_string().contains("resume"), "{err}");
    assert_eq!(server.requests().len(), 5);
}

/// A session that never stops within the stop timeout is a `Timeout` naming its state.
#[tokio::test(start_paused = true)]
async fn a_stop_that_never_ends_is_a_timeout() {
    let stopping = Reply::json(json!({"session": session_json(SESSION, "stopping")}));
    let server = raw::serve(vec![
        (
            "GET /v2/sandboxes/box-1?",
            Reply::json(envelope(NAME, "running", json!({}))),
            1,
        ),
        (
            "POST /v2/sandboxes/sessions/sbx_1/stop?",
            stopping.clone(),
            1,
        ),
        ("GET /v2/sandboxes/sessions/sbx_1?", stopping, 0),
    ])
    .await;
    let sb = builder(&server.url)
        .stop_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .connect_sandbox(NAME)
        .await
        .unwrap();
    let err = sb.stop().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.message().contains("stopping"), "{err}");
}

/// `resume` asks with `resume=true`, and the new session is the one commands go to.
#[tokio::test]
async fn resume_takes_the_new_session() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{NAME}")))
        .and(query_param("resume", "false"))
        .respond_with(ResponseTemplate::new(200).set_body_json(envelope(
            NAME,
            "stopped",
            json!({}),
        )))
        .mount(&server)
        .await;
    let mut resumed = envelope(NAME, "running", json!({}));
    resumed["session"]["id"] = json!("sbx_2");
    resumed["sandbox"]["currentSessionId"] = json!("sbx_2");
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{NAME}")))
        .and(query_param("resume", "true"))
        .respond_with(ResponseTemplate::new(200).set_body_json(resumed))
        .expect(1)
        .mount(&server)
        .await;
    let sb = provider(&server).connect_sandbox(NAME).await.unwrap();
    assert_eq!(sb.info().await.unwrap().state, SandboxState::Stopped);
    sb.resume().await.unwrap();
    assert_eq!(sb.session().unwrap().id, "sbx_2");
}

/// A sandbox whose snapshot expired cannot resume: 410 is `NotRunning`.
#[tokio::test]
async fn resuming_without_a_snapshot_is_not_running() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    server.reset().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(410).set_body_json(error_json(
            "snapshot_not_found",
            "Cannot resume sandbox: no snapshot available.",
        )))
        .mount(&server)
        .await;
    let err = sb.resume().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning);
    assert_eq!(err.status(), Some(410));
}

/// set_timeout adds what is missing between the session's end and now + t, by the server's
/// `Date`; a session that already lasts longer is left alone.
#[tokio::test]
async fn set_timeout_extends_by_what_is_missing() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    // Started at T0 with 300 s; the server says it is T0 + 100 s; 600 s more wanted.
    let date =
        httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_millis(T0 + 100_000));
    Mock::given(method("GET"))
        .and(path(session_path("")))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("date", date.as_str())
                .set_body_json(json!({"session": session_json(SESSION, "running")})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(session_path("/extend-timeout")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"session": session_json(SESSION, "running")})),
        )
        .expect(1)
        .mount(&server)
        .await;
    sb.set_timeout(Duration::from_secs(600)).await.unwrap();
    assert_eq!(
        bodies(&server, "POST", &session_path("/extend-timeout")).await,
        [json!({"duration": 400_000})]
    );
    // 100 s wanted: the session already runs until T0 + 300 s.
    sb.set_timeout(Duration::from_secs(100)).await.unwrap();
}

/// The listing follows `pagination.next` as `cursor`, sends the first label as `tags` and
/// `status=running`, and filters the rest here.
#[tokio::test]
async fn list_follows_cursors_and_filters() {
    let server = MockServer::start().await;
    let a = sandbox_json("a", "running", json!({"team": "x", "owner": "me"}));
    let b = sandbox_json("b", "running", json!({"team": "x", "owner": "you"}));
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .and(query_param_is_missing("cursor"))
        .and(query_param("tags", "owner:me"))
        .and(query_param("status", "running"))
        .and(query_param("project", PROJECT))
        .and(query_param("limit", "50"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"sandboxes": [a], "pagination": {"count": 1, "next": "c2"}})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes"))
        .and(query_param("cursor", "c2"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"sandboxes": [b], "pagination": {"count": 1, "next": null}})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let filter = ListFilter::new()
        .metadata("owner", "me")
        .metadata("team", "x")
        .state(SandboxState::Running);
    let listed: Vec<_> = provider(&server).list(&filter).try_collect().await.unwrap();
    // `b` came back (the server filtered by one tag only in this test) but is not ours.
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(
        listed[0].created_at,
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(T0))
    );
}

#[tokio::test]
async fn destroy_deletes_by_name_and_a_missing_sandbox_is_not_found() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path(format!("/v2/sandboxes/{NAME}")))
        .and(query_param("projectId", PROJECT))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"sandbox": sandbox_json(NAME, "stopped", json!({}))})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/sandboxes/gone"))
        .respond_with(
            ResponseTemplate::new(404).set_body_json(error_json("not_found", "Sandbox not found")),
        )
        .mount(&server)
        .await;
    let vercel = provider(&server);
    vercel.destroy(NAME).await.unwrap();
    assert_eq!(
        vercel.destroy("gone").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // A name Vercel cannot hold is not found, without a request.
    let err = vercel.connect("no/such name").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

/// Snapshots stop the session; listing and deleting them go through the snapshot endpoints.
#[tokio::test]
async fn a_snapshot_stops_the_session_and_snapshots_list_and_delete() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    let snap =
        json!({"id": "snap_1", "sourceSessionId": SESSION, "status": "created", "createdAt": T0});
    Mock::given(method("POST"))
        .and(path(session_path("/snapshot")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"snapshot": snap, "session": session_json(SESSION, "stopped")}),
            ),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/sandboxes/snapshots"))
        .and(query_param("name", NAME))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"snapshots": [snap], "pagination": {"count": 1, "next": null}}),
            ),
        )
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v2/sandboxes/snapshots/snap_1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"snapshot": snap})))
        .expect(1)
        .mount(&server)
        .await;
    let info = sb.snapshot(None).await.unwrap();
    assert_eq!(info.id, "snap_1");
    assert_eq!(info.sandbox_id.as_deref(), Some(NAME));
    assert_eq!(
        sb.run(&Command::shell("true")).await.unwrap_err().kind(),
        ErrorKind::NotRunning
    );
    let vercel = provider(&server);
    let snaps: Vec<_> = vercel
        .list_snapshots(Some(NAME))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(snaps.len(), 1);
    vercel.delete_snapshot("snap_1").await.unwrap();
}
