//! The conformance suite live against the Daytona simulator (`sandbox_conformance::sim::daytona`),
//! reported as `daytona-sim`: the adapter with its defaults (the log WebSocket, the toolbox
//! transport) pointed at a stateful server whose sandboxes pass through their states in time
//! and whose commands are real processes. Scenarios whose failure only a cassette can inject
//! are skipped by the suite itself.
//!
//! One simulator serves the whole test process from a thread of its own (each scenario runs on
//! a runtime of its own, which ends with the scenario).

use sandbox_conformance::sim::daytona::DaytonaSim;
use sandbox_conformance::{Suite, conformance_tests};
use sandbox_daytona::DaytonaBuilder;
use sandbox_sdk_core::{Capability, Provider};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The simulator's API URL and key, started once per test process.
fn simulator() -> &'static (String, String) {
    static SIM: OnceLock<(String, String)> = OnceLock::new();
    SIM.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime for the simulator");
            runtime.block_on(async {
                let sim = DaytonaSim::start()
                    .await
                    .expect("start the Daytona simulator");
                tx.send((sim.api_url(), sim.api_key().to_owned())).ok();
                // Serves until the test process ends.
                std::future::pending::<()>().await;
            });
        });
        rx.recv().expect("the simulator's address")
    })
}

/// The adapter pointed at the simulator (state polled every 20 ms instead of 500 ms).
fn provider() -> Arc<dyn Provider> {
    let (api_url, key) = simulator();
    let provider = DaytonaBuilder::new()
        .api_key(key.clone())
        .api_url(api_url.clone())
        .poll_interval(Duration::from_millis(20))
        .build()
        .expect("the adapter");
    Arc::new(provider)
}

fn suite() -> Suite {
    Suite::live(provider())
        .label("daytona-sim")
        .covered_elsewhere(Capability::Region, CREATE_OPTIONS)
        .covered_elsewhere(Capability::Volumes, CREATE_OPTIONS)
        .covered_elsewhere(Capability::EgressControl, CREATE_OPTIONS)
        .covered_elsewhere(Capability::Gpu, CREATE_OPTIONS)
        .covered_elsewhere(
            Capability::Usage,
            "lifecycle::limits_come_from_the_usage_endpoint",
        )
}

/// The test in `tests/lifecycle.rs` that proves the create-time capabilities.
const CREATE_OPTIONS: &str = "lifecycle::create_sends_region_resources_volumes_and_network_rules";

conformance_tests!(suite());
