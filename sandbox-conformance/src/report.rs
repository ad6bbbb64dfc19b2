//! What running scenarios reports: one scenario's [`ScenarioReport`] and [`Outcome`], a whole
//! suite's [`SuiteReport`] with its [`Counts`] and capability [`Coverage`].

use crate::scenarios::SCENARIOS;
use sandbox_sdk_core::{Capabilities, Capability, Level};
use serde_json::json;
use std::collections::BTreeMap;

/// How one scenario ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and every check held.
    Passed,
    /// Its capability is unsupported, and the probe call failed fast with `NotSupported`,
    /// sending nothing.
    NotSupported,
    /// It did not run (the reason says why: a live run of a replay-only scenario, or an
    /// unsupported capability that has nothing to refuse).
    Skipped(String),
    /// A check failed; the message says which, with the replay server's explanations.
    Failed(String),
}

/// The result of one scenario.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// The provider's name.
    pub provider: String,
    /// The scenario's name.
    pub scenario: String,
    /// How it ended.
    pub outcome: Outcome,
    /// In replay, the normalised requests the adapter sent (the insta snapshot text).
    pub requests: Option<String>,
}

impl ScenarioReport {
    /// Whether the scenario ran and passed (not a skip or a not-supported check).
    pub fn is_pass(&self) -> bool {
        self.outcome == Outcome::Passed
    }

    /// Whether the scenario failed.
    pub fn is_failure(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }

    /// A one-paragraph description of the outcome.
    pub fn message(&self) -> String {
        let head = format!("{} {}", self.provider, self.scenario);
        match &self.outcome {
            Outcome::Passed => format!("{head}: passed"),
            Outcome::NotSupported => format!("{head}: unsupported, fails fast with NotSupported"),
            Outcome::Skipped(why) => format!("{head}: skipped: {why}"),
            Outcome::Failed(why) => format!("{head}: FAILED:\n{why}"),
        }
    }

    /// `passed`, `not_supported`, `skipped` or `failed`.
    pub fn outcome_name(&self) -> &'static str {
        match self.outcome {
            Outcome::Passed => "passed",
            Outcome::NotSupported => "not_supported",
            Outcome::Skipped(_) => "skipped",
            Outcome::Failed(_) => "failed",
        }
    }

    /// The report as JSON (what `cargo xtask conformance` reads).
    pub fn to_json(&self) -> serde_json::Value {
        let detail = match &self.outcome {
            Outcome::Skipped(m) | Outcome::Failed(m) => Some(m.clone()),
            _ => None,
        };
        json!({
            "provider": self.provider,
            "scenario": self.scenario,
            "outcome": self.outcome_name(),
            "detail": detail,
        })
    }
}

/// The results of a whole suite.
#[derive(Debug, Clone)]
pub struct SuiteReport {
    /// One report per scenario, in suite order.
    pub scenarios: Vec<ScenarioReport>,
    /// The capability coverage.
    pub coverage: Coverage,
}

/// How many scenarios ended each way (the coverage check counts as one passed or failed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Ran, and every check held.
    pub passed: usize,
    /// Unsupported, and shown to fail fast sending nothing.
    pub not_supported: usize,
    /// Did not run.
    pub skipped: usize,
    /// Failed.
    pub failed: usize,
}

impl Counts {
    /// Counts one outcome.
    pub fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Passed => self.passed += 1,
            Outcome::NotSupported => self.not_supported += 1,
            Outcome::Skipped(_) => self.skipped += 1,
            Outcome::Failed(_) => self.failed += 1,
        }
    }

    /// `conformance: N passed, N not supported, N skipped, N failed`.
    pub fn summary_line(&self) -> String {
        format!(
            "conformance: {} passed, {} not supported, {} skipped, {} failed",
            self.passed, self.not_supported, self.skipped, self.failed
        )
    }
}

impl SuiteReport {
    /// The outcomes counted, with the coverage check as one passed or failed.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for r in &self.scenarios {
            counts.add(&r.outcome);
        }
        if self.coverage.check().is_err() {
            counts.failed += 1;
        } else {
            counts.passed += 1;
        }
        counts
    }

    /// Whether every scenario and the coverage check passed.
    pub fn is_success(&self) -> bool {
        self.counts().failed == 0
    }

    /// `conformance: N passed, N not supported, N skipped, N failed`.
    pub fn summary_line(&self) -> String {
        self.counts().summary_line()
    }
}

