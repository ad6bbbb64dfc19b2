//! Commands (PROTOCOL.md §6): bodies, NDJSON output kept apart, exits, background commands,
//! re-attach, kill, and a stream that is cut while the command runs (§11).

mod common;

use common::raw::{self, Reply};
use common::*;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind, ProcessEvent};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn stream_answer(lines: &[serde_json::Value]) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(ndjson(lines), "application/x-ndjson")
}

#[tokio::test]
async fn a_command_sends_env_cwd_sudo_and_timeout_and_keeps_stdout_and_stderr_apart() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(stream_answer(&[
            json!({"command": command_json("c1", None)}),
            json!({"stream": "stdout", "data": "out"}),
            json!({"stream": "stderr", "data": "err"}),
            json!({"stream": "stdout", "data": "put"}),
            json!({"command": command_json("c1", Some(3))}),
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let out = sb
        .run(
            &Command::new("python3")
                .args(["-c", "x"])
                .cwd("work")
                .env("K", "it's $V")
                .user("root")
                .timeout(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "output");
    assert_eq!(out.stderr_lossy(), "err");
    assert_eq!(out.status.code, Some(3));
    assert!(!out.status.emulated);
    assert_eq!(
        bodies(&server, "POST", &session_path("/cmd")).await,
        [
            json!({"command": "python3", "args": ["-c", "x"], "cwd": "/vercel/sandbox/work",
                "env": {"K": "it's $V"}, "sudo": true, "wait": true, "logs": true, "timeout": 100})
        ]
    );
}

#[tokio::test]
async fn users_other_than_root_and_a_pty_are_refused_before_sending() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    let before = server.received_requests().await.unwrap().len();
    let err = sb.run(&Command::new("id").user("alice")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation);
    assert_eq!(
        sb.exec(&Command::new("top").pty(sandbox_sdk_core::PtySize { cols: 80, rows: 24 }))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotSupported
    );
    assert_eq!(server.received_requests().await.unwrap().len(), before);
}

/// A stream failure line (`sandbox_stream_closed`, §6.2) ends the command with `NotRunning`.
#[tokio::test]
async fn a_stream_error_line_is_an_error() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(stream_answer(&[
            json!({"command": command_json("c1", None)}),
            json!({"stream": "error", "data": {"code": "sandbox_stream_closed", "message": "Sandbox stream was closed and is not accepting commands."}}),
        ]))
        .mount(&server)
        .await;
    let err = sb.run(&Command::shell("sleep 9")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
    assert!(err.message().contains("sandbox_stream_closed"), "{err}");
}

/// Issue 33 item 6: a stream error record is a 200 answer, which the transport does not
/// scrub; its decoded message echoing the token (escaped or not) must not reach the error.
#[tokio::test]
async fn a_stream_error_line_echoing_the_token_never_shows_it() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    let escaped = TOKEN.replace('-', "\\u002d");
    let body = format!(
        "{}\n{{\"stream\":\"error\",\"data\":{{\"code\":\"boom\",\"message\":\"token {escaped} or {TOKEN} refused\"}}}}\n",
        json!({"command": command_json("c1", None)})
    );
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "application/x-ndjson"))
        .mount(&server)
        .await;
    let err = sb.run(&Command::shell("sleep 9")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    let text = format!("{err} {err:?}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.contains("refused [boom]"), "{text}");
}

/// A background command answers at once; its output comes from `/logs` and its exit from the
/// command's wait; `processes` lists it; `kill_process` sends SIGKILL, `signal` others.
#[tokio::test]
async fn background_commands_are_listed_attached_and_signalled() {
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"command": command_json("bg1", None)})),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(session_path("/cmd")))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"commands": [command_json("bg1", None), command_json("old", Some(0))]}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(session_path("/cmd/bg1/logs")))
        .respond_with(stream_answer(&[
            json!({"stream": "stdout", "data": "done"}),
        ]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(session_path("/cmd/bg1")))
        .and(query_param("wait", "true"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"command": command_json("bg1", Some(0))})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd/bg1/kill")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"command": command_json("bg1", None)})),
        )
        .expect(2)
        .mount(&server)
        .await;
    let process = sb
        .exec(&Command::shell("sleep 2; printf done").background())
        .await
        .unwrap();
    assert_eq!(process.pid(), "bg1");
    drop(process);
    assert_eq!(
        bodies(&server, "POST", &session_path("/cmd")).await[0],
        json!({"command": "sh", "args": ["-c", "sleep 2; printf done"]})
    );
    let listed = sb.processes().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed[0].running && !listed[1].running);
    assert_eq!(listed[0].argv, ["sh", "-c", "x"]);
    sb.kill_process("bg1").await.unwrap();
    sb.signal("bg1", 15).await.unwrap();
    let kills = bodies(&server, "POST", &session_path("/cmd/bg1/kill")).await;
    assert_eq!(kills, [json!({"signal": 9}), json!({"signal": 15})]);
    let out = sb.attach("bg1").await.unwrap().output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "done");
    assert_eq!(out.status.code, Some(0));
}

