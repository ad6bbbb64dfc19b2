//! The shared conformance suite, replayed from `tests/cassettes/*.json` (provenance `spec`:
//! written from `specs/e2b/PROTOCOL.md` and the OpenAPI files, not recorded). Control plane and
//! envd both point at the one replay server; envd requests carry the routing headers.

use sandbox_conformance::{Suite, cassette, conformance_tests};
use sandbox_e2b::E2bBuilder;
use sandbox_sdk_core::{Capability, Provider};
use std::sync::Arc;

fn suite() -> Suite {
    Suite::replay(
        |base_url| {
            let provider = E2bBuilder::new()
                .api_key(cassette::TOKEN)
                .api_url(base_url)
                .sandbox_url(base_url)
                .build()?;
            Ok(Arc::new(provider) as Arc<dyn Provider>)
        },
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes"),
    )
    // No core trait operation reaches these; E2B's inherent methods are proven in adapter.rs.
    .covered_elsewhere(
        Capability::EgressControl,
        "adapter::create_options_send_egress_rules_and_volumes",
    )
    .covered_elsewhere(
        Capability::Volumes,
        "adapter::create_options_send_egress_rules_and_volumes",
    )
}

conformance_tests!(suite());
