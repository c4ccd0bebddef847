//! Per-tenant caps on outbound calls in flight on this replica (delegations, card
//! discoveries). Each one holds a remote connection and, for a delegation, up to the wait
//! window; without a cap one tenant could take every connection and pool slot. A request over
//! the cap is refused before anything is written.
//!
//! The map holds only tenants with a call in flight (an entry is removed when its last permit
//! is dropped), so it is bounded by the requests in flight, not by the tenants ever seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// In-flight counts per tenant, each at most `cap`.
#[derive(Debug)]
pub struct TenantLimiter {
    cap: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// One call in flight; dropping it frees its place.
#[derive(Debug)]
pub struct TenantPermit {
    tenant: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl TenantLimiter {
    pub fn new(cap: usize) -> Self {
        TenantLimiter {
            cap,
            in_flight: Arc::default(),
        }
    }

    /// A place for one more call of `tenant`, or None when it already has `cap` in flight.
    pub fn try_acquire(&self, tenant: &str) -> Option<TenantPermit> {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(tenant.to_string()).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(TenantPermit {
            tenant: tenant.to_string(),
            in_flight: self.in_flight.clone(),
        })
    }

    /// Tenants with a call in flight.
    #[cfg(test)]
    fn tenants(&self) -> usize {
        self.in_flight.lock().unwrap().len()
    }
}

impl Drop for TenantPermit {
    fn drop(&mut self) {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_each_tenant_and_forgets_idle_ones() {
        let limiter = TenantLimiter::new(2);
        let a1 = limiter.try_acquire("a").unwrap();
        let a2 = limiter.try_acquire("a").unwrap();
        assert!(limiter.try_acquire("a").is_none(), "a is at its cap");
        let b = limiter.try_acquire("b").expect("b has its own cap");
        drop(a1);
        let a3 = limiter.try_acquire("a").expect("a freed a place");
        drop((a2, a3, b));
        assert_eq!(
            limiter.tenants(),
            0,
            "no entry is kept without a call in flight"
        );
    }
}
