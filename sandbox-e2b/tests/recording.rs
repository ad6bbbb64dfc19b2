//! Offline checks of the conformance suite's recording wiring (`suite/mod.rs`): no
//! credentials, loopback only.

mod suite;

use bytes::Bytes;
use sandbox_conformance::{LoggedRequest, Suite, Vars};
use sandbox_e2b::E2bBuilder;
use std::path::Path;
use suite::Routes;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn record_suite(
    lookup: impl Fn(&str) -> Option<String> + 'static,
    dir: &Path,
) -> Result<Suite, String> {
    suite::e2b(dir).record_suite(lookup, dir)
}

const LIVE_KEY: &str = "e2b_livekey0000000000000000000000000000abcd";
const LIVE_ENVD_TOKEN: &str = "envd-live-token-5e1f";
const LIVE_ID: &str = "irecorded0000000000001";

fn request(path: &str, headers: &[(&str, &str)]) -> LoggedRequest {
    LoggedRequest {
        method: "POST".into(),
        path: path.into(),
        query: None,
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        body: Bytes::new(),
    }
}

fn envd(id: &str, port: &str) -> LoggedRequest {
    request(
        "/process.Process/Start",
        &[("e2b-sandbox-id", id), ("e2b-sandbox-port", port)],
    )
}

fn routes(pairs: &[(&str, &str)]) -> Routes {
    Routes::of(&E2bBuilder::from_lookup(Vars::fixed(pairs)))
}

#[test]
fn control_plane_requests_go_to_the_api_host() {
    let r = routes(&[]);
    let create = request("/v2/sandboxes", &[("x-api-key", "k")]);
    assert_eq!(r.route(&create).as_deref(), Some("https://api.e2b.app"));
    let r = routes(&[("E2B_DOMAIN", "example.test")]);
    assert_eq!(
        r.route(&create).as_deref(),
        Some("https://api.example.test")
    );
    let r = routes(&[("E2B_API_URL", "https://api.staging.test/")]);
    assert_eq!(
        r.route(&create).as_deref(),
        Some("https://api.staging.test")
    );
}

#[test]
fn envd_requests_go_to_the_sandbox_host_by_their_routing_headers() {
    // E2B's own domains: the shared host, which routes by the forwarded headers.
    let r = routes(&[]);
    assert_eq!(
        r.route(&envd("isb1", "49983")).as_deref(),
        Some("https://sandbox.e2b.app")
    );
    let r = routes(&[("E2B_DOMAIN", "e2b.dev")]);
    assert_eq!(
        r.route(&envd("isb1", "49983")).as_deref(),
        Some("https://sandbox.e2b.dev")
    );
    // Any other domain: the per-sandbox host.
    let r = routes(&[("E2B_DOMAIN", "example.test")]);
    assert_eq!(
        r.route(&envd("isb1", "49983")).as_deref(),
        Some("https://49983-isb1.example.test")
    );
    // An explicit envd URL wins.
    let r = routes(&[("E2B_SANDBOX_URL", "http://127.0.0.1:7/")]);
    assert_eq!(
        r.route(&envd("isb1", "49983")).as_deref(),
        Some("http://127.0.0.1:7")
    );
}

#[test]
fn requests_with_bad_routing_headers_have_no_route() {
    let r = routes(&[("E2B_DOMAIN", "example.test")]);
    let only_id = request("/files", &[("e2b-sandbox-id", "isb1")]);
    assert_eq!(r.route(&only_id), None);
    let only_port = request("/files", &[("e2b-sandbox-port", "49983")]);
    assert_eq!(r.route(&only_port), None);
    assert_eq!(r.route(&envd("evil.com/x", "49983")), None);
    assert_eq!(r.route(&envd("", "49983")), None);
    assert_eq!(r.route(&envd("isb1", "8080")), None);
    assert_eq!(r.route(&envd("isb1", "port")), None);
}

#[test]
fn recording_without_an_api_key_fails_naming_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = record_suite(Vars::fixed(&[("E2B_DOMAIN", "e2b.app")]), dir.path()).unwrap_err();
    assert!(err.contains("E2B_API_KEY"), "{err}");
    let err = record_suite(Vars::fixed(&[("E2B_API_KEY", "  ")]), dir.path()).unwrap_err();
    assert!(err.contains("E2B_API_KEY"), "{err}");
    let err = record_suite(
        Vars::fixed(&[("E2B_API_KEY", LIVE_KEY), ("E2B_DOMAIN", "a/b")]),
        dir.path(),
    )
    .unwrap_err();
    assert!(err.contains("invalid E2B domain"), "{err}");
    assert!(!err.contains(LIVE_KEY), "{err}");
    assert!(record_suite(Vars::fixed(&[("E2B_API_KEY", LIVE_KEY)]), dir.path()).is_ok());
}

