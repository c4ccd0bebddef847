//! The one authorisation stage of every authenticated route: the card, the RPC route and every
//! outbound route (registrations, discovery, delegation) run exactly this, in this order:
//!
//! | step | refusal |
//! |---|---|
//! | 1. bearer authentication through Q's introspection (short cache) | HTTP 401 (503 if Q is unreachable) |
//! | 2. the `agent_api` tenant feature | HTTP 403 `tenant_feature_disabled` |
//! | 3. the per-principal rate limit (one bucket per tenant + principal, per replica) | HTTP 429 + `Retry-After` |
//! | 4. the route's scopes (wildcards accepted) | HTTP 403 `insufficient_scope` |
//!
//! The rate limit comes before scopes so that a caller with the wrong scopes still spends its
//! bucket: a client hammering a route it may not use is slowed like any other.
//!
//! Steps 1-3 need only the headers, and every route runs them before it reads a byte of its
//! body: an unauthenticated or throttled client is answered without the gateway reading,
//! buffering or waiting for what it sends.
//!
//! Why an explicit stage object rather than a tower layer: the RPC route only knows which
//! scopes it needs after it has read the body and decoded the JSON-RPC method, so a layer in
//! front of the handler could not run step 4. Splitting the stage instead into [`Authorizer::admit`] (steps 1-3, yielding an
//! [`Admitted`] caller) and [`Admitted::require`] (step 4, yielding the [`Principal`]) keeps
//! one implementation for every route and makes the order a matter of types: no route can get
//! a `Principal` without going through steps 1-3 first, nor skip step 4. Routes whose scopes
//! are fixed call [`Authorizer::authorize`], which is the two in sequence.

use axum::http::HeaderMap;

use crate::auth::{Authenticator, Principal};
use crate::error::HttpError;
use crate::http::rate_limit::PrincipalRateLimit;

/// Authentication, tenant feature, rate limit and scopes: shared by every route family.
pub struct Authorizer {
    authenticator: Authenticator,
    rate_limit: PrincipalRateLimit,
}

/// A caller past authentication, the tenant feature and the rate limit; its scopes are still
/// to be checked.
#[derive(Debug)]
#[must_use = "an admitted caller must still pass the scope check"]
pub struct Admitted(Principal);

impl Authorizer {
    pub fn new(authenticator: Authenticator, rate_limit: PrincipalRateLimit) -> Self {
        Authorizer {
            authenticator,
            rate_limit,
        }
    }

    /// Steps 1-3. Records tenant and principal on the request span.
    pub async fn admit(&self, headers: &HeaderMap) -> Result<Admitted, HttpError> {
        let principal = self.authenticator.authenticate(headers).await?;
        let span = tracing::Span::current();
        span.record("tenant", principal.tenant_id.as_str());
        span.record("principal", principal.principal_id.as_str());
        principal.require_feature()?;
        self.rate_limit.check(&principal)?;
        Ok(Admitted(principal))
    }

    /// The whole stage for a route whose scopes are known before its body is read.
    pub async fn authorize(
        &self,
        headers: &HeaderMap,
        scopes: &[&'static str],
    ) -> Result<Principal, HttpError> {
        self.admit(headers).await?.require(scopes)
    }

    /// Who the credential belongs to, without authorising anything (no feature, bucket or
    /// scope check): for attributing calls to the retired routes, which answer 410 whoever
    /// calls them.
    pub async fn identify(&self, headers: &HeaderMap) -> Result<Principal, HttpError> {
        self.authenticator.authenticate(headers).await
    }

    /// Forgets idle principals' buckets (bounded memory); called periodically.
    pub fn forget_idle(&self) {
        self.rate_limit.forget_idle();
    }
}

impl Admitted {
    /// Step 4: every scope in `scopes`, or HTTP 403 naming the missing ones.
    pub fn require(self, scopes: &[&'static str]) -> Result<Principal, HttpError> {
        self.0.require_scopes(scopes)?;
        Ok(self.0)
    }
}
