//! The conformance suite, replayed from the `spec` cassettes in `tests/cassettes/`; with
//! `SANDBOX_CONFORMANCE_RECORD` set (`cargo xtask record --provider vercel [--scenario S]`) it
//! records from the live API instead (see `suite/mod.rs`).

mod suite;

use sandbox_conformance::{Suite, conformance_tests};
use std::path::Path;

const CASSETTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes");

conformance_tests!(Suite::from_env(&suite::vercel(Path::new(CASSETTES))));
