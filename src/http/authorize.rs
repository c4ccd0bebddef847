//! The one authorisation stage of every authenticated route: the card, the RPC route and every
//! outbound route (registrations, discovery, delegation) run exactly this, in this order:
//!
//! | step | refusal |
//! |---|---|
//! | 1. bearer authentication through Q's introspection (short cache) | HTTP 401 (a malformed bearer value without asking Q); 429 `too_many_unknown_tokens` when a token neither cached nor known comes from a client address over its bucket (`crate::auth::unknown_tokens`); 503 if Q cannot say, or the introspection pool has no slot for the token (`crate::auth::pool`; within an opted-in outage grace, a token known from before Q went down passes as *last known*) |
//! | 2. the `agent_api` tenant feature | HTTP 403 `tenant_feature_disabled` |
//! | 3. the per-principal rate limit (a bucket per tenant + principal and admission class, shared by the replicas through Redis; per replica while Redis is unreachable) | HTTP 429 + `Retry-After` |
//! | 4. the route's scopes (wildcards accepted) | HTTP 403 `insufficient_scope`; HTTP 503 for a caller known only from before a Q outage, unless the method only reads (GetTask, ListTasks, answered content-free) |
//!
//! The rate limit comes before scopes so that a caller with the wrong scopes still spends its
//! bucket: a client hammering a route it may not use is slowed like any other.
//!
//! Each route or method belongs to one admission class, and each class has its own bucket per
//! principal (`[rate_limit]`):
//!
//! | class | routes and methods |
//! |---|---|
//! | [`AdmissionClass::General`] | the card, every outbound route, every RPC method but CancelTask (an unknown method too) |
//! | [`AdmissionClass::Cancellation`] | the RPC method CancelTask |
//!
//! Cancellation is apart because a principal must always be able to stop its work: streams and
//! subscriptions (attempts refused at the observer bounds included) spend the general bucket,
//! never the one CancelTask needs, as the profile requires ("observers cannot consume
//! cancellation admission").
//!
//! Steps 1-2 need only the headers, and every route runs them before it reads a byte of its
//! body: an unauthenticated client is answered without the gateway reading, buffering or
//! waiting for what it sends. The RPC route runs step 3 once it has decoded the envelope,
//! because the bucket is its method's ([`Authorizer::authenticate`], then
//! [`Authorizer::spend`]); every other route runs steps 1-3 at once ([`Authorizer::admit`]),
//! before its body too.
//!
//! Why an explicit stage object rather than a tower layer: the RPC route only knows its bucket
//! and its scopes after it has read the body and decoded the JSON-RPC method, so a layer in
//! front of the handler could not run steps 3-4. Splitting the stage into typed steps
//! ([`Authenticated`] after 1-2, [`Admitted`] after 3, the [`Principal`] after 4) keeps one
//! implementation for every route and makes the order a matter of types: no route can spend a
//! bucket without steps 1-2, nor get a `Principal` without 1-3, nor skip 4. Routes whose
//! scopes are fixed call [`Authorizer::authorize`], which is the whole stage at once.

use std::sync::Arc;

use axum::http::HeaderMap;

use crate::auth::{Authenticator, Identified, Principal};
use crate::error::HttpError;
use crate::http::rate_limit::PrincipalRateLimit;

/// Which per-principal bucket a request spends (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionClass {
    /// Everything but cancellation.
    General,
    /// CancelTask.
    Cancellation,
}

/// Authentication, tenant feature, rate limit and scopes: shared by every route family.
pub struct Authorizer {
    authenticator: Arc<Authenticator>,
    general: PrincipalRateLimit,
    cancellation: PrincipalRateLimit,
}

/// A caller past authentication and the tenant feature; its bucket is still to be spent.
#[derive(Debug)]
#[must_use = "an authenticated caller must still pass the rate limit and the scope check"]
pub struct Authenticated(Identified);

/// A caller past authentication, the tenant feature and the rate limit; its scopes are still
/// to be checked.
#[derive(Debug)]
#[must_use = "an admitted caller must still pass the scope check"]
pub struct Admitted(Identified);

impl Authorizer {
    /// `general` and `cancellation` are the buckets of the two admission classes.
    pub fn new(
        authenticator: Arc<Authenticator>,
        general: PrincipalRateLimit,
        cancellation: PrincipalRateLimit,
    ) -> Self {
        Authorizer {
            authenticator,
            general,
            cancellation,
        }
    }

    /// The authenticator, for observations that check their caller's token again.
    pub fn authenticator(&self) -> &Arc<Authenticator> {
        &self.authenticator
    }

    /// Steps 1-2, from the headers alone. Records tenant and principal on the request span.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Authenticated, HttpError> {
        let identified = self.authenticator.authenticate(headers).await?;
        let principal = &identified.principal;
        // One record of both: each record is a pass through every layer of the subscriber.
        tracing::record_all!(
            tracing::Span::current(),
            tenant = principal.tenant_id.as_str(),
            principal = principal.principal_id.as_str(),
        );
        principal.require_feature()?;
        Ok(Authenticated(identified))
    }

    /// Step 3: spends the caller's bucket of `class`.
    pub async fn spend(
        &self,
        caller: Authenticated,
        class: AdmissionClass,
    ) -> Result<Admitted, HttpError> {
        let bucket = match class {
            AdmissionClass::General => &self.general,
            AdmissionClass::Cancellation => &self.cancellation,
        };
        bucket.check(&caller.0.principal).await?;
        Ok(Admitted(caller.0))
    }

    /// Steps 1-3, spending the bucket of `class`.
    pub async fn admit(
        &self,
        headers: &HeaderMap,
        class: AdmissionClass,
    ) -> Result<Admitted, HttpError> {
        let caller = self.authenticate(headers).await?;
        self.spend(caller, class).await
    }

    /// The whole stage for a route whose scopes are known before its body is read (all of
    /// them in the general admission class).
    pub async fn authorize(
        &self,
        headers: &HeaderMap,
        scopes: &[&'static str],
    ) -> Result<Principal, HttpError> {
        self.admit(headers, AdmissionClass::General)
            .await?
            .require(scopes)
    }

    /// Who the credential belongs to, without authorising anything (no feature, bucket or
    /// scope check): for attributing calls to the retired routes, which answer 410 whoever
    /// calls them.
    pub async fn identify(&self, headers: &HeaderMap) -> Result<Principal, HttpError> {
        Ok(self.authenticator.authenticate(headers).await?.principal)
    }

    /// Forgets idle principals' and client addresses' buckets (bounded memory); called
    /// periodically.
    pub fn forget_idle(&self) {
        self.general.forget_idle();
        self.cancellation.forget_idle();
        self.authenticator.forget_idle();
    }
}

impl Admitted {
    /// Step 4: every scope in `scopes`, or HTTP 403 naming the missing ones.
    /// A caller authenticated only as last known (Q unreachable) is refused here with HTTP 503:
    /// it may only read ([`Admitted::require_to_read`]).
    pub fn require(self, scopes: &[&'static str]) -> Result<Principal, HttpError> {
        if self.0.last_known {
            return Err(HttpError::IdentityUnavailable {
                cause: "Q is down; only content-free reads are served to a last known identity"
                    .into(),
            });
        }
        Ok(self.require_to_read(scopes)?.principal)
    }

    /// Step 4 for a read (GetTask, ListTasks): a last known identity passes too, marked so
    /// (its reads are content-free receipts).
    pub fn require_to_read(self, scopes: &[&'static str]) -> Result<Identified, HttpError> {
        self.0.principal.require_scopes(scopes)?;
        Ok(self.0)
    }
}
