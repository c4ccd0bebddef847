//! `/internal/v1/runs/{run_id}/approvals`: list and approve (Q's approval API).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::Utc;

use super::read_fault;
use crate::contract::{ApprovalStatus, Approvals, ApproveRequest, Run, RunStatus, WorkspaceAccess};
use crate::error::ApiError;
use crate::state::AppState;

pub(super) async fn run_approvals(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Approvals>, ApiError> {
    read_fault(&st).await?;
    let mut inner = st.lock().await;
    let entry = inner.run_mut(&run_id)?;
    Ok(Json(Approvals {
        approvals: entry.approvals.clone(),
    }))
}

pub(super) async fn approve(
    State(st): State<AppState>,
    Path((run_id, approval_id)): Path<(String, String)>,
    body: Result<Json<ApproveRequest>, JsonRejection>,
) -> Result<Json<Run>, ApiError> {
    let Json(req) = body?;
    let mut inner = st.lock().await;
    let entry = inner.run_mut(&run_id)?;
    let (agent_id, status) = (entry.run.agent_id.clone(), entry.run.status);
    let Some(approval) = entry.approvals.iter().find(|a| a.id == approval_id) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "approval_not_found",
            None,
        ));
    };
    if status.is_terminal() {
        return Err(ApiError::run_terminal(status));
    }
    if approval.status != ApprovalStatus::Pending || status != RunStatus::AwaitingApproval {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "approval_not_pending",
            Some(format!("approval {approval_id} is not pending")),
        ));
    }
    // The approver must have access to the agent's workspace.
    let workspace = st
        .fixtures
        .agent(&agent_id)
        .map(|a| a.workspace.clone())
        .unwrap_or_default();
    if inner.workspace_access(&st.fixtures, &workspace, &req.principal_id)
        != WorkspaceAccess::Granted
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "workspace_access_denied",
            Some(format!(
                "principal {} has no access to workspace {workspace}",
                req.principal_id
            )),
        ));
    }
    let entry = inner.run_mut(&run_id)?;
    if let Some(a) = entry.approvals.iter_mut().find(|a| a.id == approval_id) {
        a.status = ApprovalStatus::Approved;
    }
    entry.transition(RunStatus::Running, None, Utc::now());
    entry.wake();
    tracing::info!(%run_id, %approval_id, principal_id = %req.principal_id, "approved");
    Ok(Json(entry.run.clone()))
}
