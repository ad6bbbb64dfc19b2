//! Usage: how long a sandbox has run (and been held stopped) and what that cost, metered by
//! the provider where it meters it, estimated from the sandbox's state and the price table
//! where it does not. An estimate says so ([`Usage::estimated`]) and says how it was made
//! ([`Usage::basis`]).

use super::prices::{Prices, Shape};
use crate::lifecycle::{SandboxInfo, SandboxState, StateChange};
use serde::Serialize;
use std::time::{Duration, SystemTime};

/// What one sandbox has used so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    /// The sandbox.
    pub sandbox_id: String,
    /// Its provider.
    pub provider: String,
    /// Start of the window counted (the sandbox's creation), when known.
    pub from: Option<SystemTime>,
    /// End of the window counted.
    pub to: SystemTime,
    /// Time spent running.
    pub running: Duration,
    /// Time spent stopped or paused with its disk kept.
    pub held: Duration,
    /// What that cost, in US dollars, when it can be told.
    pub cost_usd: Option<f64>,
    /// Whether this is an estimate rather than the provider's own meter.
    pub estimated: bool,
    /// How the figures were obtained, in a sentence.
    pub basis: String,
}

/// Estimates a sandbox's usage from what a listing says about it, from its creation until `now`.
///
/// With a state [`history`](SandboxInfo::history) (Fly's machine events, the `local`
/// provider's record), each interval counts as running or held by the state it was in; the
/// time before the first recorded change counts as running when that change stops, pauses or
/// ends the sandbox (it was running then), and is not counted otherwise.
///
/// Without one, the sandbox is taken to have been in its current state since it was created,
/// except that a stopped, paused or archived sandbox with an
/// [`updated_at`](SandboxInfo::updated_at) ran until then and has been held since. A sandbox
/// paused and resumed before is therefore counted as running all along (an upper bound), and
/// a stopped one without `updated_at` as held all along (running time unknown, counted as
/// zero).
///
/// Cost needs the sandbox's CPUs and memory ([`Shape::of`]) and `prices`; without them it is
/// `None`. The [`basis`](Usage::basis) says which of these applied.
pub fn estimate(info: &SandboxInfo, now: SystemTime, prices: Option<&Prices>) -> Usage {
    let mut usage = Usage {
        sandbox_id: info.id.clone(),
        provider: info.provider.clone(),
        from: info.created_at,
        to: now,
        running: Duration::ZERO,
        held: Duration::ZERO,
        cost_usd: None,
        estimated: true,
        basis: String::new(),
    };
    let Some(created) = info.created_at else {
        usage.basis =
            "estimate: the provider reports no creation time, so nothing is counted".to_owned();
        return usage;
    };
    let mut basis = match from_history(info, created, now) {
        Some((running, held, changes)) => {
            usage.running = running;
            usage.held = held;
            format!("estimate from the {changes} state change(s) the provider reported")
        }
        None => from_current_state(info, created, now, &mut usage),
    };
    match (prices, Shape::of(&info.resources)) {
        (Some(prices), Some(shape)) => {
            let hours = |d: Duration| d.as_secs_f64() / 3600.0;
            usage.cost_usd = Some(
                prices.rate(&shape) * hours(usage.running)
                    + prices.held(&shape) * hours(usage.held),
            );
            basis.push_str(&format!(
                ", priced as {shape} at the rates as of {}",
                prices.as_of
            ));
        }
        (None, _) => basis.push_str("; no prices for this provider, so no cost"),
        (Some(_), None) => basis.push_str("; the provider reports no CPU and memory, so no cost"),
    }
    usage.basis = basis;
    usage
}

/// Running and held time from the state history, and how many changes it used; `None`
/// without history.
fn from_history(
    info: &SandboxInfo,
    created: SystemTime,
    now: SystemTime,
) -> Option<(Duration, Duration, usize)> {
    let mut changes: Vec<StateChange> = info
        .history
        .iter()
        .filter(|c| c.at <= now)
        .copied()
        .collect();
    changes.sort_by_key(|c| c.at);
    let first = *changes.first()?;
    let mut running = Duration::ZERO;
    let mut held = Duration::ZERO;
    let stops = matches!(
        first.state,
        SandboxState::Stopped
            | SandboxState::Paused
            | SandboxState::Archived
            | SandboxState::Destroyed
            | SandboxState::Failed
    );
    if stops {
        running += first.at.duration_since(created).unwrap_or_default();
    }
    for (i, change) in changes.iter().enumerate() {
        let start = change.at.max(created);
        let end = changes.get(i + 1).map_or(now, |next| next.at);
        let length = end.duration_since(start).unwrap_or_default();
        match change.state {
            SandboxState::Running => running += length,
            SandboxState::Stopped | SandboxState::Paused | SandboxState::Archived => held += length,
            _ => {}
        }
    }
    Some((running, held, changes.len()))
}

