//! Commands through the toolbox against wiremock on loopback: session exec followed over a real
//! WebSocket (frames with split markers), poll mode, kill, background + attach, one-shot and
//! direct execute, sessions and their logs.

mod common;

use common::ws::{self, Script};
use common::*;
use sandbox_daytona::DaytonaBuilder;
use sandbox_sdk_core::emulate::KEY_PREFIX;
use sandbox_sdk_core::{Command, ErrorKind, ProcessEvent, Sandbox, SandboxExt};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{body_json, method, path, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The key the replayed sandbox makes (a fixed test value; a real one comes from its
/// `/dev/urandom`).
const SANDBOX_KEY: &str = "0123456789abcdef0123456789abcdef";

/// Stdout's first line: the key.
fn key_line() -> String {
    format!("{KEY_PREFIX}{SANDBOX_KEY}\n")
}

/// Stdout's end mark, with the status.
fn out_mark(code: i32) -> String {
    format!("__sandbox_mark_{SANDBOX_KEY}:{code}\n")
}

/// Stderr's end mark.
fn err_mark() -> String {
    format!("__sandbox_mark_{SANDBOX_KEY}:\n")
}

/// `GET` of the command `id` at the paths `path_re` matches answers it running `polls` times,
/// then ended with status 0.
async fn mount_command_ends_after(server: &MockServer, path_re: &str, id: &str, polls: u64) {
    Mock::given(method("GET"))
        .and(path_regex(path_re))
        .respond_with(ok(json!({"id": id, "command": "x"})))
        .up_to_n_times(polls)
        .with_priority(1)
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(path_re))
        .respond_with(ok(json!({"id": id, "command": "x", "exitCode": 0})))
        .with_priority(2)
        .mount(server)
        .await;
}

#[tokio::test]
async fn exec_follows_the_websocket_keeping_streams_apart_across_split_markers() {
    let server = MockServer::start().await;
    let front = ws::start(*server.address()).await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "(make test\n)").await;
    Mock::given(method("GET"))
        .and(path_regex(format!(
            "^/toolbox/sb1/process/session/{SID_RE}/command/cmd-1$"
        )))
        .respond_with(ok(
            json!({"id": "cmd-1", "command": "make test", "exitCode": 3}),
        ))
        // The keyed end marks carry the status: the daemon is not asked.
        .expect(0)
        .mount(&server)
        .await;
    // The session goes back to the handle's pool, not deleted.
    session_deleted().expect(0).mount(&server).await;
    // The upgrade path has a random session id; script every path the same way via a prefix
    // match done below once the session is known. Frames: the key line, a marker split 2+1
    // across frames, a frame that is exactly a marker, both streams in one frame, and the
    // stdout mark split across frames.
    let (mark, err_mark) = (out_mark(3), err_mark());
    let frames = vec![
        format!("\x01\x01\x01{}", key_line()).into_bytes(),
        b"\x01\x01\x01one\n\x02\x02".to_vec(),
        b"\x02warn\n\x01".to_vec(),
        b"\x01\x01two\n".to_vec(),
        b"\x02\x02\x02".to_vec(),
        format!("err2\n\x01\x01\x01three\n\x01\x01\x01{}", &mark[..20]).into_bytes(),
        format!("{}\x02\x02\x02{err_mark}", &mark[20..]).into_bytes(),
    ];
    let builder = common::builder(&server).toolbox_url(format!("{}/toolbox", front.uri()));
    let sandbox = sandbox_on(builder).await;
    let mut process = sandbox.exec(&Command::shell("make test")).await.unwrap();
    let sid = session_of(&server.received_requests().await.unwrap());
    front.script(
        &format!("/toolbox/sb1/process/session/{sid}/command/cmd-1/logs"),
        Script::Frames(frames, 1000),
    );
    assert!(!process.is_streaming_emulated());
    assert_eq!(process.pid(), format!("{sid}/cmd-1"));
    let mut events = Vec::new();
    while let Some(event) = process.next_event().await {
        events.push(event.unwrap());
    }
    let stdout: Vec<u8> = events
        .iter()
        .filter_map(|e| match e {
            ProcessEvent::Stdout(b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect();
    let stderr: Vec<u8> = events
        .iter()
        .filter_map(|e| match e {
            ProcessEvent::Stderr(b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(String::from_utf8(stdout).unwrap(), "one\ntwo\nthree\n");
    assert_eq!(String::from_utf8(stderr).unwrap(), "warn\nerr2\n");
    assert!(
        matches!(events.last(), Some(ProcessEvent::Exit(s)) if s.code == Some(3) && !s.emulated)
    );
    // Output arrived as it was written: several events before the exit.
    assert!(events.len() >= 5);
    let upgrades = front.upgrades();
    assert_eq!(upgrades.len(), 1);
    let (url, headers) = &upgrades[0];
    assert!(url.ends_with("?follow=true"), "{url}");
    assert_eq!(headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(headers["x-daytona-sdk-version"], "0.218.0");
    assert_eq!(headers["x-daytona-source"], "sdk-rust");
}

#[tokio::test]
async fn poll_mode_emits_output_as_it_grows_then_the_exit_code() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "(printf one; sleep 1; printf two >&2\n)").await;
    let cmd_path = format!("^/toolbox/sb1/process/session/{SID_RE}/command/cmd-1$");
    let logs_path = format!("^/toolbox/sb1/process/session/{SID_RE}/command/cmd-1/logs$");
    mount_command_ends_after(&server, &cmd_path, "cmd-1", 1).await;
    Mock::given(method("GET"))
        .and(path_regex(logs_path.as_str()))
        .respond_with(ok(
            json!({"output": "", "stdout": format!("{}one\n", key_line()), "stderr": ""}),
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET")).and(path_regex(logs_path.as_str()))
        .respond_with(ok(json!({"output": "", "stdout": format!("{}one\ntwo{}", key_line(), out_mark(0)), "stderr": format!("warn\n{}", err_mark())})))
        .with_priority(2).mount(&server).await;
    session_deleted().expect(0).mount(&server).await;
    let sandbox = polling_provider(&server).get("sb1").await.unwrap();
    let mut process = sandbox
        .exec(&Command::shell("printf one; sleep 1; printf two >&2"))
        .await
        .unwrap();
    assert!(process.is_streaming_emulated());
    let mut events = Vec::new();
    while let Some(e) = process.next_event().await {
        events.push(e.unwrap());
    }
    // The first poll's output came first; then only what the second added, once.
    assert_eq!(events[0], ProcessEvent::Stdout("one\n".into()));
    assert!(events[1..3].contains(&ProcessEvent::Stdout("two".into())));
    assert!(events[1..3].contains(&ProcessEvent::Stderr("warn\n".into())));
    assert!(matches!(events[3], ProcessEvent::Exit(s) if s.code == Some(0)));
    assert_eq!(events.len(), 4);
}

#[tokio::test]
async fn kill_deletes_the_session_and_the_process_ends_by_signal() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "'sleep' '30'").await;
    session_deleted().expect(1).mount(&server).await;
    // Running until its session is deleted.
    Mock::given(method("GET"))
        .and(path_regex(format!(
            "^/toolbox/sb1/process/session/{SID_RE}/command/cmd-1$"
        )))
        .respond_with(ok(json!({"id": "cmd-1", "command": "sleep 30"})))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    let sandbox = polling_provider(&server).get("sb1").await.unwrap();
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    sandbox.kill_process(process.pid()).await.unwrap();
    let status = process.wait().await.unwrap();
    assert!(!status.success());
    // A killed handle must not delete the session a second time (expect(1) above), nor
    // should the process control's kill.
}

#[tokio::test]
async fn dropping_a_foreground_handle_deletes_its_session() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "'sleep' '30'").await;
    session_deleted().expect(1).mount(&server).await;
    let sandbox = polling_provider(&server).get("sb1").await.unwrap();
    drop(
        sandbox
            .exec(&Command::new("sleep").arg("30"))
            .await
            .unwrap(),
    );
    for _ in 0..200 {
        let deleted = server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .any(|r| r.method.as_str() == "DELETE");
        if deleted {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the session was not deleted");
}

#[tokio::test]
async fn background_commands_are_listed_and_reattached() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    mount_new_session(&server).await;
    Mock::given(method("POST"))
        .and(path_regex(
            r"^/toolbox/sb1/process/session/sdk-bg-[0-9]+/exec$",
        ))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "c9"})))
        .mount(&server)
        .await;
    let sandbox = polling_provider(&server).get("sb1").await.unwrap();
    let process = sandbox
        .exec(&Command::shell("sleep 2; printf done").background())
        .await
        .unwrap();
    let pid = process.pid().to_owned();
    drop(process);
    let (sid, cid) = pid.split_once('/').unwrap();
    assert_eq!(cid, "c9");
    Mock::given(method("GET")).and(path("/toolbox/sb1/process/session"))
        .respond_with(ok(json!([{"sessionId": sid, "commands": [{"id": "c9", "command": "sleep 2; printf done"}]}])))
        .mount(&server).await;
    let cmd = format!("/toolbox/sb1/process/session/{sid}/command/c9");
    mount_command_ends_after(&server, &format!("^{cmd}$"), "c9", 2).await;
    Mock::given(method("GET"))
        .and(path(format!("{cmd}/logs").as_str()))
        .respond_with(ok(json!({"output": "", "stdout": "done", "stderr": ""})))
        .mount(&server)
        .await;
    let listed = sandbox.processes().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].pid, pid);
    assert!(listed[0].running);
    let output = sandbox.attach(&pid).await.unwrap().output().await.unwrap();
    assert_eq!(output.stdout_lossy(), "done");
    assert_eq!(output.status.code, Some(0));
    // Background sessions are never deleted by the SDK.
    let deletes = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "DELETE")
        .count();
    assert_eq!(deletes, 0);
}

