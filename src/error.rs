//! The one rescue point: every failure of the A2A routes becomes a response here and nowhere
//! else.
//!
//! Two families, because A2A's JSON-RPC binding has two:
//! - [`HttpError`]: the request never reached JSON-RPC semantics (profile off, body too large,
//!   missing or bad credentials, missing scope, tenant feature off, unknown agent). These are
//!   HTTP statuses with a small JSON body, as any HTTP client or proxy expects.
//! - [`RpcError`]: a JSON-RPC error object, always HTTP 200, with `data` an array whose first
//!   element is a `google.rpc.ErrorInfo` (reason, domain `a2a-protocol.org`, metadata), plus a
//!   `google.rpc.BadRequest` for field violations, exactly as the official SDK emits them.
//!
//! [`Fault`] is either of the two: what a stage or a method fails with. Every mapping from a
//! domain failure (store, Q, lease store) to one of them is in this file, and so is the only
//! logging of those failures: at the rescue point, when the answer is written ([`respond`],
//! [`HttpError`]'s `IntoResponse`), never inside a conversion.

use a2a::error_code;
use a2a::JsonRpcId;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::lease::LeaseError;
use crate::outbound::client::OutboundError;
use crate::outbound::credential::CredentialError;
use crate::store::StoreError;
use crate::upstream::UpstreamError;

const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";
const DOMAIN: &str = "a2a-protocol.org";

/// A JSON-RPC error with its ErrorInfo metadata and field violations.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    pub metadata: Map<String, Value>,
    pub violations: Vec<(String, String)>,
    /// What went wrong inside, for the log written at the rescue point; never sent.
    pub cause: Option<Box<str>>,
}

