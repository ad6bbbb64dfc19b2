//! Deadlines and state-wait pauses.

use std::time::{Duration, SystemTime};

/// `now + wait`, saturating far in the future instead of panicking on a huge `wait` (callers
/// pass `Duration::MAX` to mean "no deadline").
pub(crate) fn instant_after(wait: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

/// The pauses of a state wait that ends at `deadline`: the caller checks at once, then pauses
/// 25 ms doubling up to `max` (the builder's poll interval), the last pause ending at the
/// deadline (`sandbox_sdk_core::wait::Backoff`).
pub(crate) fn backoff_until(
    max: Duration,
    deadline: tokio::time::Instant,
) -> sandbox_sdk_core::wait::Backoff {
    sandbox_sdk_core::wait::Backoff::new(max)
        .within(deadline.saturating_duration_since(tokio::time::Instant::now()))
}

/// `SystemTime::now() + wait`, or `None` when that is not representable.
pub(crate) fn system_time_after(wait: Duration) -> Option<SystemTime> {
    SystemTime::now().checked_add(wait)
}

/// About thirty years: "never" for a deadline.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
