//! `GET /internal/v1/tenants/{tenant_id}/agents/{agent_id}/access`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;

use crate::contract::AgentAccess;
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub(super) struct AccessQuery {
    principal_id: String,
}

pub(super) async fn agent_access(
    State(st): State<AppState>,
    Path((tenant_id, agent_id)): Path<(String, String)>,
    query: Result<Query<AccessQuery>, QueryRejection>,
) -> Result<Json<AgentAccess>, ApiError> {
    let Query(q) = query?;
    let agent = st
        .fixtures
        .tenant_agent(&tenant_id, &agent_id)
        .ok_or_else(ApiError::agent_not_found)?;
    let inner = st.lock().await;
    // An agent made unavailable answers as an unknown one.
    if inner.agent_unavailable(&agent.id) {
        return Err(ApiError::agent_not_found());
    }
    let workspace_access = inner.workspace_access(&st.fixtures, &agent.workspace, &q.principal_id);
    Ok(Json(AgentAccess {
        agent: inner.agent_record(agent),
        workspace_access,
    }))
}
