//! The conformance suite of the kit's own providers, one module each (`cargo xtask conformance`
//! runs every crate's `--test conformance`):
//!
//! - `local`: the embedded `local` provider runs every scenario live — no cassettes, real child
//!   processes. Scenarios that need an injected failure (a 401, a reset connection, ...) are
//!   skipped.
//! - `fake`: the small fake HTTP adapter of `tests/fake`, written as a third-party author would,
//!   replayed from `tests/cassettes/fake` (recorded from its loopback service with
//!   `cargo xtask record --provider fake`; the injected failures are kept hand-written, and
//!   `fake_http::a_clean_recording_derives_every_injected_failure_and_replays_green` shows the
//!   recorder deriving equivalent ones from a clean recording).

mod fake;

mod local {
    use sandbox_conformance::{Suite, conformance_tests};
    use sandbox_sdk_core::local::LocalProvider;
    use std::sync::Arc;

    fn suite() -> Suite {
        Suite::live(Arc::new(LocalProvider::new()))
    }

    conformance_tests!(suite());
}

mod fake_http {
    use sandbox_conformance::conformance_tests;

    conformance_tests!(super::fake::suite());
}
