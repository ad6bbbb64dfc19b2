//! Processes against a loopback envd: the `Start` stream (stdout and stderr apart, exit codes, errors
//! before the first event, deadlines), kill, stdin, pty, attach, and streams read as they arrive.

use futures::StreamExt;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind, ProcessEvent, PtySize};
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

mod support;
use support::*;

/// PROTOCOL.md §9 Example A: headers, enveloped body, stdout, exit 0.
#[tokio::test]
async fn exec_streams_stdout_and_sends_no_deadline_by_default() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("content-type", "application/connect+json"))
        .and(header("connect-protocol-version", "1"))
        .and(header("e2b-sandbox-id", SB))
        .and(header("e2b-sandbox-port", "49983"))
        .and(header("x-access-token", TOKEN))
        .and(|r: &Request| {
            !r.headers.contains_key("connect-timeout-ms")
                && !r.headers.contains_key("x-api-key")
                && !r.headers.contains_key("authorization")
                && !r.headers.contains_key("accept-encoding")
                && request_envelope_json(r)
                    == serde_json::json!({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false})
        })
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":412}}}"#,
            r#"{"event":{"data":{"stdout":"aGkK"}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let out = sandbox
        .run(&Command::new("/bin/bash").args(["-l", "-c", "echo hi"]))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "hi\n");
    assert_eq!(out.stderr_lossy(), "");
    assert_eq!(out.status.code, Some(0));
}

/// Example B: stderr apart, non-zero exit, spaced JSON.
#[tokio::test]
async fn exec_keeps_stderr_apart_and_reports_exit_code() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("connect-timeout-ms", "60000"))
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":413}}}"#,
            r#"{"event":{"data":{"stdout":"b3V0"}}}"#,
            r#"{"event":{"data":{"stderr":"b29wcwo="}}}"#,
            r#"{"event":{"keepalive":{}}}"#,
            r#"{"event":{"end":{"exitCode":3, "exited":true, "status":"exit status 3", "error":"exit status 3"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let out = sandbox
        .run(&Command::shell("exit 3").timeout(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "out");
    assert_eq!(out.stderr_lossy(), "oops\n");
    assert_eq!(out.status.code, Some(3));
}

/// Example C: an error before the first event, on HTTP 200.
#[tokio::test]
async fn exec_error_before_first_event_fails_exec() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("authorization", "Basic cm9vdDo="))
        .respond_with(connect_response(envelope(
            2,
            r#"{"error":{"code":"invalid_argument","message":"cwd '/nope' does not exist"}}"#,
        )))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox
        .exec(&Command::shell("ls").cwd("/nope").user("root"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Validation);
    assert!(e.message().contains("cwd '/nope' does not exist"), "{e}");
    assert_eq!(e.sandbox_id(), Some(SB));
}

#[tokio::test]
async fn exec_deadline_exceeded_is_a_timeout() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(header("connect-timeout-ms", "1000"))
        .respond_with(connect_response(stream_body(
            &[
                r#"{"event":{"start":{"pid":9}}}"#,
                r#"{"event":{"keepalive":{}}}"#,
            ],
            r#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#,
        )))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox
        .run(
            &Command::new("sleep")
                .arg("30")
                .timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
}

