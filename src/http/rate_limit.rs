//! Per-principal request rate limit for the whole deployment: one token bucket per tenant +
//! principal (and admission class, `crate::http::authorize`) shared by every replica in Redis
//! (`crate::shared_limits`), spent locally in small batches. Over the limit: HTTP 429 with
//! `Retry-After`, before any work is done.
//!
//! How a replica decides, per principal:
//!
//! 1. Tokens it leased from the shared bucket less than [`LEASE_HOLD`] ago: spend one, no
//!    round trip.
//! 2. The shared bucket said "empty, next token in *w*" less than *w* ago: refuse, no round
//!    trip (a principal sending far over its rate costs Redis nothing more).
//! 3. Otherwise one script asks the shared bucket for a batch of [`batch`] tokens (a tenth of a
//!    second's worth, at least 1): spend one, keep the rest. Concurrent requests of one
//!    principal on one replica wait for that one call rather than make their own.
//!
//! What it costs and what it allows: a principal within its rate costs one round trip per
//! batch (at the default 50/s, one per 5 requests); every token admitted came out of the shared
//! bucket, so over any period the deployment admits at most `burst + rate × period`; a token
//! leased by one replica but spent a little later lets at most one batch per replica through
//! ahead of the bucket, and unspent tokens are dropped after [`LEASE_HOLD`] (a principal that
//! moved to another replica loses at most a batch there). docs/architecture.md has the
//! measured figures.
//!
//! Redis unreachable: each replica applies the same rate and burst alone (a governor bucket
//! per principal, the per-replica limit; `crate::shared_limits` logs and exports the
//! degradation), never no limit; and the shared bucket again once Redis answers.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::time::Instant;

use crate::auth::Principal;
use crate::error::HttpError;
use crate::shared_limits::{Grant, SharedLimits};

/// How long leased tokens stay spendable.
pub const LEASE_HOLD: Duration = Duration::from_secs(1);

/// Tokens leased at once: a tenth of a second at `per_second`, at least 1, at most `burst`.
pub fn batch(per_second: u32, burst: u32) -> u32 {
    (per_second / 10).clamp(1, burst.max(1))
}

/// One bucket class: its rate, the shared buckets and the per-replica fallback.
pub struct PrincipalRateLimit {
    class: &'static str,
    per_second: u32,
    burst: u32,
    /// The per-replica buckets: the limit while the shared one cannot be reached (or is not
    /// configured). None: no limit at all.
    local: Option<DefaultKeyedRateLimiter<(String, String)>>,
    clock: DefaultClock,
    shared: Option<SharedBuckets>,
}

/// A principal: tenant and principal id.
type Key = (String, String);

struct SharedBuckets {
    limits: SharedLimits,
    batch: u32,
    leased: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Leased>>>>,
}

/// What this replica holds of one principal's shared bucket.
#[derive(Debug, Default)]
struct Leased {
    tokens: u32,
    spendable_until: Option<Instant>,
    refused_until: Option<Instant>,
}

impl Leased {
    fn idle(&self, now: Instant) -> bool {
        self.spendable_until.is_none_or(|t| t <= now) && self.refused_until.is_none_or(|t| t <= now)
    }
}

enum Decision {
    Admit,
    Refuse(Duration),
}

fn retry_after(wait: Duration) -> HttpError {
    HttpError::RateLimited {
        retry_after_seconds: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
    }
}

