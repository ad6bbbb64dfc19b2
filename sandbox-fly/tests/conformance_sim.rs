//! The conformance suite live against the Fly simulator (`sandbox_conformance::sim::fly`),
//! reported as `fly-sim`: every scenario the capability map allows runs on real machines of
//! the simulator, with Fly's documented rate limits on and the adapter at its defaults.
//!
//! One simulator serves the whole test binary (on a runtime of its own, since each generated
//! test builds its own runtime), as one Machines API serves many clients. Each scenario gets an
//! app of its own: Fly limits creates to 1/s (bursts of 3) per app, and the generated tests run
//! side by side with the client layer's retries off, so a shared app would turn the suite's own
//! concurrency into 429s that no single scenario is about.

use sandbox_conformance::sim::Simulator;
use sandbox_conformance::sim::fly::FlySim;
use sandbox_conformance::{Suite, conformance_tests};
use sandbox_fly::FlyBuilder;
use sandbox_sdk_core::Capability;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The simulator every test of this binary talks to.
fn sim() -> &'static FlySim {
    static SIM: OnceLock<(tokio::runtime::Runtime, FlySim)> = OnceLock::new();
    let (_, sim) = SIM.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the simulator");
        let sim = runtime
            .block_on(FlySim::start())
            .expect("the fly simulator starts");
        (runtime, sim)
    });
    sim
}

fn suite() -> Suite {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let sim = sim();
    let app = format!("{}-{}", sim.app(), NEXT.fetch_add(1, Ordering::Relaxed));
    sim.add_app(&app);
    let provider = FlyBuilder::new()
        .token(sim.token())
        .app(app)
        .base_url(sim.url())
        // The port preview_link asks for: Fly routes only ports a machine's services declare.
        .expose_port(8080)
        .build()
        .expect("the adapter builds");
    Suite::live(Arc::new(provider))
        .label("fly-sim")
        .covered_elsewhere(Capability::Region, "adapter::create_sends_the_region")
        .covered_elsewhere(Capability::Volumes, "adapter::create_mounts_the_volume")
}

conformance_tests!(suite());
