//! E2B-specific cassettes (`tests/cassettes/e2b/*.json`, provenance `spec`) replayed through the
//! conformance kit's replay server: each error dialect, a UTF-8 character split across events,
//! reattach by tag, fork with a partial failure, and kill of a sandbox already gone. Each
//! interaction must be used exactly as often as the cassette says, in order, and the normalised
//! requests are kept as insta snapshots (`tests/snapshots/dialects__*.snap`).

use bytes::Bytes;
use sandbox_conformance::cassette::{Cassette, Placeholders, SANDBOX_ID, SANDBOX_ID_2, TOKEN};
use sandbox_conformance::replay::{ReplayServer, normalise_requests};
use sandbox_e2b::{E2bBuilder, E2bProvider, E2bSandbox};
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, ErrorKind, ListOptions};

/// Starts a replay server with the cassette mounted and a provider pointed at it.
async fn replay(name: &str, user: Option<&str>) -> (ReplayServer, E2bProvider) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cassettes/e2b")
        .join(format!("{name}.json"));
    let cassette = Cassette::load(&path).unwrap();
    assert_eq!(cassette.scenario, name);
    let server = ReplayServer::start().await.unwrap();
    let cassette = cassette
        .substituted(&Placeholders::standard(server.url()))
        .unwrap();
    server.mount(&cassette, false).await.unwrap();
    let mut builder = E2bBuilder::new()
        .api_key(TOKEN)
        .api_url(server.url())
        .sandbox_url(server.url());
    if let Some(user) = user {
        builder = builder.user(user);
    }
    let provider = builder.build().unwrap();
    (server, provider)
}

async fn connect(provider: &E2bProvider) -> E2bSandbox {
    let sandbox = provider.connect_sandbox(SANDBOX_ID, None).await.unwrap();
    assert_eq!(sandbox.id(), SANDBOX_ID);
    sandbox
}

/// Checks every interaction was used as the cassette says, then snapshots the requests sent.
async fn verified(name: &str, server: ReplayServer) {
    if let Err(problems) = server.verify().await {
        panic!("replay server: {problems}\nmisses: {:?}", server.misses());
    }
    let placeholders = Placeholders::standard(server.url());
    insta::assert_snapshot!(name, normalise_requests(&server.requests(), &placeholders));
}

#[tokio::test]
async fn edge_proxy_errors() {
    let (server, provider) = replay("e2b_error_edge_proxy", None).await;
    let sandbox = connect(&provider).await;
    let e = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotRunning, "{e}");
    assert_eq!(e.status(), Some(502));
    assert!(!e.is_retryable());
    let e = sandbox.stat("a.txt").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(
        e.is_retryable(),
        "a transitioning sandbox is worth retrying"
    );
    verified("e2b_error_edge_proxy", server).await;
}

#[tokio::test]
async fn connect_end_stream_errors_on_http_200() {
    let (server, provider) = replay("e2b_error_connect_stream", None).await;
    let sandbox = connect(&provider).await;
    let e = sandbox
        .exec(
            &Command::new("/bin/bash")
                .args(["-l", "-c", "ls"])
                .cwd("/nope")
                .user("root"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Validation, "{e}");
    assert_eq!(e.status(), None, "a stream error arrives on HTTP 200");
    assert!(e.message().contains("cwd '/nope' does not exist"));
    let e = sandbox.attach("999").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    verified("e2b_error_connect_stream", server).await;
}

#[tokio::test]
async fn connect_unary_errors() {
    let (server, provider) = replay("e2b_error_connect_unary", Some("bob")).await;
    let sandbox = connect(&provider).await;
    let e = sandbox
        .list_files("/home/bob", ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    assert_eq!(e.status(), Some(401));
    let e = sandbox.mkdir("a.txt").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Validation, "{e}");
    verified("e2b_error_connect_unary", server).await;
}

#[tokio::test]
async fn envd_http_errors() {
    let (server, provider) = replay("e2b_error_envd_http", None).await;
    let sandbox = connect(&provider).await;
    let e = sandbox.exec(&Command::new("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    let body: sandbox_sdk_core::UploadBody = Box::pin(std::io::Cursor::new(vec![b'x'; 64]));
    let e = sandbox.upload("big.bin", body).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QuotaExceeded, "{e}");
    assert_eq!(e.status(), Some(507));
    assert!(!e.is_retryable(), "a full disk does not clear by retrying");
    verified("e2b_error_envd_http", server).await;
}

#[tokio::test]
async fn utf8_split_across_events_is_byte_exact() {
    let (server, provider) = replay("e2b_exec_utf8_split", None).await;
    let sandbox = connect(&provider).await;
    let out = sandbox
        .run(&Command::new("printf").arg("héllo→"))
        .await
        .unwrap();
    assert_eq!(out.stdout, Bytes::from("héllo→"));
    assert_eq!(out.stderr, Bytes::from("→"));
    assert_eq!(out.status.code, Some(0));
    verified("e2b_exec_utf8_split", server).await;
}

#[tokio::test]
async fn fork_with_a_partial_failure() {
    let (server, provider) = replay("e2b_fork_partial", None).await;
    let sandbox = connect(&provider).await;
    let children = sandbox.fork_many(2).await.unwrap();
    assert_eq!(children.len(), 2);
    assert_eq!(children[0].as_ref().unwrap().id(), SANDBOX_ID_2);
    let e = children[1].as_ref().unwrap_err();
    assert_eq!(e.status(), Some(503));
    assert!(e.message().contains("Failed to place sandbox"));
    verified("e2b_fork_partial", server).await;
}

#[tokio::test]
async fn kill_of_a_sandbox_already_gone() {
    let (server, provider) = replay("e2b_kill_gone", None).await;
    let sandbox = connect(&provider).await;
    let e = sandbox.destroy().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.message().contains("already gone"), "{e}");
    assert!(!sandbox.kill().await.unwrap());
    verified("e2b_kill_gone", server).await;
}

#[tokio::test]
async fn reattach_by_tag() {
    let (server, provider) = replay("e2b_reattach_by_tag", None).await;
    let sandbox = connect(&provider).await;
    let process = sandbox.attach("web").await.unwrap();
    assert_eq!(process.pid(), "600");
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "later\n");
    verified("e2b_reattach_by_tag", server).await;
}
