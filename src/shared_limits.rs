//! Deployment-wide limits in Redis: token buckets shared by every replica (the per-principal
//! rate limits) and counted slots shared by every replica (the per-tenant outbound caps and
//! each principal's share of them).
//!
//! Each decision Redis takes is one Lua script on one key, timed by the Redis server's clock,
//! so it is atomic across replicas:
//!
//! - [`SharedLimits::take_tokens`]: a token bucket (`burst` tokens, refilled at `per_second`)
//!   hands out up to the tokens asked for, or says how long until the next one. Replicas ask
//!   for a small batch at a time and spend it locally (`crate::http::rate_limit`), so most
//!   requests cost no round trip.
//! - [`SharedLimits::acquire_slot`]: a sorted set of slot ids scored by expiry takes one more
//!   only under its cap, and only while the principal asking holds fewer than its share of
//!   them (each slot id starts with its principal's id, length-prefixed). A held slot is
//!   renewed every third of [`SLOT_TTL`] and removed when its holder drops it; a slot of a
//!   replica that died expires.
//!
//! **Redis unreachable** (or not writable: a demoted primary answering `READONLY`, a server
//! `LOADING`): the first failed call turns the shared limits *degraded* (a warning
//! logged once, `a2a_shared_limits_degraded` 1); until a probe every [`PROBE_INTERVAL`]
//! gets a write taken by Redis again, callers skip Redis and apply their per-replica limits alone, which
//! are always in force: never no limit. The return is logged once too.
//!
//! Keys: `{PREFIX}:ratelimit:{class}:{len}:{tenant}:{len}:{principal}` and
//! `{PREFIX}:outbound:{kind}:{len}:{tenant}` (members `{len}:{principal}:{uuid}`), the ids
//! length-prefixed so no tenant/principal pair can forge another's key or slot; each script
//! touches one key, so on a Redis Cluster they spread over the slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use uuid::Uuid;

use crate::redis_link::RedisLink;

/// Takes tokens. KEYS: the bucket. ARGV: per second, burst, wanted. Returns {granted, wait ms
/// until one token when none was granted}.
const TAKE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) * rate / 1000)
  at = now
end
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(at))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
local wait = 0
if granted == 0 then
  wait = math.ceil((1 - tokens) * 1000 / rate)
end
return {granted, wait}
"#;

/// Takes a slot. KEYS: the tenant's slot set. ARGV: slot id, ttl ms, cap, share, the slot ids'
/// prefix naming their principal. Returns 1 if taken, 0 when the tenant holds `cap` slots, -1
/// when the principal holds `share` of them. The set holds at most `cap`
/// slots, so counting the principal's is a walk over at most `cap` ids.
const ACQUIRE_SLOT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZRANGE', KEYS[1], 0, -1)
local owner = ARGV[5]
local mine = 0
for _, id in ipairs(held) do
  if string.sub(id, 1, #owner) == owner then
    mine = mine + 1
  end
end
if #held >= tonumber(ARGV[3]) then
  return 0
end
if mine >= tonumber(ARGV[4]) then
  return -1
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
"#;

/// Renews a slot. KEYS: the slot set. ARGV: slot id, ttl ms. Returns 1 if it was still held.
const RENEW_SLOT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local updated = redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return updated
"#;

/// How long a held outbound slot counts without renewal: how long a dead replica's calls stay
/// counted.
pub const SLOT_TTL: Duration = Duration::from_secs(15);
/// While degraded, how often Redis is tried again.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// What the shared bucket answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// This many tokens (at least one) are the caller's to spend.
    Tokens(u32),
    /// None left; the next one comes after this long.
    Empty { wait: Duration },
}

/// Why the shared slots refused one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRefusal {
    /// The tenant holds all of its slots.
    Full,
    /// The principal holds its share of them.
    Share,
}

/// Redis could not decide: the caller applies its per-replica limit alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Degraded;

