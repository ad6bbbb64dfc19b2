//! # sandbox-conformance
//!
//! The behaviour suite every `sandbox-sdk-core` adapter is held to, and the kit a provider author
//! outside this repository uses to prove an adapter:
//!
//! - [`cassette`]: the JSON cassette format (ordered HTTP interactions and WebSocket exchanges
//!   with provenance and placeholders) — read its docs before writing one;
//! - [`replay`]: cassettes mounted on wiremock with exact call counts, strict or any order, and a
//!   catch-all that explains every miss; WebSocket scripts played on the same base URL;
//! - [`scenarios`]: the scenarios, written once against the core traits and selected by the
//!   adapter's capability map (`SCENARIOS.md` in this crate says exactly what each one sends and
//!   expects);
//! - [`Suite`]: runs them — replayed against an adapter built for the mock server's URL, or live
//!   (the embedded `local` provider runs the same scenarios with no cassettes);
//! - [`conformance_tests!`]: one named `#[test]` per scenario in an adapter's
//!   `tests/conformance.rs`, plus `capability_coverage`, with an insta snapshot of the normalised
//!   requests each scenario sends;
//! - [`checks`]: checks an adapter's own tests call (env and cwd folded once);
//! - [`openapi`]: JSON bodies (of cassettes, or of a live run's request log) checked against a
//!   provider's OpenAPI documents;
//! - [`record`]: the recorder (a scrubbing proxy in front of the live service, which also
//!   derives the injected-failure cassettes from live calls), [`scrub::SecretCheck`] (the
//!   secret check it and [`cassette::Cassette::load`] run), and [`SharedService`] (one live
//!   service per test binary).
//!
//! ## Proving an adapter
//!
//! 1. Give the adapter a way to point every base URL it uses at one URL, and build it with the
//!    API key [`cassette::TOKEN`].
//! 2. Record `tests/cassettes/<scenario>.json` for every scenario from the live service (the
//!    README shows the `tests/conformance.rs` that records when [`RECORD_ENV`] is set; the
//!    injected failures are derived in the same run), or write them by hand from
//!    `SCENARIOS.md`. A scenario whose capability the adapter declares unsupported needs no
//!    cassette of its own: it checks the call fails fast with `NotSupported` and sends nothing,
//!    using `connect.json` to get a sandbox.
//! 3. Add `tests/conformance.rs`: declare the suite once with [`AdapterSuite`] (the replay
//!    factory, the variables recording needs, how to record) and generate its tests with
//!    `conformance_tests!(Suite::from_env(&adapter()))`; [`AdapterSuite`] and the README show
//!    a whole file.
//!
//! `cargo test --test conformance` then runs `connect`, `lifecycle`, `exec_exit_codes`, … and
//! `capability_coverage` as separate tests. A failing scenario prints what it expected, the
//! replay server's explanation of every unmatched request (the nearest interaction and the
//! first difference), interactions used the wrong number of times, and the requests sent.
//! Snapshots land in the adapter's `tests/snapshots/`; review them like code.
//!
//! The same suite can be driven without the macro: [`Suite::run`] for one scenario,
//! [`Suite::run_all`] for all (a [`SuiteReport`] with its `conformance: N passed, N not
//! supported, N skipped, N failed` line and a coverage table).
//!
//! Under `cargo test` every scenario is its own test, and libtest can only say `ok` for one that
//! did not fail: a scenario that was not supported or skipped prints a line starting
//! `NOT SUPPORTED` or `SKIPPED` (shown with `--nocapture`), and `cargo xtask conformance` /
//! [`SuiteReport::summary_line`] count them apart from real passes.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod adapter;
pub mod cassette;
pub mod checks;
mod derive;
pub mod openapi;
mod proxy;
pub mod record;

/// The README's snippets, compiled as doc tests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
pub mod replay;
mod report;
pub mod scenarios;
pub mod scrub;
#[cfg(feature = "sim")]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub mod simulated;
mod suite;

pub use adapter::{AdapterSuite, RecordFn, Vars};
pub use proxy::LoggedRequest;
pub use record::{RECORD_ENV, RecordTarget, Router, SharedService, Upstream};
pub use report::{Counts, Coverage, CoverageRow, Outcome, ScenarioReport, SuiteReport};
pub use scenarios::Factory;
pub use scenarios::{SCENARIOS, ScenarioInfo};
#[cfg(feature = "sim")]
pub use suite::SimFactory;
pub use suite::{__private, REPORT_DIR_ENV, SCENARIO_TIMEOUT, Suite};

