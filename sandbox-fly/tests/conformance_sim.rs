//! The conformance suite live against the Fly simulator (`sandbox_sim::fly`),
//! reported as `fly-sim`: every scenario the capability map allows runs on real machines of a
//! fresh simulator, with Fly's documented rate limits on and the adapter at its defaults except
//! the kit's short request timeout and create look-up, plus the simulator-only scenarios
//! (concurrent creates with one key, a late create answer, a silent stream, kill while
//! streaming, reattach, 1,000 sandboxes).

use sandbox_conformance::{
    REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, Suite, sim_conformance_tests,
};
use sandbox_fly::FlyProvider;
use sandbox_sdk_core::{Capability, Provider, Result};
use sandbox_sim::fly::APP;
use std::sync::Arc;

/// The adapter pointed at a simulator as a user would point it at Fly: token, app, API host.
fn adapter(url: &str, token: &str) -> Result<Arc<dyn Provider>> {
    let provider = FlyProvider::builder()
        .token(token)
        .app(APP)
        .api_url(url)
        // The port preview_link asks for: Fly routes only ports a machine's services declare.
        .expose_port(8080)
        .request_timeout(REPLAY_REQUEST_TIMEOUT)
        .create_lookup(REPLAY_CREATE_LOOKUP)
        // A command that ends within the launch wait comes back whole, not streamed: with the
        // default 1 s, `exec_streaming`'s 1 s command raced it. 200 ms keeps that scenario
        // about streaming, whatever the machine's load.
        .launch_wait(std::time::Duration::from_millis(200))
        .build()?;
    Ok(Arc::new(provider))
}

fn suite() -> Suite {
    Suite::simulated("fly", adapter)
        .covered_elsewhere(Capability::Region, "create::create_sends_the_region")
        .covered_elsewhere(Capability::Volumes, "create::create_mounts_the_volume")
}

sim_conformance_tests!(suite());
