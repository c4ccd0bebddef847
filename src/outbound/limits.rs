//! Per-tenant caps on outbound calls in flight (delegations, card discoveries), for the
//! deployment. Each one holds a remote connection and, for a delegation, up to the wait
//! window; without a cap one tenant could take every connection and pool slot. A request over
//! the cap is refused before anything is written.
//!
//! Two counts, both taken before the call: this replica's (always, so a replica never holds
//! more than the cap itself), then a slot among the deployment's in Redis
//! (`crate::shared_limits`), so the cap holds across replicas. While Redis is unreachable the
//! per-replica count alone holds (degraded, logged and exported once by `shared_limits`).
//!
//! The map holds only tenants with a call in flight (an entry is removed when its last permit
//! is dropped), so it is bounded by the requests in flight, not by the tenants ever seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::shared_limits::{SharedLimits, SharedSlot};

/// In-flight counts per tenant, each at most `cap`.
#[derive(Debug)]
pub struct TenantLimiter {
    /// Which calls (`delegations`, `discoveries`): the shared slots' key.
    kind: &'static str,
    cap: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    shared: Option<SharedLimits>,
}

/// One call in flight; dropping it frees its place (and its shared slot).
#[derive(Debug)]
pub struct TenantPermit {
    tenant: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    _shared: Option<SharedSlot>,
}

impl TenantLimiter {
    /// `cap` calls of `kind` per tenant: on this replica, and with `shared`, across replicas.
    pub fn new(kind: &'static str, cap: usize, shared: Option<SharedLimits>) -> Self {
        TenantLimiter {
            kind,
            cap,
            in_flight: Arc::default(),
            shared,
        }
    }

    /// A place for one more call of `tenant`, or None when it already has `cap` in flight on
    /// this replica or across the deployment.
    pub async fn acquire(&self, tenant: &str) -> Option<TenantPermit> {
        let mut permit = self.try_acquire(tenant)?;
        if let Some(shared) = &self.shared {
            match shared.acquire_slot(self.kind, tenant, self.cap).await {
                Ok(Some(slot)) => permit._shared = Some(slot),
                Ok(None) => return None,
                // Redis cannot say: this replica's count alone holds.
                Err(_degraded) => {}
            }
        }
        Some(permit)
    }

    /// A place on this replica for one more call of `tenant`, or None when it already has
    /// `cap` in flight here.
    fn try_acquire(&self, tenant: &str) -> Option<TenantPermit> {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(tenant.to_string()).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(TenantPermit {
            tenant: tenant.to_string(),
            in_flight: self.in_flight.clone(),
            _shared: None,
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
        let limiter = TenantLimiter::new("delegations", 2, None);
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
