//! Bearer authentication through Q's token introspection, the `agent_api` tenant feature and
//! per-method scopes.
//!
//! Q's answers are cached by the token's sha256, so the cache never holds a token in clear, in
//! two bounded caches: active tokens for `auth.cache_ttl_ms` (at most 5 s, so a revoked token
//! stops working within that bound), and inactive or unknown tokens apart, for
//! `auth.negative_cache_ttl_ms`, so a flood of bad tokens neither reaches Q on every request
//! nor evicts a good entry. Concurrent requests with a token neither cache holds wait for one
//! introspection; a failure to reach Q is shared with those waiters and never cached.
//!
//! Outage: each active answer is also remembered for `outage_grace` (0: not at all). When Q
//! gives no answer at all (unreachable, 5xx, timeout; not a refusal), a remembered principal
//! authenticates the request *as last known* ([`Identified::last_known`]); the authorisation
//! stage lets such a caller only read (`crate::http::authorize`). An inactive verdict forgets
//! the token at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap};
use moka::future::Cache;
use sha2::{Digest, Sha256};

use crate::error::{identity_unavailable, HttpError};
use crate::upstream::contract::Introspection;
use crate::upstream::{UpstreamError, UpstreamRunApi};

/// The tenant feature the hosted profile requires.
pub const AGENT_API_FEATURE: &str = "agent_api";

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: Vec<String>,
    pub tenant_features: Vec<String>,
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

/// The bearer token of a request, if well-formed.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// How long and how many of one kind of introspection answer are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBounds {
    pub ttl: Duration,
    pub capacity: u64,
}

/// The cache key: the token's sha256.
type TokenKey = [u8; 32];

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
            } => Verdict::Active(Principal {
                tenant_id,
                principal_id,
                scopes,
                tenant_features,
            }),
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
}

/// The two introspection caches. moka keeps each one bounded with O(1) amortised eviction
/// (TinyLFU, so a burst of one-off keys does not push out frequently used ones), expires
/// entries by age, and runs one `init` per key at a time for `try_get_with`.
struct TokenCache {
    active: Cache<TokenKey, Principal>,
    inactive: Cache<TokenKey, ()>,
    /// Active answers kept for the outage grace; `None` when it is zero.
    last_known: Option<Cache<TokenKey, Principal>>,
}

impl TokenCache {
    fn new(active: CacheBounds, inactive: CacheBounds, outage_grace: Duration) -> Self {
        TokenCache {
            last_known: (!outage_grace.is_zero()).then(|| {
                Cache::builder()
                    .max_capacity(active.capacity.max(1))
                    .time_to_live(outage_grace)
                    .build()
            }),
            active: Cache::builder()
                .max_capacity(active.capacity.max(1))
                .time_to_live(active.ttl)
                .build(),
            inactive: Cache::builder()
                .max_capacity(inactive.capacity.max(1))
                .time_to_live(inactive.ttl)
                .build(),
        }
    }

    /// The principal of `key`, from the caches or else from `introspect`, which runs once
    /// for all concurrent callers with the same key; they all get its result. An inactive
    /// verdict goes to the inactive cache only; an error goes nowhere.
    async fn principal<E, F>(&self, key: TokenKey, introspect: F) -> Result<Principal, Arc<Miss<E>>>
    where
        F: Future<Output = Result<Verdict, E>>,
        E: Send + Sync + 'static,
    {
        if self.inactive.get(&key).await.is_some() {
            return Err(Arc::new(Miss::Inactive));
        }
        let inactive = &self.inactive;
        let last_known = &self.last_known;
        self.active
            .try_get_with(key, async move {
                match introspect.await {
                    Ok(Verdict::Active(principal)) => {
                        if let Some(last_known) = last_known {
                            last_known.insert(key, principal.clone()).await;
                        }
                        Ok(principal)
                    }
                    Ok(Verdict::Inactive) => {
                        inactive.insert(key, ()).await;
                        if let Some(last_known) = last_known {
                            last_known.invalidate(&key).await;
                        }
                        Err(Miss::Inactive)
                    }
                    Err(e) => Err(Miss::Unavailable(e)),
                }
            })
            .await
    }
}

/// Authenticates bearer tokens against Q.
pub struct Authenticator {
    upstream: UpstreamRunApi,
    cache: TokenCache,
}

impl Authenticator {
    /// `active` bounds the cache of active tokens, `inactive` that of inactive or unknown ones;
    /// `outage_grace` is how long an active answer may stand in for Q while Q gives none.
    pub fn new(
        upstream: UpstreamRunApi,
        active: CacheBounds,
        inactive: CacheBounds,
        outage_grace: Duration,
    ) -> Self {
        Authenticator {
            upstream,
            cache: TokenCache::new(active, inactive, outage_grace),
        }
    }

    /// Authenticates the request's bearer token; does not check features or scopes.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Identified, HttpError> {
        let token = bearer_token(headers).ok_or(HttpError::MissingCredential)?;
        let key: TokenKey = Sha256::digest(token.as_bytes()).into();
        let introspect = async { self.upstream.introspect(token).await.map(Verdict::from) };
        match self.cache.principal(key, introspect).await {
            Ok(principal) => Ok(Identified {
                principal,
                last_known: false,
            }),
            Err(miss) => match &*miss {
                Miss::Inactive => Err(HttpError::InvalidCredential),
                Miss::Unavailable(e) => {
                    let remembered = match (e, &self.cache.last_known) {
                        (UpstreamError::Failed { .. }, Some(last_known)) => {
                            last_known.get(&key).await
                        }
                        _ => None,
                    };
                    match remembered {
                        Some(principal) => {
                            tracing::info!(error = %e, "Q unreachable; the caller's last known identity may only read");
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
