//! Offline checks of the conformance suite's recording wiring (`suite/mod.rs`): no
//! credentials, loopback only.

mod suite;

use bytes::Bytes;
use sandbox_conformance::{LoggedRequest, Suite, Vars};
use sandbox_fly::FlyBuilder;
use std::path::Path;
use suite::{route, upstream_of};
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn record_suite(
    lookup: impl Fn(&str) -> Option<String> + 'static,
    dir: &Path,
) -> Result<Suite, String> {
    suite::fly(dir).record_suite(lookup, dir)
}

const LIVE_TOKEN: &str = "fm2_livetoken0000secret0000abcdef";
const LIVE_APP: &str = "acme-recording-sandboxes";
const LIVE_ID: &str = "d8d9e1f2a3b4c5";

fn request(path: &str) -> LoggedRequest {
    LoggedRequest {
        method: "GET".into(),
        path: path.into(),
        query: None,
        headers: Vec::new(),
        body: Bytes::new(),
    }
}

fn upstream(pairs: &[(&str, &str)]) -> String {
    upstream_of(&FlyBuilder::from_lookup(Vars::fixed(pairs))).expect("upstream")
}

#[test]
fn machines_api_requests_go_to_the_api_host() {
    assert_eq!(upstream(&[]), "https://api.machines.dev");
    assert_eq!(
        upstream(&[("FLY_API_HOSTNAME", "_api.internal:4280")]),
        "https://_api.internal:4280"
    );
    assert_eq!(
        upstream(&[("FLY_API_HOSTNAME", "http://127.0.0.1:9/v1/")]),
        "http://127.0.0.1:9"
    );
    let up = upstream(&[]);
    let get = request("/v1/apps/a/machines/m1");
    assert_eq!(
        route(&up, &get).as_deref(),
        Some("https://api.machines.dev")
    );
    let exec = request("/v1/apps/a/machines/m1/exec");
    assert_eq!(
        route(&up, &exec).as_deref(),
        Some("https://api.machines.dev")
    );
    assert_eq!(route(&up, &request("/graphql")), None);
    assert_eq!(route(&up, &request("/v1")), None);
}

#[test]
fn recording_without_credentials_fails_naming_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = record_suite(Vars::fixed(&[("FLY_APP_NAME", LIVE_APP)]), dir.path()).unwrap_err();
    assert!(err.contains("FLY_API_TOKEN"), "{err}");
    let err = record_suite(
        Vars::fixed(&[("FLY_API_TOKEN", " "), ("FLY_APP_NAME", LIVE_APP)]),
        dir.path(),
    )
    .unwrap_err();
    assert!(err.contains("FLY_API_TOKEN"), "{err}");
    let err = record_suite(Vars::fixed(&[("FLY_API_TOKEN", LIVE_TOKEN)]), dir.path()).unwrap_err();
    assert!(err.contains("FLY_APP_NAME"), "{err}");
    let err = record_suite(
        Vars::fixed(&[("FLY_API_TOKEN", LIVE_TOKEN), ("FLY_APP_NAME", "Bad App")]),
        dir.path(),
    )
    .unwrap_err();
    assert!(err.contains("invalid app name"), "{err}");
    assert!(!err.contains(LIVE_TOKEN), "{err}");
    let ok = Vars::fixed(&[("FLY_API_TOKEN", LIVE_TOKEN), ("FLY_APP", LIVE_APP)]);
    assert!(record_suite(ok, dir.path()).is_ok());
}

fn machine(state: &str) -> serde_json::Value {
    serde_json::json!({
        "id": LIVE_ID,
        "name": "sandbox-conformance",
        "state": state,
        "region": "ord",
        "instance_id": "01HEPA330HZ37A78TK080NAK1M",
        "config": {"image": "ubuntu:24.04", "metadata": {"suite": "conformance"}},
        "created_at": "2026-12-01T00:00:00Z",
    })
}

/// The whole recording path against a loopback stand-in for the Machines API: the machine
/// is created and destroyed directly, the scenario goes through the proxy with the live
/// token, and the cassette written has the token and id scrubbed and the replay app name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_a_scenario_through_the_proxy_with_secrets_scrubbed() {
    let api = MockServer::start().await;
    let auth = || header("authorization", format!("FlyV1 {LIVE_TOKEN}").as_str());
    let machines = format!("/v1/apps/{LIVE_APP}/machines");
    Mock::given(method("POST"))
        .and(path(machines.as_str()))
        .and(auth())
        .respond_with(ResponseTemplate::new(200).set_body_json(machine("started")))
        .expect(1)
        .mount(&api)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{machines}/{LIVE_ID}")))
        .and(auth())
        .respond_with(ResponseTemplate::new(200).set_body_json(machine("started")))
        .mount(&api)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{machines}/{LIVE_ID}")))
        .and(query_param("force", "true"))
        .and(auth())
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({"ok": true})))
        .expect(1)
        .mount(&api)
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    suite::fly(dir.path())
        .check_recording(
            dir.path(),
            "connect",
            &[
                ("FLY_API_TOKEN", LIVE_TOKEN),
                ("FLY_APP_NAME", LIVE_APP),
                ("FLY_API_HOSTNAME", &api.uri()),
            ],
            &[LIVE_TOKEN, LIVE_APP, LIVE_ID, &api.uri()],
            // The scenario's connect, then its info.
            &["GET /v1/apps/conformance-app/machines/{{sandbox_id}}"; 2],
        )
        .await;
}