/// Running and held time from the current state alone (see [`estimate`]); returns the basis.
fn from_current_state(
    info: &SandboxInfo,
    created: SystemTime,
    now: SystemTime,
    usage: &mut Usage,
) -> String {
    let since = |t: SystemTime| now.duration_since(t).unwrap_or_default();
    let stopped_at = info.updated_at.filter(|t| *t >= created && *t <= now);
    match info.state {
        SandboxState::Stopped | SandboxState::Paused | SandboxState::Archived => match stopped_at {
            Some(at) => {
                usage.running = at.duration_since(created).unwrap_or_default();
                usage.held = since(at);
                format!(
                    "estimate: running from creation until its last update, {} since",
                    info.state
                )
            }
            None => {
                usage.held = since(created);
                format!(
                    "estimate: {} with no time of the change, counted as held since creation (running time unknown)",
                    info.state
                )
            }
        },
        SandboxState::Destroyed | SandboxState::Failed => {
            if let Some(at) = stopped_at {
                usage.running = at.duration_since(created).unwrap_or_default();
            }
            format!(
                "estimate: {}, counted as running until its last update",
                info.state
            )
        }
        _ => {
            usage.running = since(created);
            "estimate: running since creation".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::prices::PriceTable;
    use crate::lifecycle::Resources;

    const HOUR: Duration = Duration::from_secs(3600);

    fn info(state: SandboxState) -> SandboxInfo {
        let mut info = SandboxInfo::new("sb", "e2b", state);
        info.created_at = Some(SystemTime::UNIX_EPOCH + HOUR * 10);
        info.resources = Resources {
            cpus: Some(2),
            memory_mb: Some(4096),
            disk_gb: Some(10),
            gpus: None,
        };
        info
    }

    #[test]
    fn a_running_sandbox_has_run_since_creation() {
        let prices = PriceTable::builtin().get("e2b").cloned();
        let now = SystemTime::UNIX_EPOCH + HOUR * 13;
        let usage = estimate(&info(SandboxState::Running), now, prices.as_ref());
        assert_eq!(usage.running, HOUR * 3);
        assert_eq!(usage.held, Duration::ZERO);
        assert!(usage.estimated);
        let cost = usage.cost_usd.unwrap();
        assert!((cost - 3.0 * 0.1656).abs() < 1e-9, "{cost}");
        assert!(usage.basis.contains("2x4, 10 GiB disk"), "{}", usage.basis);
    }

    #[test]
    fn a_stopped_sandbox_splits_at_its_last_update() {
        let prices = PriceTable::builtin().get("daytona").cloned();
        let now = SystemTime::UNIX_EPOCH + HOUR * 14;
        let mut stopped = info(SandboxState::Stopped);
        stopped.updated_at = Some(SystemTime::UNIX_EPOCH + HOUR * 11);
        let usage = estimate(&stopped, now, prices.as_ref());
        assert_eq!((usage.running, usage.held), (HOUR, HOUR * 3));
        let p = prices.unwrap();
        let shape = Shape::new(2, 4, 10);
        let want = p.rate(&shape) + 3.0 * p.held(&shape);
        assert!((usage.cost_usd.unwrap() - want).abs() < 1e-12);
        stopped.updated_at = None;
        let usage = estimate(&stopped, now, None);
        assert_eq!((usage.running, usage.held), (Duration::ZERO, HOUR * 4));
        assert_eq!(usage.cost_usd, None);
        assert!(
            usage.basis.contains("running time unknown"),
            "{}",
            usage.basis
        );
    }

    #[test]
    fn a_history_splits_running_from_held_time() {
        let at = |h: u32| SystemTime::UNIX_EPOCH + HOUR * h;
        let mut sb = info(SandboxState::Running);
        // Created at 10 h; recorded: stopped at 12, started at 15, paused at 16 (the start
        // before the first stop is not in the record: it was running until the stop).
        sb.history = vec![
            StateChange {
                at: at(15),
                state: SandboxState::Running,
            },
            StateChange {
                at: at(12),
                state: SandboxState::Stopped,
            },
            StateChange {
                at: at(16),
                state: SandboxState::Paused,
            },
        ];
        let usage = estimate(&sb, at(20), None);
        assert_eq!(usage.running, HOUR * 3, "10-12 and 15-16");
        assert_eq!(usage.held, HOUR * 7, "12-15 and 16-20");
        assert!(usage.basis.contains("3 state change(s)"), "{}", usage.basis);
        // A record that starts with the sandbox starting counts from there only.
        sb.history = vec![StateChange {
            at: at(11),
            state: SandboxState::Running,
        }];
        let usage = estimate(&sb, at(13), None);
        assert_eq!((usage.running, usage.held), (HOUR * 2, Duration::ZERO));
    }

    #[test]
    fn without_a_creation_time_or_a_shape_nothing_is_made_up() {
        let mut bare = SandboxInfo::new("sb", "local", SandboxState::Running);
        let usage = estimate(&bare, SystemTime::now(), None);
        assert_eq!(usage.running, Duration::ZERO);
        assert!(usage.basis.contains("no creation time"));
        bare.created_at = Some(SystemTime::UNIX_EPOCH);
        let prices = PriceTable::builtin().get("fly").cloned();
        let usage = estimate(&bare, SystemTime::UNIX_EPOCH + HOUR, prices.as_ref());
        assert_eq!(usage.running, HOUR);
        assert_eq!(usage.cost_usd, None);
        assert!(usage.basis.contains("no CPU and memory"), "{}", usage.basis);
    }
}
