//! Bounds (PROTOCOL.md §11): silent streams end or are reconnected after the idle bound
//! (paused clock, scripted server in the test's runtime: no real sleeps), reconnects that
//! bring nothing are capped, and oversized answers are refused before memory is spent.

mod common;

use common::raw::{self, Reply};
use common::*;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const CONNECT: (&str, usize) = ("GET /v2/sandboxes/box-1?", 1);

fn connect_reply() -> (&'static str, Reply, usize) {
    (
        CONNECT.0,
        Reply::json(envelope(NAME, "running", json!({}))),
        CONNECT.1,
    )
}

/// A read whose body stops after a few bytes ends with `Transport` once the idle bound passes.
#[tokio::test(start_paused = true)]
async fn a_silent_download_ends_with_transport() {
    let server = raw::serve(vec![
        connect_reply(),
        (
            "POST /v2/sandboxes/sessions/sbx_1/fs/read?",
            Reply::Hold("HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000\r\n\r\n0123456789".into()),
            1,
        ),
    ])
    .await;
    let sb = builder(&server.url)
        .build()
        .unwrap()
        .connect_sandbox(NAME)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = sb.read_file("big.bin").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert!(started.elapsed() >= sandbox_vercel::DEFAULT_STREAM_IDLE_TIMEOUT);
}

/// A command's stream that goes silent while the command runs is not its end: after the idle
/// bound the command is read and `/logs` followed, and the output arrives once.
#[tokio::test(start_paused = true)]
async fn a_silent_command_stream_is_checked_and_followed_again() {
    let first = ndjson(&[
        json!({"command": command_json("c1", None)}),
        json!({"stream": "stdout", "data": "a"}),
    ]);
    let server = raw::serve(vec![
        connect_reply(),
        (
            "POST /v2/sandboxes/sessions/sbx_1/cmd?",
            Reply::ndjson_part(&first, false),
            1,
        ),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd/c1?",
            Reply::json(json!({"command": command_json("c1", Some(4))})),
            1,
        ),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd/c1/logs?",
            Reply::ndjson(ndjson(&[json!({"stream": "stdout", "data": "ab"})])),
            1,
        ),
    ])
    .await;
    let sb = builder(&server.url)
        .build()
        .unwrap()
        .connect_sandbox(NAME)
        .await
        .unwrap();
    let out = sb.run(&Command::shell("quiet")).await.unwrap();
    assert_eq!(out.stdout_lossy(), "ab");
    assert_eq!(out.status.code, Some(4));
    assert_eq!(server.requests().len(), 4);
}

/// `/logs` that closes at once, again and again, while the command runs: after
/// `max_reconnects` fruitless tries the follower gives up with an ambiguous `Transport`.
#[tokio::test(start_paused = true)]
async fn fruitless_reconnects_are_capped() {
    let server = raw::serve(vec![
        connect_reply(),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd/c9/logs?",
            Reply::ndjson_part("", true),
            0,
        ),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd/c9?",
            Reply::json(json!({"command": command_json("c9", None)})),
            0,
        ),
    ])
    .await;
    let sb = builder(&server.url)
        .max_reconnects(3)
        .build()
        .unwrap()
        .connect_sandbox(NAME)
        .await
        .unwrap();
    let err = sb.attach("c9").await.unwrap().wait().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert!(err.is_ambiguous());
    assert!(err.message().contains("attach"), "{err}");
    let logs = server
        .requests()
        .iter()
        .filter(|r| r.contains("/logs"))
        .count();
    assert_eq!(logs, 4, "{:?}", server.requests());
}

/// A sandbox answer larger than the adapter reads is refused (`MAX_JSON`).
#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let server = MockServer::start().await;
    let mut huge = envelope(NAME, "running", json!({}));
    huge["sandbox"]["padding"] = json!("x".repeat(sandbox_vercel::MAX_JSON + 1));
    Mock::given(method("GET"))
        .and(path(format!("/v2/sandboxes/{NAME}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(huge))
        .mount(&server)
        .await;
    let err = provider(&server).connect(NAME).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    assert!(err.message().contains("larger than"), "{err}");
}

/// An NDJSON line longer than `MAX_LINE` (a server that never sends a newline) is an error,
/// not memory exhausted.
#[tokio::test]
async fn an_endless_stream_line_is_refused() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    let mut body = ndjson(&[json!({"command": command_json("c1", None)})]);
    body.push_str(&"y".repeat(sandbox_vercel::MAX_LINE + 10));
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "application/x-ndjson"))
        .mount(&server)
        .await;
    let err = sb.run(&Command::shell("x")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    assert!(err.message().contains("passed"), "{err}");
}
