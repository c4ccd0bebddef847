//! `POST /v1/a2a/agents/{agent_id}/rpc`: the JSON-RPC route.
//!
//! The stages run in this order, each in the module named for it; the first failure is
//! rendered by the rescue point (`crate::error`):
//!
//! 1. body limit (64 KiB, bounded read time): HTTP 413 / 408
//! 2. JSON-RPC envelope (needed for the id of every later JSON-RPC error): -32700 / -32600
//! 3. `A2A-Version`: -32009
//! 4. bearer authentication through Q's introspection: HTTP 401 (503 if Q is unreachable)
//! 5. `agent_api` tenant feature: HTTP 403
//! 6. method lookup: -32601
//! 7. scopes for the method: HTTP 403; per-principal rate limit: HTTP 429
//! 8. the agent and the caller's workspace access: HTTP 404 for an agent Q does not know in
//!    this tenant
//! 9. the method handler

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::a2a::{envelope, methods, observe, version};
use crate::auth::{Access, Principal};
use crate::error::{rpc_response, GatewayError, HttpError, RpcError};
use crate::http::body_limit;
use crate::metrics::RpcOutcome;
use crate::server::AppState;
use crate::store::Owner;
use crate::upstream::contract::{Agent, WorkspaceAccess};

/// The A2A methods, with the access each needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    DeleteTaskPushNotificationConfig,
    GetExtendedAgentCard,
}

impl Method {
    pub fn parse(name: &str) -> Option<Method> {
        Some(match name {
            "SendMessage" => Method::SendMessage,
            "SendStreamingMessage" => Method::SendStreamingMessage,
            "GetTask" => Method::GetTask,
            "ListTasks" => Method::ListTasks,
            "CancelTask" => Method::CancelTask,
            "SubscribeToTask" => Method::SubscribeToTask,
            "CreateTaskPushNotificationConfig" => Method::CreateTaskPushNotificationConfig,
            "GetTaskPushNotificationConfig" => Method::GetTaskPushNotificationConfig,
            "ListTaskPushNotificationConfigs" => Method::ListTaskPushNotificationConfigs,
            "DeleteTaskPushNotificationConfig" => Method::DeleteTaskPushNotificationConfig,
            "GetExtendedAgentCard" => Method::GetExtendedAgentCard,
            _ => return None,
        })
    }

    /// `a2a:delegate` for what starts or stops work or configures delivery; `a2a:read` for the rest.
    pub fn access(self) -> Access {
        match self {
            Method::SendMessage
            | Method::SendStreamingMessage
            | Method::CancelTask
            | Method::CreateTaskPushNotificationConfig
            | Method::DeleteTaskPushNotificationConfig => Access::Delegate,
            Method::GetTask
            | Method::ListTasks
            | Method::SubscribeToTask
            | Method::GetTaskPushNotificationConfig
            | Method::ListTaskPushNotificationConfigs
            | Method::GetExtendedAgentCard => Access::Read,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::SendMessage => "SendMessage",
            Method::SendStreamingMessage => "SendStreamingMessage",
            Method::GetTask => "GetTask",
            Method::ListTasks => "ListTasks",
            Method::CancelTask => "CancelTask",
            Method::SubscribeToTask => "SubscribeToTask",
            Method::CreateTaskPushNotificationConfig => "CreateTaskPushNotificationConfig",
            Method::GetTaskPushNotificationConfig => "GetTaskPushNotificationConfig",
            Method::ListTaskPushNotificationConfigs => "ListTaskPushNotificationConfigs",
            Method::DeleteTaskPushNotificationConfig => "DeleteTaskPushNotificationConfig",
            Method::GetExtendedAgentCard => "GetExtendedAgentCard",
        }
    }
}

/// An authenticated, authorised caller of one agent.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub agent: Agent,
    pub workspace: WorkspaceAccess,
}

impl Caller {
    pub fn owner(&self) -> Owner {
        Owner {
            tenant_id: self.principal.tenant_id.clone(),
            principal_id: self.principal.principal_id.clone(),
            agent_id: self.agent.id.clone(),
        }
    }
}

/// How a method fails: an HTTP refusal or a JSON-RPC error.
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

impl From<crate::store::StoreError> for Fault {
    fn from(e: crate::store::StoreError) -> Self {
        tracing::error!(error = %e, "store failure");
        Fault::Rpc(RpcError::internal())
    }
}

pub type MethodResult = Result<Value, Fault>;

