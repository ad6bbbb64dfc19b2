//! Running scenarios: [`Suite`] (replay against cassettes, live, recording, or against a
//! simulator); the reports it returns are in [`crate::report`].

use crate::cassette::{Cassette, Order, Placeholders, Provenance, ProvenanceKind, SANDBOX_ID};
use crate::replay::{ReplayServer, normalise_requests};
use crate::report::{Coverage, Outcome, ScenarioReport, SuiteReport};
use crate::scenarios::{self, Ctx, Factory, SCENARIOS, ScenarioInfo};
use sandbox_sdk_core::client::{Client, RetryPolicy};
use sandbox_sdk_core::{Capabilities, Capability, Provider};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Builds the adapter under test for a simulator: `(url, api_key)` (see [`Suite::simulated`]).
#[cfg(feature = "sim")]
pub type SimFactory =
    Arc<dyn Fn(&str, &str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static>;

/// The environment variable naming a directory where each scenario writes a JSON report (used
/// by `cargo xtask conformance` to count outcomes and draw the coverage table).
pub const REPORT_DIR_ENV: &str = "SANDBOX_CONFORMANCE_REPORT_DIR";

/// How long one scenario may run before it fails.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Clone)]
pub(crate) enum Target {
    Replay {
        factory: Factory,
        cassettes: PathBuf,
    },
    Live {
        provider: Arc<dyn Provider>,
    },
    Record(Arc<crate::record::RecordTarget>),
    #[cfg(feature = "sim")]
    Simulated {
        provider: String,
        factory: SimFactory,
        load: usize,
        /// Scenarios the simulator cannot show, with the reason (reported as skipped).
        unsimulated: BTreeMap<String, String>,
    },
}

/// The conformance suite for one adapter.
///
/// Live, against the embedded `local` provider (each scenario gets a fresh sandbox):
///
/// ```
/// use sandbox_conformance::{Outcome, Suite};
/// use sandbox_sdk_core::local::LocalProvider;
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// let suite = Suite::live(Arc::new(LocalProvider::new()));
/// let report = suite.run("exec_stdout_stderr").await;
/// assert_eq!(report.outcome, Outcome::Passed, "{}", report.message());
/// // `fork` is unsupported by `local`: the suite checks it fails fast instead.
/// assert_eq!(suite.run("fork").await.outcome, Outcome::NotSupported);
/// # }
/// ```
///
/// Replayed from cassettes, against an adapter built for the replay server's URL:
///
/// ```no_run
/// use sandbox_conformance::Suite;
/// # fn build(base_url: &str) -> sandbox_sdk_core::Result<std::sync::Arc<dyn sandbox_sdk_core::Provider>> { todo!() }
/// # async fn demo() {
/// let suite = Suite::replay(|base_url| build(base_url), "tests/cassettes");
/// let report = suite.run("exec_exit_codes").await;
/// assert!(!report.is_failure(), "{}", report.message());
/// # }
/// ```
#[derive(Clone)]
pub struct Suite {
    pub(crate) target: Target,
    covered_elsewhere: BTreeMap<Capability, String>,
    label: Option<String>,
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match &self.target {
            Target::Replay { cassettes, .. } => format!("replay from {}", cassettes.display()),
            Target::Live { provider } => format!("live against {}", provider.name()),
            Target::Record(_) => "record".to_owned(),
            #[cfg(feature = "sim")]
            Target::Simulated { provider, .. } => format!("against the {provider} simulator"),
        };
        f.debug_struct("Suite")
            .field("mode", &mode)
            .field("covered_elsewhere", &self.covered_elsewhere)
            .field("label", &self.label)
            .finish()
    }
}

fn client_of(raw: &Arc<dyn Provider>, retries: bool) -> Arc<dyn Provider> {
    let policy = if retries {
        RetryPolicy::default().no_delay(true)
    } else {
        RetryPolicy::never()
    };
    Arc::new(Client::builder(raw.clone()).retry(policy).build())
}

