//! `POST /v1/a2a/agents/{agent_id}/rpc` (also with a trailing slash): the JSON-RPC route.
//!
//! The stages run in this order, each in the module named for it; the first failure is
//! rendered by the rescue point (`crate::error`):
//!
//! 1. the authorisation stage's first part (`crate::http::authorize`), from the headers alone:
//!    bearer authentication (HTTP 401, 503 if Q is unreachable) and the `agent_api` tenant
//!    feature (HTTP 403). The body is not asked for before this passes (hyper holds at most
//!    what arrived with the headers): an unauthenticated client cannot make the gateway read,
//!    buffer or wait for a body
//! 2. body limit (64 KiB, bounded read time): HTTP 413 / 408; a declared `Content-Length` over
//!    the limit is refused without reading
//! 3. media type: a declared `Content-Type` other than JSON is -32005 (id null)
//! 4. JSON-RPC envelope (needed for the id of every later JSON-RPC error): -32700 / -32600
//! 5. `A2A-Version`: -32009. It needs only a header, but its answer carries the request's id,
//!    so it runs once the envelope is decoded
//! 6. the authorisation stage's rate limit, in the bucket of the method's admission class
//!    (known from the envelope): HTTP 429
//! 7. method lookup: -32601
//! 8. the authorisation stage's scope check for the method: HTTP 403
//! 9. the agent and the caller's workspace access: HTTP 404 for an agent Q does not know in
//!    this tenant (an id no agent can have is 404 before step 1: nothing is cached or asked)
//! 10. the method ([`crate::a2a::tasks`], streams in [`crate::a2a::observe`]); its result is
//!     serialised once, and refused (-32006) if it exceeds the 1 MiB result bound
//!
//! Steps 1-2 answer with HTTP statuses only, so nothing there needs the request id.

use std::sync::Arc;

use a2a::JsonRpcId;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Map, Value};

use crate::a2a::caller::{valid_agent_id, Caller};
use crate::a2a::method::Method;
use crate::a2a::tasks::Answer;
use crate::a2a::{envelope, observe, version, ProfileRoutes};
use crate::access::Purpose;
use crate::auth::{Credential, Identified};
use crate::error::{
    respond, result_too_large, rpc_answer, serialization_failed, Fault, HttpError, RpcError,
};
use crate::http::authorize::AdmissionClass;
use crate::http::body_limit;
use crate::http::response_budget::{AnswerSpace, ConnectionLedger, Payer};
use crate::metrics::RpcOutcome;

pub async fn serve(
    State(routes): State<Arc<ProfileRoutes>>,
    Path(agent_id): Path<String>,
    // The request itself, not `HeaderMap` + `Body`: axum's `HeaderMap` extractor clones the
    // headers (two allocations per request).
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let ledger = parts.extensions.get::<Arc<ConnectionLedger>>().cloned();
    answer(&routes, &agent_id, &parts.headers, body, ledger).await
}

/// The JSON-RPC answer to a request for agent `agent_id`: [`serve`] through the router, or
/// the gateway's hot path (`app::gateway`). `ledger` is the connection's response budget
/// (`crate::http::response_budget`), which a large answer reserves its bytes from before it
/// is built.
pub async fn answer(
    routes: &Arc<ProfileRoutes>,
    agent_id: &str,
    headers: &HeaderMap,
    body: Body,
    ledger: Option<Arc<ConnectionLedger>>,
) -> Response {
    let mut method = None;
    let mut id = JsonRpcId::Null;
    let mut space = None;
    let result = handle(
        routes,
        agent_id,
        headers,
        body,
        Seen {
            id: &mut id,
            method: &mut method,
            space: &mut space,
            ledger,
        },
    )
    .await;
    // Tell the metrics layer which method ran and how it ended; HTTP refusals carry nothing.
    let outcome = match &result {
        Ok(_) => Some(RpcOutcome {
            method,
            error_code: None,
        }),
        Err(Fault::Rpc(e)) => Some(RpcOutcome {
            method,
            error_code: Some(e.code),
        }),
        Err(Fault::Http(_)) => None,
    };
    let mut response = match result {
        Ok(response) => response,
        Err(fault) => respond(&id, fault),
    };
    if let Some(outcome) = outcome {
        response.extensions_mut().insert(outcome);
    }
    // An answer to a known caller counts against its shares, on what it reserved.
    if let Some(space) = space {
        response.extensions_mut().insert(space.into_extension());
    }
    response
}

/// What [`handle`] learns on its way that its caller needs however it ends.
struct Seen<'a> {
    id: &'a mut JsonRpcId,
    method: &'a mut Option<&'static str>,
    /// The answer's room, once the caller is known.
    space: &'a mut Option<AnswerSpace>,
    ledger: Option<Arc<ConnectionLedger>>,
}

