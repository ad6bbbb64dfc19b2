//! No call waits forever (issue 9): process and watch streams, a command's own timeout and
//! `/files` transfers against loopback servers that go silent at each step. Every bound is
//! sub-second here; each wait has a guard far above it, so a missing bound fails the test
//! instead of hanging it.

use futures::StreamExt;
use sandbox_e2b::{E2bBuilder, E2bSandbox};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind, ProcessEvent};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod support;
use support::{accept_stream, envelope, read_request, write_chunk};

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef01234567";
const SB: &str = "ilxb3ba8bnc0gpyx3i8ax";
/// Far above every bound under test: reaching it means the call had no bound.
const GUARD: Duration = Duration::from_secs(30);
const IDLE: Duration = Duration::from_millis(300);

/// A sandbox whose control plane is a wiremock server and whose envd is `envd_url`, built with
/// `configure` applied to the builder.
async fn sandbox(
    envd_url: &str,
    configure: impl FnOnce(E2bBuilder) -> E2bBuilder,
) -> (MockServer, E2bSandbox) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("/v2/sandboxes/{SB}/connect")))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "envdAccessToken": "tok_envd_123",
            "envdVersion": "0.6.13",
            "sandboxID": SB,
            "templateID": "rki5dems9wqfm4r03t7g"
        })))
        .mount(&server)
        .await;
    let builder = E2bBuilder::new()
        .api_key(KEY)
        .api_url(server.uri())
        .sandbox_url(envd_url);
    let sandbox = configure(builder)
        .build()
        .unwrap()
        .connect_sandbox(SB, None)
        .await
        .unwrap();
    (server, sandbox)
}

async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Holds `conn` open, reading and discarding, until the client goes away.
async fn hold(mut conn: TcpStream) {
    let mut buf = [0u8; 1024];
    while let Ok(n) = conn.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

async fn guarded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("{what} waited past the guard: no bound"))
}

#[tokio::test]
async fn open_streams_that_go_silent_end_with_transport() {
    for operation in ["exec", "attach", "watch"] {
        let (listener, url) = listener().await;
        // envd opens the stream (`start`), asks nothing more and then sends nothing.
        let envd = tokio::spawn(async move {
            let (mut conn, head) = accept_stream(&listener).await;
            let start = if head.starts_with("post /filesystem.filesystem/watchdir ") {
                r#"{"start":{}}"#
            } else {
                r#"{"event":{"start":{"pid":3}}}"#
            };
            write_chunk(&mut conn, &envelope(0, start)).await;
            hold(conn).await;
            head
        });
        let (_server, sandbox) = sandbox(&url, |b| b.stream_idle_timeout(IDLE)).await;
        let error = guarded(operation, async {
            match operation {
                "exec" => {
                    let mut p = sandbox
                        .exec(&Command::new("sleep").arg("99"))
                        .await
                        .unwrap();
                    p.next_event().await.unwrap().unwrap_err()
                }
                "attach" => {
                    let mut p = sandbox.attach("3").await.unwrap();
                    p.next_event().await.unwrap().unwrap_err()
                }
                _ => {
                    let mut w = sandbox.watch("/home/user", false).await.unwrap();
                    w.next().await.unwrap().unwrap_err()
                }
            }
        })
        .await;
        assert_eq!(error.kind(), ErrorKind::Transport, "{operation}: {error}");
        assert!(error.message().contains("went silent"), "{error}");
        assert_eq!(error.operation(), Some(operation), "{error}");
        assert_eq!(error.sandbox_id(), Some(SB));
        // The stream asked envd for keepalives every 50 s (PROTOCOL.md §3.3).
        let head = envd.await.unwrap();
        assert!(head.contains("keepalive-ping-interval: 50\r\n"), "{head}");
    }
}

