//! Bearer authentication through Q's token introspection, the `agent_api` tenant feature and
//! per-method scopes.
//!
//! Q's answers are cached by the token's sha256, so the cache never holds a token in clear, in
//! two bounded caches (weighed by size): active tokens for `auth.cache_ttl_ms` (at most 5 s, so
//! a revoked token stops working within that bound), and inactive or unknown tokens apart, for
//! `auth.negative_cache_ttl_ms`, so a flood of bad tokens neither reaches Q on every request
//! nor evicts a good entry. Concurrent requests with a token neither cache holds wait for one
//! introspection; a failure to reach Q is shared with those waiters and never cached.
//!
//! Work from strangers is bounded before Q sees it: a bearer value that is not an RFC 6750
//! token (its characters, at most [`MAX_TOKEN_BYTES`]) is refused with 401 without asking Q; a
//! token neither cached nor known spends its client address's bucket first (429
//! `too_many_unknown_tokens` past it, [`unknown_tokens`]); and introspections run in a pool of
//! `auth.max_introspections_in_flight` slots of which tokens this replica has never seen active
//! may hold only `auth.stranger_introspections_in_flight` ([`pool`]): a request without a slot
//! is answered 503 at once (`a2a_introspections_shed_total{token}`), never from a last known
//! identity. So made-up tokens cannot take the slots that known callers' requests and the
//! re-checks of their open streams need.
//!
//! Outage: each active answer is also remembered for the outage grace (0 by default: not at
//! all). Only while Q is down for this replica as a whole (`crate::upstream::Reachability`:
//! consecutive failures for lack of Q and no answer from it for a second, never one failed
//! call) and was last heard from within the grace does a remembered principal authenticate a
//! request *as last known* ([`Identified::last_known`]); the authorisation stage lets such a
//! caller only read, and reads of such a caller are content-free receipts. Q refusing the
//! gateway's own credential, throttling (429) or answering off the contract is not an outage:
//! the request fails with 503. An inactive verdict forgets the token at once.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
use moka::future::Cache;
use sha2::{Digest, Sha256};

use crate::client_address::{self, TrustedProxies};
use crate::error::{identity_unavailable, HttpError};
use crate::upstream::contract::Introspection;
use crate::upstream::{Reachability, UpstreamRunApi};

pub mod pool;
pub mod unknown_tokens;

use pool::IntrospectionPool;
pub use pool::{PoolBounds, Standing, KNOWN_TOKENS_CAPACITY};
use unknown_tokens::UnknownTokenLimit;

/// Longest bearer value sent to Q; a longer one is no token Q issued.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// The tenant feature the hosted profile requires.
pub const AGENT_API_FEATURE: &str = "agent_api";

/// An authenticated caller: what Q said of the token, shared rather than copied (every
/// request clones the cached principal; a copy was eight allocations). Reads as its
/// [`Claims`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(Arc<Claims>);

/// Who Q says a token's caller is, and what it may do.
#[derive(Debug, PartialEq, Eq)]
pub struct Claims {
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: Vec<String>,
    pub tenant_features: Vec<String>,
}

impl From<Claims> for Principal {
    fn from(claims: Claims) -> Self {
        Principal(Arc::new(claims))
    }
}

impl std::ops::Deref for Principal {
    type Target = Claims;

    fn deref(&self) -> &Claims {
        &self.0
    }
}

/// What a method needs beyond `ai:answer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Discovery, GetTask, ListTasks, SubscribeToTask.
    Read,
    /// SendMessage, SendStreamingMessage, CancelTask.
    Delegate,
}

impl Access {
    pub fn required_scopes(self) -> [&'static str; 2] {
        match self {
            Access::Read => ["ai:answer", "a2a:read"],
            Access::Delegate => ["ai:answer", "a2a:delegate"],
        }
    }
}

/// `ai:answer` is satisfied by `ai:answer` or `ai:*`; likewise for `a2a:`.
fn has_scope(granted: &[String], required: &str) -> bool {
    let family = required.split(':').next().unwrap_or_default();
    granted
        .iter()
        .any(|s| s == required || (s.strip_suffix(":*") == Some(family)))
}

impl Principal {
    pub fn require(&self, access: Access) -> Result<(), HttpError> {
        self.require_scopes(&access.required_scopes())
    }

    /// Every scope in `required` (wildcards as for [`Principal::require`]), or HTTP 403
    /// naming the missing ones.
    pub fn require_scopes(&self, required: &[&'static str]) -> Result<(), HttpError> {
        let missing: Vec<&'static str> = required
            .iter()
            .copied()
            .filter(|scope| !has_scope(&self.scopes, scope))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(HttpError::InsufficientScope { missing })
        }
    }

