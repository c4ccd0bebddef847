//! Method handlers: SendMessage and GetTask.

use std::time::Duration;

use a2a::{SendMessageResponse, Task, TaskState};
use serde_json::{Map, Value};
use tokio::time::Instant;
use uuid::Uuid;

use crate::a2a::rpc::{Caller, Fault, MethodResult};
use crate::a2a::task_view::{self, is_settled, render, task_state, verified_artifact};
use crate::a2a::validate::{self, validate_send};
use crate::dispatch;
use crate::error::{HttpError, RpcError};
use crate::server::AppState;
use crate::store::{Admission, NewTask, TaskRow};
use crate::upstream::contract::{EvidenceGrant, Run, WorkspaceAccess};

pub async fn send_message(
    state: &AppState,
    caller: &Caller,
    params: &Map<String, Value>,
) -> MethodResult {
    let send = validate_send(params, &state.config.limits)?;
    if caller.workspace != WorkspaceAccess::Granted {
        return Err(HttpError::WorkspaceAccessDenied.into());
    }
    let new = NewTask {
        owner: caller.owner(),
        message_id: send.message_id.clone(),
        content_sha256: send.content_sha256(),
        message: send.stored_message(),
    };
    let row = match state.store.admit(&new).await? {
        Admission::Created(row) => {
            dispatch::dispatch(state, &row, send.texts()).await?;
            row
        }
        Admission::Existing(row) => {
            if row.content_sha256 != new.content_sha256 {
                return Err(RpcError::invalid_field(
                    "message.messageId",
                    "this messageId was already used with different content; nothing was changed. Use a new messageId for new content",
                )
                .with_meta("taskId", row.task_id.to_string())
                .into());
            }
            tracing::info!(task_id = %row.task_id, "repeated messageId: recovering the existing task");
            dispatch::resolve(state, &row, send.texts()).await?;
            row
        }
    };
    let row = reload(state, caller, row.task_id).await?;

    let window = if send.return_immediately {
        Duration::ZERO
    } else {
        state.config.observation_window()
    };
    let run = observe(state, &row, window).await;
    let task = snapshot_task(
        state,
        caller,
        &row,
        run,
        send.history_length,
        Visibility::HideContent,
    )
    .await?;
    to_result(state, &SendMessageResponse::Task(task))
}

pub async fn get_task(
    state: &AppState,
    caller: &Caller,
    params: &Map<String, Value>,
) -> MethodResult {
    validate::refuse_tenant(params)?;
    let id = match params.get("id") {
        Some(Value::String(s)) if !s.is_empty() => s,
        None | Some(Value::Null) | Some(Value::String(_)) => {
            return Err(RpcError::invalid_field("id", "Field is required.").into())
        }
        Some(_) => return Err(RpcError::invalid_field("id", "must be a string").into()),
    };
    let history_length = validate::history_length(params.get("historyLength"), "historyLength")?;
    // A task in a workspace the caller lost is indistinguishable from an unknown one.
    if caller.workspace != WorkspaceAccess::Granted {
        return Err(RpcError::task_not_found().into());
    }
    let task_id = Uuid::parse_str(id).map_err(|_| RpcError::task_not_found())?;
    let row = state
        .store
        .find_owned(task_id, &caller.owner())
        .await?
        .ok_or_else(RpcError::task_not_found)?;
    if row.run_id.is_none() {
        dispatch::resolve(state, &row, stored_texts(&row)).await?;
    }
    let row = reload(state, caller, task_id).await?;
    let run = match &row.run_id {
        Some(run_id) => Some(
            state
                .upstream
                .get_run(run_id)
                .await
                .map_err(upstream_fault)?,
        ),
        None => None,
    };
    let task = snapshot_task(
        state,
        caller,
        &row,
        run,
        history_length,
        Visibility::NotFound,
    )
    .await?;
    to_result(state, &task)
}

async fn reload(state: &AppState, caller: &Caller, task_id: Uuid) -> Result<TaskRow, Fault> {
    state
        .store
        .find_owned(task_id, &caller.owner())
        .await?
        .ok_or_else(|| RpcError::task_not_found().into())
}

