//! The per-address limit on unknown tokens: before a request whose token is neither cached
//! nor known (`super::pool`) may cost an introspection, its client address
//! (`crate::client_address`) spends a token of its bucket, `auth.unknown_token_rate` per second
//! with bursts of `auth.unknown_token_burst`. Over it: HTTP 429 `too_many_unknown_tokens` with
//! `Retry-After`, Q not asked (`a2a_unknown_tokens_limited_total`). Requests with cached or
//! known tokens never spend it, so a caller already served is never slowed by its neighbours
//! on a shared address (a NAT, a proxy that is not trusted).
//!
//! IPv6 clients are counted by their /64: a single host usually holds a whole /64 and could
//! otherwise draw a fresh bucket per address.
//!
//! Bounded memory: at most [`MAX_ADDRESSES`] buckets and the overflow one (some 64 bytes each,
//! about 4 MiB in all). A full bucket is
//! the same as none, so buckets that have refilled are dropped every
//! `crate::http::rate_limit::FORGET_INTERVAL`, and at once (at most once a second) when a new
//! address finds the map full; while it is still full, new addresses share one overflow
//! bucket, so an attacker spreading over more addresses than that gains no more than one
//! more address's worth.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::HttpError;

/// Most client addresses with a bucket at once.
pub const MAX_ADDRESSES: usize = 65_536;

/// How often a full map may be swept for refilled buckets.
const SWEEP_FLOOR: Duration = Duration::from_secs(1);

/// Where the addresses past [`MAX_ADDRESSES`] are counted together.
const OVERFLOW: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

/// The buckets of every client address (GCRA: one instant per address).
pub(super) struct UnknownTokenLimit {
    /// One token's worth of time.
    interval: Duration,
    /// How far ahead of now an address's next token may be promised: `burst - 1` intervals.
    tolerance: Duration,
    buckets: Mutex<Buckets>,
}

struct Buckets {
    /// When each address's bucket is full again.
    full_at: HashMap<IpAddr, Instant>,
    swept: Instant,
}

/// The bucket an address spends: IPv4 as is, IPv6 by its /64.
fn bucket_of(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

impl UnknownTokenLimit {
    pub(super) fn new(per_second: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        UnknownTokenLimit {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            buckets: Mutex::new(Buckets {
                full_at: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    /// Spends one of `address`'s tokens, or refuses with the wait until the next one.
    pub(super) fn spend(&self, address: IpAddr) -> Result<(), HttpError> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = bucket_of(address);
        if !buckets.full_at.contains_key(&key) && buckets.full_at.len() >= MAX_ADDRESSES {
            if now.duration_since(buckets.swept) >= SWEEP_FLOOR {
                buckets.sweep(now);
            }
            if buckets.full_at.len() >= MAX_ADDRESSES {
                key = OVERFLOW;
            }
        }
        let full_at = buckets.full_at.get(&key).copied().unwrap_or(now).max(now);
        let earliest = full_at.checked_sub(self.tolerance).unwrap_or(now);
        if earliest > now {
            crate::metrics::unknown_tokens_limited();
            let wait = earliest - now;
            return Err(HttpError::TooManyUnknownTokens {
                retry_after_seconds: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            });
        }
        buckets.full_at.insert(key, full_at + self.interval);
        Ok(())
    }

    /// Drops the buckets that have refilled (bounded memory); called periodically.
    pub(super) fn forget_idle(&self) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets.sweep(Instant::now());
        buckets.full_at.shrink_to_fit();
    }

    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.buckets.lock().unwrap().full_at.len()
    }
}

impl Buckets {
    fn sweep(&mut self, now: Instant) {
        self.full_at.retain(|_, full_at| *full_at > now);
        self.swept = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(limit: &UnknownTokenLimit, address: &str, n: usize) -> usize {
        let address: IpAddr = address.parse().unwrap();
        (0..n).filter(|_| limit.spend(address).is_ok()).count()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate_per_address() {
        let limit = UnknownTokenLimit::new(20, 40);
        assert_eq!(spent(&limit, "192.0.2.1", 100), 40);
        match limit.spend("192.0.2.1".parse().unwrap()) {
            Err(HttpError::TooManyUnknownTokens {
                retry_after_seconds,
            }) => assert_eq!(retry_after_seconds, 1),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(spent(&limit, "192.0.2.2", 1), 1, "buckets are per address");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(spent(&limit, "192.0.2.1", 100), 10, "20 a second");
        tokio::time::advance(Duration::from_secs(1)).await;
        limit.forget_idle();
        assert_eq!(
            limit.addresses(),
            1,
            "the refilled bucket of .2 was dropped"
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        limit.forget_idle();
        assert_eq!(limit.addresses(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn ipv6_addresses_count_by_their_64() {
        let limit = UnknownTokenLimit::new(1, 2);
        assert_eq!(spent(&limit, "2001:db8:1:2::1", 1), 1);
        assert_eq!(spent(&limit, "2001:db8:1:2:ffff::9", 5), 1);
        assert_eq!(spent(&limit, "2001:db8:1:3::1", 5), 2);
        assert_eq!(
            spent(&limit, "::ffff:192.0.2.7", 5),
            2,
            "a mapped IPv4 address"
        );
        assert_eq!(spent(&limit, "192.0.2.7", 5), 0, "is that IPv4 address");
    }

    /// Past the bound, refilled buckets make room, and while none has, new addresses share one.
    #[tokio::test(start_paused = true)]
    async fn the_map_is_bounded() {
        let limit = UnknownTokenLimit::new(1, 1);
        let many = |from: u32| {
            (from..from + MAX_ADDRESSES as u32).for_each(|n| {
                let _ = limit.spend(IpAddr::V4(n.into()));
            })
        };
        many(0);
        assert_eq!(limit.addresses(), MAX_ADDRESSES);
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(spent(&limit, "198.51.100.1", 1), 1, "room made by a sweep");
        assert!(limit.addresses() <= MAX_ADDRESSES);
        many(1 << 20);
        // Every bucket is in use and the last sweep was just now: the last of those addresses
        // spent the overflow bucket, which the next new ones find empty.
        assert_eq!(limit.addresses(), MAX_ADDRESSES + 1);
        assert_eq!(spent(&limit, "203.0.113.1", 1), 0);
        assert_eq!(spent(&limit, "203.0.113.2", 1), 0);
        assert_eq!(limit.addresses(), MAX_ADDRESSES + 1);
    }
}
