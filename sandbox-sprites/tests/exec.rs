//! Commands over the exec WebSocket (PROTOCOL.md §5, §18.6–§18.7): scripted sockets on the
//! conformance kit's replay server for the cases a live server will not produce on demand (a
//! socket that breaks mid-stream, a session gone), and the Sprites simulator for real
//! processes.

use sandbox_conformance::cassette::{Cassette, TOKEN};
use sandbox_conformance::replay::ReplayServer;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, ErrorKind, ProcessEvent};
use sandbox_sim::Simulator;
use sandbox_sprites::SpritesProvider;
use serde_json::{Value, json};
use std::time::Duration;

const NAME: &str = "box-1";

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn server_bin(stream: u8, data: &[u8]) -> Value {
    let mut frame = vec![stream];
    frame.extend_from_slice(data);
    json!({"server": {"binary_base64": b64(&frame)}})
}

fn session_info(id: u32) -> Value {
    json!({"server": {"text": json!({"type": "session_info", "session_id": id, "tty": false}).to_string()}})
}

fn get_sprite() -> Value {
    json!({
        "request": {"method": "GET", "path": format!("/v1/sprites/{NAME}")},
        "response": {"status": 200, "body": {"json": {"name": NAME, "status": "warm"}}}
    })
}

/// The spawn of `sh -c LINE` as the adapter sends it (a foreground command), answered with
/// `script` on the socket.
fn spawn(line: &str, script: Vec<Value>) -> Value {
    spawn_answered(line, json!({"status": 101, "websocket": script}))
}

fn spawn_answered(line: &str, response: Value) -> Value {
    json!({
        "request": {
            "method": "GET",
            "path": format!("/v1/sprites/{NAME}/exec"),
            "query": {
                "cmd": ["sh", "-c", line], "path": "sh", "stdin": "false", "tty": "false",
                "dir": "/home/sprite", "max_run_after_disconnect": "120s"
            },
            "headers": {"authorization": format!("Bearer {TOKEN}")}
        },
        "response": response
    })
}

fn attach(id: u32, response: Value) -> Value {
    json!({
        "request": {
            "method": "GET",
            "path": format!("/v1/sprites/{NAME}/exec/{id}"),
            "query": {"stdin": "false"}
        },
        "response": response
    })
}

async fn replay(interactions: Vec<Value>) -> (ReplayServer, SpritesProvider) {
    let cassette = Cassette::from_json(
        &json!({
            "provider": "sprites", "scenario": "exec",
            "provenance": {"kind": "spec", "date": "2026-12-05", "source": "sandbox-sprites/PROTOCOL.md §5.5, §18.6"},
            "interactions": interactions
        })
        .to_string(),
    )
    .unwrap();
    let server = ReplayServer::start().await.unwrap();
    server.mount(&cassette, false).await.unwrap();
    let provider = SpritesProvider::builder()
        .token(TOKEN)
        .api_url(server.url())
        .stream_idle_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    (server, provider)
}

#[tokio::test]
async fn a_broken_socket_is_re_attached_and_the_replay_is_not_repeated() {
    let (server, provider) = replay(vec![
        get_sprite(),
        spawn(
            "work",
            vec![
                session_info(41),
                server_bin(1, b"one "),
                server_bin(2, b"warn "),
                json!("reset"),
            ],
        ),
        attach(
            41,
            json!({"status": 101, "websocket": [
                // The replay: everything the session printed, from its first byte.
                server_bin(1, b"one "),
                server_bin(2, b"warn "),
                server_bin(1, b"two "),
                session_info(41),
                server_bin(1, b"three"),
                server_bin(3, &[3]),
                {"client_close": null}
            ]}),
        ),
    ])
    .await;
    let sb = provider.connect(NAME).await.unwrap();
    let out = sb.run(&Command::shell("work")).await.unwrap();
    assert_eq!(out.stdout_lossy(), "one two three");
    assert_eq!(out.stderr_lossy(), "warn ");
    assert_eq!(out.status.code, Some(3));
    server.verify().await.unwrap();
}

