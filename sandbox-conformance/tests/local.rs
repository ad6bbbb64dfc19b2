//! The embedded `local` provider runs the whole suite live: no cassettes, real child processes.
//! Scenarios that need an injected failure (a 401, a reset connection, ...) are skipped here.

use sandbox_conformance::{Suite, conformance_tests};
use sandbox_sdk_core::local::LocalProvider;
use std::sync::Arc;

fn suite() -> Suite {
    Suite::live(Arc::new(LocalProvider::new()))
}

conformance_tests!(suite());
