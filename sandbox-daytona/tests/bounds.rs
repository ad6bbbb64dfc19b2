//! Bounds of the toolbox against wiremock on loopback: oversized log messages and answers are
//! refused, silent streams and unanswered calls end in bounded time.

mod common;

use common::ws::{self, Script};
use common::*;
use sandbox_sdk_core::{Command, ErrorKind, Sandbox};
use std::time::Duration;
use wiremock::MockServer;

/// A log WebSocket message far beyond the daemon's 1024-byte pieces (2 MiB, over the 1 MiB
/// cap) is refused before it is held: the command's output fails with a transport error
/// instead of buffering whatever the server sends (tungstenite alone would take 64 MiB).
#[tokio::test]
async fn an_oversized_log_message_is_refused() {
    let (_server, front, process, logs) = true_behind_a_scripted_front().await;
    let mut huge = b"\x01\x01\x01".to_vec();
    huge.resize(2 * 1024 * 1024, b'x');
    front.script(&logs, Script::Frames(vec![huge], 1000));
    let err = process.output().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert!(err.to_string().contains("log stream failed"), "{err}");
}

/// A log stream whose server stops answering (no frame, no pong) ends with `Transport` once a
/// ping goes unanswered for the bound.
#[tokio::test]
async fn a_silent_log_stream_ends_with_transport_after_an_unanswered_ping() {
    let server = MockServer::start().await;
    let front = ws::start(*server.address()).await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "'make'").await;
    let builder = common::builder(&server)
        .toolbox_url(format!("{}/toolbox", front.uri()))
        .log_ping(Duration::from_millis(100), Duration::from_millis(200));
    let sandbox = sandbox_on(builder).await;
    let process = sandbox.exec(&Command::new("make")).await.unwrap();
    let sid = session_of(&server.received_requests().await.unwrap());
    front.script(
        &format!("/toolbox/sb1/process/session/{sid}/command/cmd-1/logs"),
        Script::Silent,
    );
    let err = tokio::time::timeout(Duration::from_secs(20), process.output())
        .await
        .expect("a silent log stream was waited on forever")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert!(err.to_string().contains("ping"), "{err}");
}

/// A loopback toolbox that reads every request to its end and answers with `head` (maybe
/// nothing, maybe a head and part of a body), then goes silent without closing.
async fn silent_toolbox(head: &'static [u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                let mut answered = false;
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let done = seen.windows(4).any(|w| w == b"\r\n\r\n")
                        && (!seen.starts_with(b"POST") || seen.ends_with(b"--\r\n"));
                    if done && !answered {
                        answered = true;
                        stream.write_all(head).await.ok();
                    }
                }
            });
        }
    });
    format!("http://{addr}/toolbox")
}

/// A download whose body stops after its head and a few bytes ends with `Transport` once the
/// idle bound passes (there is no total limit, so only silence ends it).
#[tokio::test]
async fn a_download_that_goes_silent_ends_with_transport() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    let toolbox = silent_toolbox(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000\r\n\r\n0123456789",
    )
    .await;
    let sandbox = common::builder(&server)
        .toolbox_url(toolbox)
        .stream_idle_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
        .get("sb1")
        .await
        .unwrap();
    let read = async {
        let mut download = sandbox.download("f.bin").await?.into_stream();
        let mut got = Vec::new();
        while let Some(chunk) = futures::StreamExt::next(&mut download).await {
            got.extend_from_slice(&chunk?);
        }
        Ok::<_, sandbox_sdk_core::Error>(got)
    };
    let err = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("a silent download was waited on forever")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
}

/// An upload the server takes in whole but never answers ends with `Timeout` once the request
/// timeout passes after the last byte was sent.
#[tokio::test]
async fn an_upload_never_answered_ends_with_timeout() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    let toolbox = silent_toolbox(b"").await;
    let sandbox = common::builder(&server)
        .toolbox_url(toolbox)
        .request_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
        .get("sb1")
        .await
        .unwrap();
    let body: sandbox_sdk_core::UploadBody = Box::pin(std::io::Cursor::new(vec![7u8; 256 * 1024]));
    let err = tokio::time::timeout(Duration::from_secs(20), sandbox.upload("f.bin", body))
        .await
        .expect("an unanswered upload was waited on forever")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

/// A toolbox that answers every request with `answer(path)` (status line, headers and body as
/// raw bytes), on loopback.
async fn raw_toolbox(answer: fn(&str) -> Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                let _ = stream.write_all(&answer(&path)).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://{addr}/toolbox")
}

/// Toolbox answers read whole are capped per endpoint: a command's status over 4 MiB, a whole
/// log announced over 64 MiB and a file listing announced over 16 MiB are `Provider` errors
/// (before any of it is kept).
#[tokio::test]
async fn oversized_toolbox_answers_are_refused() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    let toolbox = raw_toolbox(|path| {
        if path.ends_with("/logs") {
            // Announced, not sent: the cap must refuse it from the header alone.
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 68157440\r\n\r\n{\"output\":\"".to_vec()
        } else if path.contains("/files?") {
            // A listing (16 MiB at most) announced at 17 MB.
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 17000000\r\n\r\n[".to_vec()
        } else {
            let body = format!(r#"{{"id":"c1","command":"{}","exitCode":0}}"#, "x".repeat(5 << 20));
            let mut out = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            out.extend_from_slice(body.as_bytes());
            out
        }
    })
    .await;
    let sandbox = sandbox_on(common::builder(&server).toolbox_url(toolbox)).await;
    let err = sandbox.session_command("s1", "c1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    assert!(err.message().contains("larger than"), "{err}");
    let err = sandbox.session_logs("s1", "c1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    assert!(
        err.message().contains("larger than the 67108864 bytes"),
        "{err}"
    );
    let err = sandbox
        .list_files("/home", sandbox_sdk_core::ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    assert!(
        err.message().contains("larger than the 16777216 bytes"),
        "{err}"
    );
}
