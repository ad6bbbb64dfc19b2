//! Exec over SSH against the in-process stand-in for Daytona's gateway (`tests/gateway/`,
//! PROTOCOL.md §10): auth method `none` accepted for any user, the user name checked as an
//! access token only after the handshake, and a bad token or a sandbox that is not started
//! answered by closing the connection. Accepted commands run as real local processes, so
//! stdout, stderr, stdin, exit codes and the pty are real. Each test starts its own recording
//! gateway.

mod common;
mod gateway;

use common::*;
use gateway::Gateway;
use russh::keys::HashAlg;
use sandbox_daytona::{DaytonaBuilder, DaytonaSandbox, ExecTransport};
use sandbox_sdk_core::{Command, ErrorKind, ProcessEvent, PtySize, Sandbox, SandboxExt};
use serde_json::json;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const GOOD: &str = "Fg8Jx2nPtWAVY5pVN0TlUcbCDNPFqePB";

struct Fixture {
    api: MockServer,
    port: u16,
    gw: Gateway,
    /// A sandbox id of this test alone: tokens are cached per API URL and sandbox for the whole
    /// process, and wiremock reuses its servers' URLs between tests.
    id: &'static str,
}

async fn fixture(state: &str, id: &'static str) -> Fixture {
    let gw = Gateway::new([GOOD]).recording();
    let port = gw.spawn().await;
    let api = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/api/sandbox/{id}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(sandbox(id, state)))
        .mount(&api)
        .await;
    Fixture { api, port, gw, id }
}

async fn mint_answers(f: &Fixture, token: &str, times: u64) {
    Mock::given(method("POST"))
        .and(path(format!("/api/sandbox/{}/ssh-access", f.id).as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "a1", "sandboxId": f.id, "token": token,
            "expiresAt": "2099-01-01T00:00:00.000Z", "createdAt": "2026-08-20T10:00:00.000Z", "updatedAt": "2026-08-20T10:00:00.000Z",
            "sshCommand": format!("ssh -p {} {token}@127.0.0.1", f.port)
        })))
        .expect(times)
        .mount(&f.api)
        .await;
}

/// An SSH-configured builder with no host key pin and no first-use trust.
fn unpinned(f: &Fixture) -> DaytonaBuilder {
    common::builder(&f.api).exec_transport(ExecTransport::Ssh)
}

/// An SSH-configured builder that pins the test gateway's host key.
fn builder(f: &Fixture) -> DaytonaBuilder {
    unpinned(f).ssh_host_key(gateway::fingerprint())
}

/// The fixture's sandbox through an SSH-configured provider.
async fn sandbox_of(f: &Fixture) -> DaytonaSandbox {
    builder(f).build().unwrap().get(f.id).await.unwrap()
}

