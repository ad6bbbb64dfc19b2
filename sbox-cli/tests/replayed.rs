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

/// The owner of the conformance kit's fleet cassettes (`sandbox_sdk_owner=conformance-owner`).
const OWNER: [&str; 4] = ["--prefix", "sandbox_sdk", "--owner", "conformance-owner"];

#[tokio::test(flavor = "multi_thread")]
async fn reap_dry_run_against_a_replayed_e2b_plans_and_destroys_nothing() {
    // One list filtered by the owner label; nothing else may be sent.
    let server = serve("reap_dry_run", false).await;
    let mut args = vec![
        "reap",
        "--provider",
        "e2b",
        "--keep",
        "cfsbx0002",
        "--dry-run",
    ];
    args.extend(OWNER);
    let out = sbox(&server, &args).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{:?}", server.misses());
    assert!(
        text.starts_with(
            "reap (dry run) of e2b sandboxes owned by sandbox_sdk_owner=conformance-owner\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("cfsbx0001  running  would destroy  not in the keep-set"),
        "{text}"
    );
    assert!(
        text.contains("cfsbx0002  running  left alone     in the keep-set"),
        "{text}"
    );
    assert!(
        text.ends_with("reap (dry run): 1 planned, 0 destroyed, 0 failed, 1 skipped\n"),
        "{text}"
    );
    server.verify().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn reap_against_a_replayed_e2b_destroys_only_what_the_policy_picks() {
    // The list, then exactly one DELETE /sandboxes/cfsbx0001.
    let server = serve("reap", false).await;
    let mut args = vec!["reap", "--provider", "e2b", "--keep", "cfsbx0002"];
    args.extend(OWNER);
    let out = sbox(&server, &args).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{:?}", server.misses());
    assert!(text.contains("cfsbx0001  running  destroyed"), "{text}");
    assert!(
        text.ends_with("reap: 1 planned, 1 destroyed, 0 failed, 1 skipped\n"),
        "{text}"
    );
    server.verify().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_of_the_owners_sandboxes_on_a_replayed_e2b_is_estimated() {
    // The owner's listing is the only request: E2B has no meter, so usage is estimated from it.
    let server = serve("reap_dry_run", false).await;
    let mut args = vec!["usage", "--provider", "e2b"];
    args.extend(OWNER);
    let out = sbox(&server, &args).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{:?}", server.misses());
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("cfsbx")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().all(|r| r.ends_with("estimated")), "{text}");
    // 2 vCPU and 512 MiB (priced as 1 GiB) since 2026-12-01T00:00Z: a cost, not a dash.
    assert!(rows.iter().all(|r| r.contains('$')), "{text}");
    assert!(text.contains("2 sandbox(es), $"), "{text}");
    server.verify().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn ls_escapes_control_characters_a_provider_put_in_its_answer() {
    // A provider (or whoever named a template) answers with terminal escape sequences: a
    // title change, a screen clear and a C1 control.
    let hostile = r"\u001b]0;pwned\u0007\u001b[2J\u009b31m";
    let text = std::fs::read_to_string(cassette_path("list"))
        .unwrap()
        .replace(r#""alias": "base""#, &format!(r#""alias": "{hostile}""#))
        .replace(
            r#""templateID": "rki5dems9wqfm4r03t7g""#,
            &format!(r#""templateID": "{hostile}""#),
        );
    let server = ReplayServer::start().await.unwrap();
    let cassette = Cassette::from_json(&text)
        .unwrap()
        .substituted(&Placeholders::standard(server.url()))
        .unwrap();
    server.mount(&cassette, false).await.unwrap();

    let out = sbox(&server, &["ls", "--provider", "e2b"]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{:?}", server.misses());
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(shown.lines().count(), 2, "{shown:?}");
    assert!(
        !shown
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "{shown:?}"
    );
    assert!(shown.contains(r"\u{1b}]0;pwned\u{7}"), "{shown:?}");
}
