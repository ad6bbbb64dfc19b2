//! The reaper: destroys this owner's sandboxes that a [`ReapPolicy`] says are no longer wanted,
//! and reports what it did.
//!
//! It lists with the owner's filter ([`Owner::filter`]) and checks the owner label again on
//! every sandbox listed, so a sandbox made outside the SDK or by another owner is never touched
//! even by a provider that ignored the filter. Everything it decides from comes from the
//! provider's listing (labels, creation and update times, last activity, state), nothing from a
//! file of ours, so any number of reapers may run at once on any number of machines: a sandbox
//! two of them pick is destroyed by one, and the other finds it gone and reports it skipped.
//!
//! ```no_run
//! # async fn demo(provider: &dyn sandbox_sdk_core::Provider) -> sandbox_sdk_core::Result<()> {
//! use sandbox_sdk_core::fleet::{Owner, ReapPolicy, reap};
//! use std::time::Duration;
//!
//! let owner = Owner::new("ci")?;
//! let policy = ReapPolicy::new()
//!     .max_age(Duration::from_secs(24 * 3600))
//!     .max_idle(Duration::from_secs(30 * 60))
//!     .failed()
//!     .dry_run(true);
//! let report = reap(provider, &owner, &policy).await?;
//! for doomed in &report.planned {
//!     println!("would destroy {}: {}", doomed.info.id, doomed.reasons_text());
//! }
//! # Ok(()) }
//! ```

use super::owner::Owner;
use crate::error::{Error, ErrorKind, Result};
use crate::lifecycle::{SandboxInfo, SandboxState};
use crate::provider::Provider;
use futures::{StreamExt, TryStreamExt};
use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, SystemTime};

/// How many destroys the reaper runs at once by default.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// Which of an owner's sandboxes to destroy. A sandbox is reaped when any rule set here
/// matches it; with no rule set nothing is reaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReapPolicy {
    /// Reap sandboxes created longer ago than this.
    pub max_age: Option<Duration>,
    /// Reap sandboxes whose last activity is longer ago than this, where the provider reports
    /// last activity ([`SandboxInfo::last_activity_at`]); others are never reaped as idle.
    pub max_idle: Option<Duration>,
    /// Reap sandboxes in the failed state.
    pub failed: bool,
    /// Reap sandboxes stopped, paused or archived for longer than this, counted from their
    /// last update ([`SandboxInfo::updated_at`], which is at or after the stop, so the rule
    /// never reaps early); sandboxes without one are never reaped by this rule.
    pub max_stopped: Option<Duration>,
    /// When set: these ids are never reaped, and every other sandbox of the owner is.
    pub keep: Option<BTreeSet<String>>,
    /// Decide and report, destroy nothing.
    pub dry_run: bool,
    /// The time the rules are measured against; `None` is the system clock.
    pub now: Option<SystemTime>,
    /// How many destroys run at once (at least 1).
    pub concurrency: usize,
}

impl Default for ReapPolicy {
    fn default() -> Self {
        ReapPolicy::new()
    }
}

impl ReapPolicy {
    /// A policy with no rule (reaps nothing), not a dry run.
    pub fn new() -> Self {
        ReapPolicy {
            max_age: None,
            max_idle: None,
            failed: false,
            max_stopped: None,
            keep: None,
            dry_run: false,
            now: None,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Reaps sandboxes older than `age`.
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// Reaps sandboxes idle for longer than `idle` (where the provider can tell).
    pub fn max_idle(mut self, idle: Duration) -> Self {
        self.max_idle = Some(idle);
        self
    }

    /// Reaps failed sandboxes.
    pub fn failed(mut self) -> Self {
        self.failed = true;
        self
    }

    /// Reaps sandboxes stopped for longer than `stopped`.
    pub fn max_stopped(mut self, stopped: Duration) -> Self {
        self.max_stopped = Some(stopped);
        self
    }

    /// Keeps exactly these sandboxes and reaps every other one of the owner.
    pub fn keep_only<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keep = Some(ids.into_iter().map(Into::into).collect());
        self
    }

    /// Sets whether this is a dry run.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Measures the rules against `now` instead of the system clock.
    pub fn at(mut self, now: SystemTime) -> Self {
        self.now = Some(now);
        self
    }

    /// Runs up to `n` destroys at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    fn has_rule(&self) -> bool {
        self.max_age.is_some()
            || self.max_idle.is_some()
            || self.failed
            || self.max_stopped.is_some()
            || self.keep.is_some()
    }

