//! The contract routes (`/internal/v1/*`), serving exactly the types of `q-upstream-contract`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::contract::{
    AgentAccess, ApprovalStatus, Approvals, ApproveRequest, CancelRunRequest, CreateRunRequest,
    ErrorBody, EvidenceGrant, EvidenceGrants, EvidenceQuery, Health, IntrospectRequest,
    Introspection, Run, RunChanges, RunEvents, RunGrant, RunStatus, WorkspaceAccess,
    CONTRACT_VERSION, PREFIX,
};
use crate::state::{take, AppState, FEED};

/// Longest long-poll a caller may ask for.
const MAX_WAIT_MS: u64 = 30_000;

/// A contract error: status code plus `ErrorBody`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: Option<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                error: code.to_owned(),
                message,
            },
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            Some(message.into()),
        )
    }

    pub fn run_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "run_not_found", None)
    }

    pub fn agent_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "agent_not_found", None)
    }

    pub fn injected() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            Some("injected fault".to_owned()),
        )
    }

    fn run_terminal(status: RunStatus) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "run_terminal",
            Some(format!("run is already {}", status_name(status))),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}

fn status_name(status: RunStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Per-connection handle the server inserts into every request: `kill()` makes the server drop
/// the connection without writing a response (the "drop after commit" fault).
#[derive(Clone, Default)]
pub struct ConnKill(pub Arc<Notify>);

impl ConnKill {
    pub fn kill(&self) {
        self.0.notify_one();
    }
}

pub fn router(state: AppState) -> Router<AppState> {
    let protected = Router::new()
        .route("/identity/introspect", post(introspect))
        .route(
            "/tenants/{tenant_id}/agents/{agent_id}/access",
            get(agent_access),
        )
        .route("/runs", post(create_run))
        .route("/runs/by-workflow/{workflow_id}", get(get_run_by_workflow))
        .route("/runs/{run_id}", get(get_run))
        .route("/runs/{run_id}/cancel", post(cancel_run))
        .route("/runs/{run_id}/events", get(run_events))
        .route("/runs/{run_id}/output", get(run_output))
        .route("/runs/{run_id}/approvals", get(run_approvals))
        .route(
            "/runs/{run_id}/approvals/{approval_id}/approve",
            post(approve),
        )
        .route("/runs/{run_id}/grants/{principal_id}", get(run_grant))
        .route("/evidence-grants/query", post(evidence_query))
        .route("/changes/runs", get(run_changes))
        .route_layer(middleware::from_fn_with_state(state, require_service_token));
    Router::new().nest(
        PREFIX,
        Router::new().route("/health", get(health)).merge(protected),
    )
}

async fn require_service_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    if presented != Some(st.fixtures.service_token.as_str()) {
        return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", None).into_response();
    }
    next.run(req).await
}

/// Consumes one `read_fail_500` fault, if any.
async fn read_fault(st: &AppState) -> Result<(), ApiError> {
    if take(&mut st.lock().await.faults.read_fail_500) {
        Err(ApiError::injected())
    } else {
        Ok(())
    }
}

async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        contract_version: CONTRACT_VERSION.to_owned(),
    })
}

async fn introspect(
    State(st): State<AppState>,
    body: Result<Json<IntrospectRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let inactive = || Json(json!({ "active": false })).into_response();
    let req = {
        let mut inner = st.lock().await;
        if take(&mut inner.faults.introspect_fail_500) {
            return Err(ApiError::injected());
        }
        let Json(req) = body?;
        if inner.revoked_tokens.contains(&req.token) {
            return Ok(inactive());
        }
        req
    };
    let found = st
        .fixtures
        .token(&req.token)
        .filter(|t| !t.expired)
        .and_then(|t| Some((t, st.fixtures.principal(&t.principal)?)));
    let Some((token, principal)) = found else {
        // Exactly `{"active": false}`: the other fields are absent.
        return Ok(inactive());
    };
    let features = st
        .fixtures
        .tenant(&principal.tenant)
        .map(|t| t.features.clone())
        .unwrap_or_default();
    Ok(Json(Introspection {
        active: true,
        tenant_id: Some(principal.tenant.clone()),
        principal_id: Some(principal.id.clone()),
        scopes: token.scopes.clone(),
        tenant_features: features,
    })
    .into_response())
}

