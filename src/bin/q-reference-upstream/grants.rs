//! Changes of workspace membership and of evidence grants, each with its entry in the access
//! feed: made by the admin grant routes and by the contract kit's operator hook
//! (`POST /admin/contract-hook`, the hook `q-a2a-gateway contract-check --hook-url` calls; a
//! real Q's team supplies their own, docs/contract-kit.md).
//!
//! A change and its feed entry are made under one lock, so the feed never announces a change
//! the access routes do not answer yet, unless `--break access-feed-after-api` asks for it.

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::breaks::{Break, GRANT_APPLY_DELAY};
use crate::contract::{AccessChangeKind, WorkspaceAccess};
use crate::error::ApiError;
use crate::state::{AppState, Inner, Named};

/// Grants (`true`) or revokes a principal's membership of a workspace; answers the access
/// the principal has once the change is made. `announce: false` makes it without its feed
/// entry (as if the entry were lost).
pub async fn set_workspace_grant(
    st: &AppState,
    workspace_id: &str,
    principal_id: &str,
    granted: bool,
    announce: bool,
) -> Result<WorkspaceAccess, ApiError> {
    let Some(workspace) = st.fixtures.workspace(workspace_id) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "workspace_not_found",
            None,
        ));
    };
    let named = Named {
        tenant_id: Some(workspace.tenant.clone()),
        workspace_id: Some(workspace_id.to_owned()),
        principal_id: Some(principal_id.to_owned()),
        ..Named::default()
    };
    let key = (workspace_id.to_owned(), principal_id.to_owned());
    let mut inner = announced(st, announce, AccessChangeKind::WorkspaceMembership, named).await;
    if granted {
        inner.ever_granted.insert(key.clone());
    }
    inner.workspace_grants.insert(key, granted);
    tracing::info!(%workspace_id, %principal_id, granted, "workspace grant changed");
    Ok(inner.workspace_access(&st.fixtures, workspace_id, principal_id))
}

/// Grants or revokes a principal's evidence grant on a run (404 `run_not_found` for a run
/// Q does not have).
pub async fn set_evidence_grant(
    st: &AppState,
    run_id: &str,
    principal_id: &str,
    granted: bool,
    announce: bool,
) -> Result<(), ApiError> {
    let tenant_id = {
        let inner = st.lock().await;
        let entry = inner.runs.get(run_id).ok_or_else(ApiError::run_not_found)?;
        entry.run.tenant_id.clone()
    };
    let named = Named {
        tenant_id: Some(tenant_id),
        run_id: Some(run_id.to_owned()),
        principal_id: Some(principal_id.to_owned()),
        ..Named::default()
    };
    let mut inner = announced(st, announce, AccessChangeKind::EvidenceGrant, named).await;
    inner
        .evidence_grants
        .insert((run_id.to_owned(), principal_id.to_owned()), granted);
    tracing::info!(%run_id, %principal_id, granted, "evidence grant changed");
    Ok(())
}

/// Appends the change's feed entry (when `announce`) and returns the lock to make the change
/// under. Normally both happen under that one lock; with `access-feed-after-api` broken the
/// entry goes out first and the change follows [`GRANT_APPLY_DELAY`] later.
async fn announced<'a>(
    st: &'a AppState,
    announce: bool,
    kind: AccessChangeKind,
    named: Named,
) -> tokio::sync::MutexGuard<'a, Inner> {
    let inner = st.lock().await;
    if announce {
        inner.access_changed(kind, named);
    }
    if !st.breaks.has(Break::AccessFeedAfterApi) {
        return inner;
    }
    drop(inner);
    tokio::time::sleep(GRANT_APPLY_DELAY).await;
    st.lock().await
}

/// One request of the contract kit's operator hook: the change to make for the kit's test
/// principal (docs/contract-kit.md, "The operator hook").
#[derive(Debug, Deserialize)]
pub struct HookRequest {
    action: HookAction,
    #[serde(default)]
    workspace_id: Option<String>,
    principal_id: String,
    #[serde(default)]
    run_id: Option<String>,
    // The kit also sends `tenant_id`; the reference knows it from the workspace or the run.
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum HookAction {
    RevokeMembership,
    RestoreMembership,
    RevokeEvidence,
    RestoreEvidence,
}

/// `POST /admin/contract-hook`: makes the change and answers once it is made (and announced),
/// as the kit requires of any hook.
pub async fn contract_hook(
    State(st): State<AppState>,
    body: Result<Json<HookRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(hook) = body?;
    let missing = |field: &str| ApiError::invalid(format!("{field} is required for this action"));
    match hook.action {
        HookAction::RevokeMembership | HookAction::RestoreMembership => {
            let workspace_id = hook.workspace_id.ok_or_else(|| missing("workspace_id"))?;
            let granted = matches!(hook.action, HookAction::RestoreMembership);
            let access =
                set_workspace_grant(&st, &workspace_id, &hook.principal_id, granted, true).await?;
            Ok(Json(json!({ "workspace_access": access })))
        }
        HookAction::RevokeEvidence | HookAction::RestoreEvidence => {
            let run_id = hook.run_id.ok_or_else(|| missing("run_id"))?;
            let granted = matches!(hook.action, HookAction::RestoreEvidence);
            set_evidence_grant(&st, &run_id, &hook.principal_id, granted, true).await?;
            Ok(Json(json!({ "granted": granted })))
        }
    }
}