fn created() -> serde_json::Value {
    serde_json::json!({
        "alias": "base",
        "clientID": "6532622b",
        "envdAccessToken": LIVE_ENVD_TOKEN,
        "envdVersion": "0.6.13",
        "sandboxID": LIVE_ID,
        "templateID": "rki5dems9wqfm4r03t7g",
    })
}

/// A loopback stand-in for the control plane: create, connect, details and kill of
/// `LIVE_ID`, each only with the live key; the create and the kill exactly once.
async fn control_plane() -> MockServer {
    let api = MockServer::start().await;
    let auth = || header("x-api-key", LIVE_KEY);
    Mock::given(method("POST"))
        .and(path("/v2/sandboxes"))
        .and(auth())
        .respond_with(ResponseTemplate::new(201).set_body_json(created()))
        .expect(1)
        .mount(&api)
        .await;
    Mock::given(method("POST"))
        .and(path(format!("/v2/sandboxes/{LIVE_ID}/connect")))
        .and(auth())
        .respond_with(ResponseTemplate::new(200).set_body_json(created()))
        .mount(&api)
        .await;
    let mut detail = created();
    detail["state"] = "running".into();
    detail["startedAt"] = "2026-12-01T00:00:00Z".into();
    detail["endAt"] = "2026-12-01T00:05:00Z".into();
    detail["cpuCount"] = 2.into();
    detail["memoryMB"] = 512.into();
    detail["diskSizeMB"] = 10240.into();
    detail["metadata"] = serde_json::json!({"suite": "conformance"});
    Mock::given(method("GET"))
        .and(path(format!("/sandboxes/{LIVE_ID}")))
        .and(auth())
        .respond_with(ResponseTemplate::new(200).set_body_json(detail))
        .mount(&api)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("/sandboxes/{LIVE_ID}")))
        .and(auth())
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&api)
        .await;
    api
}

/// The whole recording path against a loopback stand-in for the control plane: the sandbox
/// is created and destroyed directly, the scenario goes through the proxy with the live key,
/// and the cassette written has the key, the envd token, the id and the address scrubbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_a_scenario_through_the_proxy_with_secrets_scrubbed() {
    let api = control_plane().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = suite::e2b(dir.path())
        .check_recording(
            dir.path(),
            "connect",
            &[("E2B_API_KEY", LIVE_KEY), ("E2B_API_URL", &api.uri())],
            &[LIVE_KEY, LIVE_ENVD_TOKEN, LIVE_ID, &api.uri()],
            &[
                "POST /v2/sandboxes/{{sandbox_id}}/connect",
                "GET /sandboxes/{{sandbox_id}}",
            ],
        )
        .await;
    assert!(text.contains(r#""envdAccessToken": "{{token}}""#), "{text}");
}

/// envd calls leave the proxy for the envd host (here `E2B_SANDBOX_URL`, a second loopback
/// server) with the routing headers and the sandbox's access token, and replay afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_envd_calls_through_the_proxy_to_the_envd_host() {
    let api = control_plane().await;
    let envd = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/files"))
        .and(header("e2b-sandbox-id", LIVE_ID))
        .and(header("e2b-sandbox-port", "49983"))
        .and(header("x-access-token", LIVE_ENVD_TOKEN))
        .respond_with(
            ResponseTemplate::new(404)
                .insert_header("content-type", "application/json; charset=utf-8")
                .set_body_string(
                    "{\"code\":404,\"message\":\"path '/home/user/conformance/missing.txt' does not exist\"}\n",
                ),
        )
        .expect(1)
        .mount(&envd)
        .await;
    Mock::given(method("POST"))
        .and(path("/filesystem.Filesystem/Stat"))
        .and(header("e2b-sandbox-id", LIVE_ID))
        .and(header("e2b-sandbox-port", "49983"))
        .and(header("x-access-token", LIVE_ENVD_TOKEN))
        .respond_with(ResponseTemplate::new(404).set_body_json(serde_json::json!({
            "code": "not_found",
            "message": "file not found: stat /home/user/conformance/missing.txt: no such file or directory"
        })))
        .expect(1)
        .mount(&envd)
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    suite::e2b(dir.path())
        .check_recording(
            dir.path(),
            "files_missing",
            &[
                ("E2B_API_KEY", LIVE_KEY),
                ("E2B_API_URL", &api.uri()),
                ("E2B_SANDBOX_URL", &envd.uri()),
            ],
            &[LIVE_KEY, LIVE_ENVD_TOKEN, LIVE_ID],
            &[
                "POST /v2/sandboxes/{{sandbox_id}}/connect",
                "GET /files",
                "POST /filesystem.Filesystem/Stat",
            ],
        )
        .await;
}
