//! The conformance suite, replayed from the `spec` cassettes in `tests/cassettes/`.
//!
//! The replay server speaks plain HTTP only, so the adapter is built with
//! [`LogFollow::Poll`]: command output is read from the JSON logs endpoint instead of the log
//! WebSocket (which `tests/toolbox.rs` exercises against a real WebSocket on loopback).

use sandbox_conformance::{Suite, cassette, conformance_tests};
use sandbox_daytona::{DaytonaBuilder, LogFollow};
use sandbox_sdk_core::{Capability, Provider};
use std::sync::Arc;
use std::time::Duration;

fn suite() -> Suite {
    Suite::replay(
        |base_url| {
            let provider = DaytonaBuilder::new()
                .api_key(cassette::TOKEN)
                .api_url(format!("{base_url}/api"))
                .toolbox_url(format!("{base_url}/toolbox"))
                .log_follow(LogFollow::Poll)
                .poll_interval(Duration::ZERO)
                .build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes"),
    )
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
