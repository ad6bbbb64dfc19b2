//! Offline checks of the conformance suite's recording wiring (`suite/mod.rs`): no
//! credentials, loopback only.

mod common;
mod suite;

use bytes::Bytes;
use sandbox_conformance::{LoggedRequest, Suite, Vars};
use sandbox_daytona::DaytonaBuilder;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use suite::Routes;
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn record_suite(
    lookup: impl Fn(&str) -> Option<String> + 'static,
    dir: &Path,
) -> Result<Suite, String> {
    suite::daytona(dir).record_suite(lookup, dir)
}

const LIVE_KEY: &str = "dtn_livekey00000000000000000000000000000000abcd";
const LIVE_ID: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";

fn request(path: &str) -> LoggedRequest {
    LoggedRequest {
        method: "GET".into(),
        path: path.into(),
        query: None,
        headers: Vec::new(),
        body: Bytes::new(),
    }
}

fn routes(pairs: &[(&str, &str)]) -> Routes {
    Routes::of(&DaytonaBuilder::from_lookup(Vars::fixed(pairs))).expect("routes")
}

#[test]
fn api_requests_go_to_the_api_and_toolbox_requests_to_the_toolbox_proxy() {
    let r = routes(&[]);
    let fetch = request("/api/sandbox/sb1");
    let download = request("/toolbox/sb1/files/download");
    assert_eq!(r.route(&fetch).as_deref(), Some("https://app.daytona.io"));
    assert_eq!(
        r.route(&download).as_deref(),
        Some("https://proxy.app.daytona.io")
    );
    let r = routes(&[
        ("DAYTONA_API_URL", "http://127.0.0.1:3000/api/"),
        (
            "DAYTONA_TOOLBOX_URL",
            "https://proxy.eu.example.test/toolbox",
        ),
    ]);
    assert_eq!(r.route(&fetch).as_deref(), Some("http://127.0.0.1:3000"));
    assert_eq!(
        r.route(&download).as_deref(),
        Some("https://proxy.eu.example.test")
    );
    // The older variable name of the API URL is read too.
    let r = routes(&[("DAYTONA_SERVER_URL", "https://daytona.example.test/api")]);
    assert_eq!(
        r.route(&fetch).as_deref(),
        Some("https://daytona.example.test")
    );
}

#[test]
fn other_paths_and_bad_sandbox_ids_have_no_route() {
    let r = routes(&[]);
    for bad in [
        "/",
        "/apix/sandbox",
        "/toolbox",
        "/toolbox/",
        "/toolbox/sb1",
        "/toolbox//files",
        "/toolbox/evil.com/files",
        "/toolbox/a%2Fb/files",
        "/other/api/sandbox",
    ] {
        assert_eq!(r.route(&request(bad)), None, "{bad}");
    }
}

#[test]
fn recording_without_an_api_key_or_with_odd_urls_fails_naming_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = record_suite(Vars::fixed(&[]), dir.path()).unwrap_err();
    assert!(err.contains("DAYTONA_API_KEY"), "{err}");
    let err = record_suite(Vars::fixed(&[("DAYTONA_API_KEY", " ")]), dir.path()).unwrap_err();
    assert!(err.contains("DAYTONA_API_KEY"), "{err}");
    for (var, url) in [
        ("DAYTONA_API_URL", "https://app.daytona.io/v1"),
        ("DAYTONA_API_URL", "https://user:hunter2@app.daytona.io/api"),
        ("DAYTONA_API_URL", "ftp://app.daytona.io/api"),
        ("DAYTONA_TOOLBOX_URL", "https://proxy.app.daytona.io/tb"),
    ] {
        let err = record_suite(
            Vars::fixed(&[("DAYTONA_API_KEY", LIVE_KEY), (var, url)]),
            dir.path(),
        )
        .unwrap_err();
        assert!(err.contains(var), "{err}");
        assert!(!err.contains(LIVE_KEY) && !err.contains("hunter2"), "{err}");
    }
    assert!(record_suite(Vars::fixed(&[("DAYTONA_API_KEY", LIVE_KEY)]), dir.path()).is_ok());
}

