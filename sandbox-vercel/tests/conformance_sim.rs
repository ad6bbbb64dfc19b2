//! The conformance suite live against the Vercel Sandbox simulator (`sandbox_sim::vercel`),
//! reported as `vercel-sim`: every scenario the capability map allows runs on real sandboxes of
//! a fresh simulator, with its rate limits on and the adapter at its defaults except the kit's
//! short request timeout, create look-up and stream idle bound, plus the simulator-only
//! scenarios (concurrent creates with one key, a late create answer, a silent stream, kill
//! while streaming, reattach, 1,000 sandboxes).

use sandbox_conformance::simulated::SIM_STREAM_IDLE;
use sandbox_conformance::{
    REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, Suite, sim_conformance_tests,
};
use sandbox_sdk_core::{Capability, Provider, Result};
use sandbox_sim::vercel::{PROJECT, TEAM};
use sandbox_vercel::VercelProvider;
use std::sync::Arc;

/// The adapter pointed at a simulator as a user would point it at Vercel: token, team,
/// project, API base URL.
fn adapter(url: &str, token: &str) -> Result<Arc<dyn Provider>> {
    let provider = VercelProvider::builder()
        .token(token)
        .team_id(TEAM)
        .project_id(PROJECT)
        .api_url(url)
        // The port preview_link asks for: Vercel routes only the ports declared at create.
        .expose_port(8080)
        .request_timeout(REPLAY_REQUEST_TIMEOUT)
        .create_lookup(REPLAY_CREATE_LOOKUP)
        .stream_idle_timeout(SIM_STREAM_IDLE)
        .build()?;
    Ok(Arc::new(provider))
}

fn suite() -> Suite {
    Suite::simulated("vercel", adapter)
        .covered_elsewhere(Capability::Region, "create::create_sends_the_region")
}

sim_conformance_tests!(suite());
