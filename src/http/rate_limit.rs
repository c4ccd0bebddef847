//! Per-principal request rate limit (governor token bucket, one per tenant+principal, per
//! replica). Over the limit: HTTP 429 with `Retry-After`, before any work is done. The
//! authorisation stage holds one of these per admission class (`crate::http::authorize`).

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::auth::Principal;
use crate::error::HttpError;

pub struct PrincipalRateLimit {
    limiter: Option<DefaultKeyedRateLimiter<(String, String)>>,
    clock: DefaultClock,
}

impl PrincipalRateLimit {
    /// A bucket of `burst` requests refilled at `per_second`; none at all unless `enabled`.
    pub fn new(enabled: bool, per_second: u32, burst: u32) -> Self {
        let limiter = enabled.then(|| {
            let per_second = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
            let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
            RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst))
        });
        PrincipalRateLimit {
            limiter,
            clock: DefaultClock::default(),
        }
    }

    pub fn check(&self, principal: &Principal) -> Result<(), HttpError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        let key = (principal.tenant_id.clone(), principal.principal_id.clone());
        limiter.check_key(&key).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            HttpError::RateLimited {
                retry_after_seconds: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            }
        })
    }

    /// Forgets principals idle long enough to have a full bucket again (bounded memory).
    pub fn forget_idle(&self) {
        if let Some(limiter) = &self.limiter {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

/// How often idle principals are forgotten.
pub const FORGET_INTERVAL: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(p: &str) -> Principal {
        Principal {
            tenant_id: "t".into(),
            principal_id: p.into(),
            scopes: vec![],
            tenant_features: vec![],
        }
    }

    #[test]
    fn burst_then_limited_per_principal() {
        let limit = PrincipalRateLimit::new(true, 1, 2);
        assert!(limit.check(&principal("a")).is_ok());
        assert!(limit.check(&principal("a")).is_ok());
        match limit.check(&principal("a")) {
            Err(HttpError::RateLimited {
                retry_after_seconds,
            }) => assert!(retry_after_seconds >= 1),
            other => panic!("expected a rate limit, got {other:?}"),
        }
        assert!(
            limit.check(&principal("b")).is_ok(),
            "buckets are per principal"
        );
    }

    #[test]
    fn disabled_never_limits() {
        let limit = PrincipalRateLimit::new(false, 1, 1);
        for _ in 0..10 {
            assert!(limit.check(&principal("a")).is_ok());
        }
    }
}
