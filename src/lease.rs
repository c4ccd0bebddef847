//! Observer leases in Redis: every observation (a stream, a subscription, the wait of a
//! blocking SendMessage) holds one, counted against a global, a tenant and a principal bound
//! (defaults 256/16/4).
//!
//! Each scope is a sorted set of lease ids scored by expiry time. One Lua script, using the Redis
//! server clock, purges expired members and adds the lease to all three sets only if all three
//! are under their bounds, so the bounds hold across replicas at every moment. A replica renews
//! every lease it holds every third of the TTL, in one script call per round (per 128 leases),
//! from one task: an open stream costs no task and no Redis call of its own while it is held. A
//! lease whose replica died simply expires and is purged by the next acquisition. Releasing
//! removes it at once. A lease found missing at renewal (its expiry passed, or Redis restarted
//! empty) ends the observation, and so does Redis staying unreachable until the next round would
//! come after the lease's expiry: an observer is never counted twice and never runs uncounted
//! for long.
//!
//! CancelTask and other non-observing methods never touch leases.
//!
//! Every key starts with the hash tag `{PREFIX:leases}`: on a Redis Cluster the three scopes of
//! a caller (and every caller's) live in one slot, which a script touching several keys needs.
//! A deployment's leases are thus served by one node; with that node down they fail closed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use redis::Script;
use tokio::sync::Notify;
use tokio::time::Instant;
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

/// Renewal of a batch of leases, one call per replica and round. KEYS: the distinct scope keys
/// of the batch. ARGV: ttl ms, the number of leases n, their n ids, then per lease the 1-based
/// indexes of its global, tenant and principal keys. Returns per lease 1 if it was still held in
/// every scope (and is now extended), 0 if it was lost (and is now removed from every scope).
/// Each key is read once (`ZMSCORE`, Redis 6.2) and written once, whatever the number of leases
/// in it.
const RENEW_MANY: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local held = {}
local members = {}
for l = 1, n do
  held[l] = 1
  for i = 1, 3 do
    local k = tonumber(ARGV[2 + n + (l - 1) * 3 + i])
    if not members[k] then members[k] = {} end
    table.insert(members[k], l)
  end
end
for k, leases in pairs(members) do
  local ids = {}
  for j, l in ipairs(leases) do ids[j] = ARGV[2 + l] end
  local scores = redis.call('ZMSCORE', KEYS[k], unpack(ids))
  for j, l in ipairs(leases) do
    local score = scores[j]
    if not score or tonumber(score) <= now then held[l] = 0 end
  end
end
for k, leases in pairs(members) do
  local renew, drop = {}, {}
  for _, l in ipairs(leases) do
    if held[l] == 1 then
      table.insert(renew, now + ttl)
      table.insert(renew, ARGV[2 + l])
    else
      table.insert(drop, ARGV[2 + l])
    end
  end
  if #renew > 0 then
    redis.call('ZADD', KEYS[k], 'XX', unpack(renew))
    redis.call('PEXPIRE', KEYS[k], ttl * 2)
  end
  if #drop > 0 then redis.call('ZREM', KEYS[k], unpack(drop)) end
end
return held
"#;

/// Leases renewed by one call: it runs about 2 ms in Redis, during which Redis answers no one
/// else (`bench/lease_renewal.py`); Lua's `unpack` would take a few thousand at most.
const RENEW_BATCH: usize = 128;

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

/// The lease store port (Redis). Clones share the registry of the leases this replica holds
/// and the one task that renews them all.
#[derive(Clone)]
pub struct ObserverLeases {
    inner: Arc<Inner>,
}

struct Inner {
    redis: RedisLink,
    prefix: String,
    config: LeaseConfig,
    acquire: Script,
    renew: Script,
    count: Script,
    held: Mutex<Held>,
    renewer: OnceLock<()>,
}

/// The leases this replica holds, by slot, each with when Redis last confirmed it.
#[derive(Default)]
struct Held {
    next_slot: u64,
    leases: HashMap<u64, Holding>,
}

struct Holding {
    lease: Arc<LeaseState>,
    /// When the acquisition or the last renewal that found the lease held was sent: Redis
    /// counts it until at least this instant plus the TTL.
    confirmed: Instant,
}

/// One lease, shared by its holder and the registry the renewer reads.
struct LeaseState {
    id: Uuid,
    keys: [String; 3],
    lost: AtomicBool,
    notify: Notify,
}