    pub fn require_feature(&self) -> Result<(), HttpError> {
        if self.tenant_features.iter().any(|f| f == AGENT_API_FEATURE) {
            Ok(())
        } else {
            Err(HttpError::FeatureDisabled {
                feature: AGENT_API_FEATURE,
            })
        }
    }
}

/// The bearer token of a request, if the request presents one (well-formed or not).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether `token` can be a bearer token at all: RFC 6750's `b64token` (letters, digits,
/// `-._~+/`, then `=` padding only), at most [`MAX_TOKEN_BYTES`].
pub fn well_formed_token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && token.len() <= MAX_TOKEN_BYTES
        && body.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        })
}

/// A caller's bearer token, kept by an observation to check it again while it lasts. Its
/// `Debug` never shows it.
#[derive(Clone)]
pub struct Credential(Arc<str>);

impl Credential {
    /// The request's well-formed bearer token.
    pub fn of(headers: &HeaderMap) -> Option<Credential> {
        bearer_token(headers)
            .filter(|t| well_formed_token(t))
            .map(|t| Credential(t.into()))
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

/// How long and how many of one kind of introspection answer are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBounds {
    pub ttl: Duration,
    pub capacity: u64,
}

/// The cache key: the token's sha256.
type TokenKey = [u8; 32];

fn token_key(token: &str) -> TokenKey {
    Sha256::digest(token.as_bytes()).into()
}

/// What one introspection said about a token.
#[derive(Debug, Clone)]
enum Verdict {
    Active(Principal),
    Inactive,
}

impl From<Introspection> for Verdict {
    fn from(introspection: Introspection) -> Self {
        match introspection {
            Introspection {
                active: true,
                tenant_id: Some(tenant_id),
                principal_id: Some(principal_id),
                scopes,
                tenant_features,
            } => Verdict::Active(
                Claims {
                    tenant_id,
                    principal_id,
                    scopes,
                    tenant_features,
                }
                .into(),
            ),
            // Active without the identity it must carry is no principal either.
            _ => Verdict::Inactive,
        }
    }
}

/// Who a credential belongs to, and whether Q said so now (within the cache bound) or only
/// before an outage.
#[derive(Debug, Clone)]
pub struct Identified {
    pub principal: Principal,
    /// Q could not be asked; this is its last answer, within the outage grace.
    pub last_known: bool,
}

/// Why a lookup has no principal.
#[derive(Debug, thiserror::Error)]
enum Miss<E> {
    /// Q said the token is inactive or unknown (now, or within the negative TTL).
    #[error("inactive token")]
    Inactive,
    /// Q could not be asked.
    #[error(transparent)]
    Unavailable(E),
    /// The introspection pool has no slot for a token of this standing.
    #[error("no introspection slot for a {} token", .0.label())]
    Shed(Standing),
}

/// Bytes an entry of typical size takes: capacities count such entries, a principal with many
/// scopes or features counts for more.
const TYPICAL_ENTRY_BYTES: u64 = 256;

/// What a principal takes in a cache, roughly.
fn principal_bytes(_: &TokenKey, p: &Principal) -> u32 {
    let strings: usize = p
        .scopes
        .iter()
        .chain(&p.tenant_features)
        .map(String::len)
        .sum();
    let bytes = 96 + p.tenant_id.len() + p.principal_id.len() + strings + 24 * p.scopes.len();
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// The introspection caches. moka keeps each one bounded (weighed by size) with O(1)
/// amortised eviction (TinyLFU, so a burst of one-off keys does not push out frequently used
/// ones), expires entries by age, and runs one `init` per key at a time for `try_get_with`.
struct TokenCache {
    /// Q's answer and when its introspection was sent.
    active: Cache<TokenKey, (Principal, Instant)>,
    inactive: Cache<TokenKey, ()>,
    /// Active answers kept for the outage grace; `None` when it is zero.
    last_known: Option<Cache<TokenKey, Principal>>,
    /// The introspections running now, and who may start one.
    pool: IntrospectionPool,
    /// Unknown tokens whose request spent its client address's bucket within
    /// [`SPENT_FOR`]: the concurrent requests with the same token (a client's connections
    /// opening together) wait for that one introspection instead of each spending again.
    spent: moka::sync::Cache<TokenKey, ()>,
}

/// How long an unknown token's first request covers the others with the same token: longer
/// than an introspection takes, after which the token is cached either way.
const SPENT_FOR: Duration = Duration::from_secs(5);
/// Unknown tokens remembered as spent at once (about 100 bytes each).
const SPENT_CAPACITY: u64 = 65_536;

impl TokenCache {
    fn new(
        active: CacheBounds,
        inactive: CacheBounds,
        outage_grace: Duration,
        pool: PoolBounds,
    ) -> Self {
        let weighed = |bounds: CacheBounds| bounds.capacity.max(1) * TYPICAL_ENTRY_BYTES;
        TokenCache {
            last_known: (!outage_grace.is_zero()).then(|| {
                Cache::builder()
                    .max_capacity(weighed(active))
                    .weigher(principal_bytes)
                    .time_to_live(outage_grace)
                    .build()
            }),
            active: Cache::builder()
                .max_capacity(weighed(active))
                .weigher(|k, (p, _)| principal_bytes(k, p))
                .time_to_live(active.ttl)
                .build(),
            inactive: Cache::builder()
                .max_capacity(weighed(inactive))
                .weigher(|_, _| 64)
                .time_to_live(inactive.ttl)
                .build(),
            pool: IntrospectionPool::new(pool),
            spent: moka::sync::Cache::builder()
                .max_capacity(SPENT_CAPACITY)
                .time_to_live(SPENT_FOR)
                .build(),
        }
    }

    /// Whether this request is the first with `key` to spend its address's bucket: false
    /// while another request's spending covers it.
    fn first_to_spend(&self, key: &TokenKey) -> bool {
        self.spent.entry(*key).or_insert(()).is_fresh()
    }

    /// Neither cached (either way) nor known: what a request would cost Q is not yet bounded
    /// by anything this replica has seen of the token.
    fn unknown(&self, key: &TokenKey) -> bool {
        !self.active.contains_key(key)
            && !self.inactive.contains_key(key)
            && self.pool.standing(key) == Standing::Stranger
    }

    /// The principal of `key`, from the caches or else from `introspect`, which runs once
    /// for all concurrent callers with the same key; they all get its result. An inactive
    /// verdict goes to the inactive cache only; an error goes nowhere.
    /// With `within`, a cached answer serves only if its introspection was sent at most that
    /// long ago (an observation checking its token again); otherwise Q is asked again.
    ///
    /// A cached answer is found without the loader: `introspect` makes the introspection only
    /// on a miss, and the miss path (the cache's loader and the HTTP call to Q, about 10 KiB
    /// of future) is boxed, so the future of every request that finds its token cached, and
    /// waits on something else, does not carry it.
    async fn principal<E, F, Fut>(
        &self,
        key: TokenKey,
        within: Option<Duration>,
        introspect: F,
    ) -> Result<Principal, Arc<Miss<E>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Verdict, E>>,
        E: Send + Sync + 'static,
    {
        if self.inactive.get(&key).await.is_some() {
            return Err(Arc::new(Miss::Inactive));
        }
        match (self.active.get(&key).await, within) {
            (Some((principal, _)), None) => return Ok(principal),
            (Some((principal, at)), Some(within)) if at.elapsed() <= within => {
                return Ok(principal)
            }
            (Some(_), Some(_)) => self.active.invalidate(&key).await,
            (None, _) => {}
        }
        let inactive = &self.inactive;
        let last_known = &self.last_known;
        let pool = &self.pool;
        // Boxed: see above. `try_get_with` still answers from the cache an entry another
        // caller's introspection inserted meanwhile, and joins one in flight.
        Box::pin(self.active.try_get_with(key, async move {
            let standing = pool.standing(&key);
            let Some(_slot) = pool.try_take(standing) else {
                return Err(Miss::Shed(standing));
            };
            let sent = Instant::now();
            match introspect().await {
                Ok(Verdict::Active(principal)) => {
                    pool.active(key);
                    if let Some(last_known) = last_known {
                        last_known.insert(key, principal.clone()).await;
                    }
                    Ok((principal, sent))
                }
                Ok(Verdict::Inactive) => {
                    pool.inactive(&key);
                    inactive.insert(key, ()).await;
                    if let Some(last_known) = last_known {
                        last_known.invalidate(&key).await;
                    }
                    Err(Miss::Inactive)
                }
                Err(e) => Err(Miss::Unavailable(e)),
            }
        }))
        .await
        .map(|(principal, _)| principal)
    }
}

/// Authenticates bearer tokens against Q.
pub struct Authenticator {
    upstream: UpstreamRunApi,
    reachability: Arc<Reachability>,
    cache: TokenCache,
    outage_grace: Duration,
    unknown_tokens: UnknownTokenLimit,
    trusted_proxies: TrustedProxies,
}

/// Settings of the authenticator, typed once at start-up.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// The cache of active tokens.
    pub active: CacheBounds,
    /// The cache of inactive or unknown tokens.
    pub inactive: CacheBounds,
    /// How long after Q last answered a last known identity may still read content-free while
    /// Q is down; zero never.
    pub outage_grace: Duration,
    /// The introspection pool: its size, the strangers' share, how long a token stays known.
    pub pool: PoolBounds,
    /// Requests per second, and at once, one client address may make with unknown tokens.
    pub unknown_token_rate: u32,
    pub unknown_token_burst: u32,
    /// Whose `X-Forwarded-For` names the client.
    pub trusted_proxies: TrustedProxies,
}

impl Authenticator {
    pub fn new(upstream: UpstreamRunApi, settings: AuthSettings) -> Self {
        Authenticator {
            reachability: upstream.reachability().clone(),
            upstream,
            cache: TokenCache::new(
                settings.active,
                settings.inactive,
                settings.outage_grace,
                settings.pool,
            ),
            outage_grace: settings.outage_grace,
            unknown_tokens: UnknownTokenLimit::new(
                settings.unknown_token_rate,
                settings.unknown_token_burst,
            ),
            trusted_proxies: settings.trusted_proxies,
        }
    }

