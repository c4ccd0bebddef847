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

mod http;
mod rpc;

pub use http::HttpError;
pub use rpc::RpcError;

use a2a::error_code;
use a2a::JsonRpcId;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::lease::LeaseError;
use crate::outbound::client::OutboundError;
use crate::outbound::credential::CredentialError;
use crate::store::{fault, StoreError};
use crate::upstream::UpstreamError;

/// A JSON-RPC response (success or error) for one request id. The one place a JSON-RPC error
/// is logged.
pub fn rpc_response(id: &JsonRpcId, outcome: Result<Value, RpcError>) -> Response {
    match outcome {
        Ok(result) => (
            StatusCode::OK,
            axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})),
        )
            .into_response(),
        Err(error) => {
            log_rpc_error(&error);
            // Written at once into a buffer most answers fit (`axum::Json` starts at 128 bytes
            // and grows three times for a typical error).
            let mut body = Vec::with_capacity(ERROR_ANSWER_CAPACITY);
            match serde_json::to_writer(&mut body, &ErrorAnswer::new(id, &error)) {
                Ok(()) => rpc_answer(body),
                Err(e) => HttpError::Internal {
                    cause: format!("an error answer failed to serialise: {e}"),
                }
                .into_response(),
            }
        }
    }
}

/// A JSON-RPC answer (result or error) already written as bytes: HTTP 200, JSON.
pub fn rpc_answer(body: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// The buffer an error answer is written into: a -32009 refusal with a UUID for its id is 360
/// bytes; an answer with field violations may grow it once or twice.
const ERROR_ANSWER_CAPACITY: usize = 512;

/// A JSON-RPC error answer as it is written, in an HTTP body or an SSE `error` frame: keys in
/// sorted order, as a map of values wrote them.
#[derive(serde::Serialize)]
pub struct ErrorAnswer<'a> {
    error: &'a RpcError,
    id: &'a JsonRpcId,
    jsonrpc: &'static str,
}

impl<'a> ErrorAnswer<'a> {
    pub fn new(id: &'a JsonRpcId, error: &'a RpcError) -> Self {
        ErrorAnswer {
            error,
            id,
            jsonrpc: "2.0",
        }
    }
}

