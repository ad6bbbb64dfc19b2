//! Slow, silent and failing servers (issue 9), against wiremock: every call ends in bounded time
//! with the right error kind, and an ambiguous create never makes a second machine.

use sandbox_fly::{FlyBuilder, FlyProvider, FlySandbox};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind};
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const APP: &str = "bounds-app";
const ID: &str = "1857156b526dd8";

fn machine(id: &str, state: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "name": "sandbox",
        "state": state,
        "region": "ord",
        "instance_id": "01HEPA330HZ37A78TK080NAK1M",
        "config": {"image": "ubuntu:24.04", "metadata": {"sandbox_sdk": "1"}},
    })
}

fn machine_path(suffix: &str) -> String {
    format!("/v1/apps/{APP}/machines/{ID}{suffix}")
}

fn builder(server: &MockServer) -> FlyBuilder {
    FlyProvider::builder()
        .token("bounds-token")
        .app(APP)
        .api_url(server.uri())
        .poll_interval(Duration::ZERO)
}

async fn connected(server: &MockServer, b: FlyBuilder) -> FlySandbox {
    Mock::given(method("GET"))
        .and(path(machine_path("")))
        .respond_with(ResponseTemplate::new(200).set_body_json(machine(ID, "started")))
        .mount(server)
        .await;
    b.build().unwrap().connect_machine(ID).await.unwrap()
}

/// Fly answers 412 to `/exec` on a machine that is not started: that is `NotRunning` (as on
/// every adapter), not the `Conflict` other 412s are.
#[tokio::test]
async fn exec_on_a_stopped_machine_is_not_running() {
    let server = MockServer::start().await;
    let sandbox = connected(&server, builder(&server)).await;
    Mock::given(method("POST"))
        .and(path(machine_path("/exec")))
        .respond_with(
            ResponseTemplate::new(412)
                .set_body_json(serde_json::json!({"error": "machine is not started"})),
        )
        .mount(&server)
        .await;
    for command in [
        Command::shell("echo hi").timeout(Duration::from_secs(5)),
        Command::shell("echo hi"),
    ] {
        let err = sandbox.run(&command).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
        assert_eq!(err.status(), Some(412));
    }
    let err = sandbox.stat("/etc/hostname").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
}

/// An exec answer that takes `delay`.
fn exec_answer(body: serde_json::Value, delay: Duration) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_json(body)
        .set_delay(delay)
}

fn exec_mock() -> wiremock::MockBuilder {
    Mock::given(method("POST")).and(path(machine_path("/exec")))
}

/// A server that stalls for 5 s, against a 300 ms request timeout.
const STALL: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(300);

