//! `/internal/v1/runs`: create, read, cancel, events and output.

use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::Utc;
use serde::Deserialize;
use tokio::time::Instant;

use super::{read_fault, ConnKill, MAX_WAIT_MS};
use crate::breaks::Break;
use crate::contract::{
    CancelRunRequest, CreateRunRequest, EvidenceGrant, Run, RunEvents, RunStatus,
};
use crate::error::{status_name, ApiError};
use crate::faults::consume;
use crate::state::AppState;

pub(super) async fn create_run(
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
    if consume!(st.lock().await.faults, create_fail_500_before_commit) {
        tracing::info!("fault: create fails before commit");
        return Err(ApiError::injected());
    }
    if consume!(st.lock().await.faults, create_refuse_403) {
        tracing::info!("fault: create refused");
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "workspace_access_denied",
            Some("the principal has no access to the agent's workspace".to_owned()),
        ));
    }
    let Json(req) = body?;
    let (created, mut run) = st.create_run(req).await?;

    let (drop_conn, fail_after) = {
        let mut inner = st.lock().await;
        let drop_conn = consume!(inner.faults, create_drop_after_commit);
        let fail_after = !drop_conn && consume!(inner.faults, create_fail_500_after_commit);
        // The grant as `/grants` answers it now (a replay's may have been revoked since).
        if !inner.faults.create_omit_evidence {
            let granted = inner.evidence_granted(&run.id, &run.principal_id) == Some(true);
            run.principal_evidence = Some(if granted {
                EvidenceGrant::Granted
            } else {
                EvidenceGrant::Revoked
            });
        }
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

pub(super) async fn get_run(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    read_fault(&st).await?;
    let mut inner = st.lock().await;
    Ok(Json(inner.run_mut(&run_id)?.run.clone()))
}

pub(super) async fn get_run_by_workflow(
    State(st): State<AppState>,
    Path(workflow_id): Path<String>,
) -> Result<Response, ApiError> {
    read_fault(&st).await?;
    if st.breaks.has(Break::LookupCommitted) {
        return Err(ApiError::run_not_found());
    }
    let mut inner = st.lock().await;
    let run_id = match inner.run_id_by_workflow(&workflow_id) {
        Ok(run_id) => run_id,
        // What a proxy answers: no contract code, so nobody can tell no run was committed.
        Err(_) if st.breaks.has(Break::LookupAbsent) => {
            return Ok((StatusCode::NOT_FOUND, "Not Found").into_response());
        }
        Err(e) => return Err(e),
    };
    Ok(Json(inner.run_mut(&run_id)?.run.clone()).into_response())
}

pub(super) async fn cancel_run(
    State(st): State<AppState>,
    Path(run_id): Path<String>,
    body: Result<Json<CancelRunRequest>, JsonRejection>,
) -> Result<Json<Run>, ApiError> {
    let Json(req) = body?;
    let delay = st.lock().await.faults.take_cancel_delay();
    if let Some(delay) = delay {
        tracing::info!(?delay, "fault: delaying cancel");
        tokio::time::sleep(delay).await;
    }
    let mut inner = st.lock().await;
    if consume!(inner.faults, cancel_fail_500) {
        tracing::info!(%run_id, "fault: cancel fails before canceling");
        return Err(ApiError::injected());
    }
    let status = inner.run_mut(&run_id)?.run.status;
    if status.is_terminal() {
        return Err(ApiError::run_terminal(status));
    }
    let announce = !st.breaks.has(Break::RunFeedComplete);
    if consume!(inner.faults, cancel_async) {
        // Q takes the cancellation and stops the run on its own time: the answer still shows
        // it in its current status.
        let later = inner.faults.cancel_async_delay();
        let run = inner.run_mut(&run_id)?.run.clone();
        drop(inner);
        tracing::info!(%run_id, ?later, "fault: cancel taken asynchronously");
        let st = st.clone();
        let principal_id = req.principal_id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(later).await;
            let mut inner = st.lock().await;
            if let Ok(entry) = inner.run_mut(&run_id) {
                if !entry.run.status.is_terminal() {
                    cancel(entry, &principal_id, announce);
                }
            }
        });
        return Ok(Json(run));
    }
    let fail_after = consume!(inner.faults, cancel_fail_500_after_commit);
    let entry = inner.run_mut(&run_id)?;
    cancel(entry, &req.principal_id, announce);
    if fail_after {
        tracing::info!(%run_id, "fault: cancel fails after canceling");
        return Err(ApiError::injected());
    }
    Ok(Json(entry.run.clone()))
}

/// Cancels the run; its change goes to the run feed when `announce`.
fn cancel(entry: &mut crate::runs::RunEntry, principal_id: &str, announce: bool) {
    let message = Some(format!("canceled by {principal_id}"));
    if announce {
        entry.transition(RunStatus::Canceled, message, Utc::now());
    } else {
        entry.transition_unannounced(RunStatus::Canceled, message, Utc::now());
    }
    entry.wake();
    tracing::info!(run_id = %entry.run.id, %principal_id, "run canceled");
}

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    #[serde(default)]
    after_seq: u64,
    #[serde(default)]
    wait_ms: u64,
}

pub(super) async fn run_events(
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
            let mut events = entry.events_after(q.after_seq);
            if !events.is_empty() || Instant::now() >= until || *shutdown.borrow_and_update() {
                if st.breaks.has(Break::RunEvents) {
                    events.reverse();
                }
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

pub(super) async fn run_output(
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
