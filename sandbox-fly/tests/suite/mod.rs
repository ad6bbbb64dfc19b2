//! The Fly adapter's conformance suite, declared once: the replay adapter, the variables
//! recording needs, and how recording reaches the live Machines API. `tests/conformance.rs`
//! runs it; `tests/recording.rs` checks its recording wiring offline.
//!
//! Recording uses the live Machines API (`FLY_API_HOSTNAME`, default `https://api.machines.dev`)
//! with `FLY_API_TOKEN` and `FLY_APP_NAME` (both required). The adapter under recording is
//! configured like the replay one (default image, no region, and the replay request timeout,
//! which is also the deadline the adapter's own scripts send in `/exec` bodies) so the bodies
//! it records replay as they are; the token is scrubbed and the app name written as the replay
//! app, `conformance-app`.
//!
//! The replay adapter has the kit's `REPLAY_REQUEST_TIMEOUT` (2 s) and `REPLAY_CREATE_LOOKUP`:
//! the `create_*` scenarios answer a create late on purpose. Since the adapter's scripts get
//! the request timeout as their deadline, the spec cassettes' script `/exec` bodies carry
//! `"timeout": 2` (launches and polls, which wait 1 s in the machine, `3`).

use sandbox_conformance::{
    AdapterSuite, LoggedRequest, REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, RecordTarget, Vars,
    cassette,
};
use sandbox_fly::{FlyBuilder, FlyProvider};
use sandbox_sdk_core::{Capability, Provider};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The app the replay adapter is built for; recorded paths are rewritten to it.
const REPLAY_APP: &str = "conformance-app";

/// The suite over the cassettes in `cassettes`.
pub fn fly(cassettes: &Path) -> AdapterSuite {
    AdapterSuite::new("fly", cassettes, |base_url| {
        let provider = FlyProvider::builder()
            .token(cassette::TOKEN)
            .app(REPLAY_APP)
            .api_url(base_url)
            .poll_interval(Duration::ZERO)
            .request_timeout(REPLAY_REQUEST_TIMEOUT)
            .create_lookup(REPLAY_CREATE_LOOKUP)
            .build()?;
        Ok(Arc::new(provider) as Arc<dyn Provider>)
    })
    .record_var(
        "FLY_API_TOKEN",
        "a live API token (fly tokens create deploy -a APP)",
    )
    .record(record)
    .covered_elsewhere(Capability::Region, "create::create_sends_the_region")
    .covered_elsewhere(Capability::Volumes, "create::create_mounts_the_volume")
}

fn record(vars: &Vars, out_dir: &Path) -> Result<RecordTarget, String> {
    let token = vars.require("FLY_API_TOKEN")?;
    let app = vars
        .get("FLY_APP_NAME")
        .or_else(|| vars.get("FLY_APP"))
        .ok_or("needs the app its machines live in: set FLY_APP_NAME (fly apps create)")?;
    let settings = FlyBuilder::from_lookup(vars.lookup());
    let direct = settings
        .clone()
        .build()
        .map_err(|e| format!("cannot build the adapter from the environment: {e}"))?;
    let upstream = upstream_of(&settings)?;
    let proxied = FlyProvider::builder()
        .token(token.clone())
        .app(app.clone())
        .request_timeout(REPLAY_REQUEST_TIMEOUT);
    let mut target = RecordTarget::new(
        move |proxy| {
            let provider = proxied.clone().api_url(proxy).build()?;
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
    Ok(target)
}

/// The Machines API base (scheme, host, any path prefix, without `/v1`) of `settings`.
pub fn upstream_of(settings: &FlyBuilder) -> Result<String, String> {
    let root = settings
        .api_root()
        .map_err(|e| format!("recording fly: {e} (check FLY_API_HOSTNAME)"))?;
    Ok(root.strip_suffix("/v1").unwrap_or(&root).to_owned())
}

/// Every Machines API request (under `/v1/`) goes to `upstream`; anything else has no route.
pub fn route(upstream: &str, request: &LoggedRequest) -> Option<String> {
    request
        .path
        .starts_with("/v1/")
        .then(|| upstream.to_owned())
}
