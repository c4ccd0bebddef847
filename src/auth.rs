//! Bearer authentication through Q's token introspection, the `agent_api` tenant feature and
//! per-method scopes.
//!
//! Introspection results are cached for a short TTL (default 5 s) in a bounded map keyed by the
//! token's sha256, so a revoked token stops working within one TTL and the cache never holds a
//! token in clear.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
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

struct Cached {
    introspection: Introspection,
    expires: Instant,
}

/// Authenticates bearer tokens against Q.
pub struct Authenticator {
    upstream: UpstreamRunApi,
    ttl: Duration,
    capacity: usize,
    cache: Mutex<HashMap<[u8; 32], Cached>>,
}

impl Authenticator {
    pub fn new(upstream: UpstreamRunApi, ttl: Duration, capacity: usize) -> Self {
        Authenticator {
            upstream,
            ttl,
            capacity: capacity.max(1),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Authenticates the request's bearer token; does not check features or scopes.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, HttpError> {
        let token = bearer_token(headers).ok_or(HttpError::MissingCredential)?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let introspection = match self.cached(&key) {
            Some(hit) => hit,
            None => {
                let fresh = self
                    .upstream
                    .introspect(token)
                    .await
                    .map_err(|e| identity_unavailable(&e))?;
                self.store(key, fresh.clone());
                fresh
            }
        };
        match introspection {
            Introspection {
                active: true,
                tenant_id: Some(tenant_id),
                principal_id: Some(principal_id),
                scopes,
                tenant_features,
            } => Ok(Principal {
                tenant_id,
                principal_id,
                scopes,
                tenant_features,
            }),
            _ => Err(HttpError::InvalidCredential),
        }
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Introspection> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(key)
            .filter(|c| c.expires > Instant::now())
            .map(|c| c.introspection.clone())
    }

    fn store(&self, key: [u8; 32], introspection: Introspection) {
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= self.capacity {
            cache.retain(|_, c| c.expires > now);
        }
        if cache.len() >= self.capacity {
            // Still full of live entries: drop one rather than grow without bound.
            if let Some(victim) = cache.keys().next().copied() {
                cache.remove(&victim);
            }
        }
        cache.insert(
            key,
            Cached {
                introspection,
                expires: now + self.ttl,
            },
        );
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