/// Logs a JSON-RPC error once. A failure with an internal cause (the store, Q, the lease
/// store) is logged with it, at warn for an internal error and info otherwise. A refusal of
/// the caller's own request (no cause: a bad version, parameter or page token, an unknown
/// task) is logged at debug only, like the HTTP refusals: `a2a_http_requests_total` counts it
/// by `rpc_code`, and a client repeating a bad request neither fills the logs nor pays for a
/// log line per request.
pub fn log_rpc_error(error: &RpcError) {
    match &error.cause {
        Some(cause) if error.code == error_code::INTERNAL_ERROR => {
            tracing::warn!(code = error.code, message = %error.message, %cause, "rpc error")
        }
        Some(cause) => {
            tracing::info!(code = error.code, message = %error.message, %cause, "rpc error")
        }
        None => tracing::debug!(code = error.code, message = %error.message, "rpc error"),
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

/// A store failure inside a JSON-RPC method: -32603, cause logged at the rescue point; marked
/// `retryable` when the store only had no writable primary within reach (a failover, a
/// restart: `store::fault::unavailable`), where the same request may simply be sent again.
impl From<StoreError> for RpcError {
    fn from(e: StoreError) -> Self {
        match e {
            // Deleted while the request read it (retention, offboarding): the same answer as
            // a task that never existed.
            StoreError::TaskGone => RpcError::task_not_found(),
            e if fault::unavailable(&e) => {
                RpcError::store_unavailable().caused_by(format!("store: {e}"))
            }
            e => RpcError::internal().caused_by(format!("store: {e}")),
        }
    }
}

impl From<StoreError> for Fault {
    fn from(e: StoreError) -> Self {
        Fault::Rpc(e.into())
    }
}

/// A store failure on an HTTP route (outbound management and delegation): 503 with
/// `Retry-After` when the store only had no writable primary within reach, 500 otherwise.
impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        let cause = format!("store: {e}");
        if fault::unavailable(&e) {
            HttpError::StoreUnavailable { cause }
        } else {
            HttpError::Internal { cause }
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

/// A result over the result bound (1 MiB by default), as an answer or an SSE event: -32006,
/// refused whole rather than truncated.
pub fn result_too_large(max_result_bytes: usize) -> RpcError {
    RpcError::invalid_agent_response(format!(
        "the task exceeds the {max_result_bytes} byte result bound and cannot be returned inline"
    ))
}

/// A result that cannot be serialised (never expected): -32603.
pub fn serialization_failed(e: serde_json::Error) -> RpcError {
    RpcError::internal().caused_by(format!("result serialization failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_deleted_under_a_request_is_an_unknown_task() {
        let gone = RpcError::from(StoreError::TaskGone).to_json();
        assert_eq!(gone, RpcError::task_not_found().to_json());
        let other = RpcError::from(StoreError::Corrupt("x".into())).to_json();
        assert_eq!(other["code"], -32603);
    }

    /// A store with no writable primary within reach answers the documented retryable error:
    /// -32603 `retryable` on JSON-RPC, 503 `store_unavailable` with `Retry-After` on HTTP; a
    /// store failure of another kind stays a plain internal error.
    #[test]
    fn a_store_without_a_writable_primary_is_a_retryable_error() {
        for unavailable in [
            StoreError::ReadOnly,
            StoreError::AcquireTimeout(std::time::Duration::from_secs(2)),
        ] {
            let rpc = RpcError::from(unavailable).to_json();
            assert_eq!(rpc["code"], -32603);
            assert_eq!(rpc["data"][0]["metadata"]["retryable"], "true", "{rpc}");
            assert!(rpc["message"]
                .as_str()
                .unwrap()
                .contains("retry the same request"));
        }
        let http = HttpError::from(StoreError::ReadOnly).into_response();
        assert_eq!(http.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(http.headers()[header::RETRY_AFTER], "1");
        let corrupt = RpcError::from(StoreError::Corrupt("x".into())).to_json();
        assert!(corrupt["data"][0]["metadata"].get("retryable").is_none());
        let internal = HttpError::from(StoreError::Corrupt("x".into())).into_response();
        assert_eq!(internal.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    /// The bytes of an error answer: keys in sorted order at every level (the order the
    /// answers have always had), details as the official SDK sends them.
    #[tokio::test]
    async fn error_answers_are_these_bytes() {
        for (id, error, expected) in [
            (
                JsonRpcId::Number(7),
                RpcError::version_not_supported("0.3"),
                r#"{"error":{"code":-32009,"data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","domain":"a2a-protocol.org","metadata":{"requestedVersion":"0.3","supportedVersions":"1.0"},"reason":"VERSION_NOT_SUPPORTED"}],"message":"A2A version '0.3' is not supported by this agent. Supported version: '1.0'."},"id":7,"jsonrpc":"2.0"}"#,
            ),
            (
                JsonRpcId::String("a\"b".into()),
                RpcError::invalid_field("message.parts", "too many"),
                r#"{"error":{"code":-32602,"data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","domain":"a2a-protocol.org","metadata":{},"reason":"INVALID_PARAMS"},{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"description":"too many","field":"message.parts"}]}],"message":"Invalid params: message.parts: too many"},"id":"a\"b","jsonrpc":"2.0"}"#,
            ),
            (
                JsonRpcId::Null,
                RpcError::method_not_found(),
                r#"{"error":{"code":-32601,"message":"Method not found"},"id":null,"jsonrpc":"2.0"}"#,
            ),
        ] {
            let response = rpc_response(&id, Err(error.clone()));
            assert_eq!(
                response.headers()[axum::http::header::CONTENT_TYPE],
                "application/json"
            );
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            assert_eq!(std::str::from_utf8(&body).unwrap(), expected);
            // The object alone, as streams and delegations carry it.
            let object: Value = serde_json::from_str(expected).unwrap();
            assert_eq!(error.to_json(), object["error"]);
        }
    }

    /// The figure `ERROR_ANSWER_CAPACITY`'s comment gives: a -32009 refusal with a UUID for
    /// its id is 360 bytes, so the buffer holds it without growing.
    #[test]
    fn a_version_refusal_with_a_uuid_id_fits_the_error_buffer() {
        let id = JsonRpcId::String(uuid::Uuid::new_v4().to_string());
        let error = RpcError::version_not_supported("0.3");
        let mut body = Vec::with_capacity(ERROR_ANSWER_CAPACITY);
        serde_json::to_writer(&mut body, &ErrorAnswer::new(&id, &error)).unwrap();
        assert_eq!(body.len(), 360);
        assert_eq!(body.capacity(), ERROR_ANSWER_CAPACITY, "it grew");
    }
}