/// The request timeout to build a replayed adapter with: the `create_*` scenarios delay an
/// answer past it (`delay_ms` 3000) to make a create ambiguous.
pub const REPLAY_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The create look-up to build a replayed adapter with (see
/// [`sandbox_sdk_core::idempotency`]): the `create_*` cassettes find the sandbox within two
/// look-ups, so the window only bounds a failing adapter.
pub const REPLAY_CREATE_LOOKUP: sandbox_sdk_core::idempotency::CreateLookup =
    sandbox_sdk_core::idempotency::CreateLookup::new(std::time::Duration::from_secs(2));

/// Re-exported so [`conformance_tests!`] can snapshot requests from the adapter's crate.
#[doc(hidden)]
pub use insta;

/// Runs one scenario replayed from `cassette_dir` against adapters built by `factory` for the
/// replay server's URL: shorthand for `Suite::replay(factory, cassette_dir).run(name)`.
pub async fn run_scenario<F>(
    name: &str,
    factory: F,
    cassette_dir: impl Into<std::path::PathBuf>,
) -> ScenarioReport
where
    F: Fn(&str) -> sandbox_sdk_core::Result<std::sync::Arc<dyn sandbox_sdk_core::Provider>>
        + Send
        + Sync
        + 'static,
{
    Suite::replay(factory, cassette_dir).run(name).await
}

/// Runs every scenario of `suite` and its coverage check: shorthand for [`Suite::run_all`].
pub async fn run_suite(suite: &Suite) -> SuiteReport {
    suite.run_all().await
}

/// Whether generated tests should record (the [`RECORD_ENV`] variable is set).
pub fn recording() -> bool {
    std::env::var_os(RECORD_ENV).is_some()
}

/// Generates one `#[test]` per scenario (named after it) and a `capability_coverage` test.
///
/// `$suite` is an expression evaluated afresh in each test, typically a call to a function
/// returning [`Suite`]. A passing replayed scenario also asserts an insta snapshot of the
/// normalised requests it sent, named after the scenario, in the calling crate's snapshots
/// directory. Invoke it once per module.
#[macro_export]
macro_rules! conformance_tests {
    ($suite:expr) => {
        $crate::__every_scenario!($suite);
    };
}

/// [`conformance_tests!`] for a [`Suite::simulated`] suite: every scenario, plus the
/// simulator-only ones of [`simulated`] (feature `sim`).
///
/// The load scenario `sim_thousand_sandboxes` is generated `#[ignore]`d: it loads the machine
/// for tens of seconds, which would starve the tests running beside it of their short
/// timeouts. `cargo xtask conformance` runs it afterwards, alone (`-- --ignored --exact
/// sim_thousand_sandboxes`).
#[cfg(feature = "sim")]
#[macro_export]
macro_rules! sim_conformance_tests {
    ($suite:expr) => {
        #[test]
        #[ignore = "load: cargo xtask conformance runs it alone, after the other tests"]
        fn sim_thousand_sandboxes() {
            let report = $crate::__private::run_scenario(|| $suite, "sim_thousand_sandboxes");
            $crate::__private::finish(report);
        }

        $crate::__every_sim_scenario!($suite);
    };
}

// `__every_scenario!` and `__every_sim_scenario!`, generated by build.rs from the scenario tables.
include!(concat!(env!("OUT_DIR"), "/scenario_lists.rs"));

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($suite:expr; $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                let report = $crate::__private::run_scenario(|| $suite, stringify!($name));
                if let (true, Some(requests)) = (report.is_pass(), report.requests.as_deref()) {
                    $crate::insta::assert_snapshot!(stringify!($name), requests);
                }
                $crate::__private::finish(report);
            }
        )*

        #[test]
        fn capability_coverage() {
            $crate::__private::run_coverage(|| $suite, env!("CARGO_MANIFEST_DIR"));
        }
    };
}

#[cfg(test)]
mod tests {
    /// The names a generated macro passes to `__conformance_tests!`.
    fn generated(macro_name: &str) -> Vec<&'static str> {
        let source = include_str!(concat!(env!("OUT_DIR"), "/scenario_lists.rs"));
        let start = source.find(&format!("macro_rules! {macro_name}")).unwrap();
        let start = start + source[start..].find("($suite;").unwrap();
        let end = start + source[start..].find(");").unwrap();
        source[start..end].split_whitespace().skip(1).collect()
    }

    #[test]
    fn the_generated_list_is_every_scenario_in_order() {
        let names: Vec<&str> = crate::SCENARIOS.iter().map(|s| s.name).collect();
        assert_eq!(generated("__every_scenario"), names);
    }

    #[cfg(feature = "sim")]
    #[test]
    fn the_generated_sim_list_is_every_scenario_then_the_simulator_ones() {
        let names: Vec<&str> = crate::SCENARIOS
            .iter()
            .map(|s| s.name)
            .chain(crate::simulated::SIM_SCENARIOS.iter().map(|s| s.name))
            .filter(|name| *name != crate::simulated::LOAD_SCENARIO)
            .collect();
        assert_eq!(generated("__every_sim_scenario"), names);
        assert!(include_str!("lib.rs").contains("fn sim_thousand_sandboxes()"));
    }

    #[test]
    fn scenarios_md_documents_every_scenario() {
        let doc = include_str!("../SCENARIOS.md");
        for s in crate::SCENARIOS {
            assert!(doc.contains(&format!("### {}\n", s.name)), "{}", s.name);
        }
    }
}
