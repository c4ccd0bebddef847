//! `/admin/*`: fault injection and inspection for tests. NOT part of the contract; a real Q
//! deployment has none of this. No authentication.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::contract::{AccessChangeKind, Run, RunStatus};
use crate::error::ApiError;
use crate::faults::{CorruptMode, Faults, FaultsPatch};
use crate::grants;
use crate::state::{AgentDescription, AppState, Inner, Named};
use crate::stats::Stats;

pub fn router() -> Router<AppState> {
    Router::new().nest(
        "/admin",
        Router::new()
            .route("/grants/workspace", post(workspace_grant))
            .route("/grants/evidence", post(evidence_grant))
            .route("/contract-hook", post(grants::contract_hook))
            .route("/tokens/revoke", post(revoke_token))
            .route("/agents/{agent_id}/approval", post(agent_approval))
            .route("/agents/{agent_id}/available", post(agent_available))
            .route("/agents/{agent_id}/describe", post(agent_describe))
            .route(
                "/faults",
                get(get_faults).post(set_faults).delete(clear_faults),
            )
            .route("/runs", get(list_runs))
            .route("/runs/{run_id}/corrupt-output", post(corrupt_output))
            .route("/runs/{run_id}/fail", post(fail_run))
            .route("/stats", get(stats))
            .route("/workflow-dedup", post(workflow_dedup))
            .route("/calls", get(calls))
            .route("/last-traceparent", get(last_traceparent))
            .route("/reset", post(reset))
            .route("/barrier", get(barrier))
            .route("/barrier/release", post(release_barrier))
            .route("/feeds/{feed}/compact", post(compact_feed))
            .route("/feeds/{feed}/failover", post(fail_over_feed)),
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceGrant {
    workspace_id: String,
    principal_id: String,
    granted: bool,
    /// False: the change is made without its entry in the access feed, as if the entry was
    /// lost (a failover or a compaction a reader cannot see otherwise).
    #[serde(default = "yes")]
    announce: bool,
}

fn yes() -> bool {
    true
}

async fn workspace_grant(
    State(st): State<AppState>,
    body: Result<Json<WorkspaceGrant>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(g) = body?;
    let access =
        grants::set_workspace_grant(&st, &g.workspace_id, &g.principal_id, g.granted, g.announce)
            .await?;
    Ok(Json(json!({
        "workspace_id": g.workspace_id,
        "principal_id": g.principal_id,
        "workspace_access": access,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EvidenceGrantBody {
    run_id: String,
    principal_id: String,
    granted: bool,
    /// As for the workspace grant: false makes the change without its feed entry.
    #[serde(default = "yes")]
    announce: bool,
}

async fn evidence_grant(
    State(st): State<AppState>,
    body: Result<Json<EvidenceGrantBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(g) = body?;
    grants::set_evidence_grant(&st, &g.run_id, &g.principal_id, g.granted, g.announce).await?;
    Ok(Json(json!({
        "run_id": g.run_id,
        "principal_id": g.principal_id,
        "granted": g.granted,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeToken {
    token: String,
}

async fn revoke_token(
    State(st): State<AppState>,
    body: Result<Json<RevokeToken>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(r) = body?;
    st.lock().await.revoked_tokens.insert(r.token);
    tracing::info!("admin: token revoked");
    Ok(Json(json!({ "revoked": true })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalToggle {
    required: bool,
}

async fn agent_approval(
    State(st): State<AppState>,
    Path(agent_id): Path<String>,
    body: Result<Json<ApprovalToggle>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(t) = body?;
    if st.fixtures.agent(&agent_id).is_none() {
        return Err(ApiError::agent_not_found());
    }
    st.lock()
        .await
        .approval_required
        .insert(agent_id.clone(), t.required);
    tracing::info!(%agent_id, required = t.required, "admin: approval toggle");
    Ok(Json(
        json!({ "agent_id": agent_id, "requires_approval": t.required }),
    ))
}

/// Changes what Q answers for the fixture agent `agent_id` (`change`, under the state lock) and
/// appends the `agent` access change that announces it; 404 `agent_not_found` for an agent the
/// fixtures do not have.
async fn change_agent(
    st: &AppState,
    agent_id: &str,
    change: impl FnOnce(&mut Inner),
) -> Result<(), ApiError> {
    let Some(agent) = st.fixtures.agent(agent_id) else {
        return Err(ApiError::agent_not_found());
    };
    let mut inner = st.lock().await;
    change(&mut inner);
    inner.access_changed(
        AccessChangeKind::Agent,
        Named {
            tenant_id: Some(agent.tenant.clone()),
            agent_id: Some(agent_id.to_string()),
            ..Named::default()
        },
    );
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AvailabilityToggle {
    available: bool,
}

/// Makes an agent unavailable (Q answers `agent_not_found` for it, on the access route and on
/// create, as for an unknown agent) or available again; either is an `agent` access change.
async fn agent_available(
    State(st): State<AppState>,
    Path(agent_id): Path<String>,
    body: Result<Json<AvailabilityToggle>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(t) = body?;
    change_agent(&st, &agent_id, |inner| {
        if t.available {
            inner.unavailable_agents.remove(&agent_id);
        } else {
            inner.unavailable_agents.insert(agent_id.clone());
        }
    })
    .await?;
    tracing::info!(%agent_id, available = t.available, "admin: agent availability");
    Ok(Json(
        json!({ "agent_id": agent_id, "available": t.available }),
    ))
}

/// Changes an agent's name, description and version, as an edit in Q's agent API would: the
/// access route answers the new record, and the change is an `agent` access change.
async fn agent_describe(
    State(st): State<AppState>,
    Path(agent_id): Path<String>,
    body: Result<Json<AgentDescription>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(d) = body?;
    change_agent(&st, &agent_id, |inner| {
        inner.described_agents.insert(agent_id.clone(), d.clone());
    })
    .await?;
    tracing::info!(%agent_id, name = %d.name, "admin: agent described");
    Ok(Json(json!({ "agent_id": agent_id, "name": d.name })))
}

async fn get_faults(State(st): State<AppState>) -> Json<Faults> {
    Json(st.lock().await.faults.clone())
}

async fn set_faults(
    State(st): State<AppState>,
    body: Result<Json<FaultsPatch>, JsonRejection>,
) -> Result<Json<Faults>, ApiError> {
    let Json(patch) = body?;
    if let Some(route) = patch.unknown_route() {
        return Err(ApiError::invalid(format!(
            "no route {route:?}; status faults apply to {}",
            crate::faults::ROUTES.join(", ")
        )));
    }
    let mut inner = st.lock().await;
    inner.faults.apply(patch);
    tracing::info!(faults = ?inner.faults, "admin: faults set");
    Ok(Json(inner.faults.clone()))
}

/// Disarms every fault; the counts of those that fired stay.
async fn clear_faults(State(st): State<AppState>) -> Json<Faults> {
    let mut inner = st.lock().await;
    let fired = std::mem::take(&mut inner.faults.fired);
    inner.faults = Faults {
        fired,
        ..Faults::default()
    };
    Json(inner.faults.clone())
}

#[derive(Debug, Deserialize)]
struct RunsQuery {
    workflow_id: Option<String>,
}

async fn list_runs(State(st): State<AppState>, Query(q): Query<RunsQuery>) -> Json<Value> {
    let mut inner = st.lock().await;
    let now = Utc::now();
    let mut runs: Vec<Run> = inner
        .runs
        .values_mut()
        .filter(|e| {
            q.workflow_id
                .as_ref()
                .is_none_or(|w| *w == e.run.workflow_id)
        })
        .map(|e| {
            e.enforce_deadline(now);
            e.run.clone()
        })
        .collect();
    runs.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    Json(json!({ "runs": runs }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CorruptBody {
    mode: CorruptMode,
}

async fn corrupt_output(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
    body: Result<Json<CorruptBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(c) = body?;
    let mut inner = st.lock().await;
    let entry = inner
        .runs
        .get_mut(&run_id)
        .ok_or_else(ApiError::run_not_found)?;
    entry.corrupt = Some(c.mode);
    tracing::info!(%run_id, mode = ?c.mode, "admin: output corrupted");
    Ok(Json(json!({ "run_id": run_id, "mode": c.mode })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailBody {
    #[serde(default)]
    message: Option<String>,
}

/// Extra (not in the original brief): drives a run to `failed`, the one status the reference
/// never reaches on its own.
async fn fail_run(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
    body: Option<Json<FailBody>>,
) -> Result<Json<Run>, ApiError> {
    let message = body
        .and_then(|Json(b)| b.message)
        .unwrap_or_else(|| "agent failed".to_owned());
    let mut inner = st.lock().await;
    let entry = inner.run_mut(&run_id)?;
    if entry.run.status.is_terminal() {
        return Err(ApiError::new(StatusCode::CONFLICT, "run_terminal", None));
    }
    entry.transition(RunStatus::Failed, Some(message), Utc::now());
    entry.wake();
    tracing::info!(%run_id, "admin: run failed");
    Ok(Json(entry.run.clone()))
}

async fn stats(State(st): State<AppState>) -> Json<Stats> {
    Json(st.lock().await.stats.clone())
}

/// How many answers the `hold` fault holds right now.
async fn barrier(State(st): State<AppState>) -> Json<Value> {
    Json(json!({ "held": st.held.load(std::sync::atomic::Ordering::SeqCst) }))
}

/// Lets every held answer go.
async fn release_barrier(State(st): State<AppState>) -> Json<Value> {
    st.barrier.send_modify(|releases| *releases += 1);
    tracing::info!("admin: barrier released");
    Json(json!({ "released": true }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Compaction {
    /// Entries at or below this cursor are dropped; the head when absent.
    through: Option<u64>,
}

/// Compacts a feed (`runs` or `access`): a reader whose position is below the new floor has
/// missed changes.
async fn compact_feed(
    State(st): State<AppState>,
    Path(feed): Path<String>,
    body: Result<Json<Compaction>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(c) = body?;
    let inner = st.lock().await;
    let (floor, head) = match feed.as_str() {
        "runs" => (
            inner.feed.compact(c.through.unwrap_or(u64::MAX)),
            inner.feed.head(),
        ),
        "access" => (
            inner.access_feed.compact(c.through.unwrap_or(u64::MAX)),
            inner.access_feed.head(),
        ),
        _ => return Err(unknown_feed()),
    };
    tracing::info!(%feed, floor, head, "admin: feed compacted");
    Ok(Json(json!({ "floor": floor, "head": head })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Failover {
    /// The newest entries the new history lacks.
    #[serde(default)]
    lost: u64,
    /// How far above the old head the new history's head lands.
    #[serde(default = "five")]
    ahead: u64,
}

fn five() -> u64 {
    5
}

/// A failover of a feed to a copy with another history: a new epoch, the newest `lost`
/// entries missing, the head `ahead` above the old one (filler entries that change nothing).
async fn fail_over_feed(
    State(st): State<AppState>,
    Path(feed): Path<String>,
    body: Result<Json<Failover>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(f) = body?;
    let inner = st.lock().await;
    let (head, epoch) = match feed.as_str() {
        "runs" => (inner.feed.fail_over(f.lost, f.ahead), inner.feed.epoch()),
        "access" => (
            inner.access_feed.fail_over(f.lost, f.ahead),
            inner.access_feed.epoch(),
        ),
        _ => return Err(unknown_feed()),
    };
    tracing::info!(%feed, head, %epoch, "admin: feed failed over");
    Ok(Json(json!({ "head": head, "epoch": epoch })))
}

fn unknown_feed() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "feed_not_found",
        Some("feeds are `runs` and `access`".to_owned()),
    )
}

async fn reset(State(st): State<AppState>) -> Json<Value> {
    st.lock().await.reset();
    tracing::info!("admin: reset");
    Json(json!({ "reset": true }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DedupToggle {
    enabled: bool,
}

/// Turns Q's workflow-id deduplication off (or back on): with it off, every create makes a new
/// run, so each create the gateway sends shows as a run.
async fn workflow_dedup(
    State(st): State<AppState>,
    body: Result<Json<DedupToggle>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(t) = body?;
    st.lock().await.dedup_off = !t.enabled;
    tracing::info!(enabled = t.enabled, "admin: workflow-id deduplication");
    Ok(Json(json!({ "enabled": t.enabled })))
}

#[derive(Debug, Deserialize)]
struct CallsQuery {
    workflow_id: Option<String>,
}

/// The recorded requests in arrival order (all, or those naming one workflow id), each with
/// the status it was answered with.
async fn calls(State(st): State<AppState>, Query(q): Query<CallsQuery>) -> Json<Value> {
    let inner = st.lock().await;
    let calls: Vec<_> = inner
        .traceparents
        .iter()
        .filter(|c| {
            q.workflow_id
                .as_ref()
                .is_none_or(|w| c.workflow_id.as_ref() == Some(w))
        })
        .collect();
    Json(json!({ "calls": calls }))
}

/// The `traceparent` of the latest contract request and of the recent ones (oldest first),
/// so tests can check that the gateway propagates W3C trace context to Q.
async fn last_traceparent(State(st): State<AppState>) -> Json<Value> {
    let inner = st.lock().await;
    Json(json!({
        "traceparent": inner.traceparents.back().and_then(|s| s.traceparent.clone()),
        "recent": inner.traceparents,
    }))
}