impl RpcError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            metadata: Map::new(),
            violations: Vec::new(),
            cause: None,
        }
    }

    /// Attaches the internal cause the rescue point logs (never part of the answer).
    pub fn caused_by(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string().into_boxed_str());
        self
    }

    pub fn with_meta(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata
            .insert(key.to_string(), Value::String(value.into()));
        self
    }

    pub fn parse_error(detail: impl Into<String>) -> Self {
        RpcError::new(error_code::PARSE_ERROR, detail)
    }
    pub fn invalid_request(message: impl Into<String>) -> Self {
        RpcError::new(error_code::INVALID_REQUEST, message)
    }
    pub fn method_not_found() -> Self {
        RpcError::new(error_code::METHOD_NOT_FOUND, "Method not found")
    }
    /// -32602 for one field, named by its JSON (camelCase) path.
    pub fn invalid_field(field: &str, description: impl Into<String>) -> Self {
        let description = description.into();
        let mut e = RpcError::new(
            error_code::INVALID_PARAMS,
            format!("Invalid params: {field}: {description}"),
        );
        e.violations.push((field.to_string(), description));
        e
    }
    pub fn internal() -> Self {
        RpcError::new(error_code::INTERNAL_ERROR, "Internal error")
    }
    /// Q could not be reached or answered unexpectedly; the caller may retry the same request.
    pub fn upstream_unavailable() -> Self {
        RpcError::new(
            error_code::INTERNAL_ERROR,
            "Q is temporarily unavailable; retry the same request",
        )
        .with_meta("retryable", "true")
    }
    pub fn task_not_found() -> Self {
        RpcError::new(error_code::TASK_NOT_FOUND, "Task not found")
    }
    pub fn push_not_supported() -> Self {
        RpcError::new(
            error_code::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "Push Notification is not supported",
        )
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        RpcError::new(error_code::UNSUPPORTED_OPERATION, message)
    }
    pub fn content_type_not_supported(message: impl Into<String>) -> Self {
        RpcError::new(error_code::CONTENT_TYPE_NOT_SUPPORTED, message)
    }
    pub fn invalid_agent_response(message: impl Into<String>) -> Self {
        RpcError::new(error_code::INVALID_AGENT_RESPONSE, message)
    }
    pub fn version_not_supported(requested: &str) -> Self {
        RpcError::new(
            error_code::VERSION_NOT_SUPPORTED,
            format!(
                "A2A version '{requested}' is not supported by this agent. Supported version: '1.0'."
            ),
        )
        .with_meta("requestedVersion", requested)
        .with_meta("supportedVersions", "1.0")
    }

    /// The JSON-RPC `error` object.
    pub fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        // The SDK sends no data for parse errors and unknown methods; do the same.
        if self.code != error_code::PARSE_ERROR && self.code != error_code::METHOD_NOT_FOUND {
            let mut data = vec![json!({
                "@type": ERROR_INFO_TYPE,
                "reason": a2a::error_reason(self.code),
                "domain": DOMAIN,
                "metadata": self.metadata,
            })];
            if !self.violations.is_empty() {
                let violations: Vec<Value> = self
                    .violations
                    .iter()
                    .map(|(field, description)| json!({"field": field, "description": description}))
                    .collect();
                data.push(json!({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations}));
            }
            error.insert("data".into(), Value::Array(data));
        }
        Value::Object(error)
    }
}

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
    #[error("reading the request body failed")]
    BodyRead,
    #[error("the request body was not received in time")]
    BodyTimeout,
    #[error("request rate limit exceeded for this principal")]
    RateLimited { retry_after_seconds: u64 },
    #[error("too many concurrent observations ({scope} bound); close a stream or retry later")]
    ObserverLimit { scope: &'static str },
    #[error("observation is unavailable (lease store unreachable); use GetTask or retry later")]
    ObservationUnavailable,
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
            HttpError::IdentityUnavailable { .. } | HttpError::UpstreamUnavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            HttpError::BodyRead | HttpError::Invalid { .. } => StatusCode::BAD_REQUEST,
            HttpError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            HttpError::RateLimited { .. } | HttpError::ObserverLimit { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            HttpError::ObservationUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            HttpError::Gone { .. } => StatusCode::GONE,
            HttpError::Conflict { .. } => StatusCode::CONFLICT,
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
            HttpError::BodyRead => "bad_request",
            HttpError::BodyTimeout => "request_timeout",
            HttpError::RateLimited { .. } => "rate_limited",
            HttpError::ObserverLimit { .. } => "observer_limit",
            HttpError::ObservationUnavailable => "observation_unavailable",
            HttpError::Gone { .. } => "gone",
            HttpError::Invalid { .. } => "invalid_request",
            HttpError::Conflict { code, .. } => code,
            HttpError::LocalTargetRetired { .. } => "local_target_retired",
            HttpError::CredentialStoreUnavailable => "credential_store_unavailable",
            HttpError::RemoteFailed { .. } => "remote_agent_failed",
            HttpError::Internal { .. } => "internal_error",
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        match &self {
            HttpError::Internal { cause } => tracing::error!(%cause, "internal error"),
            HttpError::UpstreamUnavailable { cause } | HttpError::IdentityUnavailable { cause } => {
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
            HttpError::ObserverLimit { scope } => body["scope"] = json!(scope),
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
            | HttpError::ObservationUnavailable => Some(1),
            HttpError::ObserverLimit { .. } => Some(5),
            HttpError::RateLimited {
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

/// A JSON-RPC response (success or error) for one request id. The one place a JSON-RPC error
/// is logged.
pub fn rpc_response(id: &JsonRpcId, outcome: Result<Value, RpcError>) -> Response {
    let body = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => {
            log_rpc_error(&error);
            json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
        }
    };
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// Logs a JSON-RPC error once, with its internal cause when it has one.
pub fn log_rpc_error(error: &RpcError) {
    match &error.cause {
        Some(cause) if error.code == error_code::INTERNAL_ERROR => {
            tracing::warn!(code = error.code, message = %error.message, %cause, "rpc error")
        }
        Some(cause) => {
            tracing::info!(code = error.code, message = %error.message, %cause, "rpc error")
        }
        None => tracing::info!(code = error.code, message = %error.message, "rpc error"),
    }
}

/// How a stage or a method fails: an HTTP refusal, or a JSON-RPC error (answered with the
/// request's id once it is known).
#[derive(Debug)]
pub enum Fault {
    Http(HttpError),
    Rpc(RpcError),
}

impl From<RpcError> for Fault {
    fn from(e: RpcError) -> Self {
        Fault::Rpc(e)
    }
}

impl From<HttpError> for Fault {
    fn from(e: HttpError) -> Self {
        Fault::Http(e)
    }
}

/// The answer for a fault of the RPC route: HTTP refusals as they are; JSON-RPC errors under
/// the request's id (JSON-RPC's `null` id before the envelope was read).
pub fn respond(id: &JsonRpcId, fault: Fault) -> Response {
    match fault {
        Fault::Http(e) => e.into_response(),
        Fault::Rpc(e) => rpc_response(id, Err(e)),
    }
}

// --- Domain failures → protocol errors -------------------------------------------------------

/// A store failure inside a JSON-RPC method: -32603, cause logged at the rescue point.
impl From<StoreError> for RpcError {
    fn from(e: StoreError) -> Self {
        RpcError::internal().caused_by(format!("store: {e}"))
    }
}

impl From<StoreError> for Fault {
    fn from(e: StoreError) -> Self {
        Fault::Rpc(e.into())
    }
}

/// A store failure on an HTTP route (outbound management and delegation): 500.
impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        HttpError::Internal {
            cause: format!("store: {e}"),
        }
    }
}

/// Q's identity service could not say who a token is: HTTP 503, the caller may retry.
pub fn identity_unavailable(e: &UpstreamError) -> HttpError {
    HttpError::IdentityUnavailable {
        cause: format!("token introspection failed ({}): {e}", e.kind()),
    }
}

/// Q's agent API could not say whether the agent exists for this caller: HTTP 503.
pub fn agent_lookup_failed(e: &UpstreamError) -> HttpError {
    HttpError::UpstreamUnavailable {
        cause: format!("agent lookup failed ({}): {e}", e.kind()),
    }
}

/// Q could not answer a read of a JSON-RPC method: -32603, retryable.
pub fn upstream_read_failed(e: &UpstreamError) -> RpcError {
    RpcError::upstream_unavailable().caused_by(format!("Q read failed ({}): {e}", e.kind()))
}

impl From<UpstreamError> for Fault {
    fn from(e: UpstreamError) -> Self {
        Fault::Rpc(upstream_read_failed(&e))
    }
}

/// Q did not confirm a cancellation: -32603, retryable, the cancellation stays persisted.
pub fn cancel_not_confirmed(e: &UpstreamError) -> RpcError {
    RpcError::upstream_unavailable()
        .with_meta("cancellationPersisted", "true")
        .caused_by(format!(
            "cancel not confirmed by Q ({}); persisted for the reconciler: {e}",
            e.kind()
        ))
}

/// An observer lease refused: HTTP 429 over a bound, 503 with the lease store down.
impl From<LeaseError> for HttpError {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::AtBound(scope) => HttpError::ObserverLimit {
                scope: scope.as_str(),
            },
            LeaseError::Unavailable(_) => HttpError::ObservationUnavailable,
        }
    }
}

/// A credential that cannot be sealed (no key configured): HTTP 503, nothing stored.
pub fn credential_not_stored(_: &CredentialError) -> HttpError {
    HttpError::CredentialStoreUnavailable
}

/// A remote agent's card could not be fetched: HTTP 502 with the policy's or transport's
/// reason.
pub fn discovery_failed(e: &OutboundError) -> HttpError {
    HttpError::RemoteFailed {
        reason: e.reason(),
        message: format!("card discovery failed: {e}"),
    }
}

/// A result that cannot be serialised (never expected): -32603.
pub fn serialization_failed(e: serde_json::Error) -> RpcError {
    RpcError::internal().caused_by(format!("result serialization failed: {e}"))
}

#[cfg(test)]
mod tests;