#[tokio::test]
async fn stdin_and_pty_are_refused_before_anything_is_sent() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let before = server.received_requests().await.unwrap().len();
    let err = sandbox
        .exec(&Command::new("cat").stdin())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSupported);
    let err = sandbox
        .exec(&Command::new("sh").pty(Default::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSupported);
    assert_eq!(server.received_requests().await.unwrap().len(), before);
}

#[tokio::test]
async fn one_shot_execute_sends_envs_cwd_and_timeout() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/execute"))
        .and(body_json(json!({"command": "echo hello; ls /nope", "cwd": "/home/daytona", "envs": {"FOO": "bar"}, "timeout": 30})))
        .respond_with(ok(json!({"exitCode": 2, "result": "hello\nls: cannot access '/nope': No such file or directory\n"})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/execute"))
        .and(body_json(json!({"command": "sleep 60", "timeout": 1})))
        .respond_with(ResponseTemplate::new(408).set_body_json(json!({"statusCode":408,"message":"command execution timeout","code":"REQUEST_TIMEOUT","timestamp":"2026-08-20T10:00:31.02Z","path":"/process/execute","method":"POST"})))
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    let env = [("FOO".to_owned(), "bar".to_owned())].into_iter().collect();
    let out = sandbox
        .execute(
            "echo hello; ls /nope",
            Some("/home/daytona"),
            &env,
            Some(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 2);
    assert!(out.result.starts_with("hello\n"));
    let err = sandbox
        .execute(
            "sleep 60",
            None,
            &Default::default(),
            Some(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
}

#[tokio::test]
async fn a_session_name_in_use_steps_to_the_next_number() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session"))
        .and(body_json(json!({"sessionId": "sdk-exec-1"})))
        .respond_with(ResponseTemplate::new(409).set_body_json(
            json!({"statusCode": 409, "message": "session already exists", "code": "CONFLICT"}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session"))
        .and(body_json(json!({"sessionId": "sdk-exec-2"})))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-2/exec"))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "c1"})))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = polling_provider(&server).get("sb1").await.unwrap();
    let process = sandbox.exec(&Command::new("true")).await.unwrap();
    assert_eq!(process.pid(), "sdk-exec-2/c1");
    // A tag in use is the caller's conflict, not stepped over.
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session"))
        .and(body_json(json!({"sessionId": "sdk-tag-web"})))
        .respond_with(ResponseTemplate::new(409).set_body_json(
            json!({"statusCode": 409, "message": "session already exists", "code": "CONFLICT"}),
        ))
        .mount(&server)
        .await;
    let err = sandbox
        .exec(&Command::new("true").background().tag("web"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    std::mem::forget(process);
}

/// Every WebSocket fixture in `tests/ws/` (provenance `spec`): the frames are sent over a real
/// WebSocket on loopback and the process must give back exactly the expected streams, or fail
/// with the expected kind.
#[tokio::test]
async fn websocket_fixtures_replay_through_the_log_follower() {
    use base64::Engine as _;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ws");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert!(names.len() >= 3);
    for file in names {
        let fixture: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(fixture["provenance"]["kind"], "spec", "{file:?}");
        let server = MockServer::start().await;
        let front = ws::start(*server.address()).await;
        mount_sandbox(&server, "started").await;
        mount_new_session(&server).await;
        Mock::given(method("POST"))
            .and(path_regex(format!(
                "^/toolbox/sb1/process/session/{SID_RE}/exec$"
            )))
            .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "cmd-1"})))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path_regex(format!(
                "^/toolbox/sb1/process/session/{SID_RE}/command/cmd-1$"
            )))
            .respond_with(ok(
                json!({"id": "cmd-1", "command": "x", "exitCode": fixture["exit_code"]}),
            ))
            .mount(&server)
            .await;
        session_deleted().mount(&server).await;
        let frames: Vec<Vec<u8>> = fixture["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                base64::engine::general_purpose::STANDARD
                    .decode(f["base64"].as_str().unwrap())
                    .unwrap()
            })
            .collect();
        let close = fixture["close"].as_u64().unwrap() as u16;
        let builder = common::builder(&server).toolbox_url(format!("{}/toolbox", front.uri()));
        let sandbox = sandbox_on(builder).await;
        let process = sandbox.exec(&Command::new("x")).await.unwrap();
        let sid = process.pid().split('/').next().unwrap().to_owned();
        let upgrade_path = fixture["upgrade"]["path"]
            .as_str()
            .unwrap()
            .replace("{{sandbox_id}}", "sb1")
            .replace("{{any}}", &sid);
        front.script(&upgrade_path, Script::Frames(frames, close));
        let result = process.output().await;
        match fixture["expect"].get("error") {
            Some(kind) => {
                let err = result.expect_err(&format!("{file:?} should fail"));
                assert_eq!(
                    format!("{:?}", err.kind()),
                    kind.as_str().unwrap(),
                    "{file:?}"
                );
            }
            None => {
                let out = result.unwrap_or_else(|e| panic!("{file:?}: {e}"));
                assert_eq!(
                    out.stdout_lossy(),
                    fixture["expect"]["stdout"].as_str().unwrap(),
                    "{file:?}"
                );
                assert_eq!(
                    out.stderr_lossy(),
                    fixture["expect"]["stderr"].as_str().unwrap(),
                    "{file:?}"
                );
                assert_eq!(
                    out.status.code.map(i64::from),
                    fixture["exit_code"].as_i64(),
                    "{file:?}"
                );
            }
        }
        let (url, headers) = front.upgrades().pop().unwrap();
        assert!(url.ends_with("?follow=true"));
        for (name, value) in fixture["upgrade"]["headers"].as_object().unwrap() {
            let value = value.as_str().unwrap().replace("{{token}}", KEY);
            assert_eq!(headers[name.as_str()], value, "{file:?} header {name}");
        }
    }
}

#[tokio::test]
async fn sessions_run_commands_and_read_their_logs() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session"))
        .and(body_json(json!({"sessionId": "build"})))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session/build/exec"))
        .and(body_json(json!({"command": "make test", "runAsync": true})))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "a1b2"})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/process/session/build/command/a1b2"))
        .respond_with(ok(
            json!({"id": "a1b2", "command": "make test", "exitCode": 0}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET")).and(path("/toolbox/sb1/process/session/build/command/a1b2/logs"))
        .respond_with(ok(json!({"output": "\u{1}\u{1}\u{1}ok 1\n\u{2}\u{2}\u{2}warn\n", "stdout": "ok 1\n", "stderr": "warn\n"}))).mount(&server).await;
    Mock::given(method("POST")).and(path("/toolbox/sb1/process/session/build/command/a1b2/input"))
        .and(body_json(json!({"data": "y\n"})))
        .respond_with(ResponseTemplate::new(410).set_body_json(json!({"statusCode": 410, "message": "command already completed", "code": "COMMAND_ALREADY_COMPLETED"}))).mount(&server).await;
    Mock::given(method("GET")).and(path("/toolbox/sb1/process/session"))
        .respond_with(ok(json!([{"sessionId": "build", "commands": [{"id": "a1b2", "command": "make test", "exitCode": 0}]}]))).mount(&server).await;
    Mock::given(method("DELETE"))
        .and(path("/toolbox/sb1/process/session/build"))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = provider(&server).get("sb1").await.unwrap();
    sandbox.create_session("build").await.unwrap();
    let started = sandbox
        .session_exec("build", "make test", true)
        .await
        .unwrap();
    assert_eq!(started.command_id, "a1b2");
    let status = sandbox.session_command("build", "a1b2").await.unwrap();
    assert_eq!(status.exit_code, Some(0));
    let (out, err) = sandbox.session_logs("build", "a1b2").await.unwrap();
    assert_eq!((&out[..], &err[..]), (&b"ok 1\n"[..], &b"warn\n"[..]));
    let late = sandbox
        .session_input("build", "a1b2", "y\n")
        .await
        .unwrap_err();
    assert_eq!(late.kind(), ErrorKind::Conflict);
    let sessions = sandbox.sessions().await.unwrap();
    assert_eq!(sessions[0].commands[0].exit_code, Some(0));
    sandbox.delete_session("build").await.unwrap();
}

/// Both streams' end marks (stdout's with the status) come in frames; the server then keeps
/// the stream open. The process ends on the marks, with the status they carry, without
/// waiting for a close or asking the daemon for the exit code.
#[tokio::test]
async fn the_follower_ends_on_the_end_marks_without_waiting_for_the_close() {
    let server = MockServer::start().await;
    let front = ws::start(*server.address()).await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "'make'").await;
    Mock::given(method("GET"))
        .and(path_regex(r"/command/cmd-1$"))
        .respond_with(ok(json!({"id": "cmd-1", "command": "make"})))
        .expect(0)
        .mount(&server)
        .await;
    let builder = common::builder(&server).toolbox_url(format!("{}/toolbox", front.uri()));
    let sandbox = sandbox_on(builder).await;
    let process = sandbox.exec(&Command::new("make")).await.unwrap();
    let sid = session_of(&server.received_requests().await.unwrap());
    front.script(
        &format!("/toolbox/sb1/process/session/{sid}/command/cmd-1/logs"),
        Script::Hold(vec![
            format!(
                "\x01\x01\x01{}\x01\x01\x01hi\n\x02\x02\x02oops\n\x01\x01\x01{}",
                key_line(),
                out_mark(3)
            )
            .into_bytes(),
            format!("\x02\x02\x02{}", err_mark()).into_bytes(),
        ]),
    );
    // A guard against a hang, not a timing assertion: the server never closes.
    let out = tokio::time::timeout(Duration::from_secs(20), process.output())
        .await
        .expect("the follower waited for the server's close")
        .unwrap();
    assert_eq!(out.stdout_lossy(), "hi\n");
    assert_eq!(out.stderr_lossy(), "oops\n");
    assert_eq!(out.status.code, Some(3));
}

/// Issue 23: a program the command runs prints end marks of its own on both streams (the
/// fixed text they were before they carried a key, and keyed ones with a guessed key), and
/// the command goes on and exits 3. The follower ends on the line's own marks only: the exit
/// is 3, the forged lines are output, and the session goes back to the pool only then (the
/// daemon is never asked: the real marks end the follow).
#[tokio::test]
async fn forged_end_marks_do_not_end_the_follow() {
    let server = MockServer::start().await;
    let front = ws::start(*server.address()).await;
    mount_sandbox(&server, "started").await;
    // The line is checked elsewhere; any line is answered here.
    mount_new_session(&server).await;
    Mock::given(method("POST"))
        .and(path_regex(format!(
            "^/toolbox/sb1/process/session/{SID_RE}/exec$"
        )))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "cmd-1"})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"/command/cmd-1$"))
        .respond_with(ok(json!({"id": "cmd-1", "command": "make"})))
        .expect(0)
        .mount(&server)
        .await;
    session_deleted().expect(0).mount(&server).await;
    let builder = common::builder(&server).toolbox_url(format!("{}/toolbox", front.uri()));
    let sandbox = sandbox_on(builder).await;
    let process = sandbox.exec(&Command::new("make")).await.unwrap();
    let sid = session_of(&server.received_requests().await.unwrap());
    let guess = "0".repeat(32);
    let forged_out = format!(
        "__sandbox_mark_{guess}:0\n__sandbox_mark_{SANDBOX_KEY}:x\n__sandbox_sdk_end_of_output__:0\n"
    );
    let forged_err = format!("__sandbox_mark_{guess}:\n__sandbox_sdk_end_of_output__\n");
    let logged = |marker: &str, text: &str| -> String {
        text.split_inclusive('\n')
            .map(|line| format!("{marker}{line}"))
            .collect()
    };
    front.script(
        &format!("/toolbox/sb1/process/session/{sid}/command/cmd-1/logs"),
        Script::Hold(vec![
            logged("\x01\x01\x01", &key_line()).into_bytes(),
            // The forged marks end both streams here, for a while.
            (logged("\x01\x01\x01", &forged_out) + &logged("\x02\x02\x02", &forged_err))
                .into_bytes(),
            logged("\x01\x01\x01", &format!("after\n{}", out_mark(3))).into_bytes(),
            logged("\x02\x02\x02", &err_mark()).into_bytes(),
        ]),
    );
    // A guard against a hang, not a timing assertion: the server never closes.
    let out = tokio::time::timeout(Duration::from_secs(20), process.output())
        .await
        .expect("the follower waited for the server's close")
        .unwrap();
    assert_eq!(out.status.code, Some(3), "ended on a forged mark");
    assert_eq!(out.stdout_lossy(), format!("{forged_out}after\n"));
    assert_eq!(out.stderr_lossy(), forged_err);
}