/// The deployment-wide limits' port.
#[derive(Clone)]
pub struct SharedLimits {
    redis: RedisLink,
    prefix: String,
    degraded: Arc<AtomicBool>,
    take: Arc<Script>,
    acquire_slot: Arc<Script>,
    renew_slot: Arc<Script>,
}

impl std::fmt::Debug for SharedLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimits")
            .field("prefix", &self.prefix)
            .field("degraded", &self.is_degraded())
            .finish_non_exhaustive()
    }
}

fn bucket_key(prefix: &str, class: &str, tenant: &str, principal: &str) -> String {
    format!(
        "{prefix}:ratelimit:{class}:{}:{tenant}:{}:{principal}",
        tenant.len(),
        principal.len()
    )
}

fn slot_key(prefix: &str, kind: &str, tenant: &str) -> String {
    format!("{prefix}:outbound:{kind}:{}:{tenant}", tenant.len())
}

/// What every slot id of `principal` starts with, length-prefixed so no principal's prefix is
/// the start of another's (a slot id without one, such as a bare UUID, is no principal's).
fn slot_owner(principal: &str) -> String {
    format!("{}:{principal}:", principal.len())
}

impl SharedLimits {
    pub fn new(redis: RedisLink, prefix: &str) -> Self {
        crate::metrics::shared_limits_degraded(false);
        SharedLimits {
            redis,
            prefix: prefix.to_string(),
            degraded: Arc::default(),
            take: Arc::new(Script::new(TAKE)),
            acquire_slot: Arc::new(Script::new(ACQUIRE_SLOT)),
            renew_slot: Arc::new(Script::new(RENEW_SLOT)),
        }
    }

