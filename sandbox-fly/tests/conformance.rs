//! The conformance suite, replayed from the `spec` cassettes in `tests/cassettes/`.
//!
//! With `SANDBOX_CONFORMANCE_RECORD` set (`cargo xtask record --provider fly [--scenario S]`)
//! the suite records instead, from the live Machines API (`FLY_API_HOSTNAME`, default
//! `https://api.machines.dev`) with `FLY_API_TOKEN` and `FLY_APP_NAME` (both required). The
//! adapter under recording is configured like the replay one (default image, no region, and the
//! replay request timeout, which is also the deadline the adapter's own scripts send in `/exec`
//! bodies) so the bodies it records replay as they are; the token is scrubbed and the app name
//! written as the replay app, `conformance-app`.
//!
//! The replay adapter has the kit's `REPLAY_REQUEST_TIMEOUT` (2 s) and `REPLAY_CREATE_LOOKUP`:
//! the `create_*` scenarios answer a create late on purpose. Since the adapter's scripts get the
//! request timeout as their deadline, the spec cassettes' script `/exec` bodies carry
//! `"timeout": 2` (launches and polls, which wait 1 s in the machine, `3`).

use sandbox_conformance::{LoggedRequest, RecordTarget, Suite, cassette, conformance_tests};
use sandbox_fly::{FlyBuilder, FlyProvider};
use sandbox_sdk_core::{Capability, Provider};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const CASSETTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes");

/// The app the replay adapter is built for; recorded paths are rewritten to it.
const REPLAY_APP: &str = "conformance-app";

