//! Fly's documented Machines API rate limits (PROTOCOL.md §3): per action and per identifier
//! (the machine, or the app for create and list), 1 request/s sustained with bursts of 3; Get
//! Machine 5 requests/s with bursts of 10. A token bucket per `(action, identifier)`, on the
//! server runtime's clock (so a test with paused time sees the same limits, instantly).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// One documented rate: sustained requests per second and the burst.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rate {
    per_second: f64,
    burst: f64,
}

/// The rate of `action` (an operation name): Get Machine has its own, every other action 1/s,
/// bursts of 3.
pub(crate) fn rate_of(action: &str) -> Rate {
    match action {
        "get" => Rate {
            per_second: 5.0,
            burst: 10.0,
        },
        _ => Rate {
            per_second: 1.0,
            burst: 3.0,
        },
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets keyed by action and identifier.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    buckets: Mutex<HashMap<(String, String), Bucket>>,
}

impl Limits {
    /// Takes one request of `action` on `scope` now, or says how long until one is allowed.
    /// `action` is an operation name, with the method after a space where one operation name
    /// covers several endpoints (`lease POST`, `lease DELETE`: Create and Release Lease).
    pub fn take(&self, action: &str, scope: &str) -> Result<(), Duration> {
        let rate = rate_of(action.split(' ').next().unwrap_or(action));
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = buckets
            .entry((action.to_owned(), scope.to_owned()))
            .or_insert(Bucket {
                tokens: rate.burst,
                at: now,
            });
        let gained = now.saturating_duration_since(bucket.at).as_secs_f64() * rate.per_second;
        bucket.tokens = (bucket.tokens + gained).min(rate.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / rate.per_second,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_three_then_one_per_second_per_machine() {
        let limits = Limits::default();
        for _ in 0..3 {
            assert_eq!(limits.take("exec", "m1"), Ok(()));
        }
        let wait = limits.take("exec", "m1").unwrap_err();
        assert_eq!(wait, Duration::from_secs(1));
        // Another machine and another action have their own buckets.
        assert_eq!(limits.take("exec", "m2"), Ok(()));
        assert_eq!(limits.take("start", "m1"), Ok(()));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(limits.take("exec", "m1"), Err(Duration::from_millis(500)));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(limits.take("exec", "m1"), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn get_machine_allows_ten_at_once_and_five_a_second() {
        let limits = Limits::default();
        for _ in 0..10 {
            assert_eq!(limits.take("get", "m1"), Ok(()));
        }
        assert_eq!(limits.take("get", "m1"), Err(Duration::from_millis(200)));
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..5 {
            assert_eq!(limits.take("get", "m1"), Ok(()));
        }
        assert!(limits.take("get", "m1").is_err());
    }
}
