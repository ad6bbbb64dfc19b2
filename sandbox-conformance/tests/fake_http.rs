//! What the suite catches, shown on the small fake HTTP adapter of `tests/fake` (whose full
//! suite runs in `tests/conformance.rs`): the catch-all's explanation, the count check, the "no
//! duplicate create" scenario against an adapter that retries creates blindly, and the recorder
//! round trip (record from a live service, replay, pass).

mod fake;

use fake::Bugs;
use sandbox_conformance::cassette::{Cassette, ProvenanceKind};
use sandbox_conformance::{Outcome, Suite};

use fake::{LIVE_TOKEN, cassettes, factory, record_target, record_target_with};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn failure(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Failed(m) => m,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn an_adapter_that_drops_its_credentials_fails_replay_saying_so() {
    let suite = Suite::replay(
        factory(Bugs {
            no_credentials: true,
            ..Bugs::default()
        }),
        cassettes(),
    );
    // Recorded and hand-written cassettes alike: none of them lists the credential header, the
    // replay requires it anyway.
    for scenario in ["connect", "exec_exit_codes", "no_duplicate_create"] {
        let report = runtime().block_on(suite.run(scenario));
        let message = failure(&report.outcome);
        assert!(
            message.contains("credentials: the request carries no API key"),
            "{scenario}: {message}"
        );
    }
}

#[test]
fn the_catch_all_names_the_request_and_the_nearest_interaction() {
    let suite = Suite::replay(
        factory(Bugs {
            wrong_exec_path: true,
            ..Bugs::default()
        }),
        cassettes(),
    );
    let report = runtime().block_on(suite.run("exec_exit_codes"));
    let message = failure(&report.outcome);
    assert!(
        message.contains("request: POST /v1/sandboxes/cfsbx0001/run"),
        "{message}"
    );
    assert!(
        message.contains("next expected (strict order): #1 POST /v1/sandboxes/cfsbx0001/exec"),
        "{message}"
    );
    assert!(
        message.contains("nearest: #1 POST /v1/sandboxes/cfsbx0001/exec: path: expected /v1/sandboxes/cfsbx0001/exec, got /v1/sandboxes/cfsbx0001/run"),
        "{message}"
    );
    // An intended change is one command away: the cassette was recorded, so re-record.
    assert!(
        message.contains("SANDBOX_CONFORMANCE_RECORD=1 cargo test --test conformance -- exec_exit_codes && INSTA_UPDATE=always cargo test --test conformance -- exec_exit_codes"),
        "{message}"
    );
    // The adapter itself saw the explanation too (as the 418 answer's message).
    assert!(
        message.contains("no cassette interaction matched") || message.contains("HTTP 418"),
        "{message}"
    );
}

#[test]
fn the_count_check_catches_a_repeated_request() {
    let suite = Suite::replay(
        factory(Bugs {
            double_info: true,
            ..Bugs::default()
        }),
        cassettes(),
    );
    let report = runtime().block_on(suite.run("connect"));
    let message = failure(&report.outcome);
    assert!(message.contains("unmatched request"), "{message}");
    assert!(
        message.contains("it matches, but it was already used 1 of 1 time(s)"),
        "{message}"
    );
}

#[test]
fn the_count_check_catches_a_missing_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cassette = Cassette::load(&cassettes().join("connect.json")).expect("connect.json");
    let last = cassette.interactions.len() - 1;
    cassette.interactions[last].times = 2;
    std::fs::write(dir.path().join("connect.json"), cassette.to_json_pretty()).expect("write");
    let suite = Suite::replay(factory(Bugs::default()), dir.path());
    let report = runtime().block_on(suite.run("connect"));
    let message = failure(&report.outcome);
    assert!(
        message.contains("was used 1 time(s), the cassette expects exactly 2"),
        "{message}"
    );
}

#[test]
fn no_duplicate_create_catches_an_adapter_that_retries_creates_blindly() {
    let suite = Suite::replay(
        factory(Bugs {
            retry_create_blindly: true,
            ..Bugs::default()
        }),
        cassettes(),
    );
    let report = runtime().block_on(suite.run("no_duplicate_create"));
    let message = failure(&report.outcome);
    assert!(message.contains("POST /v1/sandboxes"), "{message}");
    assert!(message.contains("already used 1 of 1"), "{message}");
    // The same scenario passes for the adapter without the bug.
    let report = runtime().block_on(sandbox_conformance::run_scenario(
        "no_duplicate_create",
        factory(Bugs::default()),
        cassettes(),
    ));
    assert_eq!(report.outcome, Outcome::Passed, "{}", report.message());
}

