//! Observer leases in Redis: every observation (a stream, a subscription, the wait of a
//! blocking SendMessage) holds one, counted against a global, a tenant and a principal bound
//! (defaults 256/16/4).
//!
//! Each scope is a sorted set of lease ids scored by expiry time. One Lua script, using the Redis
//! server clock, purges expired members and adds the lease to all three sets only if all three
//! are under their bounds, so the bounds hold across replicas at every moment. A live observer
//! renews its lease every third of the TTL; a lease whose replica died simply expires and is
//! purged by the next acquisition. Releasing removes it at once. A lease found missing at
//! renewal (its expiry passed, or Redis restarted empty) ends the observation, so an observer is
//! never counted twice and never runs uncounted for long.
//!
//! CancelTask and other non-observing methods never touch leases.
//!
//! Every key starts with the hash tag `{PREFIX:leases}`: on a Redis Cluster the three scopes of
//! a caller (and every caller's) live in one slot, which a script touching several keys needs.
//! A deployment's leases are thus served by one node; with that node down they fail closed.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::sync::watch;
use uuid::Uuid;

use crate::config::{LeaseConfig, RedisConfig};
use crate::redis_link::RedisLink;

/// Atomic acquire. KEYS: global, tenant, principal. ARGV: lease id, ttl ms, then the three bounds.
/// Returns 0 when acquired, else the 1-based index of the first scope at its bound.
const ACQUIRE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = now + tonumber(ARGV[2])
for i = 1, 3 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
end
for i = 1, 3 do
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[2 + i]) then
    return i
  end
end
for i = 1, 3 do
  redis.call('ZADD', KEYS[i], expiry, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2)
end
return 0
"#;

/// Renewal. KEYS: the three scopes. ARGV: lease id, ttl ms. Returns 1 if the lease was still
/// held in every scope (and is now extended), 0 if it was lost.
const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, 3 do
  local score = redis.call('ZSCORE', KEYS[i], ARGV[1])
  if not score or tonumber(score) <= now then
    for j = 1, 3 do redis.call('ZREM', KEYS[j], ARGV[1]) end
    return 0
  end
end
for i = 1, 3 do
  redis.call('ZADD', KEYS[i], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2)
end
return 1
"#;

/// Live members of each scope. KEYS: the three scopes. Returns three counts.
const COUNT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('ZCOUNT', KEYS[i], '(' .. now, '+inf')
end
return out
"#;

/// Which bound refused a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Global,
    Tenant,
    Principal,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Tenant => "tenant",
            Scope::Principal => "principal",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("observer bound reached for scope {}", .0.as_str())]
    AtBound(Scope),
    #[error("lease store unavailable: {0}")]
    Unavailable(String),
}

/// The lease store port (Redis).
#[derive(Clone)]
pub struct ObserverLeases {
    redis: RedisLink,
    prefix: String,
    config: LeaseConfig,
    acquire: Arc<Script>,
    renew: Arc<Script>,
    count: Arc<Script>,
}

impl std::fmt::Debug for ObserverLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserverLeases")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Keys of the three scopes of one caller.
#[derive(Debug, Clone)]
struct ScopeKeys([String; 3]);

/// The global, tenant and principal keys of a caller. The hash tag is the same for all of them
/// (a cluster hashes only what is between the first `{` and the next `}`, and the tag is never
/// empty), and the ids are length-prefixed: no tenant/principal pair can forge another's key.
pub fn lease_keys(prefix: &str, tenant: &str, principal: &str) -> [String; 3] {
    let tag = format!("{{{prefix}:leases}}");
    [
        format!("{tag}:global"),
        format!("{tag}:tenant:{}:{tenant}", tenant.len()),
        format!(
            "{tag}:principal:{}:{tenant}:{}:{principal}",
            tenant.len(),
            principal.len()
        ),
    ]
}

impl ObserverLeases {
    /// Connects lazily: the gateway starts (and serves non-observing methods) with Redis down.
    pub fn new(redis: &RedisConfig, config: LeaseConfig) -> Result<Self, redis::RedisError> {
        let connection = RedisLink::connect(redis)?;
        Ok(ObserverLeases {
            redis: connection,
            prefix: redis.key_prefix.clone(),
            config,
            acquire: Arc::new(Script::new(ACQUIRE)),
            renew: Arc::new(Script::new(RENEW)),
            count: Arc::new(Script::new(COUNT)),
        })
    }

