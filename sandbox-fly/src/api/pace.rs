//! Spacing of the calls Fly rate-limits per action and identifier (PROTOCOL.md §3: 1 request/s
//! sustained, bursts of 3), so they stay within the limit instead of failing half-way with a
//! 429: `/exec` per machine (commands, file chunks, output polls, stats, listings), `/wait` per
//! machine, and the machine list per app (idempotency look-ups, `list`, the reaper). One token
//! bucket per action and identifier ([`Pace`]) is shared by every operation through any handle
//! of one provider: [`BURST`] calls may go back to back, then one per interval, and the burst
//! refills while idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Calls allowed back to back: Fly's burst.
pub(crate) const BURST: u32 = 3;

/// The actions the adapter paces, each with its own buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// `POST …/{id}/exec`, per machine.
    Exec,
    /// `GET …/{id}/wait`, per machine.
    Wait,
    /// `GET …/machines`, per app.
    List,
}

/// One [`Pacer`] per action and identifier, shared by every clone (every handle of one provider).
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    interval: Duration,
    buckets: Arc<Mutex<HashMap<(Action, String), Pacer>>>,
}

impl Pace {
    /// Buckets refilled at one call per `interval` (zero: no pacing).
    pub fn new(interval: Duration) -> Pace {
        Pace {
            interval,
            buckets: Arc::default(),
        }
    }

    fn with<T>(&self, action: Action, scope: &str, f: impl FnOnce(&mut Pacer) -> T) -> T {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let pacer = buckets
            .entry((action, scope.to_owned()))
            .or_insert_with(|| Pacer::new(self.interval));
        f(pacer)
    }

    /// When the next `action` on `scope` may go.
    pub fn next_at(&self, action: Action, scope: &str) -> Instant {
        self.with(action, scope, Pacer::next_at)
    }

    /// Waits until an `action` on `scope` may go, then counts it.
    pub async fn ready(&self, action: Action, scope: &str) {
        loop {
            let at = self.with(action, scope, |p| {
                let at = p.next_at();
                if at <= Instant::now() {
                    p.take();
                }
                at
            });
            if at <= Instant::now() {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    }

    /// Forgets the buckets of `machine` (destroyed).
    pub fn forget(&self, machine: &str) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets.retain(|(_, scope), _| scope != machine);
    }
}

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
    #[cfg(test)]
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
        for _ in 0..4 {
            pacer.ready().await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let start = Instant::now();
        for _ in 0..3 {
            pacer.ready().await;
        }
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

    #[tokio::test(start_paused = true)]
    async fn every_operation_on_one_machine_shares_its_bucket() {
        use Action::Exec;
        let pace = Pace::new(Duration::from_secs(1));
        let other_handle = pace.clone();
        let start = Instant::now();
        // An upload's two chunks, then a download's stat and first block on another handle.
        pace.ready(Exec, "m1").await;
        pace.ready(Exec, "m1").await;
        other_handle.ready(Exec, "m1").await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        other_handle.ready(Exec, "m1").await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        // Another machine has its own bucket.
        pace.ready(Exec, "m2").await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        // Concurrent callers on one machine take turns.
        let (a, b) = tokio::join!(pace.ready(Exec, "m1"), other_handle.ready(Exec, "m1"));
        let _ = (a, b);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn actions_and_scopes_have_buckets_of_their_own() {
        let pace = Pace::new(Duration::from_secs(1));
        let start = Instant::now();
        for _ in 0..3 {
            pace.ready(Action::List, "app").await;
            pace.ready(Action::Wait, "m1").await;
            pace.ready(Action::Exec, "m1").await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        // The fourth list of the app waits its turn, whatever happens on the machines.
        pace.ready(Action::List, "app").await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        pace.forget("m1");
        pace.ready(Action::Wait, "m1").await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "a forgotten machine starts full"
        );
    }
}