impl LeaseState {
    fn lose(&self) {
        self.lost.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

impl std::fmt::Debug for ObserverLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserverLeases")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

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
            inner: Arc::new(Inner {
                redis: connection,
                prefix: redis.key_prefix.clone(),
                config,
                acquire: Script::new(ACQUIRE),
                renew: Script::new(RENEW_MANY),
                count: Script::new(COUNT),
                held: Mutex::new(Held::default()),
                renewer: OnceLock::new(),
            }),
        })
    }

    /// Acquires a lease in all three scopes at once, or none.
    pub async fn acquire(
        &self,
        tenant: &str,
        principal: &str,
    ) -> Result<ObserverLease, LeaseError> {
        let inner = &self.inner;
        let keys = lease_keys(&inner.prefix, tenant, principal);
        let id = Uuid::new_v4();
        let mut redis = inner.redis.clone();
        let sent = Instant::now();
        let outcome: i64 = inner
            .acquire
            .key(&keys[0])
            .key(&keys[1])
            .key(&keys[2])
            .arg(id.hyphenated().encode_lower(&mut Uuid::encode_buffer()) as &str)
            .arg(inner.config.ttl_ms)
            .arg(inner.config.global)
            .arg(inner.config.per_tenant)
            .arg(inner.config.per_principal)
            .invoke_async(&mut redis)
            .await
            .map_err(|e| LeaseError::Unavailable(e.to_string()))?;
        inner.redis.wrote();
        match outcome {
            0 => {
                metrics::gauge!(crate::metrics::LEASES_HELD).increment(1.0);
                Ok(self.hold(id, keys, sent))
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
        let config = &self.inner.config;
        (config.global, config.per_tenant, config.per_principal)
    }

    /// Registers an acquired lease with the replica's renewer, starting it on first use.
    fn hold(&self, id: Uuid, keys: [String; 3], confirmed: Instant) -> ObserverLease {
        let state = Arc::new(LeaseState {
            id,
            keys,
            lost: AtomicBool::new(false),
            notify: Notify::new(),
        });
        let slot = {
            let mut held = self.inner.lock();
            let slot = held.next_slot;
            held.next_slot += 1;
            held.leases.insert(
                slot,
                Holding {
                    lease: state.clone(),
                    confirmed,
                },
            );
            slot
        };
        self.inner.renewer.get_or_init(|| {
            tokio::spawn(renew_while_held(Arc::downgrade(&self.inner)));
        });
        ObserverLease {
            leases: self.clone(),
            slot,
            state,
            released: false,
        }
    }

    /// Gives a lease its holder let go of back to Redis.
    async fn give_back(&self, state: &LeaseState) {
        let mut redis = self.inner.redis.clone();
        let mut pipe = redis::pipe();
        let id = state.id.hyphenated().to_string();
        for key in &state.keys {
            pipe.zrem(key, &id).ignore();
        }
        if let Err(e) = pipe.query_async::<()>(&mut redis).await {
            tracing::warn!(error = %e, "releasing an observer lease failed; it expires on its own");
        }
    }

    /// Whether the lease store takes a write now (readiness, preflight).
    pub async fn check_writable(&self) -> redis::RedisResult<()> {
        self.inner.redis.check_writable().await
    }

    /// Whether the lease store takes writes, as the calls on its link last showed.
    pub fn writable(&self) -> &std::sync::Arc<crate::writable::Writable> {
        self.inner.redis.writable()
    }

    /// The link to Redis, for the other users of the same server.
    pub fn link(&self) -> &RedisLink {
        &self.inner.redis
    }

    /// Live leases in the global scope, all replicas together.
    pub async fn global_count(&self) -> Result<i64, LeaseError> {
        let keys = lease_keys(&self.inner.prefix, "", "");
        let mut redis = self.inner.redis.clone();
        let counts: Vec<i64> = self
            .inner
            .count
            .key(&keys[0])
            .invoke_async(&mut redis)
            .await
            .map_err(|e| LeaseError::Unavailable(e.to_string()))?;
        Ok(counts.first().copied().unwrap_or(0))
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.config.ttl_ms)
    }

    /// One round: every lease held now, in calls of at most [`RENEW_BATCH`]. A lease Redis no
    /// longer holds is lost at once; with Redis unreachable, a lease is lost once the next round
    /// would come after its expiry in Redis.
    async fn renew_round(&self, period: Duration) {
        let batch: Vec<(u64, Arc<LeaseState>)> = self
            .lock()
            .leases
            .iter()
            .map(|(slot, holding)| (*slot, holding.lease.clone()))
            .collect();
        let (mut missing, mut expired) = (0usize, 0usize);
        let mut failure: Option<String> = None;
        for chunk in batch.chunks(RENEW_BATCH) {
            let sent = Instant::now();
            // After a failed call the round asks Redis nothing more: with Redis hanging, each
            // call would wait out its timeout, and the round would end past the leases' expiry.
            let answer = match &failure {
                Some(e) => Err(e.clone()),
                None => {
                    let answer = self.renew_chunk(chunk).await;
                    crate::metrics::lease_renewal_call(answer.is_ok());
                    answer
                }
            };
            let mut held = self.lock();
            match answer {
                Ok(flags) => {
                    for ((slot, _), flag) in chunk.iter().zip(flags) {
                        if flag == 1 {
                            if let Some(holding) = held.leases.get_mut(slot) {
                                holding.confirmed = sent;
                            }
                        } else if let Some(holding) = held.leases.remove(slot) {
                            holding.lease.lose();
                            missing += 1;
                        }
                    }
                }
                Err(e) => {
                    let ttl = self.ttl();
                    for (slot, _) in chunk {
                        let past = held
                            .leases
                            .get(slot)
                            .is_some_and(|h| h.confirmed.elapsed() + period >= ttl);
                        if past {
                            if let Some(holding) = held.leases.remove(slot) {
                                holding.lease.lose();
                                expired += 1;
                            }
                        }
                    }
                    failure = Some(e);
                }
            }
        }
        if missing > 0 {
            crate::metrics::leases_lost("missing", missing);
            tracing::warn!(
                leases = missing,
                "observer leases lost (Redis no longer held them); ending their observations"
            );
        }
        if expired > 0 {
            crate::metrics::leases_lost("unreachable", expired);
        }
        if let Some(e) = failure {
            tracing::warn!(
                error = %e,
                ended = expired,
                "renewing observer leases failed; observations end once their leases would have expired"
            );
        }
    }

    /// One renewal call: the distinct keys once, each lease as its id and its keys' indexes.
    async fn renew_chunk(&self, chunk: &[(u64, Arc<LeaseState>)]) -> Result<Vec<i64>, String> {
        let mut invocation = self.renew.prepare_invoke();
        invocation.arg(self.config.ttl_ms).arg(chunk.len());
        for (_, lease) in chunk {
            invocation.arg(
                lease
                    .id
                    .hyphenated()
                    .encode_lower(&mut Uuid::encode_buffer()) as &str,
            );
        }
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (_, lease) in chunk {
            for key in &lease.keys {
                let next = index.len() + 1;
                let at = *index.entry(key.as_str()).or_insert_with(|| {
                    invocation.key(key.as_str());
                    next
                });
                invocation.arg(at);
            }
        }
        let mut redis = self.redis.clone();
        let flags: Vec<i64> = invocation
            .invoke_async(&mut redis)
            .await
            .map_err(|e| e.to_string())?;
        self.redis.wrote();
        if flags.len() != chunk.len() {
            return Err(format!(
                "lease renewal answered for {} leases, not {}",
                flags.len(),
                chunk.len()
            ));
        }
        Ok(flags)
    }
}