/// `/exec` answers only when the command ended, so its call is bounded by the command's
/// (server-side) timeout plus the request timeout: 1 s + 300 ms here, not the 5 s the server
/// stalls for (before: the timeout plus a fixed 15 s).
#[tokio::test]
async fn a_stalled_exec_is_a_timeout_after_the_command_timeout_plus_the_request_timeout() {
    let server = MockServer::start().await;
    let sandbox = connected(&server, builder(&server).request_timeout(REQUEST_TIMEOUT)).await;
    exec_mock()
        .respond_with(exec_answer(
            serde_json::json!({"stdout": "hi\n", "exit_code": 0}),
            STALL,
        ))
        .mount(&server)
        .await;
    let err = sandbox
        .run(&Command::shell("echo hi").timeout(Duration::from_millis(500)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_ambiguous(), "the command may have run: {err}");
    // The emulated path (no timeout: launched, then polled) is bounded the same way.
    let err = sandbox.run(&Command::shell("echo hi")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

/// Files move in chunks, one `/exec` each: a chunk whose answer stalls ends the transfer with a
/// `Timeout` after the script's deadline (the request timeout, at least 1 s) plus the request
/// timeout, in both directions.
#[tokio::test]
async fn a_stalled_file_chunk_ends_the_transfer_with_a_timeout() {
    let server = MockServer::start().await;
    let b = builder(&server)
        .request_timeout(REQUEST_TIMEOUT)
        .file_chunk(4);
    let sandbox = connected(&server, b).await;
    let ok = serde_json::json!({"stdout": "", "exit_code": 0});
    // Upload of 10 bytes in chunks of 4: the first chunk goes through, the second stalls, and
    // the partial file is removed afterwards.
    exec_mock()
        .respond_with(exec_answer(ok.clone(), Duration::ZERO))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    exec_mock()
        .respond_with(exec_answer(ok.clone(), STALL))
        .up_to_n_times(1)
        .with_priority(2)
        .mount(&server)
        .await;
    exec_mock()
        .respond_with(exec_answer(ok, Duration::ZERO))
        .with_priority(3)
        .mount(&server)
        .await;
    let err = sandbox
        .write_file("/tmp/ten.bin", bytes::Bytes::from_static(b"0123456789"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");

    // Download: the stat and the first block answer, the second block stalls.
    server.reset().await;
    let sandbox = connected(
        &server,
        builder(&server)
            .request_timeout(REQUEST_TIMEOUT)
            .file_chunk(4),
    )
    .await;
    for (body, delay) in [
        (
            serde_json::json!({"stdout": "81a4 10 1700000000\n", "exit_code": 0}),
            Duration::ZERO,
        ),
        (
            serde_json::json!({"stdout": "MDEyMw==\n", "exit_code": 0}),
            Duration::ZERO,
        ),
        (
            serde_json::json!({"stdout": "NDU2Nw==\n", "exit_code": 0}),
            STALL,
        ),
    ] {
        exec_mock()
            .respond_with(exec_answer(body, delay))
            .up_to_n_times(1)
            .mount(&server)
            .await;
    }
    let mut download = sandbox.download("/tmp/ten.bin").await.unwrap();
    let first = futures::TryStreamExt::try_next(&mut download)
        .await
        .unwrap();
    assert_eq!(first.as_deref(), Some(&b"0123"[..]));
    let err = futures::TryStreamExt::try_next(&mut download)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

/// A create answered only after the request timeout (the machine was made all the same) is
/// settled by listing its key, not by sending it again: exactly one POST, and the caller gets
/// the machine that POST made once the list shows it.
#[tokio::test]
async fn a_create_answered_after_the_timeout_is_found_by_its_key_not_sent_again() {
    use sandbox_sdk_core::CreateSpec;
    use sandbox_sdk_core::idempotency::CreateLookup;
    use wiremock::matchers::query_param;
    let server = MockServer::start().await;
    let machines = format!("/v1/apps/{APP}/machines");
    let by_key = || {
        Mock::given(method("GET"))
            .and(path(machines.as_str()))
            .and(query_param(
                "metadata.sandbox_sdk_idempotency_key",
                "job-42",
            ))
    };
    let spec = CreateSpec::new().idempotency_key("job-42");
    let mut made = machine(ID, "started");
    made["config"]["metadata"]["sandbox_sdk_idempotency_key"] = "job-42".into();
    made["config"]["metadata"][sandbox_sdk_core::idempotency::FINGERPRINT_LABEL] =
        sandbox_sdk_core::idempotency::create_fingerprint(&spec).into();
    // Not there before the create, nor at the first look-up after it; then it shows.
    by_key()
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    by_key()
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([made])))
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(machines.as_str()))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(machine(ID, "created"))
                .set_delay(Duration::from_secs(1)),
        )
        .expect(1)
        .mount(&server)
        .await;
    let fly = builder(&server)
        .request_timeout(REQUEST_TIMEOUT)
        .create_lookup(CreateLookup::new(Duration::from_secs(5)))
        .build()
        .unwrap();
    let sandbox = fly.create(&spec).await.unwrap();
    assert_eq!(sandbox.id(), ID);
    server.verify().await;
}

/// A hostile machine (or API) answering the adapter's own scripts with a huge body: a `mkdir`
/// whose answer carries 3 MiB of stdout (a script prints nothing) was read whole (anything up to
/// the transport's 16 MiB) and taken as a success; the scripts' answers are now capped at
/// `SCRIPT_ANSWER_LIMIT` (2 MiB, twice the largest honest answer, a download block), checked
/// from Content-Length before reading. The listing's cap is larger, and a direct command's whole
/// output is bounded too.
#[tokio::test]
async fn oversized_exec_answers_are_refused_before_they_are_read() {
    assert_eq!(sandbox_fly::testing::SCRIPT_ANSWER_LIMIT, 2 * 1024 * 1024);
    let server = MockServer::start().await;
    let sandbox = connected(&server, builder(&server)).await;
    let huge = "x".repeat(3 * 1024 * 1024);
    exec_mock()
        .respond_with(exec_answer(
            serde_json::json!({"stdout": huge, "stderr": "", "exit_code": 0}),
            Duration::ZERO,
        ))
        .mount(&server)
        .await;
    let err = sandbox.mkdir("/work/dir").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    assert!(
        err.to_string().contains("larger than the 2097152 bytes"),
        "{err}"
    );

    // A direct command (timeout within the exec deadline) may print more than a script, but not
    // more than DIRECT_ANSWER_LIMIT.
    let out = sandbox
        .run(&Command::shell("cat big").timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), huge.len());
    server.reset().await;
    let sandbox = connected(&server, builder(&server)).await;
    let over = "y".repeat(sandbox_fly::testing::DIRECT_ANSWER_LIMIT);
    exec_mock()
        .respond_with(exec_answer(
            serde_json::json!({"stdout": over, "stderr": "", "exit_code": 0}),
            Duration::ZERO,
        ))
        .mount(&server)
        .await;
    let err = sandbox
        .run(&Command::shell("cat bigger").timeout(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");

    // A file listing may be larger than a script's answer (a deep tree), up to 16 MiB.
    server.reset().await;
    let sandbox = connected(&server, builder(&server)).await;
    let listing = "z".repeat(16 * 1024 * 1024 + 1);
    exec_mock()
        .respond_with(exec_answer(
            serde_json::json!({"stdout": listing, "stderr": "", "exit_code": 0}),
            Duration::ZERO,
        ))
        .mount(&server)
        .await;
    let err = sandbox
        .list_files("/work", sandbox_sdk_core::ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Provider, "{err}");
    assert!(
        err.to_string().contains("larger than the 16777216 bytes"),
        "{err}"
    );
}