    /// Why `info` should be reaped at `now` (empty: it should not).
    pub fn reasons(&self, info: &SandboxInfo, now: SystemTime) -> Vec<ReapReason> {
        let mut reasons = Vec::new();
        if self
            .keep
            .as_ref()
            .is_some_and(|keep| keep.contains(&info.id))
        {
            return reasons;
        }
        let since = |t: Option<SystemTime>| t.and_then(|t| now.duration_since(t).ok());
        if let (Some(limit), Some(age)) = (self.max_age, since(info.created_at))
            && age > limit
        {
            reasons.push(ReapReason::Age { age, limit });
        }
        if let (Some(limit), Some(idle)) = (self.max_idle, since(info.last_activity_at))
            && idle > limit
        {
            reasons.push(ReapReason::Idle { idle, limit });
        }
        if self.failed && info.state == SandboxState::Failed {
            reasons.push(ReapReason::Failed {
                raw_state: info.raw_state.clone(),
            });
        }
        let stopped = matches!(
            info.state,
            SandboxState::Stopped | SandboxState::Paused | SandboxState::Archived
        );
        if let (true, Some(limit), Some(stopped_for)) =
            (stopped, self.max_stopped, since(info.updated_at))
            && stopped_for > limit
        {
            reasons.push(ReapReason::Stopped {
                state: info.state,
                stopped_for,
                limit,
            });
        }
        if self.keep.is_some() {
            reasons.push(ReapReason::NotKept);
        }
        reasons
    }
}

/// Why the reaper picked a sandbox.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReapReason {
    /// Created longer ago than the policy's `max_age`.
    Age {
        /// Its age.
        age: Duration,
        /// The limit.
        limit: Duration,
    },
    /// No activity for longer than the policy's `max_idle`.
    Idle {
        /// How long since its last activity.
        idle: Duration,
        /// The limit.
        limit: Duration,
    },
    /// In the failed state.
    Failed {
        /// The provider's own name for the state.
        raw_state: Option<String>,
    },
    /// Stopped, paused or archived for longer than the policy's `max_stopped`.
    Stopped {
        /// Which of those.
        state: SandboxState,
        /// For how long at least (since its last update).
        stopped_for: Duration,
        /// The limit.
        limit: Duration,
    },
    /// Not in the policy's keep-set.
    NotKept,
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        _ if s < 172_800 && s.is_multiple_of(3600) => format!("{}h", s / 3600),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ if (s % 86_400) / 3600 == 0 => format!("{}d", s / 86_400),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

impl fmt::Display for ReapReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReapReason::Age { age, limit } => {
                write!(f, "age {} > {}", human(*age), human(*limit))
            }
            ReapReason::Idle { idle, limit } => {
                write!(f, "idle {} > {}", human(*idle), human(*limit))
            }
            ReapReason::Failed { raw_state } => match raw_state {
                Some(raw) => write!(f, "failed ({raw})"),
                None => f.write_str("failed"),
            },
            ReapReason::Stopped {
                state,
                stopped_for,
                limit,
            } => write!(f, "{state} for {} > {}", human(*stopped_for), human(*limit)),
            ReapReason::NotKept => f.write_str("not in the keep-set"),
        }
    }
}

/// A sandbox the reaper picked, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doomed {
    /// The sandbox as listed.
    pub info: SandboxInfo,
    /// Every rule that matched it.
    pub reasons: Vec<ReapReason>,
}