#[derive(Debug, Deserialize)]
struct AccessQuery {
    principal_id: String,
}

async fn agent_access(
    State(st): State<AppState>,
    Path((tenant_id, agent_id)): Path<(String, String)>,
    query: Result<Query<AccessQuery>, QueryRejection>,
) -> Result<Json<AgentAccess>, ApiError> {
    let Query(q) = query?;
    let agent = st
        .fixtures
        .tenant_agent(&tenant_id, &agent_id)
        .ok_or_else(ApiError::agent_not_found)?;
    let workspace_access =
        st.lock()
            .await
            .workspace_access(&st.fixtures, &agent.workspace, &q.principal_id);
    Ok(Json(AgentAccess {
        agent: agent.to_agent(),
        workspace_access,
    }))
}

async fn create_run(
    State(st): State<AppState>,
    kill: Option<Extension<ConnKill>>,
    body: Result<Json<CreateRunRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let delay = {
        let mut inner = st.lock().await;
        inner.stats.create_requests += 1;
        inner.faults.take_create_delay()
    };
    if let Some(delay) = delay {
        tracing::info!(?delay, "fault: delaying create");
        tokio::time::sleep(delay).await;
    }
    if take(&mut st.lock().await.faults.create_fail_500_before_commit) {
        tracing::info!("fault: create fails before commit");
        return Err(ApiError::injected());
    }
    if take(&mut st.lock().await.faults.create_refuse_403) {
        tracing::info!("fault: create refused");
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "workspace_access_denied",
            Some("the principal has no access to the agent's workspace".to_owned()),
        ));
    }
    let Json(req) = body?;
    let (created, run) = st.create_run(req).await?;

    let (drop_conn, fail_after) = {
        let mut inner = st.lock().await;
        let drop_conn = take(&mut inner.faults.create_drop_after_commit);
        let fail_after = !drop_conn && take(&mut inner.faults.create_fail_500_after_commit);
        (drop_conn, fail_after)
    };
    if drop_conn {
        tracing::info!(run_id = %run.id, "fault: dropping the connection after commit");
        match kill {
            Some(Extension(kill)) => {
                kill.kill();
                // The server drops this connection (and this future) right away; the sleep only
                // bounds the wait if something keeps it alive (e.g. an HTTP/2 stream task).
                tokio::time::sleep(Duration::from_secs(5)).await;
                return Err(ApiError::injected());
            }
            // Not behind our server loop: unwinding the connection task without the panic
            // hook also closes the connection without a response.
            None => std::panic::resume_unwind(Box::new("create_drop_after_commit")),
        }
    }
    if fail_after {
        tracing::info!(run_id = %run.id, "fault: create fails after commit");
        return Err(ApiError::injected());
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(run)).into_response())
}

async fn get_run(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    read_fault(&st).await?;
    let mut inner = st.lock().await;
    Ok(Json(inner.run_mut(&run_id)?.run.clone()))
}

