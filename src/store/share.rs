//! Each tenant's and each principal's share of the pool's connections for reads
//! ([`ReadShares`]).
//!
//! A read a caller asks for (ListTasks, a GetTask or SubscribeToTask that goes to the store)
//! takes a permit of its principal, then one of its tenant, before its store call takes a
//! connection, and holds both until the call is done: at most `database.principal_share` and
//! `database.tenant_share` of `database.pool_size` connections (rounded down) are held for one
//! principal's or one tenant's reads at once on this replica, so one caller's flood leaves the
//! rest of the pool to everyone else, their writes (SendMessage's admission) included.
//!
//! A read over its share waits for a permit within `database.acquire_timeout_ms`, as it would
//! for a pooled connection, and is then refused as [`StoreError::ShareExhausted`]: the
//! retryable answer of a store with no connection free, counted as
//! `a2a_store_share_refusals_total{scope}`. The principal's permit is taken first, so a
//! principal waiting for its own share holds none of its tenant's. A scope's entry lives only
//! while a permit of it is held or awaited.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{Owner, StoreError};

/// The scopes a read is counted in, as `a2a_store_share_refusals_total` labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Tenant,
    Principal,
}

impl Scope {
    pub fn label(self) -> &'static str {
        match self {
            Scope::Tenant => "tenant",
            Scope::Principal => "principal",
        }
    }
}

/// The permits of one scope: one semaphore per key with a permit held or awaited.
struct Counters {
    scope: Scope,
    cap: usize,
    held: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Counters {
    fn new(scope: Scope, cap: usize) -> Arc<Self> {
        Arc::new(Counters {
            scope,
            cap: cap.max(1),
            held: Mutex::new(HashMap::new()),
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Semaphore>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A permit of `key` by `deadline`, or the refusal.
    async fn take(
        self: &Arc<Self>,
        key: String,
        deadline: Instant,
        window: Duration,
    ) -> Result<Held, StoreError> {
        let semaphore = self
            .map()
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.cap)))
            .clone();
        // From here the entry is removed when the last holder or waiter lets go of it, even if
        // the request is dropped while it waits.
        let mut held = Held {
            counters: self.clone(),
            key,
            semaphore: Some(semaphore.clone()),
            permit: None,
        };
        let permit = match semaphore.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => match tokio::time::timeout_at(deadline, semaphore.acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                // The semaphore is never closed; either way the read does not run.
                Ok(Err(_)) | Err(_) => {
                    crate::metrics::store_share_refused(self.scope.label());
                    return Err(StoreError::ShareExhausted(self.scope, window));
                }
            },
        };
        held.permit = Some(permit);
        Ok(held)
    }
}

/// A permit of one key (or a wait for one); dropping it gives it back and removes the key's
/// entry once nobody holds or awaits it.
struct Held {
    counters: Arc<Counters>,
    key: String,
    semaphore: Option<Arc<Semaphore>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.permit.take());
        drop(self.semaphore.take());
        let mut map = self.counters.map();
        // Only the map's own reference left: no permit of this key is held or awaited (every
        // other one is taken under this lock).
        if map
            .get(&self.key)
            .is_some_and(|semaphore| Arc::strong_count(semaphore) == 1)
        {
            map.remove(&self.key);
        }
    }
}

/// What a read holds while its store call runs: a permit of its principal and of its tenant.
pub struct ReadPermit {
    _principal: Held,
    _tenant: Held,
}

/// The per-tenant and per-principal in-flight counters of reads on this replica.
#[derive(Clone)]
pub struct ReadShares {
    tenants: Arc<Counters>,
    principals: Arc<Counters>,
    window: Duration,
}

impl ReadShares {
    /// Shares of `tenant_permits` and `principal_permits` connections; a read waits for its
    /// permits at most `window` (the pool's acquire timeout).
    pub fn new(tenant_permits: usize, principal_permits: usize, window: Duration) -> Self {
        ReadShares {
            tenants: Counters::new(Scope::Tenant, tenant_permits),
            principals: Counters::new(Scope::Principal, principal_permits),
            window,
        }
    }

    /// The permits of `owner`'s principal and tenant, within the acquire window.
    pub async fn take(&self, owner: &Owner) -> Result<ReadPermit, StoreError> {
        let deadline = Instant::now() + self.window;
        let principal = self
            .principals
            .take(
                format!("{}\u{1f}{}", owner.tenant_id, owner.principal_id),
                deadline,
                self.window,
            )
            .await?;
        let tenant = self
            .tenants
            .take(owner.tenant_id.clone(), deadline, self.window)
            .await?;
        Ok(ReadPermit {
            _principal: principal,
            _tenant: tenant,
        })
    }

    /// Keys with a permit held or awaited, tenants and principals.
    #[cfg(test)]
    fn entries(&self) -> (usize, usize) {
        (self.tenants.map().len(), self.principals.map().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(tenant: &str, principal: &str) -> Owner {
        Owner {
            tenant_id: tenant.into(),
            principal_id: principal.into(),
            agent_id: "ag".into(),
        }
    }

    /// A principal holds at most its share, a tenant at most its own; another principal or
    /// tenant is not held back; a permit given back is taken again; entries go at zero.
    #[tokio::test]
    async fn reads_are_held_to_their_principal_and_tenant_shares() {
        let shares = ReadShares::new(3, 2, Duration::from_millis(30));
        let a1 = shares.take(&owner("t", "a")).await.unwrap();
        let a2 = shares.take(&owner("t", "a")).await.unwrap();
        assert!(matches!(
            shares.take(&owner("t", "a")).await,
            Err(StoreError::ShareExhausted(Scope::Principal, _))
        ));
        let b1 = shares.take(&owner("t", "b")).await.unwrap();
        assert!(matches!(
            shares.take(&owner("t", "b")).await,
            Err(StoreError::ShareExhausted(Scope::Tenant, _))
        ));
        let c = shares.take(&owner("u", "a")).await.expect("another tenant");
        assert_eq!(shares.entries(), (2, 3));
        drop(a1);
        let b2 = shares
            .take(&owner("t", "b"))
            .await
            .expect("a's permit freed");
        drop((a2, b1, b2, c));
        assert_eq!(shares.entries(), (0, 0), "no entry without a permit");
    }

    /// A read over its share waits within the window and gets the permit given back meanwhile;
    /// a wait dropped before it ends leaves no entry.
    #[tokio::test]
    async fn a_read_waits_for_its_share_within_the_window() {
        let shares = ReadShares::new(1, 1, Duration::from_secs(5));
        let first = shares.take(&owner("t", "a")).await.unwrap();
        let waiting = {
            let shares = shares.clone();
            tokio::spawn(async move { shares.take(&owner("t", "a")).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(waiting.await.unwrap());
        let held = shares.take(&owner("t", "a")).await.unwrap();
        let abandoned =
            tokio::time::timeout(Duration::from_millis(20), shares.take(&owner("t", "a"))).await;
        assert!(abandoned.is_err(), "still waiting when dropped");
        drop(held);
        assert_eq!(shares.entries(), (0, 0));
    }
}
