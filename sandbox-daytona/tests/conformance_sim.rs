//! The conformance suite live against the Daytona simulator (`sandbox_sim::daytona`),
//! reported as `daytona-sim`: the adapter with its defaults (the log WebSocket, the toolbox
//! transport) pointed at a stateful server whose sandboxes pass through their states in time
//! and whose commands are real processes. Scenarios whose failure only a cassette can inject
//! are skipped by the suite itself.
//!
//! Each scenario gets a fresh simulator (`Suite::simulated`), and the simulator-only scenarios
//! (concurrent creates with one key, a late create answer, a silent stream, kill while
//! streaming, reattach, 1,000 sandboxes) run too.

use sandbox_conformance::simulated::SIM_STREAM_IDLE;
use sandbox_conformance::{
    REPLAY_CREATE_LOOKUP, REPLAY_REQUEST_TIMEOUT, Suite, sim_conformance_tests,
};
use sandbox_daytona::DaytonaProvider;
use sandbox_sdk_core::{Capability, Provider, Result};
use std::sync::Arc;
use std::time::Duration;

/// The adapter pointed at a simulator as a user would point it at Daytona (API URL and key),
/// with the kit's short timeouts and state polled every 20 ms instead of 500 ms.
fn adapter(url: &str, key: &str) -> Result<Arc<dyn Provider>> {
    let provider = DaytonaProvider::builder()
        .api_key(key)
        .api_url(format!("{url}/api"))
        .poll_interval(Duration::from_millis(20))
        .request_timeout(REPLAY_REQUEST_TIMEOUT)
        .create_lookup(REPLAY_CREATE_LOOKUP)
        .stream_idle_timeout(SIM_STREAM_IDLE)
        // The log socket's silence bound is its ping (every + answer), not the idle timeout.
        .log_ping(SIM_STREAM_IDLE / 2, SIM_STREAM_IDLE / 2)
        .build()?;
    Ok(Arc::new(provider))
}

fn suite() -> Suite {
    Suite::simulated("daytona", adapter)
        .covered_elsewhere(Capability::Region, CREATE_OPTIONS)
        .covered_elsewhere(Capability::Volumes, CREATE_OPTIONS)
        .covered_elsewhere(Capability::EgressControl, CREATE_OPTIONS)
        .covered_elsewhere(Capability::Gpu, CREATE_OPTIONS)
        .covered_elsewhere(
            Capability::Usage,
            "lifecycle::limits_come_from_the_usage_endpoint",
        )
        .not_simulated("prepare_reuse", SNAPSHOTS)
        .not_simulated("prepare_failure", SNAPSHOTS)
        .not_simulated(
            "usage",
            "the simulator serves no analytics API, so usage is estimated; the metered path \
             is proven by the replayed usage scenario",
        )
}

/// Why the prepare scenarios do not run here.
const SNAPSHOTS: &str = "the simulator does not build snapshots (`/api/snapshots`); \
    prepare is proven by the replayed prepare scenarios";

/// The test in `tests/create.rs` that proves the create-time capabilities.
const CREATE_OPTIONS: &str = "create::create_sends_region_resources_volumes_and_network_rules";

sim_conformance_tests!(suite());
