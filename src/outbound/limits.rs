//! Per-tenant caps on outbound calls in flight (delegations, card discoveries), for the
//! deployment, and each principal's share of them. Each call holds a remote connection and,
//! for a delegation, up to the wait window; without a cap one tenant could take every
//! connection and pool slot, and without a share one principal of a tenant (an admin
//! discovering, a caller delegating in a loop) could take all of its tenant's places and leave
//! its other principals refused. A request over either is refused before anything is written.
//!
//! Two counts, both taken before the call: this replica's (always, so a replica never holds
//! more than the cap or the share itself), then a slot among the deployment's in Redis
//! (`crate::shared_limits`), so both hold across replicas. The share is checked in the same
//! Redis call as the cap (the tenant's slots name their principal): no extra round trip. While
//! Redis is unreachable the per-replica counts alone hold (degraded, logged and exported once
//! by `shared_limits`).
//!
//! The maps hold only tenants and principals with a call in flight (an entry is removed when
//! its last permit is dropped), so they are bounded by the requests in flight, not by the
//! tenants or principals ever seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::shared_limits::{SharedLimits, SharedSlot, SlotRefusal};

/// Which limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// The tenant has `cap` calls in flight.
    Tenant,
    /// The principal has its share of them in flight.
    Principal,
}

impl Busy {
    /// The metric label and the refusal's scope.
    pub fn scope(self) -> &'static str {
        match self {
            Busy::Tenant => "tenant",
            Busy::Principal => "principal",
        }
    }
}

/// Calls in flight on this replica, per tenant and per (tenant, principal).
#[derive(Debug, Default)]
struct Counts {
    tenants: HashMap<String, usize>,
    principals: HashMap<(String, String), usize>,
}

/// In-flight counts per tenant, each at most `cap`, and per principal, each at most `share`.
#[derive(Debug)]
pub struct TenantLimiter {
    /// Which calls (`delegations`, `discoveries`): the shared slots' key.
    kind: &'static str,
    cap: usize,
    share: usize,
    in_flight: Arc<Mutex<Counts>>,
    shared: Option<SharedLimits>,
}

/// One call in flight; dropping it frees its place (and its shared slot).
#[derive(Debug)]
pub struct TenantPermit {
    tenant: String,
    principal: String,
    in_flight: Arc<Mutex<Counts>>,
    _shared: Option<SharedSlot>,
}

impl TenantLimiter {
    /// `cap` calls of `kind` per tenant, at most `share` of them per principal: on this
    /// replica, and with `shared`, across replicas.
    pub fn new(kind: &'static str, cap: usize, share: usize, shared: Option<SharedLimits>) -> Self {
        TenantLimiter {
            kind,
            cap,
            share: share.min(cap),
            in_flight: Arc::default(),
            shared,
        }
    }

    /// Which calls these are (`delegations`, `discoveries`).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// A place for one more call of `principal` of `tenant`, or which limit refused it: the
    /// principal already has its share in flight, or the tenant its cap, on this replica or
    /// across the deployment.
    pub async fn acquire(&self, tenant: &str, principal: &str) -> Result<TenantPermit, Busy> {
        let mut permit = self.try_acquire(tenant, principal)?;
        if let Some(shared) = &self.shared {
            match shared
                .acquire_slot(self.kind, tenant, principal, self.cap, self.share)
                .await
            {
                Ok(Ok(slot)) => permit._shared = Some(slot),
                Ok(Err(SlotRefusal::Full)) => return Err(Busy::Tenant),
                Ok(Err(SlotRefusal::Share)) => return Err(Busy::Principal),
                // Redis cannot say: this replica's counts alone hold.
                Err(_degraded) => {}
            }
        }
        Ok(permit)
    }

    /// A place on this replica for one more call of `principal` of `tenant`, or which limit
    /// refused it here. The tenant's cap is checked first, so a call refused before the shares
    /// existed is refused the same way; the share refuses only calls the cap would have let in.
    fn try_acquire(&self, tenant: &str, principal: &str) -> Result<TenantPermit, Busy> {
        let mut counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let owner = (tenant.to_string(), principal.to_string());
        if counts.tenants.get(tenant).copied().unwrap_or(0) >= self.cap {
            return Err(Busy::Tenant);
        }
        if counts.principals.get(&owner).copied().unwrap_or(0) >= self.share {
            return Err(Busy::Principal);
        }
        *counts.tenants.entry(owner.0.clone()).or_insert(0) += 1;
        *counts.principals.entry(owner).or_insert(0) += 1;
        Ok(TenantPermit {
            tenant: tenant.to_string(),
            principal: principal.to_string(),
            in_flight: self.in_flight.clone(),
            _shared: None,
        })
    }

    /// Tenants and principals with a call in flight.
    #[cfg(test)]
    fn entries(&self) -> (usize, usize) {
        let counts = self.in_flight.lock().unwrap();
        (counts.tenants.len(), counts.principals.len())
    }
}

/// Takes one off `key`'s count, removing the entry at zero.
fn release<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Drop for TenantPermit {
    fn drop(&mut self) {
        let mut counts = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        release(&mut counts.tenants, &self.tenant);
        let owner = (
            std::mem::take(&mut self.tenant),
            std::mem::take(&mut self.principal),
        );
        release(&mut counts.principals, &owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_each_tenant_and_forgets_idle_ones() {
        let limiter = TenantLimiter::new("delegations", 2, 2, None);
        let a1 = limiter.try_acquire("a", "p").unwrap();
        let a2 = limiter.try_acquire("a", "q").unwrap();
        assert_eq!(
            limiter.try_acquire("a", "r").unwrap_err(),
            Busy::Tenant,
            "a is at its cap"
        );
        let b = limiter.try_acquire("b", "p").expect("b has its own cap");
        drop(a1);
        let a3 = limiter.try_acquire("a", "r").expect("a freed a place");
        drop((a2, a3, b));
        assert_eq!(
            limiter.entries(),
            (0, 0),
            "no entry is kept without a call in flight"
        );
    }

    #[test]
    fn one_principal_holds_at_most_its_share_of_its_tenant() {
        let limiter = TenantLimiter::new("delegations", 3, 2, None);
        let p1 = limiter.try_acquire("a", "p").unwrap();
        let p2 = limiter.try_acquire("a", "p").unwrap();
        assert_eq!(
            limiter.try_acquire("a", "p").unwrap_err(),
            Busy::Principal,
            "p holds its share"
        );
        let q1 = limiter.try_acquire("a", "q").expect("q has the rest");
        assert_eq!(limiter.try_acquire("a", "q").unwrap_err(), Busy::Tenant);
        assert_eq!(
            limiter.try_acquire("a", "p").unwrap_err(),
            Busy::Tenant,
            "a full tenant is reported as such, whoever asks"
        );
        let other = limiter
            .try_acquire("b", "p")
            .expect("the same principal id in another tenant is another principal");
        drop(p1);
        let p3 = limiter.try_acquire("a", "p").expect("p freed a place");
        drop((p2, p3, q1, other));
        assert_eq!(limiter.entries(), (0, 0));
    }
}
