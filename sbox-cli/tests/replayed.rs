//! `sbox exec` and `sbox cp` against a replayed cloud provider: E2B's conformance cassettes
//! (written from its protocol documents) served by the conformance kit's replay server, with
//! sbox configured only through E2B's usual environment variables, as a user would.

use sandbox_conformance::cassette::{self, Cassette, Placeholders};
use sandbox_conformance::replay::ReplayServer;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The E2B adapter's cassettes, shared rather than copied so they cannot drift apart.
fn cassette_path(scenario: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sandbox-e2b/tests/cassettes")
        .join(format!("{scenario}.json"))
}

async fn serve(scenario: &str, lenient: bool) -> ReplayServer {
    let server = ReplayServer::start().await.unwrap();
    let cassette = Cassette::load(&cassette_path(scenario))
        .unwrap()
        .substituted(&Placeholders::standard(server.url()))
        .unwrap();
    server.mount(&cassette, lenient).await.unwrap();
    server
}

async fn sbox(server: &ReplayServer, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(args)
        .env("E2B_API_KEY", cassette::TOKEN)
        .env("E2B_API_URL", server.url())
        .env("E2B_SANDBOX_URL", server.url())
        .env_remove("E2B_DOMAIN")
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_streams_stdout_and_stderr_apart_from_a_replayed_e2b() {
    let server = serve("exec_stdout_stderr", false).await;
    let out = sbox(
        &server,
        &[
            "exec",
            "--provider",
            "e2b",
            cassette::SANDBOX_ID,
            "--",
            // sbox exec sends argv as given; the cassette is the conformance scenario's
            // Command::shell line, which E2B runs as a login bash.
            "/bin/bash",
            "-l",
            "-c",
            "printf out; printf err >&2",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{:?}", server.misses());
    assert_eq!(out.stdout, b"out");
    assert_eq!(out.stderr, b"err");
    server.verify().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn cp_uploads_and_downloads_through_a_replayed_e2b() {
    // Two sbox processes connect once each, so the cassette's calls are mounted for any count;
    // anything it does not describe still fails the test as a miss.
    // The scenario is a streaming upload then a streaming download (SCENARIOS.md,
    // files_streaming): what sbox cp does in each direction.
    let server = serve("files_streaming", true).await;
    let dir = tempfile::tempdir().unwrap();
    let data: String = (0..100).map(|i| format!("line {i}\n")).collect();
    let src = dir.path().join("stream.txt");
    std::fs::write(&src, &data).unwrap();
    let remote = format!("{}:conformance/stream.txt", cassette::SANDBOX_ID);

    let out = sbox(
        &server,
        &["cp", "--provider", "e2b", src.to_str().unwrap(), &remote],
    )
    .await;
    assert!(out.status.success(), "{out:?}\n{:?}", server.misses());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("copied 790 bytes"),
        "{out:?}"
    );

    let back = dir.path().join("back.txt");
    let out = sbox(
        &server,
        &["cp", "--provider", "e2b", &remote, back.to_str().unwrap()],
    )
    .await;
    assert!(out.status.success(), "{out:?}\n{:?}", server.misses());
    assert_eq!(std::fs::read_to_string(&back).unwrap(), data);
    server.verify().await.unwrap();
}
