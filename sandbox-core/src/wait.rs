//! Waiting for a state: check at once, then back off.
//!
//! Every wait in the SDK (a sandbox reaching `running`, a snapshot becoming active, a command's
//! log catching up) checks first and pauses only when the answer is "not yet": 25 ms, doubling
//! up to the caller's longest pause, and never past the deadline. A provider that answers at
//! once is never waited on for a whole poll interval.

use std::time::Duration;
use tokio::time::Instant;

/// The first pause of a [`Backoff`].
pub const FIRST_PAUSE: Duration = Duration::from_millis(25);

/// The pauses between the checks of one wait.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    started: Instant,
    deadline: Option<Instant>,
}

impl Backoff {
    /// Pauses of 25 ms (or `max`, when shorter) doubling up to `max`, with no deadline.
    pub fn new(max: Duration) -> Self {
        Backoff {
            next: FIRST_PAUSE.min(max),
            max,
            started: Instant::now(),
            deadline: None,
        }
    }

    /// Stops pausing once `within` has passed since the backoff was made.
    pub fn within(mut self, within: Duration) -> Self {
        self.deadline = self.started.checked_add(within);
        self
    }

    /// How long since the backoff was made.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Pauses before the next check. Returns `false` without pausing when the deadline has
    /// passed; the last pause is cut short to end at the deadline, so one final check happens
    /// right at it.
    pub async fn pause(&mut self) -> bool {
        let mut pause = self.next;
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            pause = pause.min(left);
        }
        tokio::time::sleep(pause).await;
        self.next = self.next.saturating_mul(2).min(self.max);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_double_up_to_the_cap_and_stop_at_the_deadline() {
        let mut backoff = Backoff::new(Duration::from_millis(500)).within(Duration::from_secs(2));
        let mut at = Vec::new();
        while backoff.pause().await {
            at.push(backoff.elapsed().as_millis());
        }
        assert_eq!(at, [25, 75, 175, 375, 775, 1275, 1775, 2000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_cap_is_the_first_pause_too() {
        let mut backoff = Backoff::new(Duration::from_millis(10));
        assert!(backoff.pause().await);
        assert!(backoff.pause().await);
        assert_eq!(backoff.elapsed(), Duration::from_millis(20));
    }
}