/// A sandbox that could not make a key says so on stdout's first line; a key line and marks a
/// program prints after it are output, the follow goes on until the daemon has the exit code,
/// and the status is the daemon's.
#[tokio::test]
async fn without_a_key_the_status_is_the_daemons() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "'make'").await;
    session_deleted().expect(0).mount(&server).await;
    let cmd_path = format!("^/toolbox/sb1/process/session/{SID_RE}/command/cmd-1$");
    let logs_path = format!("^/toolbox/sb1/process/session/{SID_RE}/command/cmd-1/logs$");
    // Running at the first poll, ended with 3 at the second.
    Mock::given(method("GET"))
        .and(path_regex(cmd_path.as_str()))
        .respond_with(ok(json!({"id": "cmd-1", "command": "x"})))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(cmd_path.as_str()))
        .respond_with(ok(json!({"id": "cmd-1", "command": "x", "exitCode": 3})))
        .with_priority(2)
        .mount(&server)
        .await;
    let forged = format!("{}{}", key_line(), out_mark(0));
    let stdout = format!("{KEY_PREFIX}none\n{forged}");
    Mock::given(method("GET"))
        .and(path_regex(logs_path.as_str()))
        .respond_with(ok(
            json!({"output": "", "stdout": stdout, "stderr": err_mark()}),
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(logs_path.as_str()))
        .respond_with(ok(
            json!({"output": "", "stdout": format!("{stdout}more\n"), "stderr": err_mark()}),
        ))
        .with_priority(2)
        .mount(&server)
        .await;
    let sandbox = polling_provider(&server).get("sb1").await.unwrap();
    let out = sandbox.run(&Command::new("make")).await.unwrap();
    assert_eq!(out.status.code, Some(3));
    assert_eq!(out.stdout_lossy(), format!("{forged}more\n"));
    assert_eq!(out.stderr_lossy(), err_mark());
}

