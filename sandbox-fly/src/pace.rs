//! Spacing of the many `/exec` calls one emulated operation makes (file chunks), so a large
//! transfer stays within Fly's per-action rate (1 request/s sustained, bursts of 3) instead of
//! failing half-way with a 429. This is pacing, not retrying: every call is sent once.

use std::time::Duration;
use tokio::time::Instant;

/// Calls allowed back to back before pacing starts (Fly's burst is 3; one is left for others).
const BURST: u32 = 2;

/// Waits between calls after a short burst.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    interval: Duration,
    last: Option<Instant>,
    calls: u32,
}

impl Pacer {
    pub fn new(interval: Duration) -> Pacer {
        Pacer {
            interval,
            last: None,
            calls: 0,
        }
    }

    /// Waits until the next call may go, then records it.
    pub async fn ready(&mut self) {
        if self.calls >= BURST
            && let Some(last) = self.last
        {
            tokio::time::sleep_until(last + self.interval).await;
        }
        self.last = Some(Instant::now());
        self.calls = self.calls.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_calls_are_spaced() {
        let mut pacer = Pacer::new(Duration::from_secs(1));
        let start = Instant::now();
        pacer.ready().await;
        pacer.ready().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        pacer.ready().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        pacer.ready().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }
}
