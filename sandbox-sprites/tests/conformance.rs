//! The conformance suite, replayed from the `spec` cassettes in `tests/cassettes/` (WebSocket
//! exchanges included); with `SANDBOX_CONFORMANCE_RECORD` set (`cargo xtask record --provider
//! sprites [--scenario S]`) it records instead (see `suite/mod.rs`).

mod suite;

use sandbox_conformance::{Suite, conformance_tests};
use std::path::Path;

const CASSETTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes");

conformance_tests!(Suite::from_env(&suite::sprites(Path::new(CASSETTES))));