/// A proxy that does not carry WebSockets refuses the upgrade (here 400, which maps to
/// `Validation`): the command is followed by polling instead of failing.
#[tokio::test]
async fn a_refused_upgrade_falls_back_to_polling() {
    let server = MockServer::start().await;
    let front = ws::start(*server.address()).await;
    mount_sandbox(&server, "started").await;
    mount_session_exec(&server, "'make'").await;
    Mock::given(method("GET"))
        .and(path_regex(r"/command/cmd-1$"))
        .respond_with(ok(json!({"id": "cmd-1", "command": "make", "exitCode": 0})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"/command/cmd-1/logs$"))
        .respond_with(ok(json!({
            "output": format!("\u{1}\u{1}\u{1}{}\u{1}\u{1}\u{1}hi\n\u{1}\u{1}\u{1}{}\u{2}\u{2}\u{2}{}", key_line(), out_mark(0), err_mark()),
        })))
        .expect(1)
        .mount(&server)
        .await;
    let builder = common::builder(&server).toolbox_url(format!("{}/toolbox", front.uri()));
    let sandbox = sandbox_on(builder).await;
    let process = sandbox.exec(&Command::new("make")).await.unwrap();
    let sid = session_of(&server.received_requests().await.unwrap());
    front.script(
        &format!("/toolbox/sb1/process/session/{sid}/command/cmd-1/logs"),
        Script::Refuse(
            400,
            r#"{"statusCode":400,"message":"websocket: the client is not using the websocket protocol","code":"BAD_REQUEST"}"#.into(),
        ),
    );
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "hi\n");
    assert_eq!(out.status.code, Some(0));
    assert_eq!(front.upgrades().len(), 1);
}

