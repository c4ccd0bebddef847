//! Whether a shared dependency (PostgreSQL, Redis) accepts writes: what `/readyz` and the
//! `a2a_store_writable` / `a2a_redis_writable` gauges read.
//!
//! A server that answers is not enough: a standby, a demoted primary or a server put in
//! read-only mode answers every read and refuses every write. Each dependency's port reports
//! here what it saw: [`Writable::confirmed`] when a write, or a check that the server takes
//! writes, succeeded; [`Writable::refused`] when the server refused a write or could not be
//! reached. Readiness then asks [`Writable::within`]: writable now, or confirmed writable
//! no longer than the bound ago, so a failover of a few seconds does not take every replica out
//! of its Service at once, and a dependency with no writable server for longer does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// What one dependency last showed about its writes.
#[derive(Debug)]
pub struct Writable {
    /// The gauge this state is exported as (1 writable, 0 not).
    gauge: &'static str,
    start: Instant,
    /// Milliseconds after `start` of the last confirmation, plus one (0: never confirmed).
    confirmed_at: AtomicU64,
    now: AtomicBool,
}

impl Writable {
    /// Not yet confirmed: a process starts not ready until its first check passes.
    pub fn new(gauge: &'static str) -> Self {
        metrics::gauge!(gauge).set(0.0);
        Writable {
            gauge,
            start: Instant::now(),
            confirmed_at: AtomicU64::new(0),
            now: AtomicBool::new(false),
        }
    }

    /// A write, or a check that the server takes writes, succeeded just now.
    pub fn confirmed(&self) {
        let at = self.start.elapsed().as_millis() as u64 + 1;
        self.confirmed_at.fetch_max(at, Ordering::Relaxed);
        if !self.now.swap(true, Ordering::Relaxed) {
            metrics::gauge!(self.gauge).set(1.0);
        }
    }

    /// The server refused a write (read-only, shutting down) or none could be reached.
    pub fn refused(&self) {
        if self.now.swap(false, Ordering::Relaxed) {
            metrics::gauge!(self.gauge).set(0.0);
        }
    }

    /// Whether the last thing seen was a write accepted.
    pub fn now(&self) -> bool {
        self.now.load(Ordering::Relaxed)
    }

    /// Writable now, or confirmed writable at most `bound` ago.
    pub fn within(&self, bound: Duration) -> bool {
        self.now() || self.since_confirmed().is_some_and(|ago| ago <= bound)
    }

    /// How long ago a write was last confirmed; `None` if never.
    pub fn since_confirmed(&self) -> Option<Duration> {
        match self.confirmed_at.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.start
                    .elapsed()
                    .saturating_sub(Duration::from_millis(at - 1)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writable_within_the_bound_of_its_last_confirmation_only() {
        let w = Writable::new("test_writable");
        assert!(!w.within(Duration::from_secs(60)), "never confirmed");
        w.confirmed();
        assert!(w.now() && w.within(Duration::ZERO));
        w.refused();
        assert!(!w.now());
        tokio::time::advance(Duration::from_millis(2_000)).await;
        assert!(w.within(Duration::from_millis(2_000)));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!w.within(Duration::from_millis(2_000)));
        w.confirmed();
        assert!(w.within(Duration::ZERO));
    }
}