#[tokio::test]
async fn keepalives_keep_a_quiet_stream_open_past_the_idle_bound() {
    let (listener, url) = listener().await;
    let envd = tokio::spawn(async move {
        let (mut conn, _) = accept_stream(&listener).await;
        write_chunk(&mut conn, &envelope(0, r#"{"event":{"start":{"pid":3}}}"#)).await;
        // Three idle bounds of quiet output, broken only by keepalives.
        for _ in 0..9 {
            tokio::time::sleep(IDLE / 3).await;
            write_chunk(&mut conn, &envelope(0, r#"{"event":{"keepalive":{}}}"#)).await;
        }
        let mut end = envelope(0, r#"{"event":{"data":{"stdout":"aGkK"}}}"#);
        end.extend(envelope(
            0,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ));
        end.extend(envelope(2, "{}"));
        write_chunk(&mut conn, &end).await;
        write_chunk(&mut conn, b"").await;
    });
    let (_server, sandbox) = sandbox(&url, |b| b.stream_idle_timeout(IDLE)).await;
    let out = guarded("run", sandbox.run(&Command::new("slow")))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "hi\n");
    envd.await.unwrap();
}

#[tokio::test]
async fn a_command_timeout_is_enforced_when_envd_goes_silent_after_start() {
    let (listener, url) = listener().await;
    let envd = tokio::spawn(async move {
        let (mut conn, head) = accept_stream(&listener).await;
        write_chunk(&mut conn, &envelope(0, r#"{"event":{"start":{"pid":3}}}"#)).await;
        hold(conn).await;
        head
    });
    // The default stream idle bound (65 s) is far away: only the command's timeout applies.
    let (_server, sandbox) = sandbox(&url, |b| b).await;
    let timeout = Duration::from_millis(200);
    let error = guarded(
        "run",
        sandbox.run(&Command::new("sleep").arg("99").timeout(timeout)),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    assert_eq!(error.operation(), Some("exec"));
    assert!(!error.is_retryable());
    assert!(error.message().contains("timeout of 200ms"), "{error}");
    // envd was told the same deadline, so it would have ended the process itself.
    let head = envd.await.unwrap();
    assert!(head.contains("connect-timeout-ms: 200\r\n"), "{head}");
}

#[tokio::test]
async fn envd_s_own_deadline_answer_wins_within_the_grace() {
    let (listener, url) = listener().await;
    tokio::spawn(async move {
        let (mut conn, _) = accept_stream(&listener).await;
        write_chunk(&mut conn, &envelope(0, r#"{"event":{"start":{"pid":3}}}"#)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let end = envelope(
            2,
            r#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#,
        );
        write_chunk(&mut conn, &end).await;
        write_chunk(&mut conn, b"").await;
    });
    let (_server, sandbox) = sandbox(&url, |b| b).await;
    let error = guarded(
        "run",
        sandbox.run(
            &Command::new("sleep")
                .arg("99")
                .timeout(Duration::from_millis(100)),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    assert!(error.message().contains("deadline_exceeded"), "{error}");
}

/// Answers `/files` requests with `respond` on each accepted connection.
async fn files_server<F, Fut>(respond: F) -> String
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let (listener, url) = listener().await;
    let respond = std::sync::Arc::new(respond);
    tokio::spawn(async move {
        loop {
            let (conn, _) = listener.accept().await.unwrap();
            let respond = respond.clone();
            tokio::spawn(async move { respond(conn).await });
        }
    });
    url
}

fn upload_body(len: usize) -> sandbox_sdk_core::UploadBody {
    Box::pin(std::io::Cursor::new(vec![b'x'; len]))
}

#[tokio::test]
async fn an_upload_whose_answer_never_comes_is_a_timeout() {
    // envd reads the whole body and never answers.
    let url = files_server(|mut conn| async move {
        read_request(&mut conn).await;
        hold(conn).await;
    })
    .await;
    let (_server, sandbox) = sandbox(&url, |b| {
        b.request_timeout(Duration::from_millis(300))
            .transfer_idle_timeout(IDLE)
    })
    .await;
    let error = guarded(
        "upload",
        sandbox.upload("/home/user/a.bin", upload_body(1 << 20)),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    assert_eq!(error.operation(), Some("upload"));
    assert!(error.is_ambiguous(), "the file may have been written");
}

#[tokio::test]
async fn an_upload_the_server_stops_reading_is_a_timeout() {
    // envd reads the head and a little of the body, then stops reading: the client's writes
    // block once the socket buffers are full.
    let url = files_server(|mut conn| async move {
        let mut buf = vec![0u8; 16 * 1024];
        let _ = conn.read(&mut buf).await;
        tokio::time::sleep(GUARD).await;
    })
    .await;
    let (_server, sandbox) = sandbox(&url, |b| {
        b.request_timeout(Duration::from_millis(300))
            .transfer_idle_timeout(IDLE)
    })
    .await;
    let error = guarded(
        "upload",
        sandbox.upload("/home/user/a.bin", upload_body(64 << 20)),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
}

/// Reads a whole download.
async fn collect(download: sandbox_sdk_core::Download) -> sandbox_sdk_core::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut chunks = download.into_stream();
    while let Some(chunk) = chunks.next().await {
        body.extend_from_slice(&chunk?);
    }
    Ok(body)
}

#[tokio::test]
async fn a_download_that_goes_silent_mid_body_ends_with_transport() {
    let url = files_server(|mut conn| async move {
        read_request(&mut conn).await;
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nfirst bytes")
            .await
            .unwrap();
        hold(conn).await;
    })
    .await;
    let (_server, sandbox) = sandbox(&url, |b| b.transfer_idle_timeout(IDLE)).await;
    let download = guarded("download", sandbox.download("/home/user/a.bin"))
        .await
        .unwrap();
    let error = guarded("download body", collect(download))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport, "{error}");
    assert!(error.message().contains("went silent"), "{error}");
}

#[tokio::test]
async fn a_steady_download_outlives_the_request_timeout() {
    // No total limit: 8 chunks 100 ms apart take longer than the 300 ms request timeout.
    let url = files_server(|mut conn| async move {
        read_request(&mut conn).await;
        conn.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            conn.write_all(b"4\r\nabcd\r\n").await.unwrap();
        }
        conn.write_all(b"0\r\n\r\n").await.unwrap();
        hold(conn).await;
    })
    .await;
    let (_server, sandbox) = sandbox(&url, |b| {
        b.request_timeout(Duration::from_millis(300))
            .transfer_idle_timeout(IDLE)
    })
    .await;
    let download = guarded("download", sandbox.download("/home/user/a.bin"))
        .await
        .unwrap();
    let body = guarded("download body", collect(download)).await.unwrap();
    assert_eq!(body.len(), 32);
}

#[tokio::test]
async fn an_upload_counts_what_it_sent_through_the_reader_path() {
    let url = files_server(|mut conn| async move {
        let (head, body) = read_request(&mut conn).await;
        assert!(head.starts_with("post /files?"), "{head}");
        assert!(
            head.contains("content-type: application/octet-stream"),
            "{head}"
        );
        assert!(body.len() > 3 << 20, "{}", body.len());
        let answer = r#"[{"name":"a.bin","path":"/home/user/a.bin","type":"file"}]"#;
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        conn.write_all(reply.as_bytes()).await.unwrap();
        hold(conn).await;
    })
    .await;
    let (_server, sandbox) = sandbox(&url, |b| b).await;
    let sent = guarded(
        "upload",
        sandbox.upload("/home/user/a.bin", upload_body(3 << 20)),
    )
    .await
    .unwrap();
    assert_eq!(sent.bytes, 3 << 20);
}

/// An exec that ends normally is not cut by its timeout's grace (a regression guard for the
/// client-side deadline: it only fires on a stream still open past it).
#[tokio::test]
async fn a_command_that_ends_in_time_keeps_its_exit_status() {
    let (listener, url) = listener().await;
    tokio::spawn(async move {
        let (mut conn, _) = accept_stream(&listener).await;
        let mut body = envelope(0, r#"{"event":{"start":{"pid":3}}}"#);
        body.extend(envelope(
            0,
            r#"{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}"#,
        ));
        body.extend(envelope(2, "{}"));
        write_chunk(&mut conn, &body).await;
        write_chunk(&mut conn, b"").await;
    });
    let (_server, sandbox) = sandbox(&url, |b| b).await;
    let mut p = sandbox
        .exec(&Command::new("false").timeout(Duration::from_millis(100)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let event = guarded("exit", p.next_event()).await.unwrap().unwrap();
    assert!(
        matches!(event, ProcessEvent::Exit(s) if s.code == Some(3)),
        "{event:?}"
    );
}
