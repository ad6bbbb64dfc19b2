//! The shared conformance suite, replayed from `tests/cassettes/*.json` (provenance `spec`:
//! written from the E2B protocol facts in `PROTOCOL.md` and the OpenAPI files, not recorded).
//! Control plane and envd both point at the one replay server; envd requests carry the routing
//! headers.
//!
//! With `SANDBOX_CONFORMANCE_RECORD` set (`cargo xtask record --provider e2b [--scenario S]`)
//! the suite records instead, from the live service: see `suite/mod.rs`.

mod suite;

use sandbox_conformance::{Suite, conformance_tests};
use std::path::Path;

const CASSETTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes");

conformance_tests!(Suite::from_env(&suite::e2b(Path::new(CASSETTES))));