impl Doomed {
    /// The reasons as one line: `age 3h > 1h; failed (error)`.
    pub fn reasons_text(&self) -> String {
        self.reasons
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Why the reaper left a sandbox alone.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// It does not carry the owner's label (the provider listed it although the filter asked
    /// for the label): never touched.
    NotOurs,
    /// In the keep-set.
    Kept,
    /// No rule of the policy matched it.
    NoRule,
    /// Already destroyed when listed, or gone by the time the reaper destroyed it (another
    /// reaper, or the provider's own auto-delete, got there first).
    Gone,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::NotOurs => "not ours (no owner label): never touched",
            SkipReason::Kept => "in the keep-set",
            SkipReason::NoRule => "no rule matched",
            SkipReason::Gone => "already gone",
        })
    }
}

/// A sandbox left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The sandbox's id.
    pub id: String,
    /// Its state when listed.
    pub state: SandboxState,
    /// Why it was left alone.
    pub reason: SkipReason,
}

/// A destroy that failed.
#[derive(Debug)]
pub struct ReapFailure {
    /// The sandbox the reaper tried to destroy.
    pub doomed: Doomed,
    /// Why it could not.
    pub error: Error,
}

/// What a reap decided and did.
#[derive(Debug, Default)]
pub struct ReapReport {
    /// Whether it was a dry run (then nothing was destroyed and `destroyed` and `failed` are
    /// empty).
    pub dry_run: bool,
    /// What the policy picked, with the reasons: what a dry run would destroy.
    pub planned: Vec<Doomed>,
    /// The ids destroyed.
    pub destroyed: Vec<String>,
    /// The destroys that failed.
    pub failed: Vec<ReapFailure>,
    /// The sandboxes left alone, with the reason.
    pub skipped: Vec<Skipped>,
}

impl ReapReport {
    /// `reap: 2 planned, 2 destroyed, 0 failed, 3 skipped` (`(dry run)` when it was one).
    pub fn summary_line(&self) -> String {
        format!(
            "reap{}: {} planned, {} destroyed, {} failed, {} skipped",
            if self.dry_run { " (dry run)" } else { "" },
            self.planned.len(),
            self.destroyed.len(),
            self.failed.len(),
            self.skipped.len()
        )
    }
}