    /// Authenticates the request's bearer token; does not check features or scopes. A token
    /// neither cached nor known first spends its client address's bucket, once for all the
    /// requests with that token within [`SPENT_FOR`] (they share its one introspection).
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Identified, HttpError> {
        let token = bearer_token(headers).ok_or(HttpError::MissingCredential)?;
        if !well_formed_token(token) {
            return Err(HttpError::InvalidCredential);
        }
        let key = token_key(token);
        if self.cache.unknown(&key) && self.cache.first_to_spend(&key) {
            // Every request the server runs has its peer; anything else shares one bucket.
            let client = client_address::peer().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| {
                self.trusted_proxies.client(p, headers)
            });
            if let Err(refused) = self.unknown_tokens.spend(client) {
                // Refused: the token's next request spends (and is refused) in its turn.
                self.cache.spent.invalidate(&key);
                return Err(refused);
            }
        }
        self.identify(token, key, None).await
    }

    /// Forgets the client addresses whose bucket has refilled (bounded memory); called
    /// periodically.
    pub fn forget_idle(&self) {
        self.unknown_tokens.forget_idle();
    }

    /// Who `credential` belongs to now, for an observation that checks it again: Q's answer
    /// to an introspection sent at most `within` ago, never a last known identity.
    pub async fn recheck(
        &self,
        credential: &Credential,
        within: Duration,
    ) -> Result<Principal, HttpError> {
        let key = token_key(&credential.0);
        Ok(self
            .identify(&credential.0, key, Some(within))
            .await?
            .principal)
    }

