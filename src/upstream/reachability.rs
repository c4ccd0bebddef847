//! Whether Q is down, as one state of this replica rather than the verdict of one call.
//!
//! Every call to Q reports its outcome here. Q is **down** when the last
//! [`DOWN_AFTER_FAILURES`] calls in a row failed for lack of Q (no answer, or 5xx: see
//! [`Cause::is_outage`]) and no answer at all came for [`DOWN_AFTER_SILENCE`]. Any answer
//! (a success, a definite refusal, but also a 429, a 401/403 to the gateway's own credential,
//! an answer off the contract) says Q is up: those are Q refusing or misbehaving, not Q gone,
//! and none of them may open the outage grace. The change feeds' long-polls (several a second
//! per replica) and the readiness probe's health check keep this state current without any
//! request traffic, so one caller's failures (a slow introspection, a flood of tokens) cannot
//! decide it while the rest of Q answers.
//!
//! What depends on it: the outage grace (`auth.outage_read_grace_seconds`, default 0, at most
//! 60 s): while Q is down and was last heard from within the grace, reads may be answered for
//! a caller known from before the outage, content-free (`crate::access`, `crate::auth`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::error::Cause;

/// Consecutive outage failures before Q counts as down.
pub const DOWN_AFTER_FAILURES: u32 = 3;

/// How long without any answer before Q counts as down.
pub const DOWN_AFTER_SILENCE: Duration = Duration::from_secs(1);

/// This replica's view of Q.
#[derive(Debug)]
pub struct Reachability {
    epoch: Instant,
    /// Milliseconds after `epoch` (plus one) of the last answer; 0: none yet.
    last_answer: AtomicU64,
    failures: AtomicU32,
}

impl Default for Reachability {
    fn default() -> Self {
        Reachability {
            epoch: Instant::now(),
            last_answer: AtomicU64::new(0),
            failures: AtomicU32::new(0),
        }
    }
}

impl Reachability {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Q answered (whatever it said).
    pub fn answered(&self) {
        self.last_answer.store(self.now_ms(), Ordering::Release);
        if self.failures.swap(0, Ordering::AcqRel) >= DOWN_AFTER_FAILURES {
            tracing::info!("Q answers again");
            crate::metrics::upstream_down(false);
        }
    }

    /// A call failed: for lack of Q, or with an answer (which says Q is up).
    pub fn failed(&self, cause: Cause) {
        if !cause.is_outage() {
            self.answered();
            return;
        }
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures == DOWN_AFTER_FAILURES {
            crate::metrics::upstream_down(true);
        }
    }

    /// Time since Q last answered anything; `None` if it never did.
    pub fn since_answer(&self) -> Option<Duration> {
        match self.last_answer.load(Ordering::Acquire) {
            0 => None,
            at => Some(Duration::from_millis(self.now_ms().saturating_sub(at))),
        }
    }

    /// Whether Q is down (see the module doc).
    pub fn is_down(&self) -> bool {
        self.failures.load(Ordering::Acquire) >= DOWN_AFTER_FAILURES
            && self
                .since_answer()
                .is_none_or(|silence| silence >= DOWN_AFTER_SILENCE)
    }

    /// Whether Q is down and was last heard from at most `grace` ago: the window in which a
    /// caller known from before the outage may still read content-free receipts.
    pub fn within_outage_grace(&self, grace: Duration) -> bool {
        !grace.is_zero()
            && self.is_down()
            && self.since_answer().is_some_and(|silence| silence <= grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of Q whose clock started a minute ago, so answers can be dated in the past.
    fn reachability() -> Reachability {
        Reachability {
            epoch: Instant::now() - Duration::from_secs(60),
            ..Reachability::default()
        }
    }

    fn silent_for(r: &Reachability, d: Duration) {
        // Pretend the last answer came `d` ago.
        let at = r.now_ms().saturating_sub(d.as_millis() as u64).max(1);
        r.last_answer.store(at, Ordering::Release);
    }

    #[test]
    fn one_failed_call_is_not_an_outage() {
        let r = reachability();
        r.answered();
        silent_for(&r, Duration::from_secs(5));
        r.failed(Cause::Transport);
        r.failed(Cause::ServerError);
        assert!(!r.is_down());
        r.failed(Cause::Transport);
        assert!(r.is_down());
        assert!(r.within_outage_grace(Duration::from_secs(60)));
        assert!(!r.within_outage_grace(Duration::from_secs(2)));
        assert!(!r.within_outage_grace(Duration::ZERO));
        r.answered();
        assert!(!r.is_down());
    }

    #[test]
    fn q_refusing_or_throttling_is_not_down() {
        let r = reachability();
        silent_for(&r, Duration::from_secs(5));
        for cause in [
            Cause::Throttled,
            Cause::CredentialRejected,
            Cause::Unexpected,
        ] {
            for _ in 0..10 {
                r.failed(cause);
            }
            assert!(!r.is_down(), "{cause:?}");
        }
    }

    #[test]
    fn failures_amid_answers_are_not_down() {
        let r = reachability();
        for _ in 0..10 {
            r.failed(Cause::Transport);
        }
        // Another call (a feed poll) answered just now: Q is up, whatever this caller saw.
        r.answered();
        for _ in 0..10 {
            r.failed(Cause::Transport);
        }
        assert!(!r.is_down(), "answered less than a second ago");
    }
}