/// The replica's one renewer: every third of the TTL, one round over every lease it holds.
/// Ends when the last handle on the leases is gone.
async fn renew_while_held(leases: Weak<Inner>) {
    let period = match leases.upgrade() {
        Some(inner) => inner.ttl() / 3,
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = leases.upgrade() else {
            return;
        };
        inner.renew_round(period).await;
    }
}

/// A held lease. Dropping it (the client went away, the window ended) releases it in the
/// background; `release` does it in line.
pub struct ObserverLease {
    leases: ObserverLeases,
    slot: u64,
    state: Arc<LeaseState>,
    released: bool,
}

impl ObserverLease {
    /// Resolves when the lease is lost (Redis no longer held it at a renewal, or could not be
    /// reached before it would have expired); the observation must end.
    pub async fn lost(&self) {
        loop {
            let notified = self.state.notify.notified();
            if self.state.lost.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    pub async fn release(mut self) {
        self.let_go();
        self.leases.give_back(&self.state).await;
    }

    /// Stops counting and renewing the lease on this replica; giving it back to Redis is left.
    fn let_go(&mut self) {
        self.released = true;
        metrics::gauge!(crate::metrics::LEASES_HELD).decrement(1.0);
        self.leases.inner.lock().leases.remove(&self.slot);
    }
}

impl Drop for ObserverLease {
    fn drop(&mut self) {
        if !self.released {
            self.let_go();
            let (leases, state) = (self.leases.clone(), self.state.clone());
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { leases.give_back(&state).await });
            }
        }
    }
}

#[cfg(test)]
mod tests;
