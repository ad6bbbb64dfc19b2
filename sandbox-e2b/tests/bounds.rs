//! Time bounds on opening streams and transfers against envds that never answer: the request
//! timeout bounds the opening (a command's own first), never an open stream.

use futures::TryStreamExt;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use std::time::Duration;
use wiremock::MockServer;

mod support;
use support::*;

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
    let (listener, envd_url) = raw_envd().await;
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