fn stored_texts(row: &TaskRow) -> Vec<String> {
    row.message["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn upstream_fault(e: crate::upstream::UpstreamError) -> Fault {
    tracing::warn!(error = %e, kind = e.kind(), "Q read failed");
    RpcError::upstream_unavailable().into()
}

/// Follows the task's run until it settles (terminal or interrupted) or `window` ends, using
/// Q's long-polled event feed; returns the last run read, if any. The run keeps going under its
/// own deadline when the window ends.
async fn observe(state: &AppState, row: &TaskRow, window: Duration) -> Option<Run> {
    let run_id = row.run_id.as_deref()?;
    let deadline = Instant::now() + window;
    let poll = Duration::from_millis(state.config.upstream.poll_interval_ms);
    let mut after_seq = 0;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        match state
            .upstream
            .run_events(run_id, after_seq, remaining.min(Duration::from_secs(25)))
            .await
        {
            Ok(events) => {
                after_seq = events.last_seq.max(after_seq);
                if events
                    .events
                    .last()
                    .is_some_and(|e| is_settled(&task_state(e.status)))
                {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "run event feed failed; retrying within the window");
                tokio::time::sleep(poll.min(remaining)).await;
            }
        }
    }
    match state.upstream.get_run(run_id).await {
        Ok(run) => Some(run),
        Err(e) => {
            tracing::warn!(error = %e, "final run read failed; answering from the stored projection");
            None
        }
    }
}

/// What a revoked evidence grant does to a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visibility {
    /// The whole task is hidden: -32001, like an unknown id (GetTask).
    NotFound,
    /// The task is returned without history or artifacts (SendMessage's own receipt).
    HideContent,
}

/// Projects the observed run into the store (the trigger stamps the timestamp) and renders
/// the task, with the verified artifact when the run completed.
async fn snapshot_task(
    state: &AppState,
    caller: &Caller,
    row: &TaskRow,
    run: Option<Run>,
    history_length: Option<usize>,
    on_revoked: Visibility,
) -> Result<Task, Fault> {
    let (task_state, status_message) = match &run {
        Some(run) => (task_state(run.status), run.status_message.clone()),
        None => (row.state.clone(), row.status_message.clone()),
    };
    let status_timestamp = if task_state != row.state || status_message != row.status_message {
        state
            .store
            .record_state(row.task_id, &task_state, status_message.as_deref())
            .await?
    } else {
        row.status_timestamp
    };

    let mut content_visible = true;
    let mut artifact = None;
    if let Some(run) = &run {
        let grant = state
            .upstream
            .run_grant(&run.id, &caller.principal.principal_id)
            .await
            .map_err(upstream_fault)?;
        if grant.evidence != EvidenceGrant::Granted {
            if on_revoked == Visibility::NotFound {
                return Err(RpcError::task_not_found().into());
            }
            content_visible = false;
        }
        if content_visible && task_state == TaskState::Completed {
            let output = state
                .upstream
                .run_output(&run.id)
                .await
                .map_err(upstream_fault)?;
            artifact = Some(verified_artifact(&output)?);
        }
    }
    Ok(render(
        row,
        task_view::Snapshot {
            state: task_state,
            status_message,
            status_timestamp,
            artifact,
            content_visible,
        },
        history_length,
    ))
}

/// Serializes a result, refusing one over the 1 MiB bound (only a huge artifact can get there).
fn to_result<T: serde::Serialize>(state: &AppState, value: &T) -> MethodResult {
    let bytes = serde_json::to_vec(value).map_err(|e| {
        tracing::error!(error = %e, "result serialization failed");
        Fault::Rpc(RpcError::internal())
    })?;
    if bytes.len() > state.config.limits.max_result_bytes {
        return Err(RpcError::invalid_agent_response(format!(
            "the task exceeds the {} byte result bound and cannot be returned inline",
            state.config.limits.max_result_bytes
        ))
        .into());
    }
    serde_json::from_slice(&bytes).map_err(|_| Fault::Rpc(RpcError::internal()))
}