#[test]
fn create_scenarios_catch_a_create_sent_again_after_an_ambiguous_failure() {
    for (scenario, bugs) in [
        (
            "create_slow_answer",
            Bugs {
                no_create_lookup: true,
                ..Bugs::default()
            },
        ),
        (
            "create_slow_answer",
            Bugs {
                retry_create_blindly: true,
                ..Bugs::default()
            },
        ),
        (
            "create_reset",
            Bugs {
                no_create_lookup: true,
                ..Bugs::default()
            },
        ),
    ] {
        let report = runtime().block_on(Suite::replay(factory(bugs), cassettes()).run(scenario));
        let message = failure(&report.outcome);
        assert!(
            message.contains("POST /v1/sandboxes"),
            "{scenario}: {message}"
        );
    }
}

#[test]
fn recorded_cassettes_replay_and_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime();
    for scenario in ["exec_env_cwd", "files_roundtrip"] {
        let recorded = rt.block_on(Suite::record(record_target(dir.path())).run(scenario));
        assert_eq!(recorded.outcome, Outcome::Passed, "{}", recorded.message());
        let path = dir.path().join(format!("{scenario}.json"));
        let text = std::fs::read_to_string(&path).expect("cassette written");
        assert!(
            !text.contains(LIVE_TOKEN),
            "the live token leaked into {text}"
        );
        assert!(
            !text.contains("127.0.0.1"),
            "the service address leaked into {text}"
        );
        assert!(text.contains("{{sandbox_id}}"), "{text}");
        let cassette = Cassette::load(&path).expect("valid cassette");
        assert_eq!(cassette.provenance.kind, ProvenanceKind::Recorded);
        assert!(!cassette.interactions.is_empty());
        // connect.json is needed by nothing here: these scenarios connect inside their own cassette.
        let replayed =
            rt.block_on(Suite::replay(factory(Bugs::default()), dir.path()).run(scenario));
        assert_eq!(replayed.outcome, Outcome::Passed, "{}", replayed.message());
    }
}

#[test]
fn run_all_counts_every_scenario_and_draws_the_coverage_table() {
    let suite = Suite::replay(factory(Bugs::default()), cassettes());
    let report = runtime().block_on(sandbox_conformance::run_suite(&suite));
    let failures: Vec<String> = report
        .scenarios
        .iter()
        .filter(|r| r.is_failure())
        .map(|r| r.message())
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let counts = report.counts();
    assert_eq!(
        counts.passed + counts.not_supported + counts.failed + counts.skipped,
        sandbox_conformance::SCENARIOS.len() + 1
    );
    assert_eq!(counts.failed, 0);
    assert_eq!(
        counts.skipped, 1,
        "only exec_streaming is skipped (streaming unsupported)"
    );
    // Unsupported scenarios are counted as such, not as passes.
    let unsupported = report
        .scenarios
        .iter()
        .filter(|r| r.outcome == Outcome::NotSupported)
        .count();
    assert!(unsupported > 10, "{unsupported}");
    assert_eq!(counts.not_supported, unsupported);
    assert_eq!(
        report.summary_line(),
        format!(
            "conformance: {} passed, {unsupported} not supported, 1 skipped, 0 failed",
            counts.passed
        )
    );
    let table = report.coverage.markdown(&Default::default());
    assert!(
        table.contains("| files_upload | native | files_roundtrip, files_streaming"),
        "{table}"
    );
    assert!(table.contains("| fork | unsupported | fork |"), "{table}");
}

#[test]
fn a_declared_capability_that_no_scenario_exercises_fails_coverage() {
    let mut caps = fake::capabilities();
    caps.gpu = sandbox_sdk_core::Level::Native;
    let coverage = sandbox_conformance::Coverage::compute("fake", &caps, &Default::default());
    let err = coverage.check().unwrap_err();
    assert!(err.contains("gpu"), "{err}");
    let mut elsewhere = std::collections::BTreeMap::new();
    elsewhere.insert(
        sandbox_sdk_core::Capability::Gpu,
        "create::requests_gpus".to_owned(),
    );
    assert!(
        sandbox_conformance::Coverage::compute("fake", &caps, &elsewhere)
            .check()
            .is_ok()
    );
}

/// The scenarios whose cassettes the recorder derives: the fake's hand-written ones.
const DERIVED: &[&str] = &[
    "error_unauthorized",
    "error_conflict",
    "error_rate_limited",
    "error_server",
    "error_connection_reset",
    "error_truncated_stream",
    "no_duplicate_create",
    "create_slow_answer",
    "create_reset",
    "create_unavailable",
];

