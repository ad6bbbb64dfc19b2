//! The conformance suite live against the Sprites simulator (`sandbox_sim::sprites`), reported
//! as `sprites-sim`: every scenario the capability map allows runs on real sprites of a fresh
//! simulator, with the adapter at its defaults except the kit's short request timeout, create
//! look-up and stream idle bound and a public URL (the `preview_link` scenario), plus the
//! simulator-only scenarios (concurrent creates with one key, a late create answer, a silent
//! stream, kill while streaming, reattach, 1,000 sandboxes).

use sandbox_conformance::simulated::SIM_STREAM_IDLE;
use sandbox_conformance::{
    REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, Suite, sim_conformance_tests,
};
use sandbox_sdk_core::{Capability, Provider, Result};
use sandbox_sprites::SpritesProvider;
use std::sync::Arc;

/// The adapter pointed at a simulator as a user would point it at Sprites: token and API URL.
fn adapter(url: &str, token: &str) -> Result<Arc<dyn Provider>> {
    let provider = SpritesProvider::builder()
        .token(token)
        .api_url(url)
        .public_url(true)
        .request_timeout(REPLAY_REQUEST_TIMEOUT)
        .create_timeout(REPLAY_REQUEST_TIMEOUT)
        .create_lookup(REPLAY_CREATE_LOOKUP)
        .stream_idle_timeout(SIM_STREAM_IDLE)
        .build()?;
    Ok(Arc::new(provider))
}

fn suite() -> Suite {
    Suite::simulated("sprites", adapter).covered_elsewhere(
        Capability::Region,
        "create::a_create_sends_the_body_the_official_sdks_send",
    )
}

sim_conformance_tests!(suite());