/// Destroys `owner`'s sandboxes on `provider` that `policy` picks (or, in a dry run, only says
/// which), and reports what it decided and did.
///
/// A listing that fails is an error (nothing is destroyed on a partial view); a destroy that
/// fails is reported in [`ReapReport::failed`] and the others go on. A sandbox already gone when
/// destroyed is reported skipped ([`SkipReason::Gone`]). With no rule set, nothing is reaped.
pub async fn reap(
    provider: &dyn Provider,
    owner: &Owner,
    policy: &ReapPolicy,
) -> Result<ReapReport> {
    let now = policy.now.unwrap_or_else(SystemTime::now);
    let listed: Vec<SandboxInfo> =
        provider
            .list(&owner.filter())
            .try_collect()
            .await
            .map_err(|e| {
                e.with_note("reap: listing the owner's sandboxes failed; nothing was destroyed")
            })?;
    let mut report = ReapReport {
        dry_run: policy.dry_run,
        ..ReapReport::default()
    };
    let mut seen = BTreeSet::new();
    for info in listed {
        if !seen.insert(info.id.clone()) {
            continue;
        }
        let skip = |reason| Skipped {
            id: info.id.clone(),
            state: info.state,
            reason,
        };
        if !owner.owns(&info) {
            tracing::warn!(
                provider = provider.name(),
                sandbox_id = %info.id,
                "reap: the provider listed a sandbox without the owner label; leaving it alone"
            );
            report.skipped.push(skip(SkipReason::NotOurs));
            continue;
        }
        if info.state == SandboxState::Destroyed {
            report.skipped.push(skip(SkipReason::Gone));
            continue;
        }
        if policy.keep.as_ref().is_some_and(|k| k.contains(&info.id)) {
            report.skipped.push(skip(SkipReason::Kept));
            continue;
        }
        let reasons = if policy.has_rule() {
            policy.reasons(&info, now)
        } else {
            Vec::new()
        };
        if reasons.is_empty() {
            report.skipped.push(skip(SkipReason::NoRule));
        } else {
            report.planned.push(Doomed { info, reasons });
        }
    }
    if policy.dry_run {
        for doomed in &report.planned {
            tracing::info!(
                provider = provider.name(),
                sandbox_id = %doomed.info.id,
                reasons = %doomed.reasons_text(),
                "reap (dry run): would destroy"
            );
        }
        return Ok(report);
    }
    let outcomes: Vec<(Doomed, Result<()>)> = futures::stream::iter(report.planned.clone())
        .map(|doomed| async move {
            let result = provider.destroy(&doomed.info.id).await;
            (doomed, result)
        })
        .buffer_unordered(policy.concurrency.max(1))
        .collect()
        .await;
    for (doomed, result) in outcomes {
        let id = doomed.info.id.clone();
        match result {
            Ok(()) => {
                tracing::info!(
                    provider = provider.name(),
                    sandbox_id = %id,
                    reasons = %doomed.reasons_text(),
                    "reap: destroyed"
                );
                report.destroyed.push(id);
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                report.skipped.push(Skipped {
                    id,
                    state: doomed.info.state,
                    reason: SkipReason::Gone,
                });
            }
            Err(error) => {
                tracing::warn!(
                    provider = provider.name(),
                    sandbox_id = %id,
                    error = %error,
                    "reap: destroy failed"
                );
                report.failed.push(ReapFailure { doomed, error });
            }
        }
    }
    report.destroyed.sort();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(hours: u32) -> SystemTime {
        SystemTime::UNIX_EPOCH + HOUR * hours
    }

    fn sandbox(id: &str, state: SandboxState, created: u32) -> SandboxInfo {
        let mut info = SandboxInfo::new(id, "p", state);
        info.created_at = Some(at(created));
        info
    }

    #[test]
    fn each_rule_names_itself() {
        let now = at(100);
        let policy = ReapPolicy::new()
            .max_age(HOUR * 10)
            .max_idle(HOUR)
            .failed()
            .max_stopped(HOUR * 2);
        assert!(
            policy
                .reasons(&sandbox("young", SandboxState::Running, 95), now)
                .is_empty()
        );
        let old = policy.reasons(&sandbox("old", SandboxState::Running, 50), now);
        assert_eq!(
            old,
            [ReapReason::Age {
                age: HOUR * 50,
                limit: HOUR * 10
            }]
        );
        assert_eq!(old[0].to_string(), "age 2d2h > 10h");
        let mut idle = sandbox("idle", SandboxState::Running, 99);
        idle.last_activity_at = Some(at(97));
        assert_eq!(policy.reasons(&idle, now)[0].to_string(), "idle 3h > 1h");
        let mut failed = sandbox("f", SandboxState::Failed, 99);
        failed.raw_state = Some("build_failed".into());
        assert_eq!(
            policy.reasons(&failed, now)[0].to_string(),
            "failed (build_failed)"
        );
        let mut stopped = sandbox("s", SandboxState::Stopped, 99);
        assert!(
            policy.reasons(&stopped, now).is_empty(),
            "no update time: not reaped as stopped"
        );
        stopped.updated_at = Some(at(97));
        assert_eq!(
            policy.reasons(&stopped, now)[0].to_string(),
            "stopped for 3h > 2h"
        );
        let kept = policy.clone().keep_only(["old"]);
        assert!(
            kept.reasons(&sandbox("old", SandboxState::Running, 50), now)
                .is_empty()
        );
        assert_eq!(
            kept.reasons(&sandbox("other", SandboxState::Running, 99), now),
            [ReapReason::NotKept]
        );
    }

    #[test]
    fn durations_read_well() {
        for (secs, text) in [
            (5, "5s"),
            (600, "10m"),
            (3600, "1h"),
            (5400, "90m"),
            (3 * 3600, "3h"),
            (3 * 86_400, "3d"),
            (50 * 3600, "2d2h"),
        ] {
            assert_eq!(human(Duration::from_secs(secs)), text);
        }
    }
}