impl PrincipalRateLimit {
    /// A bucket of `burst` requests refilled at `per_second` per principal; none at all unless
    /// `enabled`. With `shared`, one bucket for every replica; without, one per replica.
    pub fn new(
        class: &'static str,
        enabled: bool,
        per_second: u32,
        burst: u32,
        shared: Option<SharedLimits>,
    ) -> Self {
        let local = enabled.then(|| {
            let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
            let size = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(size))
        });
        let shared = shared.filter(|_| enabled).map(|limits| SharedBuckets {
            limits,
            batch: batch(per_second, burst),
            leased: Mutex::default(),
        });
        PrincipalRateLimit {
            class,
            per_second: per_second.max(1),
            burst: burst.max(1),
            local,
            clock: DefaultClock::default(),
            shared,
        }
    }

    pub async fn check(&self, principal: &Principal) -> Result<(), HttpError> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        let key = (principal.tenant_id.clone(), principal.principal_id.clone());
        if let Some(shared) = &self.shared {
            if let Some(decision) = self.shared_decision(shared, &key).await {
                return match decision {
                    Decision::Admit => Ok(()),
                    Decision::Refuse(wait) => Err(retry_after(wait)),
                };
            }
        }
        local
            .check_key(&key)
            .map_err(|not_until| retry_after(not_until.wait_time_from(self.clock.now())))
    }

    /// The shared bucket's decision, or None when Redis cannot decide (degraded).
    async fn shared_decision(
        &self,
        shared: &SharedBuckets,
        key: &(String, String),
    ) -> Option<Decision> {
        let entry = {
            let mut leased = shared.leased.lock().unwrap_or_else(|e| e.into_inner());
            leased.entry(key.clone()).or_default().clone()
        };
        // One call to Redis at a time per principal on this replica: the others wait for it.
        let mut leased = entry.lock().await;
        let now = Instant::now();
        if leased.tokens > 0 && leased.spendable_until.is_some_and(|t| now < t) {
            leased.tokens -= 1;
            return Some(Decision::Admit);
        }
        if let Some(until) = leased.refused_until.filter(|t| now < *t) {
            return Some(Decision::Refuse(until - now));
        }
        let grant = shared
            .limits
            .take_tokens(
                self.class,
                &key.0,
                &key.1,
                self.per_second,
                self.burst,
                shared.batch,
            )
            .await
            .ok()?;
        let now = Instant::now();
        match grant {
            Grant::Tokens(n) => {
                leased.tokens = n - 1;
                leased.spendable_until = Some(now + LEASE_HOLD);
                leased.refused_until = None;
                Some(Decision::Admit)
            }
            Grant::Empty { wait } => {
                leased.tokens = 0;
                leased.refused_until = Some(now + wait);
                Some(Decision::Refuse(wait))
            }
        }
    }

    /// Forgets principals idle long enough to have a full bucket again, and leases that
    /// lapsed (bounded memory).
    pub fn forget_idle(&self) {
        if let Some(local) = &self.local {
            local.retain_recent();
            local.shrink_to_fit();
        }
        if let Some(shared) = &self.shared {
            let now = Instant::now();
            let mut leased = shared.leased.lock().unwrap_or_else(|e| e.into_inner());
            leased.retain(|_, entry| entry.try_lock().map_or(true, |l| !l.idle(now)));
            leased.shrink_to_fit();
        }
    }
}

/// How often idle principals are forgotten.
pub const FORGET_INTERVAL: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Claims;

    fn principal(p: &str) -> Principal {
        Claims {
            tenant_id: "t".into(),
            principal_id: p.into(),
            scopes: vec![],
            tenant_features: vec![],
        }
        .into()
    }

    #[tokio::test]
    async fn burst_then_limited_per_principal() {
        let limit = PrincipalRateLimit::new("general", true, 1, 2, None);
        assert!(limit.check(&principal("a")).await.is_ok());
        assert!(limit.check(&principal("a")).await.is_ok());
        match limit.check(&principal("a")).await {
            Err(HttpError::RateLimited {
                retry_after_seconds,
            }) => assert!(retry_after_seconds >= 1),
            other => panic!("expected a rate limit, got {other:?}"),
        }
        assert!(
            limit.check(&principal("b")).await.is_ok(),
            "buckets are per principal"
        );
    }

    #[tokio::test]
    async fn disabled_never_limits() {
        let limit = PrincipalRateLimit::new("general", false, 1, 1, None);
        for _ in 0..10 {
            assert!(limit.check(&principal("a")).await.is_ok());
        }
    }

    #[test]
    fn a_batch_is_a_tenth_of_a_second_within_the_burst() {
        assert_eq!(batch(50, 100), 5);
        assert_eq!(batch(5, 10), 1);
        assert_eq!(batch(1000, 20), 20);
        assert_eq!(batch(0, 0), 1);
    }
}
