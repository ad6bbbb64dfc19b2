//! The Daytona adapter's conformance suite, declared once: the replay adapter, the variables
//! recording needs, and how recording routes the adapter's requests to the live service.
//! `tests/conformance.rs` runs it; `tests/recording.rs` checks its recording wiring offline.
//!
//! The replay server speaks plain HTTP only, so the adapter is built with `LogFollow::Poll`:
//! command output is read from the JSON logs endpoint instead of the log WebSocket (which
//! `tests/exec.rs` exercises against a real WebSocket on loopback).
//!
//! Recording uses the live service with `DAYTONA_API_KEY` (required). The adapter is configured
//! like the replay one (polled logs, toolbox transport) and both of its base URLs point at the
//! recording proxy, which sends `/api/...` to the API (`DAYTONA_API_URL`, default
//! `https://app.daytona.io/api`) and `/toolbox/{id}/...` to the toolbox proxy
//! (`DAYTONA_TOOLBOX_URL`, default `https://proxy.app.daytona.io/toolbox`; set it when your
//! sandboxes' `toolboxProxyUrl` is another one). The API key is scrubbed from every cassette;
//! tokens the service hands out (SSH access, previews) are scrubbed by the recorder itself.

use sandbox_conformance::{
    AdapterSuite, LoggedRequest, REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, RecordTarget, Vars,
    cassette,
};
use sandbox_daytona::{DaytonaBuilder, DaytonaProvider, ExecTransport, LogFollow};
use sandbox_sdk_core::{Capability, Provider};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The replayed adapter's direct window (see `DaytonaBuilder::direct_window`).
const DIRECT_WINDOW: Duration = Duration::from_secs(3);

/// The cloud toolbox proxy (what sandboxes' `toolboxProxyUrl` says), where recorded toolbox
/// calls go unless `DAYTONA_TOOLBOX_URL` names another.
const DEFAULT_TOOLBOX_URL: &str = "https://proxy.app.daytona.io/toolbox";

/// The test in `tests/create.rs` that proves the create-time capabilities.
const CREATE_OPTIONS: &str = "create::create_sends_region_resources_volumes_and_network_rules";

/// The suite over the cassettes in `cassettes`.
pub fn daytona(cassettes: &Path) -> AdapterSuite {
    AdapterSuite::new("daytona", cassettes, |base_url| {
        let provider = DaytonaProvider::builder()
            .api_key(cassette::TOKEN)
            .api_url(format!("{base_url}/api"))
            .toolbox_url(format!("{base_url}/toolbox"))
            .log_follow(LogFollow::Poll)
            .poll_interval(Duration::ZERO)
            .request_timeout(REPLAY_REQUEST_TIMEOUT)
            .create_lookup(REPLAY_CREATE_LOOKUP)
            // exec_timeout's answer comes after 1 s (when timeout(1) stops the command):
            // well within this window; exec_kill's never comes and the window passes.
            .direct_window(DIRECT_WINDOW)
            .build()?;
        Ok(Arc::new(provider) as Arc<dyn Provider>)
    })
    .record_var(
        "DAYTONA_API_KEY",
        "a live API key (and DAYTONA_API_URL for a server other than app.daytona.io)",
    )
    .record(record)
    // Capabilities no core trait operation reaches, proven by the adapter's own tests.
    .covered_elsewhere(Capability::Region, CREATE_OPTIONS)
    .covered_elsewhere(Capability::Volumes, CREATE_OPTIONS)
    .covered_elsewhere(Capability::EgressControl, CREATE_OPTIONS)
    .covered_elsewhere(Capability::Gpu, CREATE_OPTIONS)
    .covered_elsewhere(
        Capability::Usage,
        "lifecycle::limits_come_from_the_usage_endpoint",
    )
}

fn record(vars: &Vars, out_dir: &Path) -> Result<RecordTarget, String> {
    let api_key = vars.require("DAYTONA_API_KEY")?;
    let builder = DaytonaBuilder::from_lookup(vars.lookup())
        .api_key(api_key.clone())
        .log_follow(LogFollow::Poll)
        .exec_transport(ExecTransport::Toolbox);
    let routes = Routes::of(&builder)?;
    let direct = builder
        .clone()
        .build()
        .map_err(|e| format!("cannot build the adapter from the environment: {e}"))?;
    Ok(RecordTarget::new(
        move |proxy| {
            let provider = builder
                .clone()
                .api_url(format!("{proxy}/api"))
                .toolbox_url(format!("{proxy}/toolbox"))
                .build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        Arc::new(direct),
        move |request| routes.route(request),
        out_dir,
    )
    .secret(api_key)
    .source("recorded from the live Daytona service by cargo xtask record --provider daytona"))
}

/// Where the recording proxy forwards each request the adapter sends it: the origins
/// (`https://host[:port]`) of the API and of the toolbox proxy.
#[derive(Debug, Clone)]
pub struct Routes {
    api: String,
    toolbox: String,
}

impl Routes {
    pub fn of(builder: &DaytonaBuilder) -> Result<Routes, String> {
        let toolbox = builder
            .toolbox_url_override()
            .unwrap_or(DEFAULT_TOOLBOX_URL);
        Ok(Routes {
            api: origin(builder.api_url_or_default(), "/api", "DAYTONA_API_URL")?,
            toolbox: origin(toolbox, "/toolbox", "DAYTONA_TOOLBOX_URL")?,
        })
    }

    /// `/api/...` goes to the API, `/toolbox/{id}/...` (an id of letters, digits, `-` and
    /// `_`) to the toolbox proxy; anything else has no route.
    pub fn route(&self, request: &LoggedRequest) -> Option<String> {
        let path = request.path.as_str();
        if path == "/api" || path.starts_with("/api/") {
            return Some(self.api.clone());
        }
        let rest = path.strip_prefix("/toolbox/")?;
        let (id, _) = rest.split_once('/')?;
        let id_ok = !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        id_ok.then(|| self.toolbox.clone())
    }
}

/// `https://host[:port]` of `url`, which must be that origin followed by `suffix` (the path
/// the replayed cassettes use), as the variable `var` would set it.
fn origin(url: &str, suffix: &str, var: &str) -> Result<String, String> {
    let trimmed = url.trim_end_matches('/');
    trimmed
        .strip_suffix(suffix)
        .filter(|origin| {
            let host = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            host.is_some_and(|h| !h.is_empty() && !h.contains(['/', '?', '#', '@']))
        })
        .map(str::to_owned)
        .ok_or_else(|| {
            format!(
                "needs {var} of the form https://HOST{suffix} (the cassettes replay under \
                 {suffix})"
            )
        })
}
