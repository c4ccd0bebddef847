//! Bearer authentication through Q's token introspection, the `agent_api` tenant feature and
//! per-method scopes.
//!
//! Q's answers are cached by the token's sha256, so the cache never holds a token in clear, in
//! two bounded caches: active tokens for `auth.cache_ttl_ms` (at most 5 s, so a revoked token
//! stops working within that bound), and inactive or unknown tokens apart, for
//! `auth.negative_cache_ttl_ms`, so a flood of bad tokens neither reaches Q on every request
//! nor evicts a good entry. Concurrent requests with a token neither cache holds wait for one
//! introspection; a failure to reach Q is shared with those waiters and never cached.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap};
use moka::future::Cache;
use sha2::{Digest, Sha256};

use crate::error::{identity_unavailable, HttpError};
use crate::upstream::contract::Introspection;
use crate::upstream::UpstreamRunApi;

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
}

impl TokenCache {
    fn new(active: CacheBounds, inactive: CacheBounds) -> Self {
        TokenCache {
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
        self.active
            .try_get_with(key, async move {
                match introspect.await {
                    Ok(Verdict::Active(principal)) => Ok(principal),
                    Ok(Verdict::Inactive) => {
                        inactive.insert(key, ()).await;
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
    /// `active` bounds the cache of active tokens, `inactive` that of inactive or unknown ones.
    pub fn new(upstream: UpstreamRunApi, active: CacheBounds, inactive: CacheBounds) -> Self {
        Authenticator {
            upstream,
            cache: TokenCache::new(active, inactive),
        }
    }

    /// Authenticates the request's bearer token; does not check features or scopes.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, HttpError> {
        let token = bearer_token(headers).ok_or(HttpError::MissingCredential)?;
        let key: TokenKey = Sha256::digest(token.as_bytes()).into();
        let introspect = async { self.upstream.introspect(token).await.map(Verdict::from) };
        self.cache
            .principal(key, introspect)
            .await
            .map_err(|miss| match &*miss {
                Miss::Inactive => HttpError::InvalidCredential,
                Miss::Unavailable(e) => identity_unavailable(e),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(scopes: &[&str]) -> Principal {
        Principal {
            tenant_id: "t".into(),
            principal_id: "p".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            tenant_features: vec![AGENT_API_FEATURE.into()],
        }
    }

    #[test]
    fn exact_and_wildcard_scopes() {
        assert!(principal(&["ai:answer", "a2a:read"])
            .require(Access::Read)
            .is_ok());
        assert!(principal(&["ai:*", "a2a:*"])
            .require(Access::Delegate)
            .is_ok());
        assert!(principal(&["ai:answer", "a2a:*"])
            .require(Access::Read)
            .is_ok());
    }

    #[test]
    fn missing_scopes_are_named() {
        assert_eq!(
            principal(&["ai:answer", "a2a:read"]).require(Access::Delegate),
            Err(HttpError::InsufficientScope {
                missing: vec!["a2a:delegate"]
            })
        );
        assert_eq!(
            principal(&["a2a:read", "a2a:delegate"]).require(Access::Read),
            Err(HttpError::InsufficientScope {
                missing: vec!["ai:answer"]
            })
        );
    }

    #[test]
    fn wildcards_do_not_cross_families_or_prefixes() {
        assert!(principal(&["a2a:*"]).require(Access::Read).is_err());
        assert!(principal(&["*", "a2a:read"]).require(Access::Read).is_err());
        assert!(principal(&["ai:answer", "a2a:read:*"])
            .require(Access::Read)
            .is_err());
        assert!(principal(&["ai:answerx", "a2a:read"])
            .require(Access::Read)
            .is_err());
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }

    fn bounds(ttl_ms: u64, capacity: u64) -> CacheBounds {
        CacheBounds {
            ttl: Duration::from_millis(ttl_ms),
            capacity,
        }
    }

    fn key(n: u32) -> TokenKey {
        Sha256::digest(n.to_be_bytes()).into()
    }

    /// An introspection that counts its calls and answers `verdict` after `delay`.
    async fn introspection(
        calls: &std::sync::atomic::AtomicUsize,
        delay_ms: u64,
        verdict: Result<Verdict, &'static str>,
    ) -> Result<Verdict, &'static str> {
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        verdict
    }

    fn calls_of(calls: &std::sync::atomic::AtomicUsize) -> usize {
        calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test]
    async fn concurrent_misses_share_one_introspection() {
        let cache = TokenCache::new(bounds(5_000, 100), bounds(1_000, 100));
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let verdict = Ok(Verdict::Active(principal(&["ai:answer"])));
        let results = futures_util::future::join_all(
            (0..20).map(|_| cache.principal(key(1), introspection(&calls, 50, verdict.clone()))),
        )
        .await;
        assert!(results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|p| p.principal_id == "p")));
        assert_eq!(calls_of(&calls), 1);
        // Then served from the cache.
        assert!(cache
            .principal(key(1), introspection(&calls, 0, verdict))
            .await
            .is_ok());
        assert_eq!(calls_of(&calls), 1);
    }

    #[tokio::test]
    async fn a_failure_is_shared_with_its_waiters_and_not_cached() {
        let cache = TokenCache::new(bounds(5_000, 100), bounds(1_000, 100));
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let results = futures_util::future::join_all(
            (0..10).map(|_| cache.principal(key(1), introspection(&calls, 50, Err("Q down")))),
        )
        .await;
        assert!(results.iter().all(|r| matches!(
            r.as_ref().map_err(|e| &**e),
            Err(Miss::Unavailable("Q down"))
        )));
        assert_eq!(calls_of(&calls), 1);
        let active = Ok(Verdict::Active(principal(&[])));
        assert!(cache
            .principal(key(1), introspection(&calls, 0, active))
            .await
            .is_ok());
        assert_eq!(calls_of(&calls), 2, "the failure was not kept");
    }

    #[tokio::test]
    async fn inactive_answers_are_kept_for_the_negative_ttl() {
        let cache = TokenCache::new(bounds(5_000, 100), bounds(150, 100));
        let calls = std::sync::atomic::AtomicUsize::new(0);
        for _ in 0..5 {
            let miss = cache
                .principal(key(1), introspection(&calls, 0, Ok(Verdict::Inactive)))
                .await
                .unwrap_err();
            assert!(matches!(*miss, Miss::Inactive));
        }
        assert_eq!(calls_of(&calls), 1);
        assert_eq!(cache.active.entry_count(), 0, "never in the active cache");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let active = Ok(Verdict::Active(principal(&[])));
        assert!(cache
            .principal(key(1), introspection(&calls, 0, active))
            .await
            .is_ok());
        assert_eq!(
            calls_of(&calls),
            2,
            "asked again once the negative entry expired"
        );
    }

    #[tokio::test]
    async fn active_answers_expire_after_the_ttl() {
        let cache = TokenCache::new(bounds(150, 100), bounds(1_000, 100));
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let active = Ok(Verdict::Active(principal(&[])));
        for _ in 0..3 {
            let found = cache.principal(key(1), introspection(&calls, 0, active.clone()));
            assert!(found.await.is_ok());
        }
        assert_eq!(calls_of(&calls), 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let revoked = cache.principal(key(1), introspection(&calls, 0, Ok(Verdict::Inactive)));
        assert!(matches!(*revoked.await.unwrap_err(), Miss::Inactive));
        assert_eq!(calls_of(&calls), 2);
    }

    /// Each cache holds at most its capacity, and a flood of inactive tokens leaves every
    /// active entry in place.
    #[tokio::test]
    async fn capacities_hold_and_inactive_tokens_cannot_evict_active_ones() {
        const ACTIVE: u64 = 50;
        const INACTIVE: u64 = 20;
        let cache = TokenCache::new(bounds(5_000, ACTIVE), bounds(5_000, INACTIVE));
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let active = Ok(Verdict::Active(principal(&[])));
        for n in 0..ACTIVE as u32 {
            let found = cache.principal(key(n), introspection(&calls, 0, active.clone()));
            assert!(found.await.is_ok());
        }
        for n in 1_000..1_500 {
            let miss = cache.principal(key(n), introspection(&calls, 0, Ok(Verdict::Inactive)));
            assert!(miss.await.is_err());
        }
        cache.active.run_pending_tasks().await;
        cache.inactive.run_pending_tasks().await;
        assert!(
            cache.inactive.entry_count() <= INACTIVE,
            "{}",
            cache.inactive.entry_count()
        );
        assert_eq!(cache.active.entry_count(), ACTIVE);
        let before = calls_of(&calls);
        for n in 0..ACTIVE as u32 {
            let found = cache.principal(key(n), introspection(&calls, 0, Ok(Verdict::Inactive)));
            assert!(found.await.is_ok(), "active entry {n} survived");
        }
        assert_eq!(calls_of(&calls), before, "all served from the cache");

        // Many more active tokens than the capacity: the active cache stays bounded.
        for n in 10_000..10_500 {
            let found = cache.principal(key(n), introspection(&calls, 0, active.clone()));
            assert!(found.await.is_ok());
        }
        cache.active.run_pending_tasks().await;
        assert!(
            cache.active.entry_count() <= ACTIVE,
            "{}",
            cache.active.entry_count()
        );
    }

    #[test]
    fn an_active_answer_without_identity_is_inactive() {
        let answer = |tenant: Option<&str>| Introspection {
            active: true,
            tenant_id: tenant.map(str::to_owned),
            principal_id: Some("p".into()),
            scopes: vec![],
            tenant_features: vec![],
        };
        assert!(matches!(Verdict::from(answer(None)), Verdict::Inactive));
        assert!(matches!(
            Verdict::from(answer(Some("t"))),
            Verdict::Active(_)
        ));
        let inactive = Introspection {
            active: false,
            ..answer(Some("t"))
        };
        assert!(matches!(Verdict::from(inactive), Verdict::Inactive));
    }

    #[test]
    fn feature_is_required() {
        let mut p = principal(&["ai:answer"]);
        assert!(p.require_feature().is_ok());
        p.tenant_features.clear();
        assert!(matches!(
            p.require_feature(),
            Err(HttpError::FeatureDisabled { .. })
        ));
    }
}