#[tokio::test]
async fn utf8_split_across_frames_is_kept_byte_exact() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    let text = "héllo→wörld";
    let bytes = text.as_bytes();
    // Split inside the two-byte é and inside the three-byte arrow.
    let parts = [&bytes[..2], &bytes[2..7], &bytes[7..]];
    let messages: Vec<String> = parts
        .iter()
        .map(|p| format!(r#"{{"event":{{"data":{{"stdout":"{}"}}}}}}"#, b64(p)))
        .collect();
    let mut all = vec![r#"{"event":{"start":{"pid":1}}}"#.to_owned()];
    all.extend(messages);
    all.push(r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#.into());
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    process_start()
        .respond_with(events(&refs))
        .mount(&server)
        .await;
    let mut p = sandbox.exec(&Command::new("cat").arg("x")).await.unwrap();
    let mut chunks = Vec::new();
    while let Some(ev) = p.next_event().await {
        match ev.unwrap() {
            ProcessEvent::Stdout(b) => chunks.push(b),
            ProcessEvent::Exit(s) => assert!(s.success()),
            ProcessEvent::Stderr(_) => panic!("no stderr expected"),
        }
    }
    assert_eq!(chunks.len(), 3);
    assert_eq!(&chunks[0][..], &bytes[..2]);
    let joined: Vec<u8> = chunks.concat();
    assert_eq!(joined, bytes);
}

#[tokio::test]
async fn killed_process_reports_the_signal_and_kill_is_unary() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/process.Process/SendSignal"))
        .and(header("content-type", "application/json"))
        .and(header("x-access-token", TOKEN))
        .and(body_json(
            serde_json::json!({"process":{"pid":77},"signal":"SIGNAL_SIGKILL"}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(2)
        .mount(&server)
        .await;
    process_start()
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":77}}}"#,
            r#"{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}"#,
        ]))
        .mount(&server)
        .await;
    let p = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    assert_eq!(p.pid(), "77");
    sandbox.kill_process("77").await.unwrap();
    p.kill().await.unwrap();
    let status = p.wait().await.unwrap();
    assert_eq!(status.signal, Some(9));
    assert!(!status.success());
}

#[tokio::test]
async fn stdin_is_sent_as_input_then_closed() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(|r: &Request| request_envelope_json(r)["stdin"] == serde_json::json!(true))
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":5}}}"#,
            r#"{"event":{"data":{"stdout":"aGVsbG8="}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/process.Process/SendInput"))
        .and(body_json(
            serde_json::json!({"process":{"pid":5},"input":{"stdin":"aGVsbG8="}}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/process.Process/CloseStdin"))
        .and(body_json(serde_json::json!({"process":{"pid":5}})))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    let mut p = sandbox.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = p.take_stdin().unwrap();
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"hello").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    // The exit waits for the queued input and the close to be sent: no polling needed.
    let out = p.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "hello");
}

/// Mounts a `Start` that announces pid 5 and a `cat` waiting for input.
async fn cat_with_stdin(server: &MockServer) {
    process_start()
        .and(|r: &Request| request_envelope_json(r)["stdin"] == serde_json::json!(true))
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":5}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .mount(server)
        .await;
}

/// Runs `cat` with stdin, `SendInput` answered `send` and `CloseStdin` answered `close`
/// (expected `close_calls` times), writes `hello` and returns the error the writer's shutdown
/// gives, as a core error, with the writer.
async fn stdin_shutdown_error(
    send: ResponseTemplate,
    close: ResponseTemplate,
    close_calls: u64,
) -> (sandbox_sdk_core::Error, sandbox_sdk_core::Stdin, MockServer) {
    use tokio::io::AsyncWriteExt;
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    cat_with_stdin(&server).await;
    for (call, answer, times) in [("SendInput", send, 1), ("CloseStdin", close, close_calls)] {
        Mock::given(method("POST"))
            .and(path(format!("/process.Process/{call}")))
            .respond_with(answer)
            .expect(times)
            .mount(&server)
            .await;
    }
    let mut p = sandbox.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = p.take_stdin().unwrap();
    stdin.write_all(b"hello").await.unwrap();
    let e = sandbox_sdk_core::Error::from(stdin.shutdown().await.unwrap_err());
    (e, stdin, server)
}

/// A 401 on `SendInput` reaches the stdin writer as `Unauthorized`, not a broken pipe: the
/// shutdown waits for the pump's word and answers with its error.
#[tokio::test]
async fn stdin_refused_with_401_is_unauthorized_at_the_writer() {
    use tokio::io::AsyncWriteExt;
    let (e, mut stdin, _server) = stdin_shutdown_error(
        ResponseTemplate::new(401).set_body_raw(
            "{\"code\":401,\"message\":\"unauthorized access\"}\n",
            "application/json; charset=utf-8",
        ),
        ResponseTemplate::new(200).set_body_json(serde_json::json!({})),
        0,
    )
    .await;
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    assert_eq!(e.status(), Some(401));
    assert!(!format!("{e:?}{e}").contains(TOKEN));
    // A later write says the same, not a bare "stdin is closed".
    assert!(stdin.write_all(b"more").await.is_err());
}

/// A 429 on `CloseStdin` reaches the writer as `QuotaExceeded` with its `Retry-After`.
#[tokio::test]
async fn stdin_close_rate_limited_is_quota_exceeded_at_the_writer() {
    let (e, _stdin, _server) = stdin_shutdown_error(
        ResponseTemplate::new(200).set_body_json(serde_json::json!({})),
        ResponseTemplate::new(429)
            .insert_header("retry-after", "7")
            .set_body_json(serde_json::json!({"code": 429, "message": "rate limited"})),
        1,
    )
    .await;
    assert_eq!(e.kind(), ErrorKind::QuotaExceeded, "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
}

#[tokio::test]
async fn pty_exec_and_resize() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .and(|r: &Request| {
            request_envelope_json(r)["pty"] == serde_json::json!({"size":{"cols":100,"rows":30}})
        })
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":6}}}"#,
            r#"{"event":{"data":{"pty":"MzAgMTAwDQo="}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/process.Process/Update"))
        .and(body_json(
            serde_json::json!({"process":{"pid":6},"pty":{"size":{"cols":120,"rows":40}}}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({})))
        .expect(1)
        .mount(&server)
        .await;
    let p = sandbox
        .exec(&Command::shell("stty size").pty(PtySize {
            cols: 100,
            rows: 30,
        }))
        .await
        .unwrap();
    p.resize(PtySize {
        cols: 120,
        rows: 40,
    })
    .await
    .unwrap();
    let out = p.output().await.unwrap();
    assert!(out.stdout_lossy().contains("30 100"));
}

#[tokio::test]
async fn attach_by_tag_and_list_processes() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    Mock::given(method("POST"))
        .and(path("/process.Process/List"))
        .and(body_json(serde_json::json!({})))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "processes": [{"config": {"cmd": "sh", "args": ["-c", "sleep 2"]}, "pid": 12, "tag": "bg"}]
        })))
        .expect(1)
        .mount(&server)
        .await;
    let list = sandbox.processes().await.unwrap();
    assert_eq!(list[0].pid, "12");
    assert_eq!(list[0].argv, ["sh", "-c", "sleep 2"]);
    Mock::given(method("POST"))
        .and(path("/process.Process/Connect"))
        .and(|r: &Request| request_envelope_json(r) == serde_json::json!({"process":{"tag":"bg"}}))
        .respond_with(events(&[
            r#"{"event":{"start":{"pid":12}}}"#,
            r#"{"event":{"data":{"stdout":"ZG9uZQ=="}}}"#,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let out = sandbox.attach("bg").await.unwrap().output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "done");
    Mock::given(method("POST"))
        .and(path("/process.Process/Connect"))
        .and(|r: &Request| request_envelope_json(r) == serde_json::json!({"process":{"pid":999}}))
        .respond_with(connect_response(envelope(
            2,
            r#"{"error":{"code":"not_found","message":"process with pid 999 not found"}}"#,
        )))
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(
        sandbox.attach("999").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn edge_proxy_sandbox_not_found_is_not_running() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .respond_with(ResponseTemplate::new(502).set_body_raw(
            format!(r#"{{"sandboxId":"{SB}","message":"The sandbox was not found","code":502}}"#),
            "application/json; charset=utf-8",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotRunning);
    assert_eq!(e.status(), Some(502));
}

#[tokio::test]
async fn envd_plain_401_on_an_rpc_path_is_unauthorized() {
    let server = MockServer::start().await;
    let sandbox = connected(&server).await;
    process_start()
        .respond_with(ResponseTemplate::new(401).set_body_raw(
            "{\"code\":401,\"message\":\"unauthorized access, please provide a valid access token or method signing if supported\"}\n",
            "application/json; charset=utf-8",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let e = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized);
    assert!(!format!("{e:?}{e}").contains(TOKEN));
}

#[tokio::test]
async fn dropping_a_process_closes_its_stream() {
    use tokio::io::AsyncReadExt;
    let server = MockServer::start().await;
    let (listener, envd_url) = raw_envd().await;
    // envd sends `start` and then nothing: the stream stays open until the client goes away.
    let envd = tokio::spawn(async move {
        let (mut conn, head) = accept_stream(&listener).await;
        assert!(head.starts_with("post /process.process/start "), "{head}");
        write_chunk(&mut conn, &envelope(0, r#"{"event":{"start":{"pid":3}}}"#)).await;
        let mut buf = [0u8; 256];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    let sandbox = connected_to(&server, &envd_url).await;
    let p = sandbox
        .exec(&Command::new("sleep").arg("99"))
        .await
        .unwrap();
    assert_eq!(p.pid(), "3");
    let weak = std::sync::Arc::downgrade(&p.control());
    drop(p);
    // No reader task holds the process's parts once the handle is gone...
    assert!(weak.upgrade().is_none());
    // ...and the connection is closed: envd sees the client go away (a task left reading the
    // stream would keep it open; the limit only guards against hanging).
    tokio::time::timeout(Duration::from_secs(30), envd)
        .await
        .expect("the Start stream stayed open after the process handle was dropped")
        .unwrap();
}

#[tokio::test]
async fn streamed_events_arrive_before_the_stream_ends() {
    // A process handle is a lazy stream: events are decoded as they arrive, not at the end.
    let server = MockServer::start().await;
    let (listener, envd_url) = raw_envd().await;
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let envd = tokio::spawn(async move {
        let (mut conn, _) = accept_stream(&listener).await;
        write_chunk(&mut conn, &envelope(0, r#"{"event":{"start":{"pid":2}}}"#)).await;
        write_chunk(
            &mut conn,
            &envelope(0, r#"{"event":{"data":{"stdout":"b25l"}}}"#),
        )
        .await;
        // The rest is only sent once the client has seen "one".
        wait.await.unwrap();
        let mut rest = envelope(0, r#"{"event":{"data":{"stdout":"dHdv"}}}"#);
        rest.extend(envelope(
            0,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        ));
        rest.extend(envelope(2, "{}"));
        // Split inside an envelope, so the decoder has to join chunks.
        write_chunk(&mut conn, &rest[..7]).await;
        write_chunk(&mut conn, &rest[7..]).await;
        write_chunk(&mut conn, b"").await;
    });
    let sandbox = connected_to(&server, &envd_url).await;
    let mut p = sandbox
        .exec(&Command::shell("printf one; sleep 1; printf two"))
        .await
        .unwrap();
    assert!(!p.is_streaming_emulated());
    let first = p.next().await.unwrap().unwrap();
    assert!(
        matches!(&first, ProcessEvent::Stdout(b) if &b[..] == b"one"),
        "{first:?}"
    );
    go.send(()).unwrap();
    let events: Vec<_> = p.collect().await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(&events[0], Ok(ProcessEvent::Stdout(b)) if &b[..] == b"two"));
    assert!(matches!(&events[1], Ok(ProcessEvent::Exit(s)) if s.code == Some(0)));
    envd.await.unwrap();
}