/// The committed request snapshot of a scenario of the fake (made from the hand-written cassette).
fn committed_snapshot(scenario: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/snapshots/conformance__fake_http__{scenario}.snap"
    ));
    let text = std::fs::read_to_string(&path).expect("snapshot");
    let body = text.splitn(3, "---\n").nth(2).expect("an insta header");
    body.trim_end().to_owned()
}

#[test]
fn a_clean_recording_derives_every_injected_failure_and_replays_green() {
    // A copy of the fake's cassettes without the hand-written ones the kit can derive (the
    // fleet scenarios' stay: they cannot be recorded, a live run makes its own fleet first).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dropped = Vec::new();
    for entry in std::fs::read_dir(cassettes()).expect("cassettes") {
        let path = entry.expect("entry").path();
        let cassette = Cassette::load(&path).expect("valid cassette");
        let derivable = sandbox_conformance::SCENARIOS
            .iter()
            .find(|s| s.name == cassette.scenario)
            .is_none_or(|s| !s.live);
        if cassette.provenance.kind == ProvenanceKind::Spec && derivable {
            dropped.push(cassette.scenario);
        } else {
            std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
        }
    }
    dropped.sort();
    let mut derived: Vec<String> = DERIVED.iter().map(|s| (*s).to_owned()).collect();
    derived.sort();
    assert_eq!(dropped, derived, "the fake's hand-written cassettes");

    let rt = runtime();
    let recording = rt.block_on(Suite::record(record_target(dir.path())).run_all());
    let failures: Vec<String> = recording
        .scenarios
        .iter()
        .filter(|r| r.is_failure())
        .map(|r| r.message())
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    for scenario in DERIVED {
        let report = recording
            .scenarios
            .iter()
            .find(|r| r.scenario == *scenario)
            .expect("reported");
        assert_eq!(report.outcome, Outcome::Passed, "{}", report.message());
        let cassette =
            Cassette::load(&dir.path().join(format!("{scenario}.json"))).expect("derived");
        assert_eq!(cassette.provenance.kind, ProvenanceKind::Spec, "{scenario}");
        let source = cassette.provenance.source.unwrap_or_default();
        assert!(
            source.starts_with("derived by sandbox-conformance from the live answers to"),
            "{scenario}: {source}"
        );
    }

    let replay = rt.block_on(Suite::replay(factory(Bugs::default()), dir.path()).run_all());
    let failures: Vec<String> = replay
        .scenarios
        .iter()
        .filter(|r| r.is_failure())
        .map(|r| r.message())
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    // The derived cassettes make the adapter send exactly what the hand-written ones did.
    for scenario in DERIVED {
        let report = replay
            .scenarios
            .iter()
            .find(|r| r.scenario == *scenario)
            .expect("replayed");
        assert_eq!(report.outcome, Outcome::Passed, "{}", report.message());
        assert_eq!(
            report.requests.as_deref().map(str::trim_end),
            Some(committed_snapshot(scenario).as_str()),
            "{scenario}"
        );
    }

    // Recording again keeps a derived cassette as it is.
    let path = dir.path().join("error_server.json");
    let before = std::fs::read(&path).expect("derived");
    let again = rt.block_on(Suite::record(record_target(dir.path())).run("error_server"));
    match &again.outcome {
        Outcome::Skipped(why) => assert!(why.contains("never overwrites"), "{why}"),
        other => panic!("expected the cassette to be kept, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).expect("kept"), before);
}

#[test]
fn a_cassette_the_recorder_cannot_derive_fails_the_recording_saying_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bugs = Bugs {
        no_create_lookup: true,
        ..Bugs::default()
    };
    let report = runtime()
        .block_on(Suite::record(record_target_with(dir.path(), bugs)).run("create_slow_answer"));
    let message = failure(&report.outcome);
    assert!(
        message.contains("create_slow_answer.json is missing and the recorder could not derive it"),
        "{message}"
    );
    assert!(message.contains("does not look the key up"), "{message}");
    assert!(message.contains("### create_slow_answer"), "{message}");
    assert!(!dir.path().join("create_slow_answer.json").exists());
}

#[test]
fn a_missing_cassette_says_how_to_record_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report =
        runtime().block_on(Suite::replay(factory(Bugs::default()), dir.path()).run("connect"));
    let message = failure(&report.outcome);
    assert!(
        message.contains("SANDBOX_CONFORMANCE_RECORD=1 cargo test --test conformance -- connect"),
        "{message}"
    );
    assert!(message.contains("### connect"), "{message}");
}
