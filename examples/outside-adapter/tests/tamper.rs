//! What replay catches, on cassettes recorded from the live Acme service (`tests/conformance.rs`
//! in record mode): an adapter that drops or changes its credential, a cassette that holds a
//! secret, and a request the cassette does not expect all fail, saying what is wrong.

mod service;

use acme_sandbox::AcmeProvider;
use sandbox_conformance::cassette::{Cassette, TOKEN};
use sandbox_conformance::scrub::SecretCheck;
use sandbox_conformance::{Outcome, REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, Suite};
use sandbox_sdk_core::Provider;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn recorded() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cassettes");
    assert!(
        dir.join("connect.json").is_file(),
        "no recorded cassettes in {}: record them first (cargo xtask outside-check, or \
         SANDBOX_CONFORMANCE_RECORD=1 cargo test --test conformance)",
        dir.display()
    );
    dir
}

/// The adapter for `base_url`, with `key` as its API key, or none.
fn adapter(base_url: &str, key: Option<&str>) -> sandbox_sdk_core::Result<Arc<dyn Provider>> {
    let mut builder = AcmeProvider::builder()
        .base_url(base_url)
        .timeout(REPLAY_REQUEST_TIMEOUT)
        .create_lookup(REPLAY_CREATE_LOOKUP);
    if let Some(key) = key {
        builder = builder.api_key(key);
    }
    Ok(Arc::new(builder.build()?))
}

/// A copy of the recorded cassettes with `edit` applied to one of them.
fn tampered(scenario: &str, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(recorded()).expect("cassettes") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
    }
    let path = dir.path().join(format!("{scenario}.json"));
    let mut cassette: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    edit(&mut cassette);
    let text = serde_json::to_string_pretty(&cassette).expect("JSON");
    std::fs::write(&path, text).expect("write");
    dir
}

fn failure(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Failed(message) => message,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_untampered_recording_replays() {
    let suite = Suite::replay(|url| adapter(url, Some(TOKEN)), recorded());
    for scenario in [
        "connect",
        "exec_streaming",
        "error_server",
        "create_slow_answer",
    ] {
        let report = suite.run(scenario).await;
        assert_eq!(report.outcome, Outcome::Passed, "{}", report.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_that_drops_its_credential_fails_replay_saying_so() {
    let suite = Suite::replay(|url| adapter(url, None), recorded());
    // A recorded and a derived cassette alike.
    for scenario in ["connect", "exec_exit_codes", "error_server"] {
        let report = suite.run(scenario).await;
        let message = failure(&report.outcome);
        assert!(
            message.contains("credentials: the request carries no API key"),
            "{scenario}: {message}"
        );
    }
    let suite = Suite::replay(|url| adapter(url, Some("another-key")), recorded());
    let report = suite.run("connect").await;
    let message = failure(&report.outcome);
    assert!(
        message.contains("credentials: header x-api-key does not carry the API key")
            && message.contains("<a different credential>"),
        "{message}"
    );
    assert!(!message.contains("another-key"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cassette_holding_a_secret_is_refused_naming_file_and_line() {
    let planted = "sk_live_51HcAcmeBillingKey0123456789";
    let dir = tampered("connect", |c| {
        c["interactions"][0]["response"]["body"]["json"]["billing_key"] = json!(planted);
    });
    let path = dir.path().join("connect.json");
    let text = std::fs::read_to_string(&path).expect("read");
    let findings = SecretCheck::new().cassette(&text);
    assert_eq!(findings.len(), 1, "{findings:?}");
    let report = Suite::replay(|url| adapter(url, Some(TOKEN)), dir.path())
        .run("connect")
        .await;
    let message = failure(&report.outcome);
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("looks like a secret"), "{message}");
    assert!(
        message.contains(&format!("line {}", findings[0])),
        "{message}"
    );
    assert!(!message.contains(planted), "{message}");
    assert!(Cassette::load(&path).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_cassette_does_not_expect_fails_replay_naming_the_difference() {
    // The cassette now expects `exit 4` where the scenario runs `exit 3`.
    let dir = tampered("exec_exit_codes", |c| {
        let argv = &mut c["interactions"][2]["request"]["body"]["json"]["argv"];
        assert_eq!(argv[2], json!("exit 3"), "the recorded second command");
        argv[2] = json!("exit 4");
    });
    let report = Suite::replay(|url| adapter(url, Some(TOKEN)), dir.path())
        .run("exec_exit_codes")
        .await;
    let message = failure(&report.outcome);
    assert!(
        message.contains(r#"body: /argv/2: expected "exit 4", got "exit 3""#),
        "{message}"
    );
    assert!(
        message.contains(
            "SANDBOX_CONFORMANCE_RECORD=1 cargo test --test conformance -- exec_exit_codes"
        ),
        "{message}"
    );
}

#[test]
fn the_recording_holds_no_live_key() {
    let check = SecretCheck::new().known(service::LIVE_KEY);
    for entry in std::fs::read_dir(recorded()).expect("cassettes") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(!text.contains(service::LIVE_KEY), "{}", path.display());
        assert!(check.cassette(&text).is_empty(), "{}", path.display());
    }
}
