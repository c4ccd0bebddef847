//! Outbound: Q calling remote A2A agents on a tenant's behalf (docs/outbound.md).
//!
//! - [`registrations`]: `/v1/a2a/agents` management API and card discovery
//! - [`card_trust`]: a registration's trust in its remote's card signatures
//! - [`delegation`]: `POST /v1/a2a/tasks`, the delegation wrapper
//! - [`client`]: the JSON-RPC client every remote call goes through
//! - [`policy`]: the one address/URL policy, enforced at connect time
//! - [`credential`]: AES-256-GCM sealing of credentials, bound to tenant, registration, origin
//! - [`limits`]: per-tenant caps on delegations and discoveries in flight, across replicas

pub mod card_trust;
pub mod client;
pub mod credential;
pub mod delegation;
pub mod limits;
pub mod policy;
pub mod registrations;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;

use crate::a2a::cursor::CursorCodec;
use crate::auth::Principal;
use crate::config::OutboundConfig;
use crate::error::HttpError;
use crate::http::authorize::Authorizer;
use crate::http::body_limit;
use crate::shared_limits::SharedLimits;
use crate::store::outbound::{PgOutboundStore, Registration};
use client::{OutboundError, RemoteAgentClient};
use credential::{BearerCredential, Binding, CredentialKeys};
use limits::{Busy, TenantLimiter, TenantPermit};
use policy::{origin, DnsSettings, OutboundPolicy, PolicyRefusal, PolicyResolver};

/// Settings of the outbound routes, typed once at start-up.
#[derive(Debug, Clone)]
pub struct OutboundSettings {
    /// The gateway's public base URL (local agents' A2A URLs in a retired-route answer).
    pub public_base: String,
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Most characters of text in a delegated message.
    pub max_text_chars: usize,
    /// Longest a delegation waits for the remote task to settle.
    pub delegation_wait: Duration,
    /// Pause between reads of a remote task while waiting.
    pub poll_interval: Duration,
    /// Largest delegation result stored, bytes of JSON.
    pub max_stored_result_bytes: usize,
    /// Most registrations one tenant may hold.
    pub max_registrations: i64,
}

/// What the outbound routes use, built once at start-up: the authorisation stage, the
/// registration and delegation store, the policy-enforcing client and the credential keys.
pub struct OutboundRoutes {
    pub authorizer: Arc<Authorizer>,
    pub store: PgOutboundStore,
    pub client: RemoteAgentClient,
    pub keys: CredentialKeys,
    pub settings: OutboundSettings,
    /// Delegations in flight per tenant.
    pub delegations: TenantLimiter,
    /// Card discoveries in flight per tenant.
    pub discoveries: TenantLimiter,
    /// Signs the registration listing's page tokens (the key ListTasks' are signed with).
    pub cursors: CursorCodec,
}

impl OutboundRoutes {
    /// With `shared`, the per-tenant caps hold across replicas.
    pub fn new(
        config: &OutboundConfig,
        authorizer: Arc<Authorizer>,
        store: PgOutboundStore,
        settings: OutboundSettings,
        shared: Option<SharedLimits>,
        cursors: CursorCodec,
    ) -> anyhow::Result<Self> {
        let policy = Arc::new(OutboundPolicy::new(config.allow_http, config.allow_nets()?));
        let resolver = PolicyResolver::system(
            policy,
            DnsSettings {
                timeout: Duration::from_millis(config.dns_timeout_ms),
                attempts: config.dns_attempts,
            },
        )
        .map_err(|e| anyhow::anyhow!("outbound DNS resolver: {e}"))?;
        // Parsed here rather than when the configuration loads: the configuration sits below
        // the services that use it. `preflight` reports the same check.
        let keys = CredentialKeys::parse(
            config.credential_keys.expose(),
            &config.credential_active_key,
        )
        .map_err(|e| anyhow::anyhow!("outbound credential keys: {e}"))?;
        Ok(OutboundRoutes {
            authorizer,
            store,
            client: RemoteAgentClient::new(config, Arc::new(resolver))?,
            keys,
            settings,
            delegations: TenantLimiter::new(
                "delegations",
                config.tenant_delegations,
                config.principal_delegations,
                shared.clone(),
            ),
            discoveries: TenantLimiter::new(
                "discoveries",
                config.tenant_discoveries,
                config.principal_discoveries,
                shared,
            ),
            cursors,
        })
    }
}

impl OutboundRoutes {
    /// Opens a registration's credential for its current endpoint origin, with that origin.
    /// `Err` means it cannot be used (missing key, moved origin, tampered row): the call that
    /// needs it is not made.
    pub(crate) fn open_credential(
        &self,
        registration: &Registration,
    ) -> Result<Option<(BearerCredential, String)>, OutboundError> {
        let Some(sealed) = &registration.credential else {
            return Ok(None);
        };
        let url = self.client.policy().check_url(&registration.endpoint)?;
        let origin = origin(&url);
        let credential = self
            .keys
            .open(
                sealed,
                Binding {
                    tenant_id: &registration.tenant_id,
                    registration_id: &registration.id,
                    origin: &origin,
                },
            )
            .map_err(|e| {
                tracing::error!(registration = %registration.id, error = %e, "stored credential unusable");
                OutboundError::Policy(PolicyRefusal {
                    reason: "credential_unusable",
                    target: registration.id.clone(),
                })
            })?;
        Ok(Some((credential, origin)))
    }
}

impl OutboundRoutes {
    /// A place for one more delegation of `principal`, or 429 before anything is written.
    pub(crate) async fn delegation_permit(
        &self,
        principal: &Principal,
    ) -> Result<TenantPermit, HttpError> {
        permit(&self.delegations, principal).await
    }

    /// A place for one more card discovery of `principal`, or 429.
    pub(crate) async fn discovery_permit(
        &self,
        principal: &Principal,
    ) -> Result<TenantPermit, HttpError> {
        permit(&self.discoveries, principal).await
    }
}

/// A place in `limiter` for one more call of `principal`, or 429 naming the limit reached
/// (counted in `a2a_outbound_refusals_total`).
async fn permit(limiter: &TenantLimiter, principal: &Principal) -> Result<TenantPermit, HttpError> {
    limiter
        .acquire(&principal.tenant_id, &principal.principal_id)
        .await
        .map_err(|busy| {
            crate::metrics::outbound_refused(limiter.kind(), busy.scope());
            match busy {
                Busy::Tenant => HttpError::TenantBusy {
                    calls: limiter.kind(),
                },
                Busy::Principal => HttpError::PrincipalBusy {
                    calls: limiter.kind(),
                },
            }
        })
}

/// Registration ids carry this prefix, so they never collide with Q agent ids.
pub const REGISTRATION_PREFIX: &str = "reg-";

/// Reads a JSON body within the body limit.
pub(crate) async fn read_json<T: DeserializeOwned>(
    max_body_bytes: usize,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, HttpError> {
    let bytes = body_limit::read(body, headers, max_body_bytes).await?;
    serde_json::from_slice(&bytes).map_err(|e| HttpError::Invalid {
        field: "body".into(),
        message: format!("invalid JSON body: {e}"),
    })
}

pub(crate) fn invalid(field: &str, message: impl Into<String>) -> HttpError {
    HttpError::Invalid {
        field: field.to_string(),
        message: message.into(),
    }
}