/// Which scenarios exercise each capability, for one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    /// The provider's name.
    pub provider: String,
    /// One row per capability, in table order.
    pub rows: Vec<CoverageRow>,
}

/// One capability's coverage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoverageRow {
    /// The capability.
    pub capability: Capability,
    /// Its declared level (as the client layer sees it, emulation included).
    pub level: Level,
    /// Scenarios that exercise it, or when it is unsupported, those that check it fails fast.
    pub scenarios: Vec<&'static str>,
    /// The adapter's own test that covers it, when declared with `covered_elsewhere`.
    pub elsewhere: Option<String>,
}

impl Coverage {
    /// Computes coverage of `caps` by the scenarios, plus the adapter's declared other tests.
    pub fn compute(
        provider: &str,
        caps: &Capabilities,
        elsewhere: &BTreeMap<Capability, String>,
    ) -> Coverage {
        let rows = Capability::ALL
            .iter()
            .map(|cap| {
                let level = caps.level(*cap);
                let scenarios = SCENARIOS
                    .iter()
                    .filter(|s| {
                        if level.is_available() {
                            // A scenario whose required capability is unsupported is skipped:
                            // it proves nothing about the others it exercises.
                            s.exercises.contains(cap)
                                && s.requires.is_none_or(|r| caps.level(r).is_available())
                        } else {
                            s.probe && s.requires == Some(*cap)
                        }
                    })
                    .map(|s| s.name)
                    .collect();
                CoverageRow {
                    capability: *cap,
                    level,
                    scenarios,
                    elsewhere: elsewhere.get(cap).cloned(),
                }
            })
            .collect();
        Coverage {
            provider: provider.to_owned(),
            rows,
        }
    }

    /// Capabilities declared native or emulated that nothing exercises.
    pub fn uncovered(&self) -> Vec<Capability> {
        self.rows
            .iter()
            .filter(|r| r.level.is_available() && r.scenarios.is_empty() && r.elsewhere.is_none())
            .map(|r| r.capability)
            .collect()
    }

    /// Fails naming every declared capability that nothing exercises.
    pub fn check(&self) -> Result<(), String> {
        let missing = self.uncovered();
        if missing.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = missing.iter().map(|c| c.as_str()).collect();
        Err(format!(
            "{} declares {} as native or emulated, but no scenario exercises {} and the suite \
             names no other test for {} (Suite::covered_elsewhere)",
            self.provider,
            names.join(", "),
            if names.len() == 1 { "it" } else { "them" },
            if names.len() == 1 { "it" } else { "them" },
        ))
    }

    /// A Markdown table: capability, level, scenarios, and their outcomes when given.
    pub fn markdown(&self, outcomes: &BTreeMap<String, String>) -> String {
        let mut out = format!(
            "| {} capability | level | exercised by |\n| --- | --- | --- |\n",
            self.provider
        );
        for r in &self.rows {
            let mut by: Vec<String> = r
                .scenarios
                .iter()
                .map(|s| match outcomes.get(*s) {
                    Some(o) => format!("{s} ({o})"),
                    None => (*s).to_owned(),
                })
                .collect();
            if let Some(test) = &r.elsewhere {
                by.push(format!("adapter test `{test}`"));
            }
            let by = if by.is_empty() {
                if r.level.is_available() {
                    "**nothing**".to_owned()
                } else {
                    "—".to_owned()
                }
            } else {
                by.join(", ")
            };
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                r.capability,
                r.level.as_str(),
                by
            ));
        }
        out
    }

    /// The coverage as JSON (what `cargo xtask conformance` reads).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "provider": self.provider,
            "scenarios": SCENARIOS.iter().map(|s| s.name).collect::<Vec<_>>(),
            "uncovered": self.uncovered().iter().map(|c| c.as_str()).collect::<Vec<_>>(),
            "rows": self.rows.iter().map(|r| json!({
                "capability": r.capability.as_str(),
                "level": r.level.as_str(),
                "scenarios": r.scenarios,
                "elsewhere": r.elsewhere,
            })).collect::<Vec<_>>(),
        })
    }
}
