//! An adapter's conformance suite declared once: replayed from its cassettes by default,
//! recorded from the live service when [`RECORD_ENV`](crate::RECORD_ENV) is set, with the
//! variables recording needs named in one place.

use crate::record::RecordTarget;
use crate::report::Outcome;
use crate::suite::Suite;
use sandbox_sdk_core::{Capability, Provider};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Builds the live service's [`RecordTarget`] from the recording variables, writing cassettes
/// to the given directory.
pub type RecordFn = Arc<dyn Fn(&Vars, &Path) -> Result<RecordTarget, String> + Send + Sync>;

/// What an adapter's `tests/conformance.rs` declares once; [`Suite::from_env`] turns it into
/// the suite to run.
///
/// ```no_run
/// // tests/conformance.rs of an adapter crate `acme-sandbox`.
/// use sandbox_conformance::{AdapterSuite, RecordTarget, Suite, Vars, conformance_tests};
/// use sandbox_sdk_core::Provider;
/// use std::path::Path;
/// use std::sync::Arc;
/// # mod acme_sandbox { pub struct AcmeBuilder; impl AcmeBuilder {
/// #   pub fn new() -> Self { AcmeBuilder }
/// #   pub fn api_key(self, _: &str) -> Self { self }
/// #   pub fn base_url(self, _: &str) -> Self { self }
/// #   pub fn build(self) -> sandbox_sdk_core::Result<sandbox_sdk_core::local::LocalProvider> { Ok(Default::default()) } } }
/// use acme_sandbox::AcmeBuilder;
///
/// fn adapter() -> AdapterSuite {
///     AdapterSuite::new("acme", concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cassettes"), |url| {
///         let provider = AcmeBuilder::new()
///             .api_key(sandbox_conformance::cassette::TOKEN)
///             .base_url(url)
///             .build()?;
///         Ok(Arc::new(provider) as Arc<dyn Provider>)
///     })
///     .record_var("ACME_API_KEY", "a live API key (acme keys create)")
///     .record(record_target)
/// }
///
/// /// The live service behind the recording proxy, from the adapter's variables.
/// fn record_target(vars: &Vars, out_dir: &Path) -> Result<RecordTarget, String> {
///     let key = vars.require("ACME_API_KEY")?;
///     let secret = key.clone();
///     let target = RecordTarget::one_host(
///         move |url| {
///             let provider = AcmeBuilder::new().api_key(&key).base_url(url).build()?;
///             Ok(Arc::new(provider) as Arc<dyn Provider>)
///         },
///         "https://api.acme.dev",
///         out_dir,
///     )
///     .map_err(|e| e.to_string())?;
///     Ok(target.secret(secret))
/// }
///
/// conformance_tests!(Suite::from_env(&adapter()));
/// # fn main() {}
/// ```
#[derive(Clone)]
pub struct AdapterSuite {
    provider: String,
    cassettes: PathBuf,
    replay: crate::Factory,
    record_vars: Vec<(String, String)>,
    record: Option<RecordFn>,
    covered_elsewhere: Vec<(Capability, String)>,
}

impl std::fmt::Debug for AdapterSuite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterSuite")
            .field("provider", &self.provider)
            .field("cassettes", &self.cassettes)
            .field("record_vars", &self.record_vars)
            .field("records", &self.record.is_some())
            .finish()
    }
}

impl AdapterSuite {
    /// The adapter `provider`, replayed from the cassettes in `cassettes` against adapters built
    /// by `replay` for the replay server's base URL (with the API key
    /// [`cassette::TOKEN`](crate::cassette::TOKEN)).
    pub fn new<F>(provider: &str, cassettes: impl Into<PathBuf>, replay: F) -> AdapterSuite
    where
        F: Fn(&str) -> sandbox_sdk_core::Result<Arc<dyn Provider>> + Send + Sync + 'static,
    {
        AdapterSuite {
            provider: provider.to_owned(),
            cassettes: cassettes.into(),
            replay: Arc::new(replay),
            record_vars: Vec::new(),
            record: None,
            covered_elsewhere: Vec::new(),
        }
    }

    /// Declares a variable recording cannot do without, and what to set it to; recording
    /// without it fails naming it, before anything is sent.
    pub fn record_var(mut self, name: &str, what: &str) -> AdapterSuite {
        self.record_vars.push((name.to_owned(), what.to_owned()));
        self
    }