impl Suite {
    /// A suite replaying the cassettes in `cassettes` (`<scenario>.json` each) against adapters
    /// built by `factory` for the replay server's base URL.
    pub fn replay<F>(factory: F, cassettes: impl Into<PathBuf>) -> Suite
    where
        F: Fn(&str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static,
    {
        Suite {
            target: Target::Replay {
                factory: Arc::new(factory),
                cassettes: cassettes.into(),
            },
            covered_elsewhere: BTreeMap::new(),
            label: None,
        }
    }

    /// A suite running live against `provider` (no cassettes, no request counts; replay-only
    /// scenarios are skipped). Each scenario gets a fresh sandbox, destroyed afterwards.
    pub fn live(provider: Arc<dyn Provider>) -> Suite {
        Suite {
            target: Target::Live { provider },
            covered_elsewhere: BTreeMap::new(),
            label: None,
        }
    }

    /// A suite running live against the simulator of `provider` (see [`sandbox_sim`]): each
    /// scenario starts a fresh simulator and builds the adapter with `factory(url, api_key)`
    /// (every base URL the adapter uses pointed at `url`, the kit's short timeouts, see
    /// [`crate::simulated`]). Besides the regular scenarios (as [`Suite::live`] runs them) it
    /// runs the simulator-only ones; generate their tests with [`crate::sim_conformance_tests!`].
    /// Reports are labelled `<provider>-sim`.
    #[cfg(feature = "sim")]
    pub fn simulated<F>(provider: &str, factory: F) -> Suite
    where
        F: Fn(&str, &str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static,
    {
        Suite {
            target: Target::Simulated {
                provider: provider.to_owned(),
                factory: Arc::new(factory),
                load: crate::simulated::LOAD_SANDBOXES,
                unsimulated: BTreeMap::new(),
            },
            covered_elsewhere: BTreeMap::new(),
            label: Some(format!("{provider}-sim")),
        }
    }

    /// How many sandboxes the simulator-only load scenario holds at once (default
    /// [`LOAD_SANDBOXES`](crate::simulated::LOAD_SANDBOXES)), for a simulator whose sandboxes
    /// are too heavy for that many on the test machine. No effect on other suites.
    #[cfg(feature = "sim")]
    pub fn load_sandboxes(mut self, n: usize) -> Suite {
        if let Target::Simulated { load, .. } = &mut self.target {
            *load = n;
        }
        self
    }

    /// Reports `scenario` as skipped with `reason` instead of running it: the simulator does
    /// not simulate what it needs (a provider feature outside its documented scope). No effect
    /// on other suites.
    #[cfg(feature = "sim")]
    pub fn not_simulated(mut self, scenario: &str, reason: &str) -> Suite {
        if let Target::Simulated { unsimulated, .. } = &mut self.target {
            unsimulated.insert(scenario.to_owned(), reason.to_owned());
        }
        self
    }

    /// A suite recording cassettes from a live service; see [`crate::record`].
    pub fn record(target: crate::record::RecordTarget) -> Suite {
        Suite {
            target: Target::Record(Arc::new(target)),
            covered_elsewhere: BTreeMap::new(),
            label: None,
        }
    }

    /// Declares that `capability`, which no scenario can exercise through the core traits (or
    /// not fully), is proven by the adapter's own test `test`. Shown in the coverage table.
    pub fn covered_elsewhere(mut self, capability: Capability, test: impl Into<String>) -> Suite {
        self.covered_elsewhere.insert(capability, test.into());
        self
    }

    /// Reports this suite under `label` instead of the provider's name (report files, coverage,
    /// messages), for a provider with a second suite in another configuration (such as
    /// `daytona-ssh`). Cassettes still name the provider itself.
    pub fn label(mut self, label: impl Into<String>) -> Suite {
        self.label = Some(label.into());
        self
    }

    fn describe_provider(&self) -> Result<(String, Capabilities), String> {
        let raw = match &self.target {
            Target::Replay { factory, .. } => factory("http://127.0.0.1:9")
                .map_err(|e| format!("the adapter factory failed: {e}"))?,
            Target::Live { provider } => provider.clone(),
            Target::Record(t) => t.describe()?,
            #[cfg(feature = "sim")]
            Target::Simulated { factory, .. } => {
                factory("http://127.0.0.1:9", "sim-placeholder-key")
                    .map_err(|e| format!("the adapter factory failed: {e}"))?
            }
        };
        let client = client_of(&raw, false);
        let name = self.label.clone().unwrap_or_else(|| raw.name().to_owned());
        Ok((name, client.capabilities()))
    }

    /// The provider's capability coverage by the scenarios.
    pub fn coverage(&self) -> Result<Coverage, String> {
        let (name, caps) = self.describe_provider()?;
        Ok(Coverage::compute(&name, &caps, &self.covered_elsewhere))
    }

    /// Runs every scenario (each in its own task, so a panicking adapter fails only its
    /// scenario) and the coverage check.
    pub async fn run_all(&self) -> SuiteReport {
        let mut scenarios = Vec::new();
        for info in SCENARIOS {
            let suite = self.clone();
            let name = info.name;
            let report = match tokio::spawn(async move { suite.run(name).await }).await {
                Ok(report) => report,
                Err(e) => ScenarioReport {
                    provider: self.describe_provider().map(|d| d.0).unwrap_or_default(),
                    scenario: name.to_owned(),
                    outcome: Outcome::Failed(format!("the scenario panicked: {e}")),
                    requests: None,
                },
            };
            scenarios.push(report);
        }
        let coverage = self.coverage().unwrap_or_else(|e| Coverage {
            provider: e,
            rows: Vec::new(),
        });
        SuiteReport {
            scenarios,
            coverage,
        }
    }

    /// Runs one scenario by name.
    pub async fn run(&self, scenario: &str) -> ScenarioReport {
        #[cfg(feature = "sim")]
        if let Target::Simulated {
            provider,
            factory,
            load,
            unsimulated,
        } = &self.target
        {
            if let Some(reason) = unsimulated.get(scenario) {
                return ScenarioReport {
                    provider: self.label.clone().unwrap_or_default(),
                    scenario: scenario.to_owned(),
                    outcome: Outcome::Skipped(format!("not simulated: {reason}")),
                    requests: None,
                };
            }
            let run = run_simulated(scenario, provider, factory, *load);
            let limit = if scenario == crate::simulated::LOAD_SCENARIO {
                crate::simulated::LOAD_TIMEOUT
            } else {
                SCENARIO_TIMEOUT
            };
            return self.bounded(scenario, limit, run).await;
        }
        let Some(info) = scenarios::scenario(scenario) else {
            return ScenarioReport {
                provider: String::new(),
                scenario: scenario.to_owned(),
                outcome: Outcome::Failed(format!("no scenario named {scenario:?}")),
                requests: None,
            };
        };
        let run = async {
            match &self.target {
                Target::Replay { factory, cassettes } => run_replay(info, factory, cassettes).await,
                Target::Live { provider } => run_live(info, provider.clone()).await,
                // Live scenarios are recorded through the proxy; injected failures are derived
                // from live calls of the same adapter.
                Target::Record(target) if info.live => {
                    crate::record::run_record(info, target).await
                }
                Target::Record(target) => crate::derive::run(info, target).await,
                #[cfg(feature = "sim")]
                Target::Simulated { .. } => unreachable!("simulated suites return above"),
            }
        };
        self.bounded(scenario, SCENARIO_TIMEOUT, run).await
    }

    /// `run` within `limit`, labelled.
    async fn bounded(
        &self,
        scenario: &str,
        limit: Duration,
        run: impl std::future::Future<Output = ScenarioReport>,
    ) -> ScenarioReport {
        match tokio::time::timeout(limit, run).await {
            Ok(mut report) => {
                if let Some(label) = &self.label {
                    report.provider = label.clone();
                }
                report
            }
            Err(_) => ScenarioReport {
                provider: self.describe_provider().map(|d| d.0).unwrap_or_default(),
                scenario: scenario.to_owned(),
                outcome: Outcome::Failed(format!("did not finish within {}s", limit.as_secs())),
                requests: None,
            },
        }
    }
}

fn unsupported(info: &ScenarioInfo, caps: &Capabilities) -> Option<Capability> {
    info.requires.filter(|c| !caps.level(*c).is_available())
}

async fn run_replay(
    info: &'static ScenarioInfo,
    factory: &Factory,
    cassettes: &std::path::Path,
) -> ScenarioReport {
    let mut report = ScenarioReport {
        provider: String::new(),
        scenario: info.name.to_owned(),
        outcome: Outcome::Passed,
        requests: None,
    };
    let server = match ReplayServer::start().await {
        Ok(s) => Arc::new(s),
        Err(e) => {
            report.outcome = Outcome::Failed(format!("cannot start the replay server: {e}"));
            return report;
        }
    };
    let placeholders = Placeholders::standard(server.url());
    let raw = match factory(server.url()) {
        Ok(p) => p,
        Err(e) => {
            report.outcome = Outcome::Failed(format!("the adapter factory failed: {e}"));
            return report;
        }
    };
    report.provider = raw.name().to_owned();
    let client = client_of(&raw, false);
    let caps = client.capabilities();
    let missing_cap = unsupported(info, &caps);
    if let Some(cap) = missing_cap
        && !info.probe
    {
        report.outcome = Outcome::Skipped(format!("{cap} is unsupported"));
        return report;
    }
    if let Some(why) = scenarios::emulated_elsewhere(info, &caps) {
        report.outcome = Outcome::Skipped(why);
        return report;
    }
    let cassette = if missing_cap.is_some() && scenarios::provider_level(info.name) {
        Ok(Cassette {
            provider: raw.name().to_owned(),
            scenario: info.name.to_owned(),
            provenance: Provenance {
                kind: ProvenanceKind::Spec,
                date: String::new(),
                source: None,
            },
            order: Order::Any,
            interactions: Vec::new(),
        })
    } else {
        let stem = if missing_cap.is_some() {
            "connect"
        } else {
            info.name
        };
        load_cassette(cassettes, stem, raw.name(), &placeholders)
    };
    let cassette = match cassette {
        Ok(c) => c,
        Err(e) => {
            report.outcome = Outcome::Failed(e);
            return report;
        }
    };
    if let Err(e) = server.mount(&cassette, missing_cap.is_some()).await {
        report.outcome = Outcome::Failed(e);
        return report;
    }
    let counter = server.clone();
    let ctx = Ctx {
        retrying: client_of(&raw, true),
        client,
        raw,
        sandbox_id: SANDBOX_ID.to_owned(),
        live: false,
        requests: Some(Arc::new(move || counter.request_count())),
    };
    let result = match missing_cap {
        Some(_) => scenarios::probe(&ctx, info.name).await,
        None => match scenarios::body(info.name) {
            Some(body) => body(&ctx).await,
            None => Err(format!("scenario {} has no body", info.name)),
        },
    };
    drop(ctx);
    let verified = server.verify().await;
    report.outcome = match (result, verified) {
        (Ok(()), Ok(())) => {
            if missing_cap.is_some() {
                Outcome::NotSupported
            } else {
                report.requests = Some(normalise_requests(&server.requests(), &placeholders));
                Outcome::Passed
            }
        }
        (Ok(()), Err(v)) => Outcome::Failed(format!("the replay server saw problems:\n{v}")),
        (Err(e), Ok(())) => Outcome::Failed(e),
        (Err(e), Err(v)) => Outcome::Failed(format!("{e}\nthe replay server saw problems:\n{v}")),
    };
    if report.is_failure() {
        let unmatched = !server.misses().is_empty();
        server.reset().await;
        let log = normalise_requests(&server.requests(), &placeholders);
        if let Outcome::Failed(m) = &mut report.outcome {
            m.push_str(&format!("\nrequests sent:\n{log}"));
            if unmatched {
                m.push_str(&if_intended(&cassette, cassettes, info.name));
            }
        }
    }
    report
}

/// What to do when a request mismatch is an intended change of the adapter's wire behaviour.
fn if_intended(cassette: &Cassette, dir: &Path, scenario: &str) -> String {
    let path = Cassette::path_in(dir, cassette.scenario.as_str());
    let accept = format!("INSTA_UPDATE=always cargo test --test conformance -- {scenario}");
    let record = format!(
        "{}=1 cargo test --test conformance -- {scenario}",
        crate::RECORD_ENV
    );
    match cassette.provenance.kind {
        ProvenanceKind::Recorded => format!(
            "\nif the adapter's new requests are intended, re-record the cassette and accept the \
             new request snapshot in one command (the live service's credentials set):\n  \
             {record} && {accept}\n"
        ),
        ProvenanceKind::Spec if crate::derive::is_derived(cassette) => format!(
            "\nif the adapter's new requests are intended: {} was derived by the recorder, which \
             never overwrites a cassette, so delete it, derive it again and accept the new \
             request snapshot in one command (the live service's credentials set):\n  \
             rm {} && {record} && {accept}\n",
            path.display(),
            path.display()
        ),
        ProvenanceKind::Spec => format!(
            "\nif the adapter's new requests are intended: {} is hand-written (provenance \
             `spec`), so edit it as SCENARIOS.md describes (or delete it and let the recorder \
             derive it: {record}), then accept the new request snapshot:\n  {accept}\n",
            path.display()
        ),
    }
}

fn load_cassette(
    dir: &std::path::Path,
    stem: &str,
    provider: &str,
    placeholders: &Placeholders,
) -> Result<Cassette, String> {
    let path = Cassette::path_in(dir, stem);
    if !path.exists() {
        return Err(format!(
            "no cassette at {}: record it from the live service ({}=1 cargo test --test \
             conformance -- {stem}; the injected failures are derived), or write it by hand \
             from sandbox-conformance/SCENARIOS.md (### {stem})",
            path.display(),
            crate::RECORD_ENV
        ));
    }
    let cassette = Cassette::load(&path).map_err(|e| e.to_string())?;
    if cassette.provider != provider {
        return Err(format!(
            "{} is for provider {:?}, the adapter is {:?}",
            path.display(),
            cassette.provider,
            provider
        ));
    }
    if cassette.scenario != stem {
        return Err(format!(
            "{} says scenario {:?}, expected {stem:?}",
            path.display(),
            cassette.scenario
        ));
    }
    cassette
        .substituted(placeholders)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// One scenario (regular or simulator-only) against a fresh simulator of `provider`.
#[cfg(feature = "sim")]
async fn run_simulated(
    scenario: &str,
    provider: &str,
    factory: &SimFactory,
    load: usize,
) -> ScenarioReport {
    let mut report = ScenarioReport {
        provider: provider.to_owned(),
        scenario: scenario.to_owned(),
        outcome: Outcome::Passed,
        requests: None,
    };
    let sim = match sandbox_sim::start(provider, 0, sandbox_sim::FaultPlan::new()).await {
        Ok(sim) => sim,
        Err(e) => {
            report.outcome = Outcome::Failed(format!("cannot start the simulator: {e}"));
            return report;
        }
    };
    let raw = match factory(sim.url(), sim.api_key()) {
        Ok(p) => p,
        Err(e) => {
            report.outcome = Outcome::Failed(format!("the adapter factory failed: {e}"));
            return report;
        }
    };
    if let Some(info) = scenarios::scenario(scenario) {
        return run_live(info, raw).await;
    }
    let Some(info) = crate::simulated::sim_scenario(scenario) else {
        report.outcome = Outcome::Failed(format!("no scenario named {scenario:?}"));
        return report;
    };
    let caps = client_of(&raw, false).capabilities();
    if let Some(cap) = info.requires.filter(|c| !caps.level(*c).is_available()) {
        report.outcome = Outcome::Skipped(format!("{cap} is unsupported"));
        return report;
    }
    let (url, key) = (sim.url().to_owned(), sim.api_key().to_owned());
    let rebuild = move || factory(&url, &key);
    report.outcome = match crate::simulated::run(scenario, load, &*sim, raw, &rebuild).await {
        Ok(()) => Outcome::Passed,
        Err(e) => Outcome::Failed(e),
    };
    report
}

async fn run_live(info: &'static ScenarioInfo, raw: Arc<dyn Provider>) -> ScenarioReport {
    let mut report = ScenarioReport {
        provider: raw.name().to_owned(),
        scenario: info.name.to_owned(),
        outcome: Outcome::Passed,
        requests: None,
    };
    if !info.live {
        report.outcome =
            Outcome::Skipped("replay only: the failure is injected by a cassette".into());
        return report;
    }
    let client = client_of(&raw, false);
    let caps = client.capabilities();
    let missing_cap = unsupported(info, &caps);
    if let Some(cap) = missing_cap
        && !info.probe
    {
        report.outcome = Outcome::Skipped(format!("{cap} is unsupported"));
        return report;
    }
    let setup =
        info.needs_sandbox && !(missing_cap.is_some() && scenarios::provider_level(info.name));
    let sandbox_id = if setup {
        match raw.create(&scenarios::conformance_spec()).await {
            Ok(sb) => sb.id().to_owned(),
            Err(e) => {
                report.outcome = Outcome::Failed(format!("setup: create failed: {e}"));
                return report;
            }
        }
    } else {
        SANDBOX_ID.to_owned()
    };
    let ctx = Ctx {
        retrying: client_of(&raw, true),
        client,
        raw: raw.clone(),
        sandbox_id: sandbox_id.clone(),
        live: true,
        requests: None,
    };
    let result = match missing_cap {
        Some(_) => scenarios::probe(&ctx, info.name).await,
        None => match scenarios::body(info.name) {
            Some(body) => body(&ctx).await,
            None => Err(format!("scenario {} has no body", info.name)),
        },
    };
    if setup && let Ok(sb) = raw.connect(&sandbox_id).await {
        let _ = sb.destroy().await;
    }
    report.outcome = match result {
        Ok(()) if missing_cap.is_some() => Outcome::NotSupported,
        Ok(()) => Outcome::Passed,
        Err(e) => Outcome::Failed(e),
    };
    report
}

/// Writes `report` (and nothing else) to the directory named by [`REPORT_DIR_ENV`], if set.
pub(crate) fn write_report_file(name: &str, value: &serde_json::Value) {
    let Some(dir) = std::env::var_os(REPORT_DIR_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let _ = std::fs::create_dir_all(&dir);
    let file: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let _ = std::fs::write(dir.join(format!("{file}.json")), value.to_string());
}

#[doc(hidden)]
pub mod __private {
    //! Support for the [`conformance_tests!`](crate::conformance_tests) macro.
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"))
    }

    /// Runs one scenario for a generated test and returns its report (nothing written yet).
    pub fn run_scenario(suite: impl FnOnce() -> Suite, scenario: &str) -> ScenarioReport {
        let suite = suite();
        runtime().block_on(suite.run(scenario))
    }

    /// Ends a generated test (after its snapshot was checked): writes the report file, prints
    /// the reason of a skip, and panics with the explanation of a failure.
    pub fn finish(report: ScenarioReport) {
        write_report_file(
            &format!("{}.{}", report.provider, report.scenario),
            &report.to_json(),
        );
        match &report.outcome {
            Outcome::Failed(_) => panic!("{}", report.message()),
            Outcome::Skipped(_) => println!("SKIPPED {}", report.message()),
            Outcome::NotSupported => println!("NOT SUPPORTED {}", report.message()),
            Outcome::Passed => {}
        }
    }

    /// The generated `capability_coverage` test; `crate_dir` is the adapter crate's root, where
    /// each `covered_elsewhere` test must exist.
    pub fn run_coverage(suite: impl FnOnce() -> Suite, crate_dir: &str) {
        let suite = suite();
        for (capability, test) in &suite.covered_elsewhere {
            if let Err(e) = test_exists(Path::new(crate_dir), test) {
                panic!(
                    "Suite::covered_elsewhere({}, {test:?}): {e}",
                    capability.as_str()
                );
            }
        }
        let coverage = suite
            .coverage()
            .unwrap_or_else(|e| panic!("cannot compute coverage: {e}"));
        write_report_file(
            &format!("{}.capability_coverage", coverage.provider),
            &coverage.to_json(),
        );
        println!("{}", coverage.markdown(&BTreeMap::new()));
        if let Err(e) = coverage.check() {
            panic!("{e}");
        }
    }
}

/// Checks that `test` (`file::name`, `module::tests::name` or a bare `name`) is a test function in
/// the crate at `crate_dir`: `tests/file.rs` (or `tests/file/`) for `file::name`, any source under
/// `tests/` and `src/` otherwise.
pub(crate) fn test_exists(crate_dir: &Path, test: &str) -> Result<(), String> {
    let mut parts: Vec<&str> = test.split("::").collect();
    let name = parts
        .pop()
        .filter(|n| !n.is_empty())
        .ok_or("no test name")?;
    let tests = crate_dir.join("tests");
    let roots: Vec<PathBuf> = match parts.first() {
        Some(file) if tests.join(format!("{file}.rs")).is_file() => {
            vec![tests.join(format!("{file}.rs"))]
        }
        Some(file) if tests.join(file).is_dir() => vec![tests.join(file)],
        _ => vec![tests, crate_dir.join("src")],
    };
    let needle = format!("fn {name}(");
    let mut stack = roots;
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                stack.push(entry.path());
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && std::fs::read_to_string(&path).is_ok_and(|text| text.contains(&needle))
        {
            return Ok(());
        }
    }
    Err(format!(
        "no test function `{name}` in {} (a renamed or removed test cannot cover a capability)",
        crate_dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sdk_core::Level;

    #[test]
    fn an_intended_change_names_the_one_command_for_each_kind_of_cassette() {
        let cassette = |kind, source: &str| Cassette {
            provider: "demo".into(),
            scenario: "error_server".into(),
            provenance: Provenance {
                kind,
                date: "2026-12-01".into(),
                source: Some(source.into()),
            },
            order: Order::Strict,
            interactions: Vec::new(),
        };
        let dir = Path::new("tests/cassettes");
        let accept = "INSTA_UPDATE=always cargo test --test conformance -- error_server";
        let record = "SANDBOX_CONFORMANCE_RECORD=1 cargo test --test conformance -- error_server";
        let recorded = if_intended(
            &cassette(ProvenanceKind::Recorded, "live"),
            dir,
            "error_server",
        );
        assert!(
            recorded.contains(&format!("{record} && {accept}")),
            "{recorded}"
        );
        let derived = cassette(
            ProvenanceKind::Spec,
            "derived by sandbox-conformance from the live answers to connect(id)",
        );
        let derived = if_intended(&derived, dir, "error_server");
        assert!(
            derived.contains(&format!(
                "rm tests/cassettes/error_server.json && {record} && {accept}"
            )),
            "{derived}"
        );
        let by_hand = if_intended(
            &cassette(ProvenanceKind::Spec, "SCENARIOS.md"),
            dir,
            "error_server",
        );
        assert!(by_hand.contains("is hand-written"), "{by_hand}");
        assert!(by_hand.contains(accept), "{by_hand}");
    }

    #[test]
    fn covered_elsewhere_names_must_exist() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        test_exists(dir, "fake_http::recorded_cassettes_replay_and_pass").unwrap();
        test_exists(dir, "recorded_cassettes_replay_and_pass").unwrap();
        test_exists(dir, "tests::covered_elsewhere_names_must_exist").unwrap();
        let error = test_exists(dir, "fake_http::no_such_test").unwrap_err();
        assert!(error.contains("no test function `no_such_test`"), "{error}");
        assert!(test_exists(dir, "fake_http::").is_err());
    }

    #[test]
    fn a_scenario_skipped_for_its_required_capability_covers_nothing() {
        // `preview_link` exercises private_preview but requires expose_port: without
        // expose_port it is skipped, so it cannot prove private_preview.
        let mut caps = Capabilities::NONE;
        caps.set(Capability::PrivatePreview, Level::Native);
        let coverage = Coverage::compute("demo", &caps, &BTreeMap::new());
        assert_eq!(coverage.uncovered(), vec![Capability::PrivatePreview]);
        caps.set(Capability::ExposePort, Level::Native);
        let coverage = Coverage::compute("demo", &caps, &BTreeMap::new());
        assert!(
            coverage.uncovered().is_empty(),
            "{:?}",
            coverage.uncovered()
        );
    }
}