/// The start stream is cut after some output while the command runs (the edge's cut, §11):
/// the command is read, `/logs` replays from the first byte and what was handed out is
/// skipped, so the caller sees every byte once, and the exit.
#[tokio::test]
async fn a_cut_stream_reconnects_through_logs_without_repeating_output() {
    let first = ndjson(&[
        json!({"command": command_json("c1", None)}),
        json!({"stream": "stdout", "data": "one-"}),
        json!({"stream": "stderr", "data": "e1"}),
    ]);
    let server = raw::serve(vec![
        (
            "GET /v2/sandboxes/box-1?",
            Reply::json(envelope(NAME, "running", json!({}))),
            1,
        ),
        (
            "POST /v2/sandboxes/sessions/sbx_1/cmd?",
            Reply::ndjson_part(&first, true),
            1,
        ),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd/c1?",
            Reply::json(json!({"command": command_json("c1", None)})),
            1,
        ),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd/c1/logs?",
            Reply::ndjson(ndjson(&[
                json!({"stream": "stdout", "data": "on"}),
                json!({"stream": "stdout", "data": "e-two"}),
                json!({"stream": "stderr", "data": "e1e2"}),
            ])),
            1,
        ),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd/c1?teamId=team_t&wait=true",
            Reply::json(json!({"command": command_json("c1", Some(0))})),
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
    let mut process = sb.exec(&Command::shell("long")).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = process.next_event().await {
        events.push(event.unwrap());
    }
    let out: String = events
        .iter()
        .filter_map(|e| match e {
            ProcessEvent::Stdout(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect();
    let err: String = events
        .iter()
        .filter_map(|e| match e {
            ProcessEvent::Stderr(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(out, "one-two");
    assert_eq!(err, "e1e2");
    assert!(matches!(events.last(), Some(ProcessEvent::Exit(s)) if s.code == Some(0)));
    let requests = server.requests();
    assert_eq!(requests.len(), 5, "{requests:?}");
    assert!(requests[3].contains("/cmd/c1/logs"), "{requests:?}");
}

/// Cut before the first line, the command may or may not run: the session's commands are
/// listed (PROTOCOL.md §13.2); with no command there to follow, the error says so (ambiguous),
/// and nothing is sent again.
#[tokio::test]
async fn a_stream_cut_before_the_command_started_is_ambiguous() {
    let server = raw::serve(vec![
        (
            "GET /v2/sandboxes/box-1?",
            Reply::json(envelope(NAME, "running", json!({}))),
            1,
        ),
        (
            "POST /v2/sandboxes/sessions/sbx_1/cmd?",
            Reply::ndjson_part("", true),
            1,
        ),
        (
            "GET /v2/sandboxes/sessions/sbx_1/cmd?",
            Reply::json(json!({ "commands": [] })),
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
    let err = sb.exec(&Command::shell("x")).await.unwrap_err();
    assert!(err.is_ambiguous(), "{err}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(
        requests[2].starts_with("GET /v2/sandboxes/sessions/sbx_1/cmd?"),
        "{requests:?}"
    );
}

/// Answers stdin requests as the service does (PROTOCOL.md §6.6): `bytesWritten` is the
/// offset plus the decoded data; the first request of all answers 503 instead.
struct StdinServer {
    failed_once: std::sync::atomic::AtomicBool,
}

impl wiremock::Respond for StdinServer {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        use base64::Engine as _;
        if !self
            .failed_once
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return ResponseTemplate::new(503)
                .set_body_json(error_json("service_unavailable", "try again"));
        }
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let data = body["data"].as_str().map_or(0, |d| {
            base64::engine::general_purpose::STANDARD
                .decode(d)
                .unwrap()
                .len()
        });
        let written = body["offset"].as_u64().unwrap() + data as u64;
        ResponseTemplate::new(200)
            .set_body_json(json!({"command": command_json("c1", None), "bytesWritten": written}))
    }
}

/// A command with stdin is started with `attachStdin`; its writes go out in order as
/// `{data, offset}` with at most 512 KiB each, a request that failed (503) is sent again with
/// the same offset and data, and shutdown sends `{offset, close: true}` once everything is in.
#[tokio::test]
async fn stdin_goes_out_in_ordered_offset_chunks_resends_alike_and_closes() {
    use base64::Engine as _;
    use tokio::io::AsyncWriteExt;
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(stream_answer(&[
            json!({"command": command_json("c1", None)}),
            json!({"stream": "stdout", "data": "echoed"}),
            json!({"command": command_json("c1", Some(0))}),
        ]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd/c1/stdin")))
        .respond_with(StdinServer {
            failed_once: false.into(),
        })
        .mount(&server)
        .await;
    let mut process = sb.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = process.take_stdin().expect("a stdin writer");
    let big: Vec<u8> = (0..600 * 1024).map(|i| (i % 251) as u8).collect();
    let mut all = b"line one\n".to_vec();
    stdin.write_all(b"line one\n").await.unwrap();
    stdin.write_all(&big).await.unwrap();
    all.extend_from_slice(&big);
    stdin.shutdown().await.unwrap();
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "echoed");
    assert_eq!(
        bodies(&server, "POST", &session_path("/cmd")).await[0]["attachStdin"],
        true
    );
    let sent = bodies(&server, "POST", &session_path("/cmd/c1/stdin")).await;
    // The first request failed and went again unchanged.
    assert_eq!(sent[0], sent[1]);
    let (close, writes) = sent[1..].split_last().unwrap();
    assert_eq!(close, &json!({"offset": all.len(), "close": true}));
    let mut got = Vec::new();
    for w in writes {
        assert_eq!(w["offset"].as_u64().unwrap(), got.len() as u64, "{w}");
        assert!(w.get("close").is_none());
        let data = base64::engine::general_purpose::STANDARD
            .decode(w["data"].as_str().unwrap())
            .unwrap();
        assert!(!data.is_empty() && data.len() <= 512 * 1024);
        got.extend_from_slice(&data);
    }
    assert_eq!(got, all);
}

/// A command that takes no more input (`command_stdin_unavailable`, §6.6) fails the write as a
/// closed pipe would; a close then is not an error.
#[tokio::test]
async fn stdin_to_a_command_that_stopped_reading_fails_the_write_not_the_close() {
    use tokio::io::AsyncWriteExt;
    let server = MockServer::start().await;
    let sb = connected(&server).await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"command": command_json("c2", None)})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(session_path("/cmd/c2/stdin")))
        .respond_with(ResponseTemplate::new(400).set_body_json(error_json(
            "command_stdin_unavailable",
            "The command is not reading stdin.",
        )))
        .mount(&server)
        .await;
    let mut process = sb
        .exec(&Command::new("true").stdin().background())
        .await
        .unwrap();
    let mut stdin = process.take_stdin().unwrap();
    stdin.write_all(b"x").await.unwrap();
    let err = stdin.shutdown().await.unwrap_err();
    let err = sandbox_sdk_core::Error::from(err);
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    assert!(err.message().contains("no longer reads stdin"), "{err}");
    // One write, no retry of a refusal.
    assert_eq!(
        bodies(&server, "POST", &session_path("/cmd/c2/stdin")).await,
        [json!({"data": "eA==", "offset": 0})]
    );
    let mut process = sb
        .exec(&Command::new("true").stdin().background())
        .await
        .unwrap();
    process.take_stdin().unwrap().shutdown().await.unwrap();
}