#[tokio::test]
async fn exec_over_ssh_keeps_streams_exit_code_and_bytes_exact() {
    let f = fixture("started", "sb-exec_over_ssh_keeps_").await;
    mint_answers(&f, GOOD, 1).await;
    let provider = builder(&f).build().unwrap();
    use sandbox_sdk_core::Provider;
    let caps = provider.capabilities();
    assert!(caps.stdin.is_available() && caps.pty.is_available() && caps.streaming.is_available());
    let sandbox = provider.get(f.id).await.unwrap();
    let out = sandbox
        .run(&Command::shell("printf out; printf err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "out");
    assert_eq!(out.stderr_lossy(), "err");
    assert_eq!(out.status.code, Some(3));
    // cwd and env are folded into the line; the token is reused (one mint, expect(1)).
    let out = sandbox
        .run(
            &Command::shell("printf '%s' \"$V\"")
                .env("V", "it's $x")
                .cwd("/"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "it's $x");
    let seen = f.gw.seen();
    assert_eq!(seen.users, [GOOD, GOOD], "auth none with the token as user");
}

#[tokio::test]
async fn stdin_reaches_the_command_and_eof_ends_it() {
    let f = fixture("started", "sb-stdin_reaches_the_co").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = sandbox_of(&f).await;
    let mut process = sandbox.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = process.take_stdin().unwrap();
    stdin.write_all(b"line one\nline two\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "line one\nline two\n");
    assert_eq!(out.status.code, Some(0));
}

#[tokio::test]
async fn pty_size_and_resize_are_relayed() {
    let f = fixture("started", "sb-pty_size_and_resize_").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = sandbox_of(&f).await;
    // A real terminal: echo is turned off before the size is printed, and the size line is
    // awaited before anything is typed, so the input is never echoed into the output.
    let mut process = sandbox
        .exec(
            &Command::shell("stty -echo; stty size; read x")
                .stdin()
                .pty(PtySize {
                    cols: 100,
                    rows: 30,
                }),
        )
        .await
        .unwrap();
    let mut stdout = Vec::new();
    while !stdout.ends_with(b"\n") {
        match process.next_event().await {
            Some(Ok(ProcessEvent::Stdout(bytes))) => stdout.extend_from_slice(&bytes),
            other => panic!("expected the size line, got {other:?}"),
        }
    }
    process
        .resize(PtySize {
            cols: 120,
            rows: 40,
        })
        .await
        .unwrap();
    let mut stdin = process.take_stdin().unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    let out = process.output().await.unwrap();
    stdout.extend_from_slice(&out.stdout);
    assert_eq!(String::from_utf8_lossy(&stdout), "30 100\r\n");
    assert_eq!(out.status.code, Some(0));
    let seen = f.gw.seen();
    assert_eq!(seen.ptys, [(100, 30)]);
    assert_eq!(seen.resizes, [(120, 40)]);
}

#[tokio::test]
async fn kill_signals_and_the_process_ends_without_success() {
    let f = fixture("started", "sb-kill_signals_and_the").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = sandbox_of(&f).await;
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    process.kill().await.unwrap();
    let status = process.wait().await.unwrap();
    assert!(!status.success());
    assert_eq!(status.signal, Some(9));
    // The gateway got the signal (give its handler a moment to run).
    for _ in 0..200 {
        if f.gw.seen().signals == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(f.gw.seen().signals, 1);
}

#[tokio::test]
async fn an_expired_token_is_unauthorized_after_a_check_and_is_forgotten() {
    let f = fixture("started", "sb-an_expired_token_is_").await;
    // The API hands out a token the gateway does not know (expired or revoked).
    mint_answers(&f, "expiredTokenAAAAAAAAAAAAAAAAAAAA", 2).await;
    let sandbox = sandbox_of(&f).await;
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(!format!("{err} {err:?}").contains("expiredToken"));
    // The refused token was dropped from the cache: the next exec mints again (expect(2)).
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[tokio::test]
async fn a_sandbox_that_is_not_started_is_not_running() {
    let f = fixture("stopped", "sb-a_sandbox_that_is_no").await;
    mint_answers(&f, "tokenForAStoppedSandboxXXXXXXXXX", 1).await;
    let sandbox = sandbox_of(&f).await;
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
}

#[tokio::test]
async fn a_pinned_host_key_that_differs_is_refused() {
    let f = fixture("started", "sb-a_pinned_host_key_th").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = builder(&f)
        .ssh_host_key("SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        .build()
        .unwrap()
        .get(f.id)
        .await
        .unwrap();
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(err.message().contains("not the pinned one"), "{err}");
    assert!(f.gw.seen().users.is_empty(), "the token went to the key");
    // The right pin is accepted, as SHA-256 or SHA-512.
    let sha512 = gateway::host_key()
        .public_key()
        .fingerprint(HashAlg::Sha512)
        .to_string();
    for pin in [gateway::fingerprint(), sha512] {
        let sandbox = unpinned(&f)
            .ssh_host_key(pin)
            .build()
            .unwrap()
            .get(f.id)
            .await
            .unwrap();
        assert!(
            sandbox
                .run(&Command::new("true"))
                .await
                .unwrap()
                .status
                .success()
        );
    }
    // A pin that is not a fingerprint fails the build.
    let err = unpinned(&f).ssh_host_key("ab:cd:ef").build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Validation, "{err}");
}

#[tokio::test]
async fn without_a_pin_or_first_use_trust_the_host_key_is_refused_before_the_token_is_sent() {
    let f = fixture("started", "sb-without_a_pin_or_fir").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = unpinned(&f).build().unwrap().get(f.id).await.unwrap();
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    let message = err.message();
    assert!(message.contains(&gateway::fingerprint()), "{err}");
    assert!(
        message.contains("ssh_host_key") && message.contains("ssh_trust_host_key_on_first_use"),
        "{err}"
    );
    assert!(!format!("{err} {err:?}").contains(GOOD));
    // The handshake ended at the host key: the gateway saw no auth attempt, so no token.
    assert!(f.gw.seen().users.is_empty(), "{:?}", f.gw.seen().users);
    assert!(f.gw.seen().commands.is_empty());
    // With the pin the same sandbox works (the token minted above is reused: expect(1)).
    let out = builder(&f)
        .build()
        .unwrap()
        .get(f.id)
        .await
        .unwrap()
        .run(&Command::new("true"))
        .await
        .unwrap();
    assert!(out.status.success());
    assert_eq!(f.gw.seen().users, [GOOD]);
    // So it does with the explicit first-use opt-in and no pin.
    let out = unpinned(&f)
        .ssh_trust_host_key_on_first_use(true)
        .build()
        .unwrap()
        .get(f.id)
        .await
        .unwrap()
        .run(&Command::new("true"))
        .await
        .unwrap();
    assert!(out.status.success());
    assert_eq!(f.gw.seen().users, [GOOD, GOOD]);
}

#[tokio::test]
async fn background_commands_stay_on_toolbox_sessions() {
    let f = fixture("started", "sb-background_commands_").await;
    Mock::given(method("POST"))
        .and(path(format!("/toolbox/{}/process/session", f.id).as_str()))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&f.api)
        .await;
    Mock::given(method("POST"))
        .and(path(
            format!("/toolbox/{}/process/session/sdk-bg-1/exec", f.id).as_str(),
        ))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "c1"})))
        .expect(1)
        .mount(&f.api)
        .await;
    let sandbox = sandbox_of(&f).await;
    let process = sandbox
        .exec(&Command::new("sleep").arg("9").background())
        .await
        .unwrap();
    assert_eq!(process.pid(), "sdk-bg-1/c1");
    assert!(f.gw.seen().commands.is_empty());
}

#[tokio::test]
async fn kill_process_reaches_a_command_over_ssh_by_its_pid() {
    let f = fixture("started", "sb-kill_process_reache").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = sandbox_of(&f).await;
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    assert!(process.pid().starts_with("ssh/"), "{}", process.pid());
    sandbox.kill_process(process.pid()).await.unwrap();
    let status = process.wait().await.unwrap();
    assert!(!status.success());
    // A pid no live handle has is NotFound, and nothing is sent to the toolbox.
    let err = sandbox
        .kill_process("ssh/00000000000000000000000000000000")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}