async fn handle(
    routes: &Arc<ProfileRoutes>,
    agent_id: &str,
    headers: &HeaderMap,
    body: Body,
    seen: Seen<'_>,
) -> Result<Response, Fault> {
    let Seen {
        id: id_seen,
        method: method_seen,
        space,
        ledger,
    } = seen;
    // An id no agent can have is unknown before anything is cached or asked of Q.
    if !valid_agent_id(agent_id) {
        return Err(HttpError::AgentNotFound.into());
    }
    let authenticated = routes.authorizer.authenticate(headers).await?;
    let bytes = body_limit::read(body, headers, routes.max_body_bytes).await?;
    envelope::check_media_type(headers)?;
    let envelope = envelope::decode(&bytes).map_err(|(id, e)| {
        *id_seen = id;
        Fault::Rpc(e)
    })?;
    *id_seen = envelope.id.clone();
    let method = &*envelope.method;
    let span = tracing::Span::current();
    span.record("rpc_method", method);
    let parsed = Method::parse(method);
    *method_seen = Some(parsed.map_or("unknown", Method::name));

    version::negotiate(headers).map_err(|v| RpcError::version_not_supported(&v.0))?;

    // The bucket is the method's admission class, known once the envelope is read; an
    // unknown method spends the general bucket and is -32601 right after.
    let class = parsed.map_or(AdmissionClass::General, Method::admission);
    let admitted = routes.authorizer.spend(authenticated, class).await?;
    let method = parsed.ok_or_else(RpcError::method_not_found)?;
    let scopes = method.access().required_scopes();
    let purpose = method.purpose();
    let identified = match purpose {
        Purpose::Read => admitted.require_to_read(&scopes)?,
        Purpose::Current => Identified {
            principal: admitted.require(&scopes)?,
            last_known: false,
        },
    };

    let credential = Credential::of(headers);
    let caller = routes
        .agents
        .resolve(identified, credential, agent_id, purpose)
        .await?;
    // The parameters are built only for a request every check above admitted.
    let params = envelope.params()?;
    let id = &envelope.id;
    let tasks = &routes.tasks;
    let principal = &caller.principal;
    let space = space.insert(AnswerSpace::new(
        ledger,
        Payer::new(&principal.tenant_id, &principal.principal_id),
    ));
    match method {
        // Streams answer with SSE once they start; anything before that is plain JSON.
        Method::SendStreamingMessage => observe::send_streaming(tasks, &caller, id, &params).await,
        Method::SubscribeToTask => observe::subscribe(tasks, &caller, id, &params).await,
        _ => {
            let result = call(routes, &caller, method, params, space).await?;
            bounded_result(id, &result, tasks.settings.limits.max_result_bytes)
        }
    }
}

async fn call(
    routes: &ProfileRoutes,
    caller: &Caller,
    method: Method,
    params: Map<String, Value>,
    space: &AnswerSpace,
) -> Result<Answer, Fault> {
    let tasks = &routes.tasks;
    let value = match method {
        Method::GetTask => return tasks.get_task(caller, &params, space).await,
        Method::SendMessage => tasks.send_message(caller, &params).await,
        Method::SendStreamingMessage | Method::SubscribeToTask => {
            unreachable!("streaming methods are answered by crate::a2a::observe")
        }
        Method::ListTasks => tasks.list_tasks(caller, &params, space).await,
        Method::CancelTask => tasks.cancel_task(caller, &params).await,
        Method::CreateTaskPushNotificationConfig
        | Method::GetTaskPushNotificationConfig
        | Method::ListTaskPushNotificationConfigs
        | Method::DeleteTaskPushNotificationConfig => Err(RpcError::push_not_supported().into()),
        Method::GetExtendedAgentCard => Err(RpcError::unsupported(
            "The agent does not support authenticated extended cards",
        )
        .into()),
    };
    value.map(Answer::Value)
}

/// The JSON-RPC success answer, serialised once: the result's bytes are measured against the
/// result bound (only a huge artifact can exceed it) and then framed as the envelope, exactly
/// the bytes `rpc_response` would write (keys in `id`, `jsonrpc`, `result` order).
fn bounded_result(
    id: &JsonRpcId,
    result: &Answer,
    max_result_bytes: usize,
) -> Result<Response, Fault> {
    let serialized;
    let result: &[u8] = match result {
        Answer::Value(value) => {
            serialized = serde_json::to_vec(value).map_err(serialization_failed)?;
            &serialized
        }
        Answer::Serialized(bytes) => bytes,
    };
    if result.len() > max_result_bytes {
        return Err(result_too_large(max_result_bytes).into());
    }
    let id = serde_json::to_vec(id).map_err(serialization_failed)?;
    let mut body = Vec::with_capacity(result.len() + id.len() + 40);
    body.extend_from_slice(b"{\"id\":");
    body.extend_from_slice(&id);
    body.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
    body.extend_from_slice(result);
    body.push(b'}');
    Ok(rpc_answer(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::rpc_response;
    use serde_json::json;

    #[tokio::test]
    async fn bounded_result_writes_the_same_bytes_as_the_envelope() {
        for id in [
            JsonRpcId::Number(7),
            JsonRpcId::String("a\"b".into()),
            JsonRpcId::Null,
        ] {
            let result = json!({"zeta": [1, {"b": 2, "a": "x"}], "alpha": null});
            let expected = rpc_response(&id, Ok(result.clone()));
            let expected = axum::body::to_bytes(expected.into_body(), usize::MAX).await;
            let expected = expected.unwrap();
            let serialized = bytes::Bytes::from(serde_json::to_vec(&result).unwrap());
            for answer in [
                Answer::Value(result.clone()),
                Answer::Serialized(serialized),
            ] {
                let framed = bounded_result(&id, &answer, 1 << 20).unwrap();
                let framed = axum::body::to_bytes(framed.into_body(), usize::MAX).await;
                assert_eq!(framed.unwrap(), expected);
            }
        }
    }

    #[test]
    fn bounded_result_refuses_one_byte_over() {
        let result = Answer::Value(json!("x".repeat(10)));
        // `"xxxxxxxxxx"` is 12 bytes.
        assert!(bounded_result(&JsonRpcId::Null, &result, 12).is_ok());
        match bounded_result(&JsonRpcId::Null, &result, 11) {
            Err(Fault::Rpc(e)) => assert_eq!(e.code, a2a::error_code::INVALID_AGENT_RESPONSE),
            other => panic!("expected -32006, got {:?}", other.map(|_| ())),
        }
    }
}