    /// How to record: `target` builds the live service's [`RecordTarget`] from the variables.
    /// Without it, recording this adapter fails saying it cannot be recorded.
    pub fn record<F>(mut self, target: F) -> AdapterSuite
    where
        F: Fn(&Vars, &Path) -> Result<RecordTarget, String> + Send + Sync + 'static,
    {
        self.record = Some(Arc::new(target));
        self
    }

    /// Declares that `capability` is proven by the adapter's own test `test` (see
    /// [`Suite::covered_elsewhere`]), in both modes.
    pub fn covered_elsewhere(mut self, capability: Capability, test: &str) -> AdapterSuite {
        self.covered_elsewhere.push((capability, test.to_owned()));
        self
    }

    /// The replay suite.
    pub fn replay_suite(&self) -> Suite {
        let replay = self.replay.clone();
        self.covered(Suite::replay(
            move |url| replay(url),
            self.cassettes.clone(),
        ))
    }

    /// The recording suite, configured from the variables `lookup` reads and writing cassettes
    /// to `out_dir`. Fails naming the first declared variable that is unset or empty.
    pub fn record_suite(
        &self,
        lookup: impl Fn(&str) -> Option<String> + 'static,
        out_dir: &Path,
    ) -> Result<Suite, String> {
        let provider = &self.provider;
        let record = self
            .record
            .as_ref()
            .ok_or_else(|| format!("{provider} declares no way to record its cassettes"))?;
        let vars = Vars::new(lookup);
        for (name, what) in &self.record_vars {
            if vars.get(name).is_none() {
                return Err(format!("recording {provider} needs {name}: {what}"));
            }
        }
        let target = record(&vars, out_dir).map_err(|e| format!("recording {provider}: {e}"))?;
        Ok(self.covered(Suite::record(target)))
    }

    /// Records `scenario` into `out_dir` through the recording proxy, with `vars` in place of
    /// the environment (the live credentials and the URLs of loopback stand-ins for the live
    /// service), and checks what every adapter's recording must do: the scenario passes, the
    /// cassette says `recorded` (`spec` when the target records from a simulator, see
    /// [`RecordTarget::from_simulator`]), holds none of `secrets` (keys, tokens, ids, the stand-ins'
    /// addresses) and exactly the requests `requests` (`METHOD path` lines in order, as
    /// [`request_lines`](crate::cassette::request_lines) gives them, placeholders included),
    /// and replays through the replay suite. Returns the cassette's text for the adapter's own
    /// checks.
    ///
    /// For an adapter's `tests/recording.rs` (no credentials, loopback only):
    ///
    /// ```no_run
    /// # async fn check(adapter: sandbox_conformance::AdapterSuite, api_url: &str) {
    /// let dir = std::env::temp_dir().join("acme-recording");
    /// let vars = [("ACME_API_KEY", "live-key-123"), ("ACME_API_URL", api_url)];
    /// adapter
    ///     .check_recording(&dir, "connect", &vars, &["live-key-123", api_url], &[
    ///         "GET /sandboxes/{{sandbox_id}}",
    ///     ])
    ///     .await;
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When any of those checks fails, with a message saying which and the cassette's text.
    pub async fn check_recording(
        &self,
        out_dir: &Path,
        scenario: &str,
        vars: &[(&str, &str)],
        secrets: &[&str],
        requests: &[&str],
    ) -> String {
        let suite = self
            .record_suite(Vars::fixed(vars), out_dir)
            .unwrap_or_else(|e| panic!("the recording suite could not start: {e}"));
        let kind = match &suite.target {
            crate::suite::Target::Record(target)
                if target.provenance_kind() == crate::cassette::ProvenanceKind::Spec =>
            {
                "spec"
            }
            _ => "recorded",
        };
        let report = suite.run(scenario).await;
        assert_eq!(report.outcome, Outcome::Passed, "{}", report.message());
        let path = out_dir.join(format!("{scenario}.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("no cassette at {}: {e}", path.display()));
        for (i, secret) in secrets.iter().enumerate() {
            assert!(
                !text.contains(secret),
                "secret {i} of the list was left in the cassette:\n{text}"
            );
        }
        let cassette: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("the cassette is not JSON ({e}):\n{text}"));
        assert_eq!(cassette["provenance"]["kind"], kind, "{text}");
        assert_eq!(
            crate::cassette::request_lines(&cassette),
            requests,
            "{text}"
        );
        let replay = self.replay.clone();
        let replayed = self
            .covered(Suite::replay(move |url| replay(url), out_dir))
            .run(scenario)
            .await;
        assert_eq!(
            replayed.outcome,
            Outcome::Passed,
            "the recording does not replay: {}",
            replayed.message()
        );
        text
    }

    fn covered(&self, mut suite: Suite) -> Suite {
        for (capability, test) in &self.covered_elsewhere {
            suite = suite.covered_elsewhere(*capability, test.clone());
        }
        suite
    }
}

impl Suite {
    /// The suite `adapter` declares, as the environment asks: recorded into its cassette
    /// directory when [`RECORD_ENV`](crate::RECORD_ENV) is set (`cargo xtask record`), replayed
    /// otherwise.
    ///
    /// # Panics
    ///
    /// When recording is asked for and cannot start (a variable unset, the adapter cannot be
    /// built): the message names what to set. A test is the only caller.
    pub fn from_env(adapter: &AdapterSuite) -> Suite {
        if crate::recording() {
            return adapter
                .record_suite(|name| std::env::var(name).ok(), &adapter.cassettes)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        adapter.replay_suite()
    }
}

/// The variables recording reads: trimmed, with empty ones treated as unset.
pub struct Vars {
    lookup: Lookup,
}

type Lookup = Box<dyn Fn(&str) -> Option<String>>;

impl std::fmt::Debug for Vars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vars { .. }") // values may be secrets
    }
}

