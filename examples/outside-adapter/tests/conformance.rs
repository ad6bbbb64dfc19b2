//! The conformance suite of `acme-sandbox`, as the `sandbox-conformance` README shows it: replayed
//! from `tests/cassettes` by default, recorded from the live Acme service when
//! `SANDBOX_CONFORMANCE_RECORD` is set. Here the live service is the loopback one of
//! `tests/service`, started once per test binary.
//!
//! ```text
//! SANDBOX_CONFORMANCE_RECORD=1 cargo test --test conformance   # record (and derive)
//! cargo test --test conformance                                # replay
//! ```

mod service;

use acme_sandbox::AcmeProvider;
use sandbox_conformance::cassette::TOKEN;
use sandbox_conformance::record::RecordTarget;
use sandbox_conformance::{
    REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, SharedService, Suite, conformance_tests,
    recording,
};
use sandbox_sdk_core::Provider;
use std::sync::Arc;

const CASSETTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes");

/// The live service every scenario records from.
static SERVICE: SharedService = SharedService::new();

/// The adapter for `base_url`, authenticating with `key`.
fn adapter(base_url: &str, key: &str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> {
    let provider = AcmeProvider::builder()
        .base_url(base_url)
        .api_key(key)
        .timeout(REPLAY_REQUEST_TIMEOUT)
        .create_lookup(REPLAY_CREATE_LOOKUP)
        .build()?;
    Ok(Arc::new(provider))
}

fn suite() -> Suite {
    if recording() {
        let url = SERVICE
            .url(|| service::serve(service::LIVE_KEY))
            .expect("the Acme service starts");
        let target = RecordTarget::one_host(|url| adapter(url, service::LIVE_KEY), &url, CASSETTES)
            .expect("the adapter builds")
            .secret(service::LIVE_KEY)
            .source("the Acme service of examples/outside-adapter/tests/service, on loopback");
        return Suite::record(target);
    }
    Suite::replay(|base_url| adapter(base_url, TOKEN), CASSETTES)
}

conformance_tests!(suite());