    fn keys(&self, tenant: &str, principal: &str) -> ScopeKeys {
        ScopeKeys(lease_keys(&self.prefix, tenant, principal))
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.config.ttl_ms)
    }

    /// Acquires a lease in all three scopes at once, or none.
    pub async fn acquire(
        &self,
        tenant: &str,
        principal: &str,
    ) -> Result<ObserverLease, LeaseError> {
        let keys = self.keys(tenant, principal);
        let id = Uuid::new_v4().to_string();
        let mut redis = self.redis.clone();
        let outcome: i64 = self
            .acquire
            .key(&keys.0[0])
            .key(&keys.0[1])
            .key(&keys.0[2])
            .arg(&id)
            .arg(self.config.ttl_ms)
            .arg(self.config.global)
            .arg(self.config.per_tenant)
            .arg(self.config.per_principal)
            .invoke_async(&mut redis)
            .await
            .map_err(|e| LeaseError::Unavailable(e.to_string()))?;
        match outcome {
            0 => {
                metrics::gauge!(crate::metrics::LEASES_HELD).increment(1.0);
                Ok(self.start_renewal(id, keys))
            }
            refused => {
                let scope = match refused {
                    1 => Scope::Global,
                    2 => Scope::Tenant,
                    _ => Scope::Principal,
                };
                crate::metrics::lease_refused(scope.as_str());
                Err(LeaseError::AtBound(scope))
            }
        }
    }

    /// The configured bounds (exported as gauges so saturation is a ratio).
    pub fn bounds(&self) -> (u32, u32, u32) {
        (
            self.config.global,
            self.config.per_tenant,
            self.config.per_principal,
        )
    }

    fn start_renewal(&self, id: String, keys: ScopeKeys) -> ObserverLease {
        let (lost_tx, lost_rx) = watch::channel(false);
        let leases = self.clone();
        let (renew_id, renew_keys) = (id.clone(), keys.clone());
        let renewer = tokio::spawn(async move {
            let period = leases.ttl() / 3;
            let mut unreachable_since: Option<tokio::time::Instant> = None;
            loop {
                tokio::time::sleep(period).await;
                let mut redis = leases.redis.clone();
                let renewed: Result<i64, _> = leases
                    .renew
                    .key(&renew_keys.0[0])
                    .key(&renew_keys.0[1])
                    .key(&renew_keys.0[2])
                    .arg(&renew_id)
                    .arg(leases.config.ttl_ms)
                    .invoke_async(&mut redis)
                    .await;
                match renewed {
                    Ok(1) => unreachable_since = None,
                    Ok(_) => {
                        tracing::warn!("observer lease lost; ending the observation");
                        let _ = lost_tx.send(true);
                        return;
                    }
                    Err(e) => {
                        // Redis away: the lease would have expired by now; stop observing.
                        let since =
                            *unreachable_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() + period >= leases.ttl() {
                            tracing::warn!(error = %e, "lease store unreachable past the lease TTL; ending the observation");
                            let _ = lost_tx.send(true);
                            return;
                        }
                    }
                }
            }
        });
        ObserverLease {
            leases: self.clone(),
            id,
            keys,
            lost: lost_rx,
            renewer,
            released: false,
        }
    }

    async fn release_keys(&self, id: &str, keys: &ScopeKeys) {
        let mut redis = self.redis.clone();
        let mut pipe = redis::pipe();
        for key in &keys.0 {
            pipe.zrem(key, id).ignore();
        }
        if let Err(e) = pipe.query_async::<()>(&mut redis).await {
            tracing::warn!(error = %e, "releasing an observer lease failed; it expires on its own");
        }
    }

    /// A round trip to the lease store (readiness, preflight).
    pub async fn ping(&self) -> redis::RedisResult<()> {
        self.redis.ping().await
    }

    /// The link to Redis, for the other users of the same server.
    pub fn link(&self) -> &RedisLink {
        &self.redis
    }

    /// Live leases in the global scope, all replicas together.
    pub async fn global_count(&self) -> Result<i64, LeaseError> {
        let keys = self.keys("", "");
        let mut redis = self.redis.clone();
        let counts: Vec<i64> = self
            .count
            .key(&keys.0[0])
            .invoke_async(&mut redis)
            .await
            .map_err(|e| LeaseError::Unavailable(e.to_string()))?;
        Ok(counts.first().copied().unwrap_or(0))
    }
}

/// A held lease. Dropping it (the client went away, the window ended) releases it in the
/// background; `release` does it in line.
pub struct ObserverLease {
    leases: ObserverLeases,
    id: String,
    keys: ScopeKeys,
    lost: watch::Receiver<bool>,
    renewer: tokio::task::JoinHandle<()>,
    released: bool,
}

impl ObserverLease {
    /// Resolves when the lease is lost (not renewed in time); the observation must end.
    pub async fn lost(&mut self) {
        while !*self.lost.borrow() {
            if self.lost.changed().await.is_err() {
                // Renewer finished without reporting loss: only on release.
                std::future::pending::<()>().await;
            }
        }
    }

    pub async fn release(mut self) {
        self.renewer.abort();
        self.released = true;
        metrics::gauge!(crate::metrics::LEASES_HELD).decrement(1.0);
        self.leases.release_keys(&self.id, &self.keys).await;
    }
}

impl Drop for ObserverLease {
    fn drop(&mut self) {
        self.renewer.abort();
        if !self.released {
            metrics::gauge!(crate::metrics::LEASES_HELD).decrement(1.0);
            let leases = self.leases.clone();
            let id = std::mem::take(&mut self.id);
            let keys = self.keys.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { leases.release_keys(&id, &keys).await });
            }
        }
    }
}

#[cfg(test)]
mod tests;