fn suite() -> Suite {
    if sandbox_conformance::recording() {
        return record_suite(|name| std::env::var(name).ok(), Path::new(CASSETTES))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    replay_suite(Path::new(CASSETTES))
}

/// The replay suite over the cassettes in `dir`.
fn replay_suite(dir: &Path) -> Suite {
    covered(Suite::replay(
        |base_url| {
            let provider = FlyProvider::builder()
                .token(cassette::TOKEN)
                .app(REPLAY_APP)
                .base_url(base_url)
                .poll_interval(Duration::ZERO)
                .request_timeout(sandbox_conformance::REPLAY_REQUEST_TIMEOUT)
                .create_lookup(sandbox_conformance::REPLAY_CREATE_LOOKUP)
                .build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        dir,
    ))
}

/// Capabilities proven by the adapter's own tests.
fn covered(suite: Suite) -> Suite {
    suite
        .covered_elsewhere(Capability::Region, "adapter::create_sends_the_region")
        .covered_elsewhere(Capability::Volumes, "adapter::create_mounts_the_volume")
}

/// The recording suite, configured from the variables `lookup` reads (the process environment
/// in `suite()`), writing cassettes to `out_dir`. Fails naming `FLY_API_TOKEN` or
/// `FLY_APP_NAME` when one is unset.
fn record_suite(lookup: impl Fn(&str) -> Option<String>, out_dir: &Path) -> Result<Suite, String> {
    let var = |name: &str| {
        lookup(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let token = var("FLY_API_TOKEN").ok_or(
        "recording fly needs a live API token: set FLY_API_TOKEN (fly tokens create deploy -a APP)",
    )?;
    let app = var("FLY_APP_NAME").or_else(|| var("FLY_APP")).ok_or(
        "recording fly needs the app its machines live in: set FLY_APP_NAME (fly apps create)",
    )?;
    let settings = FlyBuilder::from_lookup(&lookup);
    let direct = settings.clone().build().map_err(|e| {
        format!("recording fly: cannot build the adapter from the environment: {e}")
    })?;
    let upstream = upstream_of(&settings)?;
    let proxied = FlyProvider::builder()
        .token(token.clone())
        .app(app.clone())
        .request_timeout(sandbox_conformance::REPLAY_REQUEST_TIMEOUT);
    let mut target = RecordTarget::new(
        move |proxy| {
            let provider = proxied.clone().base_url(proxy).build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        Arc::new(direct),
        move |request| route(&upstream, request),
        out_dir,
    )
    .secret(token.clone())
    .replace(app, REPLAY_APP)
    .source("recorded from the live Fly Machines API by cargo xtask record --provider fly");
    // A token written with its scheme (`FlyV1 fm2_…`) may also appear without it.
    if let Some((_, bare)) = token.split_once(' ') {
        target = target.secret(bare.trim());
    }
    Ok(covered(Suite::record(target)))
}

/// The Machines API base (scheme, host, any path prefix, without `/v1`) of `settings`.
fn upstream_of(settings: &FlyBuilder) -> Result<String, String> {
    let root = settings
        .api_root()
        .map_err(|e| format!("recording fly: {e} (check FLY_API_HOSTNAME)"))?;
    Ok(root.strip_suffix("/v1").unwrap_or(&root).to_owned())
}

/// Every Machines API request (under `/v1/`) goes to `upstream`; anything else has no route.
fn route(upstream: &str, request: &LoggedRequest) -> Option<String> {
    request
        .path
        .starts_with("/v1/")
        .then(|| upstream.to_owned())
}

conformance_tests!(suite());

/// Offline checks of the recording wiring (no credentials, loopback only).
mod recording {
    use super::*;
    use bytes::Bytes;
    use sandbox_conformance::Outcome;
    use std::collections::HashMap;
    use wiremock::matchers::{header, method, path, query_param};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    const LIVE_TOKEN: &str = "fm2_livetoken0000secret0000abcdef";
    const LIVE_APP: &str = "acme-recording-sandboxes";
    const LIVE_ID: &str = "d8d9e1f2a3b4c5";

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

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
        upstream_of(&FlyBuilder::from_lookup(vars(pairs))).expect("upstream")
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
        let err = record_suite(vars(&[("FLY_APP_NAME", LIVE_APP)]), dir.path()).unwrap_err();
        assert!(err.contains("FLY_API_TOKEN"), "{err}");
        let err = record_suite(
            vars(&[("FLY_API_TOKEN", " "), ("FLY_APP_NAME", LIVE_APP)]),
            dir.path(),
        )
        .unwrap_err();
        assert!(err.contains("FLY_API_TOKEN"), "{err}");
        let err = record_suite(vars(&[("FLY_API_TOKEN", LIVE_TOKEN)]), dir.path()).unwrap_err();
        assert!(err.contains("FLY_APP_NAME"), "{err}");
        let err = record_suite(
            vars(&[("FLY_API_TOKEN", LIVE_TOKEN), ("FLY_APP_NAME", "Bad App")]),
            dir.path(),
        )
        .unwrap_err();
        assert!(err.contains("invalid app name"), "{err}");
        assert!(!err.contains(LIVE_TOKEN), "{err}");
        let ok = vars(&[("FLY_API_TOKEN", LIVE_TOKEN), ("FLY_APP", LIVE_APP)]);
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
        let suite = record_suite(
            vars(&[
                ("FLY_API_TOKEN", LIVE_TOKEN),
                ("FLY_APP_NAME", LIVE_APP),
                ("FLY_API_HOSTNAME", &api.uri()),
            ]),
            dir.path(),
        )
        .expect("record suite");
        let report = suite.run("connect").await;
        assert_eq!(report.outcome, Outcome::Passed, "{}", report.message());

        // What was recorded replays with the replay adapter.
        let replayed = replay_suite(dir.path()).run("connect").await;
        assert_eq!(replayed.outcome, Outcome::Passed, "{}", replayed.message());

        let text = std::fs::read_to_string(dir.path().join("connect.json")).expect("cassette");
        for leaked in [LIVE_TOKEN, LIVE_APP, LIVE_ID, api.uri().as_str()] {
            assert!(!text.contains(leaked), "{leaked} left in {text}");
        }
        let c: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(c["provenance"]["kind"], "recorded", "{text}");
        let lines = cassette::request_lines(&c);
        assert!(!lines.is_empty(), "{text}");
        for line in &lines {
            assert_eq!(
                line, "GET /v1/apps/conformance-app/machines/{{sandbox_id}}",
                "{text}"
            );
        }
    }
}