#[tokio::test]
async fn re_attaches_that_only_replay_known_output_are_counted_and_end_following() {
    let mut attach_again = attach(
        41,
        json!({"status": 101, "websocket": [
            server_bin(1, b"seen"),
            session_info(41),
            "reset"
        ]}),
    );
    attach_again["times"] = json!(2);
    let (server, _) = replay(vec![
        get_sprite(),
        spawn(
            "work",
            vec![session_info(41), server_bin(1, b"seen"), json!("reset")],
        ),
        attach_again,
    ])
    .await;
    let provider = SpritesProvider::builder()
        .token(TOKEN)
        .api_url(server.url())
        .stream_idle_timeout(Duration::from_secs(5))
        .max_reattaches(2)
        .build()
        .unwrap();
    let sb = provider.connect(NAME).await.unwrap();
    let mut process = sb.exec(&Command::shell("work")).await.unwrap();
    assert_eq!(
        process.next_event().await.unwrap().unwrap(),
        ProcessEvent::Stdout("seen".into())
    );
    let err = process.next_event().await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert!(
        err.message().contains("2 re-attaches brought nothing"),
        "{err}"
    );
    server.verify().await.unwrap();
}

#[tokio::test]
async fn a_pty_reads_raw_terminal_bytes_sends_resizes_and_takes_the_exit_message() {
    let spawn_tty = json!({
        "request": {
            "method": "GET",
            "path": format!("/v1/sprites/{NAME}/exec"),
            "query": {
                "cmd": ["sh", "-c", "work"], "path": "sh", "stdin": "false", "tty": "true",
                "cols": "80", "rows": "24", "dir": "/home/sprite",
                "max_run_after_disconnect": "120s"
            }
        },
        "response": {"status": 101, "websocket": [
            {"server": {"text": json!({"type": "session_info", "session_id": 9, "tty": true}).to_string()}},
            // Raw terminal bytes: no stream id, so a leading 0x01 is data.
            {"server": {"binary_base64": b64(b"\x01raw\r\n")}},
            {"client": {"json": {"type": "resize", "cols": 120, "rows": 40}}},
            {"server": {"binary_base64": b64(b"40 120\r\n")}},
            {"server": {"text": json!({"type": "exit", "exit_code": 4}).to_string()}},
            {"client_close": null}
        ]}
    });
    let (server, provider) = replay(vec![get_sprite(), spawn_tty]).await;
    let sb = provider.connect(NAME).await.unwrap();
    let mut process = sb
        .exec(&Command::shell("work").pty(sandbox_sdk_core::PtySize { cols: 80, rows: 24 }))
        .await
        .unwrap();
    assert_eq!(
        process.next_event().await.unwrap().unwrap(),
        ProcessEvent::Stdout("\x01raw\r\n".into())
    );
    process
        .resize(sandbox_sdk_core::PtySize {
            cols: 120,
            rows: 40,
        })
        .await
        .unwrap();
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "40 120\r\n");
    assert_eq!(out.status.code, Some(4));
    server.verify().await.unwrap();
}