/// The sandbox DTO of `LIVE_ID` (PROTOCOL.md §2.3), started.
fn live_sandbox() -> Value {
    let dto = common::sandbox(LIVE_ID, "started");
    let dto = common::with(dto, "labels", json!({"suite": "conformance"}));
    common::with(dto, "autoStopInterval", json!(5))
}

/// The sandbox while it exists, a 404 once the (direct) destroy went through.
struct Fetch(Arc<AtomicBool>);

impl Respond for Fetch {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        if self.0.load(Ordering::SeqCst) {
            ResponseTemplate::new(404).set_body_json(json!({
                "statusCode": 404, "error": "Not Found",
                "message": format!("Sandbox with ID or name {LIVE_ID} not found")
            }))
        } else {
            ResponseTemplate::new(200).set_body_json(live_sandbox())
        }
    }
}

struct Destroy(Arc<AtomicBool>);

impl Respond for Destroy {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        self.0.store(true, Ordering::SeqCst);
        let mut dto = live_sandbox();
        dto["state"] = "destroying".into();
        ResponseTemplate::new(200).set_body_json(dto)
    }
}

/// A loopback stand-in for the API: create, fetch and destroy of `LIVE_ID`, each only with
/// the live key; the create and the destroy exactly once.
async fn api() -> MockServer {
    let api = MockServer::start().await;
    let auth = || header("authorization", format!("Bearer {LIVE_KEY}").as_str());
    let gone = Arc::new(AtomicBool::new(false));
    Mock::given(method("POST"))
        .and(path("/api/sandbox"))
        .and(auth())
        .respond_with(ResponseTemplate::new(200).set_body_json(live_sandbox()))
        .expect(1)
        .mount(&api)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/api/sandbox/{LIVE_ID}")))
        .and(auth())
        .respond_with(Fetch(gone.clone()))
        .mount(&api)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("/api/sandbox/{LIVE_ID}")))
        .and(auth())
        .respond_with(Destroy(gone))
        .expect(1)
        .mount(&api)
        .await;
    api
}

/// The whole recording path against loopback stand-ins for the API and the toolbox proxy:
/// the sandbox is created and destroyed directly, the scenario's fetch goes through the
/// proxy to the API and its file calls to the toolbox proxy, with the live key; the
/// cassette written has the key, the id and the addresses scrubbed, and replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_api_and_toolbox_calls_through_the_proxy_with_secrets_scrubbed() {
    let api = api().await;
    let toolbox = MockServer::start().await;
    for op in ["download", "info"] {
        Mock::given(method("GET"))
            .and(path(format!("/toolbox/{LIVE_ID}/files/{op}")))
            .and(query_param("path", "conformance/missing.txt"))
            .and(header(
                "authorization",
                format!("Bearer {LIVE_KEY}").as_str(),
            ))
            .respond_with(ResponseTemplate::new(404).set_body_json(json!({
                "statusCode": 404,
                "message": "file not found: conformance/missing.txt",
                "code": "FILE_NOT_FOUND",
                "timestamp": "2026-12-01T04:00:10Z",
                "path": format!("/files/{op}"),
                "method": "GET",
                "source": "DAYTONA_DAEMON"
            })))
            .expect(1)
            .mount(&toolbox)
            .await;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let api_url = format!("{}/api", api.uri());
    let toolbox_url = format!("{}/toolbox", toolbox.uri());
    suite::daytona(dir.path())
        .check_recording(
            dir.path(),
            "files_missing",
            &[
                ("DAYTONA_API_KEY", LIVE_KEY),
                ("DAYTONA_API_URL", &api_url),
                ("DAYTONA_TOOLBOX_URL", &toolbox_url),
            ],
            &[LIVE_KEY, LIVE_ID, &api.uri(), &toolbox.uri()],
            &[
                "GET /api/sandbox/{{sandbox_id}}",
                "GET /toolbox/{{sandbox_id}}/files/download",
                "GET /toolbox/{{sandbox_id}}/files/info",
            ],
        )
        .await;
}