/// The sync session exec answer in the shape PROTOCOL.md §6.2 gives (`output` marked,
/// `stdout`/`stderr` apart), for a command printing `out`/`err` and ending with `code`.
fn sync_answer(cmd_id: &str, out: &str, err: &str, code: i32) -> serde_json::Value {
    let stdout = format!("{}{out}{}", key_line(), out_mark(code));
    let stderr = format!("{err}{}", err_mark());
    // Every line behind its stream's marker (stdout's lines first: the log's order is not
    // read here).
    let marked = |marker: &str, text: &str| -> String {
        text.split_inclusive('\n')
            .map(|line| format!("{marker}{line}"))
            .collect()
    };
    json!({
        "cmdId": cmd_id,
        "output": marked("\u{1}\u{1}\u{1}", &stdout) + &marked("\u{2}\u{2}\u{2}", &stderr),
        "stdout": stdout,
        "stderr": stderr,
        "exitCode": code,
    })
}

/// A short command is one synchronous request in a session the handle keeps: stdout and
/// stderr apart and the exit code straight from the answer; the next command reuses the
/// session (no create, no follow, no delete).
#[tokio::test]
async fn a_short_command_is_one_request_in_a_reused_session() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session"))
        .and(body_json(json!({"sessionId": "sdk-exec-1"})))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    for (n, inner, answer) in [
        (
            1,
            "(echo hi; echo oops >&2\n)",
            sync_answer("c1", "hi\n", "oops\n", 0),
        ),
        (2, "(printf x; exit 3\n)", sync_answer("c2", "x", "", 3)),
    ] {
        Mock::given(method("POST"))
            .and(path("/toolbox/sb1/process/session/sdk-exec-1/exec"))
            .and(body_json(
                json!({"command": wrapped_nth(inner, n), "runAsync": false}),
            ))
            .respond_with(ok(answer))
            .expect(1)
            .mount(&server)
            .await;
    }
    let sandbox = common::builder(&server)
        .direct_window(Duration::from_secs(30))
        .build()
        .unwrap()
        .get("sb1")
        .await
        .unwrap();
    let before = server.received_requests().await.unwrap().len();
    let out = sandbox.run_shell("echo hi; echo oops >&2").await.unwrap();
    assert_eq!(out.stdout_lossy(), "hi\n");
    assert_eq!(out.stderr_lossy(), "oops\n");
    assert_eq!(out.status.code, Some(0));
    let after_first = server.received_requests().await.unwrap().len();
    assert_eq!(after_first - before, 2, "session create + one exec");
    let out = sandbox.run_shell("printf x; exit 3").await.unwrap();
    assert_eq!(out.stdout_lossy(), "x");
    assert_eq!(out.stderr_lossy(), "");
    assert_eq!(out.status.code, Some(3));
    let after_second = server.received_requests().await.unwrap().len();
    assert_eq!(
        after_second - after_first,
        1,
        "one exec in the kept session"
    );
}

