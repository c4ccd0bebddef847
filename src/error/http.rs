//! HTTP refusals: failures answered with an HTTP status before JSON-RPC semantics apply, with
//! their small JSON body, `WWW-Authenticate` and `Retry-After` headers.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Failures answered with an HTTP status before JSON-RPC semantics apply.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpError {
    #[error("not found")]
    NotFound,
    #[error("agent not found")]
    AgentNotFound,
    #[error("request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("missing or malformed bearer credential")]
    MissingCredential,
    #[error("credential is not active")]
    InvalidCredential,
    #[error("credential lacks scopes {missing:?}")]
    InsufficientScope { missing: Vec<&'static str> },
    #[error("tenant feature {feature} is not enabled")]
    FeatureDisabled { feature: &'static str },
    #[error("no access to the agent's workspace")]
    WorkspaceAccessDenied,
    /// `cause` is logged at the rescue point, never sent.
    #[error("identity service unavailable")]
    IdentityUnavailable { cause: String },
    /// `cause` is logged at the rescue point, never sent.
    #[error("Q is unavailable")]
    UpstreamUnavailable { cause: String },
    /// PostgreSQL has no writable primary within reach right now (a failover, a restart);
    /// `cause` is logged at the rescue point, never sent.
    #[error("the gateway's database is temporarily unavailable; retry the same request")]
    StoreUnavailable { cause: String },
    #[error("reading the request body failed")]
    BodyRead,
    #[error("the request body was not received in time")]
    BodyTimeout,
    #[error("request rate limit exceeded for this principal")]
    RateLimited { retry_after_seconds: u64 },
    /// This client address sent more requests with tokens the gateway does not know (neither
    /// cached nor seen active) than its bucket allows; Q was not asked.
    #[error("too many requests with unknown tokens from this address; retry later")]
    TooManyUnknownTokens { retry_after_seconds: u64 },
    #[error("too many concurrent observations ({scope} bound); close a stream or retry later")]
    ObserverLimit { scope: &'static str },
    /// The tenant has as many outbound calls of this kind in flight as it may.
    #[error("too many {calls} in flight for this tenant; retry later; nothing was sent or stored")]
    TenantBusy { calls: &'static str },
    /// The principal has its share of its tenant's outbound calls of this kind in flight.
    #[error(
        "too many {calls} in flight for this principal (its share of the tenant's); retry later; nothing was sent or stored"
    )]
    PrincipalBusy { calls: &'static str },
    #[error("observation is unavailable (lease store unreachable); use GetTask or retry later")]
    ObservationUnavailable,
    /// Answers not yet taken by their clients fill the `scope` budget (`connection` or
    /// `process`); the answer was dropped.
    #[error("too many answers are waiting for their clients ({scope} budget); retry later")]
    ResponseBufferFull { scope: &'static str },
    #[error("this route was retired; use {replacement}")]
    Gone {
        replacement: &'static str,
        guide: &'static str,
    },
    /// A management or delegation request that fails validation.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The same caller-chosen id was used with other content; nothing changed.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// Delegation to a local `q.*` agent: retired; use the agent's own A2A interface.
    #[error("delegation to local agent {agent_id} is retired; use its A2A interface")]
    LocalTargetRetired {
        agent_id: String,
        card_url: String,
        rpc_url: String,
    },
    /// Credentials cannot be stored: no credential key is configured.
    #[error("credential storage is not configured on this gateway")]
    CredentialStoreUnavailable,
    /// A remote agent could not be used (discovery); `reason` is the outbound policy's or
    /// transport's.
    #[error("{message}")]
    RemoteFailed {
        reason: &'static str,
        message: String,
    },
    /// Delegation to a registration whose trust policy is `require`, while its remote's card
    /// is not verified; `reason` is the last check's (or `not_discovered`).
    #[error(
        "this registration requires its remote's card to be signed by one of its trusted keys \
         (cardTrust.policy \"require\"), and it is not verified ({reason}); discover the card \
         again once the remote serves one that verifies; nothing was sent"
    )]
    CardNotVerified { reason: String },
    /// `cause` is logged at the rescue point, never sent.
    #[error("internal error")]
    Internal { cause: String },
}

impl HttpError {
    fn status(&self) -> StatusCode {
        match self {
            HttpError::NotFound | HttpError::AgentNotFound => StatusCode::NOT_FOUND,
            HttpError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            HttpError::MissingCredential | HttpError::InvalidCredential => StatusCode::UNAUTHORIZED,
            HttpError::InsufficientScope { .. }
            | HttpError::FeatureDisabled { .. }
            | HttpError::WorkspaceAccessDenied => StatusCode::FORBIDDEN,
            HttpError::IdentityUnavailable { .. }
            | HttpError::UpstreamUnavailable { .. }
            | HttpError::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            HttpError::BodyRead | HttpError::Invalid { .. } => StatusCode::BAD_REQUEST,
            HttpError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            HttpError::RateLimited { .. }
            | HttpError::TooManyUnknownTokens { .. }
            | HttpError::ObserverLimit { .. }
            | HttpError::TenantBusy { .. }
            | HttpError::PrincipalBusy { .. } => StatusCode::TOO_MANY_REQUESTS,
            HttpError::ObservationUnavailable | HttpError::ResponseBufferFull { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            HttpError::Gone { .. } => StatusCode::GONE,
            HttpError::Conflict { .. } | HttpError::CardNotVerified { .. } => StatusCode::CONFLICT,
            HttpError::LocalTargetRetired { .. } => StatusCode::GONE,
            HttpError::CredentialStoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            HttpError::RemoteFailed { .. } => StatusCode::BAD_GATEWAY,
            HttpError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            HttpError::NotFound => "not_found",
            HttpError::AgentNotFound => "agent_not_found",
            HttpError::PayloadTooLarge { .. } => "payload_too_large",
            HttpError::MissingCredential => "unauthorized",
            HttpError::InvalidCredential => "invalid_token",
            HttpError::InsufficientScope { .. } => "insufficient_scope",
            HttpError::FeatureDisabled { .. } => "tenant_feature_disabled",
            HttpError::WorkspaceAccessDenied => "workspace_access_denied",
            HttpError::IdentityUnavailable { .. } => "identity_unavailable",
            HttpError::UpstreamUnavailable { .. } => "upstream_unavailable",
            HttpError::StoreUnavailable { .. } => "store_unavailable",
            HttpError::BodyRead => "bad_request",
            HttpError::BodyTimeout => "request_timeout",
            HttpError::RateLimited { .. } => "rate_limited",
            HttpError::TooManyUnknownTokens { .. } => "too_many_unknown_tokens",
            HttpError::ObserverLimit { .. } => "observer_limit",
            HttpError::TenantBusy { .. } => "tenant_concurrency_limit",
            HttpError::PrincipalBusy { .. } => "principal_concurrency_limit",
            HttpError::ObservationUnavailable => "observation_unavailable",
            HttpError::ResponseBufferFull { .. } => "response_buffer_full",
            HttpError::Gone { .. } => "gone",
            HttpError::Invalid { .. } => "invalid_request",
            HttpError::Conflict { code, .. } => code,
            HttpError::LocalTargetRetired { .. } => "local_target_retired",
            HttpError::CredentialStoreUnavailable => "credential_store_unavailable",
            HttpError::RemoteFailed { .. } => "remote_agent_failed",
            HttpError::CardNotVerified { .. } => "card_not_verified",
            HttpError::Internal { .. } => "internal_error",
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        match &self {
            HttpError::Internal { cause } => tracing::error!(%cause, "internal error"),
            HttpError::UpstreamUnavailable { cause }
            | HttpError::IdentityUnavailable { cause }
            | HttpError::StoreUnavailable { cause } => {
                tracing::warn!(error = %self, %cause, "dependency unavailable")
            }
            HttpError::CredentialStoreUnavailable => {
                tracing::warn!(error = %self, "credential not stored")
            }
            HttpError::RemoteFailed { reason, message } => {
                tracing::warn!(reason, %message, "remote agent call failed")
            }
            _ => {}
        }
        let mut body = json!({"error": self.code(), "message": self.to_string()});
        match &self {
            HttpError::InsufficientScope { missing } => body["requiredScopes"] = json!(missing),
            HttpError::FeatureDisabled { feature } => body["feature"] = json!(feature),
            HttpError::PayloadTooLarge { limit } => body["limitBytes"] = json!(limit),
            HttpError::ObserverLimit { scope } | HttpError::ResponseBufferFull { scope } => {
                body["scope"] = json!(scope)
            }
            HttpError::Gone { replacement, guide } => {
                body["replacement"] = json!(replacement);
                body["migrationGuide"] = json!(guide);
            }
            HttpError::Invalid { field, .. } => body["field"] = json!(field),
            HttpError::LocalTargetRetired {
                agent_id,
                card_url,
                rpc_url,
            } => {
                body["agentId"] = json!(agent_id);
                body["a2a"] = json!({"agentCardUrl": card_url, "rpcUrl": rpc_url});
            }
            HttpError::RemoteFailed { reason, .. } => body["reason"] = json!(reason),
            HttpError::CardNotVerified { reason } => body["reason"] = json!(reason),
            _ => {}
        }
        let mut response = (self.status(), axum::Json(body)).into_response();
        let headers = response.headers_mut();
        // RFC 6750 §3: tell the client which bearer problem it has.
        let challenge = match &self {
            HttpError::MissingCredential => Some("Bearer".to_string()),
            HttpError::InvalidCredential => Some("Bearer error=\"invalid_token\"".to_string()),
            HttpError::InsufficientScope { missing } => Some(format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\"",
                missing.join(" ")
            )),
            _ => None,
        };
        if let Some(challenge) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            headers.insert(header::WWW_AUTHENTICATE, challenge);
        }
        let retry_after = match &self {
            HttpError::IdentityUnavailable { .. }
            | HttpError::UpstreamUnavailable { .. }
            | HttpError::StoreUnavailable { .. }
            | HttpError::ObservationUnavailable
            | HttpError::ResponseBufferFull { .. } => Some(1),
            HttpError::ObserverLimit { .. } => Some(5),
            HttpError::TenantBusy { .. } | HttpError::PrincipalBusy { .. } => Some(2),
            HttpError::RateLimited {
                retry_after_seconds,
            }
            | HttpError::TooManyUnknownTokens {
                retry_after_seconds,
            } => Some((*retry_after_seconds).max(1)),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