pub async fn serve(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut method = None;
    let result = handle(&state, &agent_id, &headers, body, &mut method).await;
    // Tell the metrics layer which method ran and how it ended; HTTP refusals carry nothing.
    let outcome = match &result {
        Ok(_) => Some(RpcOutcome {
            method,
            error_code: None,
        }),
        Err(GatewayError::Rpc(_, e)) => Some(RpcOutcome {
            method,
            error_code: Some(e.code),
        }),
        Err(GatewayError::Http(_)) => None,
    };
    let mut response = match result {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    if let Some(outcome) = outcome {
        response.extensions_mut().insert(outcome);
    }
    response
}

async fn handle(
    state: &Arc<AppState>,
    agent_id: &str,
    headers: &HeaderMap,
    body: Body,
    method_seen: &mut Option<&'static str>,
) -> Result<Response, GatewayError> {
    let limits = &state.config.limits;
    let bytes = body_limit::read(body, headers, limits.max_body_bytes).await?;
    let envelope::Envelope { id, method, params } =
        envelope::decode(&bytes).map_err(|(id, e)| GatewayError::Rpc(id, e))?;
    let span = tracing::Span::current();
    span.record("rpc_method", method.as_str());
    let parsed = Method::parse(&method);
    *method_seen = Some(parsed.map_or("unknown", Method::name));

    version::negotiate(headers)
        .map_err(|v| GatewayError::Rpc(id.clone(), RpcError::version_not_supported(&v.0)))?;

    let principal = state.auth.authenticate(headers).await?;
    span.record("tenant", principal.tenant_id.as_str());
    span.record("principal", principal.principal_id.as_str());
    principal.require_feature()?;
    state.rate_limit.check(&principal)?;

    let method =
        parsed.ok_or_else(|| GatewayError::Rpc(id.clone(), RpcError::method_not_found()))?;
    principal.require(method.access())?;

    let caller = resolve_agent(state, principal, agent_id).await?;
    let outcome = match method {
        // Streams answer with SSE once they start; anything before that is plain JSON.
        Method::SendStreamingMessage => observe::send_streaming(state, &caller, &id, &params).await,
        Method::SubscribeToTask => observe::subscribe(state, &caller, &id, &params).await,
        _ => dispatch(state, &caller, method, params)
            .await
            .map(|result| rpc_response(&id, Ok(result))),
    };
    match outcome {
        Ok(response) => Ok(response),
        Err(Fault::Rpc(e)) => {
            tracing::info!(code = e.code, message = %e.message, "rpc error");
            Err(GatewayError::Rpc(id, e))
        }
        Err(Fault::Http(e)) => Err(GatewayError::Http(e)),
    }
}

/// The agent as Q knows it in the caller's tenant, with the caller's current workspace access.
pub async fn resolve_agent(
    state: &AppState,
    principal: Principal,
    agent_id: &str,
) -> Result<Caller, HttpError> {
    let access = state
        .upstream
        .agent_access(&principal.tenant_id, agent_id, &principal.principal_id)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, kind = e.kind(), "agent lookup failed");
            HttpError::UpstreamUnavailable
        })?
        .ok_or(HttpError::AgentNotFound)?;
    if access.agent.tenant_id != principal.tenant_id {
        // Q must not return another tenant's agent; treat it as unknown if it does.
        return Err(HttpError::AgentNotFound);
    }
    Ok(Caller {
        principal,
        agent: access.agent,
        workspace: access.workspace_access,
    })
}

async fn dispatch(
    state: &AppState,
    caller: &Caller,
    method: Method,
    params: Map<String, Value>,
) -> MethodResult {
    match method {
        Method::SendMessage => methods::send_message(state, caller, &params).await,
        Method::GetTask => methods::get_task(state, caller, &params).await,
        Method::SendStreamingMessage | Method::SubscribeToTask => {
            unreachable!("streaming methods are answered by crate::a2a::observe")
        }
        Method::ListTasks => methods::list_tasks(state, caller, &params).await,
        Method::CancelTask => methods::cancel_task(state, caller, &params).await,
        Method::CreateTaskPushNotificationConfig
        | Method::GetTaskPushNotificationConfig
        | Method::ListTaskPushNotificationConfigs
        | Method::DeleteTaskPushNotificationConfig => Err(RpcError::push_not_supported().into()),
        Method::GetExtendedAgentCard => Err(RpcError::unsupported(
            "The agent does not support authenticated extended cards",
        )
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_and_has_access() {
        for name in [
            "SendMessage",
            "SendStreamingMessage",
            "GetTask",
            "ListTasks",
            "CancelTask",
            "SubscribeToTask",
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
            "GetExtendedAgentCard",
        ] {
            assert_eq!(Method::parse(name).unwrap().name(), name);
        }
        assert_eq!(Method::parse("message/send"), None);
        assert_eq!(Method::parse("sendmessage"), None);
        assert_eq!(Method::SendMessage.access(), Access::Delegate);
        assert_eq!(Method::CancelTask.access(), Access::Delegate);
        assert_eq!(Method::GetTask.access(), Access::Read);
        assert_eq!(Method::SubscribeToTask.access(), Access::Read);
    }
}