/// A session command takes no env or cwd (the flag says `false`): a command sent to the
/// sandbox directly is folded by the adapter with core's `fold_env_cwd`, one sent through
/// core's emulation layer (what `Client` puts around every provider) is folded there and
/// passed on unchanged: the same line either way, folded once.
#[tokio::test]
async fn env_and_cwd_are_folded_once_with_or_without_the_client_layer() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    mount_new_session(&server).await;
    let folded = r"(cd -- '/srv' && export GREETING='it'\''s $HOME' && exec 'pwd'
)";
    for n in [1, 2] {
        Mock::given(method("POST"))
            .and(path("/toolbox/sb1/process/session/sdk-exec-1/exec"))
            .and(body_json(
                json!({"command": wrapped_nth(folded, n), "runAsync": false}),
            ))
            .respond_with(ok(sync_answer(&format!("c{n}"), "/srv\n", "", 0)))
            .expect(1)
            .mount(&server)
            .await;
    }
    let sandbox = sandbox_on(common::builder(&server).direct_window(Duration::from_secs(30))).await;
    sandbox_conformance::checks::env_cwd_folded_once(&sandbox).await;
}

/// Mounts `POST /toolbox/sb1/process/session` making any session (201).
async fn mount_new_session(server: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session"))
        .respond_with(ResponseTemplate::new(201))
        .mount(server)
        .await;
}

