//! Outbound: Q calling remote A2A agents on a tenant's behalf (docs/outbound.md).
//!
//! - [`registrations`]: `/v1/a2a/agents` management API and card discovery
//! - [`delegation`]: `POST /v1/a2a/tasks`, the delegation wrapper
//! - [`client`]: the JSON-RPC client every remote call goes through
//! - [`policy`]: the one address/URL policy, enforced at connect time
//! - [`credential`]: AES-256-GCM sealing of credentials, bound to tenant, registration, origin

pub mod client;
pub mod credential;
pub mod delegation;
pub mod policy;
pub mod registrations;

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use serde::de::DeserializeOwned;

use crate::auth::Principal;
use crate::config::Config;
use crate::error::HttpError;
use crate::http::body_limit;
use crate::server::AppState;
use crate::store::StoreError;
use client::RemoteAgentClient;
use credential::CredentialKeys;
use policy::OutboundPolicy;

/// The outbound side's shared parts.
#[derive(Debug)]
pub struct Outbound {
    pub client: RemoteAgentClient,
    pub keys: CredentialKeys,
}

impl Outbound {
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let outbound = &config.outbound;
        let policy = Arc::new(OutboundPolicy::new(
            outbound.allow_http,
            outbound.allow_nets()?,
        ));
        let keys = CredentialKeys::parse(
            outbound.credential_keys.expose(),
            &outbound.credential_active_key,
        )?;
        Ok(Outbound {
            client: RemoteAgentClient::new(outbound, policy)?,
            keys,
        })
    }
}

/// Registration ids carry this prefix, so they never collide with Q agent ids.
pub const REGISTRATION_PREFIX: &str = "reg-";

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store failure");
        HttpError::Internal
    }
}

/// Authentication, the tenant feature and `scopes`, in the order the RPC route uses.
pub(crate) async fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    scopes: &[&'static str],
) -> Result<Principal, HttpError> {
    let principal = state.auth.authenticate(headers).await?;
    let span = tracing::Span::current();
    span.record("tenant", principal.tenant_id.as_str());
    span.record("principal", principal.principal_id.as_str());
    principal.require_feature()?;
    principal.require_scopes(scopes)?;
    Ok(principal)
}

/// Reads a JSON body within the body limit.
pub(crate) async fn read_json<T: DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, HttpError> {
    let bytes = body_limit::read(body, headers, state.config.limits.max_body_bytes).await?;
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