    /// `within`: `None` for a request (any answer within the cache bound, a last known
    /// identity within the outage grace), `Some` for an observation's re-check.
    async fn identify(
        &self,
        token: &str,
        key: TokenKey,
        within: Option<Duration>,
    ) -> Result<Identified, HttpError> {
        let introspect = || async { self.upstream.introspect(token).await.map(Verdict::from) };
        match self.cache.principal(key, within, introspect).await {
            Ok(principal) => Ok(Identified {
                principal,
                last_known: false,
            }),
            Err(miss) => match &*miss {
                Miss::Inactive => Err(HttpError::InvalidCredential),
                Miss::Shed(standing) => {
                    crate::metrics::introspection_shed(standing.label());
                    Err(HttpError::IdentityUnavailable {
                        cause: format!("no introspection slot for a {} token", standing.label()),
                    })
                }
                Miss::Unavailable(e) => {
                    let outage = within.is_none()
                        && self.reachability.within_outage_grace(self.outage_grace);
                    let remembered = match &self.cache.last_known {
                        Some(last_known) if outage => last_known.get(&key).await,
                        _ => None,
                    };
                    match remembered {
                        Some(principal) => {
                            tracing::info!(error = %e, "Q is down; the caller's last known identity may only read, content-free");
                            Ok(Identified {
                                principal,
                                last_known: true,
                            })
                        }
                        None => Err(identity_unavailable(e)),
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests;