#[tokio::test]
async fn a_command_past_its_timeout_whose_exit_never_comes_still_ends() {
    // The kill is answered, but the socket stays open (pings answered) and no exit comes: the
    // process ends with Timeout one idle bound after the kill instead of waiting for ever.
    let (server, _) = replay(vec![
        get_sprite(),
        spawn("sleep 60", vec![session_info(41)]),
        json!({
            "request": {"method": "POST", "path": format!("/v1/sprites/{NAME}/exec/41/kill"),
                        "query": {"signal": "SIGKILL"}},
            "response": {"status": 200, "body": {"text": "{\"type\":\"complete\",\"exit_code\":137}\n"}}
        }),
    ])
    .await;
    let provider = SpritesProvider::builder()
        .token(TOKEN)
        .api_url(server.url())
        .stream_idle_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let sb = provider.connect(NAME).await.unwrap();
    let err = sb
        .run(&Command::shell("sleep 60").timeout(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    server.verify().await.unwrap();
}

#[tokio::test]
async fn a_session_gone_while_detached_ends_the_process_with_an_ambiguous_transport_error() {
    let (server, provider) = replay(vec![
        get_sprite(),
        spawn(
            "work",
            vec![session_info(41), server_bin(1, b"partial"), json!("reset")],
        ),
        attach(
            41,
            json!({"status": 404, "body": {"json": {"error": "session not found"}}}),
        ),
    ])
    .await;
    let sb = provider.connect(NAME).await.unwrap();
    let mut process = sb.exec(&Command::shell("work")).await.unwrap();
    assert_eq!(process.pid(), "41");
    let first = process.next_event().await.unwrap().unwrap();
    assert_eq!(first, ProcessEvent::Stdout("partial".into()));
    let err = process.next_event().await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert!(err.is_ambiguous());
    assert!(err.message().contains("41 is gone"), "{err}");
    server.verify().await.unwrap();
}

#[tokio::test]
async fn a_refused_upgrade_maps_like_any_answer_and_never_shows_the_token() {
    let (server, provider) = replay(vec![
        get_sprite(),
        spawn_answered(
            "work",
            json!({"status": 401, "body": {"json": {"error": format!("bad token Bearer {TOKEN}")}}}),
        ),
    ])
    .await;
    let sb = provider.connect(NAME).await.unwrap();
    let err = sb.run(&Command::shell("work")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(!format!("{err} {err:?}").contains(TOKEN), "{err}");
    server.verify().await.unwrap();
}

/// A loopback server answering every request with `answer(request head)`: a whole HTTP/1.1
/// response with `Content-Length` (the replay server sends chunked bodies, which the upgrade
/// client does not decode).
async fn answering(answer: fn(&str) -> (u16, String)) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                loop {
                    while !head.ends_with(b"\r\n\r\n") {
                        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let (status, body) = answer(&String::from_utf8_lossy(&head));
                    head.clear();
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// Issue 33 item 6: the refused upgrade's body was scrubbed byte by byte, so a token echoed
/// with JSON escapes came back whole once the body was decoded into the message.
#[tokio::test]
async fn a_refused_upgrade_echoing_the_token_escaped_never_shows_it() {
    let url = answering(|head| {
        if head.contains("/exec") {
            let escaped: String = TOKEN
                .chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect();
            (400, format!(r#"{{"error":"bad token {escaped} here"}}"#))
        } else {
            (200, json!({"name": NAME, "status": "warm"}).to_string())
        }
    })
    .await;
    let provider = SpritesProvider::builder()
        .token(TOKEN)
        .api_url(url)
        .build()
        .unwrap();
    let sb = provider.connect(NAME).await.unwrap();
    let err = sb.run(&Command::shell("work")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation, "{err}");
    let text = format!("{err} {err:?}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.contains("bad token <redacted> here"), "{text}");
}

/// Issue 33 item 8: `Command::env` travels in the exec URL's query (the protocol has no
/// private place for it), so a refused upgrade that quotes its request line, as servers and
/// proxies do, must not get the values into the error.
#[tokio::test]
async fn a_refused_upgrade_quoting_the_exec_url_never_shows_env_values() {
    let url = answering(|head| {
        if head.contains("/exec") {
            let line = head.lines().next().unwrap_or_default().replace('"', "'");
            (400, format!(r#"{{"error":"bad request: {line}"}}"#))
        } else {
            (200, json!({"name": NAME, "status": "warm"}).to_string())
        }
    })
    .await;
    let provider = SpritesProvider::builder()
        .token(TOKEN)
        .api_url(url)
        .build()
        .unwrap();
    let sb = provider.connect(NAME).await.unwrap();
    let command = Command::new("deploy")
        .env("API_TOKEN", "s3cr3t/value 42")
        .env("SHORT", "xy");
    let err = sb.run(&command).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation, "{err}");
    let text = format!("{err} {err:?}");
    for shown in ["s3cr3t", "s3cr3t%2Fvalue%2042", "SHORT=xy", "SHORT%3Dxy"] {
        assert!(!text.contains(shown), "{shown} in {text}");
    }
    assert!(
        text.contains("bad request: GET /v1/sprites/box-1/exec?"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn output_larger_than_the_replay_buffer_arrives_whole() {
    // The simulator keeps 64 KiB for replays; a live reader must still get every byte.
    let sim = sandbox_sim::sprites::SpritesSim::builder()
        .scrollback(64 * 1024)
        .start()
        .await
        .unwrap();
    let provider = SpritesProvider::builder()
        .token(sim.token())
        .api_url(sim.url())
        .build()
        .unwrap();
    let sb = provider.create(&CreateSpec::new()).await.unwrap();
    let n = 4 * 1024 * 1024;
    let out = sb
        .run(&Command::shell(format!(
            "yes 0123456789abcdef | head -c {n}"
        )))
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), n);
    assert!(out.status.success());
    sb.destroy().await.unwrap();
}
