//! The conformance suite, replayed from the `spec` cassettes in `tests/cassettes/`.

use sandbox_conformance::{Suite, cassette, conformance_tests};
use sandbox_fly::FlyBuilder;
use sandbox_sdk_core::{Capability, Provider};
use std::sync::Arc;
use std::time::Duration;

fn suite() -> Suite {
    Suite::replay(
        |base_url| {
            let provider = FlyBuilder::new()
                .token(cassette::TOKEN)
                .app("conformance-app")
                .base_url(base_url)
                .poll_interval(Duration::ZERO)
                .build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes"),
    )
    .covered_elsewhere(Capability::Region, "adapter::create_sends_the_region")
    .covered_elsewhere(Capability::Volumes, "adapter::create_mounts_the_volume")
}

conformance_tests!(suite());