impl Vars {
    /// Variables read through `lookup` (such as `|name| std::env::var(name).ok()`).
    pub fn new(lookup: impl Fn(&str) -> Option<String> + 'static) -> Vars {
        Vars {
            lookup: Box::new(lookup),
        }
    }

    /// The variable's trimmed value, or `None` when it is unset or empty.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The variable's trimmed value, or an error naming it.
    pub fn require(&self, name: &str) -> Result<String, String> {
        self.get(name).ok_or_else(|| format!("{name} is not set"))
    }

    /// A lookup answering from `pairs` only (for tests of recording wiring: no process
    /// environment involved).
    pub fn fixed(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'static + use<> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    /// The raw lookup, for an adapter builder's `from_lookup`.
    pub fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
        |name| (self.lookup)(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sdk_core::local::LocalProvider;

    fn adapter() -> AdapterSuite {
        AdapterSuite::new("acme", "/nonexistent", |_| {
            Ok(Arc::new(LocalProvider::new()) as Arc<dyn Provider>)
        })
        .record_var("ACME_KEY", "a live API key")
        .record_var("ACME_APP", "the app to record in")
        .record(|vars, _| Err(format!("built with {}", vars.require("ACME_APP")?)))
        .covered_elsewhere(Capability::Region, "adapter::region")
    }

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'static {
        Vars::fixed(pairs)
    }

    #[test]
    fn recording_names_the_first_missing_variable_before_building_anything() {
        let error = adapter()
            .record_suite(lookup(&[("ACME_KEY", " k ")]), Path::new("/tmp"))
            .unwrap_err();
        assert_eq!(error, "recording acme needs ACME_APP: the app to record in");
        let error = adapter()
            .record_suite(
                lookup(&[("ACME_KEY", "  "), ("ACME_APP", "a")]),
                Path::new("/tmp"),
            )
            .unwrap_err();
        assert_eq!(error, "recording acme needs ACME_KEY: a live API key");
    }

    #[test]
    fn the_record_function_sees_trimmed_variables_and_its_error_names_the_provider() {
        let error = adapter()
            .record_suite(
                lookup(&[("ACME_KEY", "k"), ("ACME_APP", " app-1 ")]),
                Path::new("/tmp"),
            )
            .unwrap_err();
        assert_eq!(error, "recording acme: built with app-1");
    }

    #[test]
    fn an_adapter_without_a_record_function_says_it_cannot_record() {
        let plain = AdapterSuite::new("plain", "/nonexistent", |_| {
            Ok(Arc::new(LocalProvider::new()) as Arc<dyn Provider>)
        });
        let error = plain
            .record_suite(lookup(&[]), Path::new("/tmp"))
            .unwrap_err();
        assert_eq!(error, "plain declares no way to record its cassettes");
    }

    #[test]
    fn the_replay_suite_carries_the_declared_coverage() {
        let suite = adapter().replay_suite();
        let debug = format!("{suite:?}");
        assert!(debug.contains("replay from /nonexistent"), "{debug}");
        assert!(debug.contains("adapter::region"), "{debug}");
    }
}