    /// Whether the limits are per replica for now (Redis unreachable).
    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    /// A call failed: degrade (once), and probe until Redis answers again.
    fn failed(&self, error: &redis::RedisError) {
        if self.degraded.swap(true, Ordering::AcqRel) {
            return;
        }
        crate::metrics::shared_limits_degraded(true);
        tracing::warn!(
            error = %error,
            "Redis unreachable: rate limits and outbound caps hold per replica until it returns"
        );
        let limits = self.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                loop {
                    tokio::time::sleep(PROBE_INTERVAL).await;
                    // A write, not a PING: a demoted primary answers PING and refuses writes.
                    if limits.redis.check_writable().await.is_ok() {
                        limits.degraded.store(false, Ordering::Release);
                        crate::metrics::shared_limits_degraded(false);
                        tracing::info!("Redis reachable again: rate limits and outbound caps hold across replicas");
                        return;
                    }
                }
            });
        }
    }

    /// Up to `want` tokens from the deployment's bucket of `class` for this principal.
    pub async fn take_tokens(
        &self,
        class: &str,
        tenant: &str,
        principal: &str,
        per_second: u32,
        burst: u32,
        want: u32,
    ) -> Result<Grant, Degraded> {
        if self.is_degraded() {
            return Err(Degraded);
        }
        let mut redis = self.redis.clone();
        let answer: Result<(u32, u64), _> = self
            .take
            .key(bucket_key(&self.prefix, class, tenant, principal))
            .arg(per_second.max(1))
            .arg(burst.max(1))
            .arg(want.max(1))
            .invoke_async(&mut redis)
            .await;
        match answer {
            Ok((0, wait_ms)) => {
                self.redis.wrote();
                Ok(Grant::Empty {
                    wait: Duration::from_millis(wait_ms.max(1)),
                })
            }
            Ok((granted, _)) => {
                self.redis.wrote();
                Ok(Grant::Tokens(granted))
            }
            Err(e) => {
                self.failed(&e);
                Err(Degraded)
            }
        }
    }

    /// One of the `cap` slots of `kind` for `tenant`, across replicas, at most `share` of them
    /// held by `principal`: `Ok(Err(_))` says which is reached.
    pub async fn acquire_slot(
        &self,
        kind: &str,
        tenant: &str,
        principal: &str,
        cap: usize,
        share: usize,
    ) -> Result<Result<SharedSlot, SlotRefusal>, Degraded> {
        if self.is_degraded() {
            return Err(Degraded);
        }
        let key = slot_key(&self.prefix, kind, tenant);
        let owner = slot_owner(principal);
        let id = format!("{owner}{}", Uuid::new_v4());
        let mut redis = self.redis.clone();
        let taken: Result<i64, _> = self
            .acquire_slot
            .key(&key)
            .arg(&id)
            .arg(SLOT_TTL.as_millis() as u64)
            .arg(cap)
            .arg(share)
            .arg(&owner)
            .invoke_async(&mut redis)
            .await;
        match taken {
            Ok(1) => {
                self.redis.wrote();
                Ok(Ok(self.hold_slot(key, id)))
            }
            Ok(-1) => {
                self.redis.wrote();
                Ok(Err(SlotRefusal::Share))
            }
            Ok(_) => {
                self.redis.wrote();
                Ok(Err(SlotRefusal::Full))
            }
            Err(e) => {
                self.failed(&e);
                Err(Degraded)
            }
        }
    }

    fn hold_slot(&self, key: String, id: String) -> SharedSlot {
        let limits = self.clone();
        let (renew_key, renew_id) = (key.clone(), id.clone());
        // Renewed while held; a slot lost (expired during an outage, Redis restarted empty)
        // is simply no longer counted: the call it covers goes on, bounded by its own timeout.
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(SLOT_TTL / 3).await;
                let mut redis = limits.redis.clone();
                let renewed: Result<i64, _> = limits
                    .renew_slot
                    .key(&renew_key)
                    .arg(&renew_id)
                    .arg(SLOT_TTL.as_millis() as u64)
                    .invoke_async(&mut redis)
                    .await;
                if let Err(e) = renewed {
                    tracing::debug!(error = %e, "renewing an outbound slot failed");
                }
            }
        });
        SharedSlot {
            limits: self.clone(),
            key,
            id,
            renewer,
        }
    }

    /// Held slots of `kind` for `tenant` (tests, diagnostics).
    pub async fn slots_held(&self, kind: &str, tenant: &str) -> redis::RedisResult<u64> {
        let mut redis = self.redis.clone();
        redis::cmd("ZCARD")
            .arg(slot_key(&self.prefix, kind, tenant))
            .query_async(&mut redis)
            .await
    }
}

/// A slot held in Redis; dropping it frees it (in the background).
pub struct SharedSlot {
    limits: SharedLimits,
    key: String,
    id: String,
    renewer: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for SharedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSlot")
            .field("key", &self.key)
            .finish()
    }
}

impl Drop for SharedSlot {
    fn drop(&mut self) {
        self.renewer.abort();
        let mut redis = self.limits.redis.clone();
        let key = std::mem::take(&mut self.key);
        let id = std::mem::take(&mut self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let released: redis::RedisResult<i64> = redis::cmd("ZREM")
                    .arg(&key)
                    .arg(&id)
                    .query_async(&mut redis)
                    .await;
                if let Err(e) = released {
                    tracing::debug!(error = %e, "releasing an outbound slot failed; it expires on its own");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_length_prefixed() {
        assert_ne!(
            bucket_key("q", "general", "a:1", "b"),
            bucket_key("q", "general", "a", "1:b")
        );
        assert_ne!(
            slot_key("q", "delegations", "a"),
            slot_key("q", "discoveries", "a")
        );
        // No principal's slot ids start with another's prefix.
        assert!(!format!("{}x", slot_owner("a:1")).starts_with(&slot_owner("a")));
        assert!(!slot_owner("ab").starts_with(&slot_owner("a")));
        assert_eq!(slot_owner("p-alice"), "7:p-alice:");
        assert_eq!(
            bucket_key("q-a2a", "cancellation", "t-acme", "p-alice"),
            "q-a2a:ratelimit:cancellation:6:t-acme:7:p-alice"
        );
    }
}