async fn get_run_by_workflow(
    State(st): State<AppState>,
    Path(workflow_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    read_fault(&st).await?;
    let mut inner = st.lock().await;
    let run_id = inner.run_id_by_workflow(&workflow_id)?;
    Ok(Json(inner.run_mut(&run_id)?.run.clone()))
}

async fn cancel_run(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
    body: Result<Json<CancelRunRequest>, JsonRejection>,
) -> Result<Json<Run>, ApiError> {
    let Json(req) = body?;
    let mut inner = st.lock().await;
    let entry = inner.run_mut(&run_id)?;
    if entry.run.status.is_terminal() {
        return Err(ApiError::run_terminal(entry.run.status));
    }
    entry.transition(
        RunStatus::Canceled,
        Some(format!("canceled by {}", req.principal_id)),
        Utc::now(),
    );
    entry.wake();
    tracing::info!(%run_id, principal_id = %req.principal_id, "run canceled");
    Ok(Json(entry.run.clone()))
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    #[serde(default)]
    after_seq: u64,
    #[serde(default)]
    wait_ms: u64,
}

async fn run_events(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Json<RunEvents>, ApiError> {
    let Query(q) = query?;
    read_fault(&st).await?;
    let until = Instant::now() + Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    let mut shutdown = st.shutdown_rx();
    loop {
        let mut rx = {
            let mut inner = st.lock().await;
            let entry = inner.run_mut(&run_id)?;
            let events = entry.events_after(q.after_seq);
            if !events.is_empty() || Instant::now() >= until || *shutdown.borrow_and_update() {
                return Ok(Json(RunEvents {
                    events,
                    last_seq: entry.last_seq(),
                }));
            }
            // Subscribed under the lock, so no event can slip between the check and the wait.
            entry.subscribe()
        };
        // A new event, the run removed (reset), shutdown, or the wait is over: look again.
        tokio::select! {
            _ = tokio::time::timeout_at(until, rx.changed()) => {}
            _ = shutdown.changed() => {}
        }
    }
}

async fn run_output(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    read_fault(&st).await?;
    let mut inner = st.lock().await;
    let entry = inner.run_mut(&run_id)?;
    match entry.served_output() {
        Some(out) => Ok(Json(out).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "output_not_ready",
            Some(format!("run is {}", status_name(entry.run.status))),
        )),
    }
}

async fn run_approvals(
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

async fn approve(
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

#[derive(Deserialize)]
struct ChangesQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    limit: Option<usize>,
}

/// Q's run change feed: every status change of every run, in order, long-polled.
async fn run_changes(
    State(st): State<AppState>,
    query: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<RunChanges>, ApiError> {
    let Query(q) = query?;
    read_fault(&st).await?;
    let limit = q.limit.unwrap_or(500).clamp(1, 1000);
    let until = Instant::now() + Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    let mut shutdown = st.shutdown_rx();
    loop {
        let mut rx = FEED.subscribe();
        {
            let mut inner = st.lock().await;
            let changes = inner.changes_after(q.after, limit);
            if !changes.is_empty() || Instant::now() >= until || *shutdown.borrow_and_update() {
                let cursor = changes.last().map_or(q.after, |c| c.cursor);
                return Ok(Json(RunChanges {
                    changes,
                    cursor,
                    head: FEED.head(),
                }));
            }
        }
        tokio::select! {
            _ = tokio::time::timeout_at(until, rx.changed()) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Evidence grants of one principal on many runs.
async fn evidence_query(
    State(st): State<AppState>,
    body: Result<Json<EvidenceQuery>, JsonRejection>,
) -> Result<Json<EvidenceGrants>, ApiError> {
    let Json(q) = body?;
    read_fault(&st).await?;
    if q.run_ids.len() > 1000 {
        return Err(ApiError::invalid("at most 1000 run_ids per query"));
    }
    let inner = st.lock().await;
    let grants = q
        .run_ids
        .into_iter()
        .map(|run_id| {
            let granted = inner
                .evidence_granted(&run_id, &q.principal_id)
                .unwrap_or(false);
            RunGrant {
                run_id,
                principal_id: q.principal_id.clone(),
                evidence: if granted {
                    EvidenceGrant::Granted
                } else {
                    EvidenceGrant::Revoked
                },
            }
        })
        .collect();
    Ok(Json(EvidenceGrants { grants }))
}

async fn run_grant(
    State(st): State<AppState>,
    Path((run_id, principal_id)): Path<(String, String)>,
) -> Result<Json<RunGrant>, ApiError> {
    read_fault(&st).await?;
    let mut inner = st.lock().await;
    let owner = inner.run_mut(&run_id)?.run.principal_id.clone();
    let granted = inner
        .evidence_grants
        .get(&(run_id.clone(), principal_id.clone()))
        .copied()
        .unwrap_or(owner == principal_id);
    Ok(Json(RunGrant {
        run_id,
        principal_id,
        evidence: if granted {
            EvidenceGrant::Granted
        } else {
            EvidenceGrant::Revoked
        },
    }))
}
