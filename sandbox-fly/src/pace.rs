//! Spacing of the many `/exec` calls one emulated operation makes (file chunks, output polls),
//! so it stays within Fly's per-action rate (1 request/s sustained, bursts of 3: PROTOCOL.md §3)
//! instead of failing half-way with a 429. A token bucket like Fly's own: [`BURST`] calls may go
//! back to back, then one per interval, and the burst refills while the operation is idle.
//! This is pacing, not retrying: every call is sent once.

use std::time::Duration;
use tokio::time::Instant;

/// Calls allowed back to back (Fly's burst is 3; one is left for the caller's other calls).
pub(crate) const BURST: u32 = 2;

/// A token bucket of [`BURST`] calls refilled at one call per interval.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    interval: Duration,
    /// Calls available at `at` (fractional while refilling).
    tokens: f64,
    at: Instant,
}

impl Pacer {
    /// A full bucket.
    pub fn new(interval: Duration) -> Pacer {
        Pacer {
            interval,
            tokens: f64::from(BURST),
            at: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        if self.interval.is_zero() {
            self.tokens = f64::from(BURST);
        } else {
            let gained =
                now.saturating_duration_since(self.at).as_secs_f64() / self.interval.as_secs_f64();
            self.tokens = (self.tokens + gained).min(f64::from(BURST));
        }
        self.at = now;
    }

    /// When the next call may go (now, when the bucket has a call left).
    pub fn next_at(&mut self) -> Instant {
        let now = Instant::now();
        self.refill(now);
        if self.tokens >= 1.0 {
            now
        } else {
            now + self.interval.mul_f64(1.0 - self.tokens)
        }
    }

    /// Records a call made now.
    pub fn take(&mut self) {
        self.refill(Instant::now());
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    /// Waits until the next call may go, then records it.
    pub async fn ready(&mut self) {
        tokio::time::sleep_until(self.next_at()).await;
        self.take();
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

    #[tokio::test(start_paused = true)]
    async fn an_idle_spell_refills_the_burst_but_never_beyond_it() {
        let mut pacer = Pacer::new(Duration::from_secs(1));
        for _ in 0..3 {
            pacer.ready().await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let start = Instant::now();
        pacer.ready().await;
        pacer.ready().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        pacer.ready().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_interval_never_waits() {
        let mut pacer = Pacer::new(Duration::ZERO);
        let start = Instant::now();
        for _ in 0..10 {
            pacer.ready().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