/// Mounts a started `sb1`, its first pooled session `sdk-exec-1`, and the synchronous exec of
/// `line` there, answered only after 30 s (once): the command outlives any direct window.
async fn mount_outliving_exec(server: &MockServer, line: &str) {
    mount_sandbox(server, "started").await;
    mount_new_session(server).await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-1/exec"))
        .and(body_json(json!({"command": line, "runAsync": false})))
        .respond_with(ok(sync_answer("c2", "", "", 0)).set_delay(Duration::from_secs(30)))
        .expect(1)
        .mount(server)
        .await;
}

/// A command still running when the direct window closes keeps running: its id is read from
/// the session by its line, and it is followed to its end.
#[tokio::test]
async fn a_command_outliving_the_direct_window_is_found_and_followed() {
    let server = MockServer::start().await;
    let line = wrapped("'sleep' '5'");
    mount_outliving_exec(&server, &line).await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-1"))
        .respond_with(ok(json!({"sessionId": "sdk-exec-1", "commands": [
            {"id": "c1", "command": wrapped("'true'"), "exitCode": 0},
            {"id": "c2", "command": line},
        ]})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-1/command/c2"))
        .respond_with(ok(json!({"id": "c2", "command": line, "exitCode": 0})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-1/command/c2/logs"))
        .respond_with(ok(json!({
            "output": format!("\u{1}\u{1}\u{1}{}\u{1}\u{1}\u{1}slow\n\u{1}\u{1}\u{1}{}\u{2}\u{2}\u{2}{}", key_line(), out_mark(0), err_mark()),
        })))
        .mount(&server)
        .await;
    let sandbox = polling_provider_with(&server, |b| b.direct_window(Duration::from_millis(100)))
        .get("sb1")
        .await
        .unwrap();
    let process = sandbox.exec(&Command::new("sleep").arg("5")).await.unwrap();
    assert_eq!(process.pid(), "sdk-exec-1/c2");
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "slow\n");
    assert_eq!(out.status.code, Some(0));
}

/// A loaded daemon may not list a command yet when the direct window passes: the session is
/// looked at again (backing off) until it does, instead of failing the exec (seen with a
/// thousand sandboxes at once against the simulator).
#[tokio::test]
async fn a_command_the_session_lists_late_is_still_found() {
    let server = MockServer::start().await;
    let line = wrapped("'sleep' '5'");
    mount_outliving_exec(&server, &line).await;
    // Not listed at the first two looks, listed at the third.
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-1"))
        .respond_with(ok(json!({"sessionId": "sdk-exec-1", "commands": []})))
        .up_to_n_times(2)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-1"))
        .respond_with(ok(json!({"sessionId": "sdk-exec-1", "commands": [
            {"id": "c2", "command": line},
        ]})))
        .expect(1)
        .mount(&server)
        .await;
    let sandbox = polling_provider_with(&server, |b| b.direct_window(Duration::from_millis(50)))
        .get("sb1")
        .await
        .unwrap();
    let process = sandbox.exec(&Command::new("sleep").arg("5")).await.unwrap();
    assert_eq!(process.pid(), "sdk-exec-1/c2");
}

fn polling_provider_with(
    server: &MockServer,
    f: impl FnOnce(DaytonaBuilder) -> DaytonaBuilder,
) -> sandbox_daytona::DaytonaProvider {
    f(common::builder(server).log_follow(sandbox_daytona::LogFollow::Poll))
        .build()
        .unwrap()
}

/// A command its process timeout stopped (coreutils `timeout` exits 124) is a `Timeout`
/// error, as on the other adapters; a command exiting 124 on its own before its timeout could
/// pass is just an exit.
#[tokio::test]
async fn a_process_timeout_is_a_timeout_error() {
    let server = MockServer::start().await;
    mount_sandbox(&server, "started").await;
    mount_new_session(&server).await;
    Mock::given(method("POST"))
        .and(path("/toolbox/sb1/process/session/sdk-exec-1/exec"))
        // The answer comes after the 1 ms timeout has surely passed, however fast loopback is
        // (an answer inside 1 ms would make 124 a plain exit, as the second half checks).
        .respond_with(ok(sync_answer("c1", "", "", 124)).set_delay(Duration::from_millis(20)))
        .mount(&server)
        .await;
    let sandbox = common::builder(&server)
        .direct_window(Duration::from_secs(30))
        .build()
        .unwrap()
        .get("sb1")
        .await
        .unwrap();
    let timed = Command::new("sleep")
        .arg("30")
        .timeout(Duration::from_millis(1));
    let err = sandbox.run(&timed).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let long = Command::new("sh")
        .args(["-c", "exit 124"])
        .timeout(Duration::from_secs(3600));
    assert_eq!(sandbox.run(&long).await.unwrap().status.code, Some(124));
}
