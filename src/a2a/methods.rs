//! Method handlers: SendMessage, GetTask, ListTasks and CancelTask.
//!
//! Visibility rules, in one place:
//! - a task belongs to (tenant, principal, agent); anyone else gets -32001, like an unknown id;
//! - without current access to the agent's workspace, GetTask is -32001 and ListTasks lists
//!   nothing; with a revoked evidence grant on the run, GetTask is -32001;
//! - where a task is still returned without its content (ListTasks entries whose evidence was
//!   revoked, SendMessage's repeat, CancelTask's answer without access), it is a control
//!   receipt: id, contextId and status state/timestamp only; no history, artifacts or Q text;
//! - a caller can always cancel its own task, whatever happened to its grants.

use std::collections::HashMap;
use std::time::Duration;

use a2a::{Artifact, SendMessageResponse, Task, TaskState};
use chrono::{DateTime, Utc};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde_json::{json, Map, Value};
use tokio::time::Instant;
use uuid::Uuid;

use crate::a2a::cursor::CursorError;
use crate::a2a::rpc::{Caller, Fault, MethodResult};
use crate::a2a::task_view::{is_settled, render, task_state, verified_artifact, Snapshot};
use crate::a2a::validate::{self, validate_send, ValidatedSend};
use crate::dispatch;
use crate::error::{HttpError, RpcError};
use crate::server::AppState;
use crate::store::{Admission, ListFilter, ListPosition, NewTask, TaskRow};
use crate::upstream::contract::{EvidenceGrant, Run, RunStatus, WorkspaceAccess};
use crate::upstream::UpstreamError;

/// ListTasks page size when the request names none, and the largest allowed.
pub const DEFAULT_PAGE_SIZE: i64 = 50;
pub const MAX_PAGE_SIZE: i64 = 100;

/// Outputs fetched at once while building an artifact-bearing ListTasks page.
const OUTPUT_FETCH_CONCURRENCY: usize = 8;

pub async fn send_message(
    state: &AppState,
    caller: &Caller,
    params: &Map<String, Value>,
) -> MethodResult {
    let send = validate_send(params, &state.config.limits)?;
    if caller.workspace != WorkspaceAccess::Granted {
        return Err(HttpError::WorkspaceAccessDenied.into());
    }
    let row = admit(state, caller, &send).await?;

    // The wait is an observation and holds a lease; without one (over a bound, or the lease
    // store down) the run still exists and the current task is returned at once.
    let mut lease = None;
    let window = if send.return_immediately {
        Duration::ZERO
    } else {
        match state
            .leases
            .acquire(&caller.principal.tenant_id, &caller.principal.principal_id)
            .await
        {
            Ok(held) => {
                lease = Some(held);
                state.config.observation_window()
            }
            Err(e) => {
                tracing::info!(task_id = %row.task_id, reason = %e, "blocking send returns without waiting");
                Duration::ZERO
            }
        }
    };
    let run = observe(state, &row, window).await;
    if let Some(lease) = lease {
        lease.release().await;
    }
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

/// Commits the message under its identity and dispatches it (or, for a repeat, recovers the
/// existing task). Returns the task as stored after dispatch.
pub(crate) async fn admit(
    state: &AppState,
    caller: &Caller,
    send: &ValidatedSend,
) -> Result<TaskRow, Fault> {
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
            dispatch::resolve(state, &row).await?;
            row
        }
    };
    reload(state, caller, row.task_id).await
}

pub async fn get_task(
    state: &AppState,
    caller: &Caller,
    params: &Map<String, Value>,
) -> MethodResult {
    validate::refuse_tenant(params)?;
    let id = required_task_id(params)?;
    let history_length = validate::history_length(params.get("historyLength"), "historyLength")?;
    if caller.workspace != WorkspaceAccess::Granted {
        return Err(RpcError::task_not_found().into());
    }
    let mut row = owned(state, caller, id).await?;
    // Only a task whose run is not yet recorded can change here; a recorded run is what the
    // row just read says (re-reading it would cost a database round trip per GetTask).
    if row.run_id.is_none() {
        dispatch::resolve(state, &row).await?;
        row = reload(state, caller, row.task_id).await?;
    }
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

pub async fn list_tasks(
    state: &AppState,
    caller: &Caller,
    params: &Map<String, Value>,
) -> MethodResult {
    validate::refuse_tenant(params)?;
    let owner = caller.owner();
    let mut filter = ListFilter::default();
    let mut impossible = false;
    match params.get("contextId") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => match Uuid::parse_str(s) {
            Ok(id) => filter.context_id = Some(id),
            // Context ids are server-assigned UUIDs: anything else matches no task.
            Err(_) => impossible = true,
        },
        Some(_) => return Err(RpcError::invalid_field("contextId", "must be a string").into()),
    }
    match params.get("status") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() || s == "TASK_STATE_UNSPECIFIED" => {}
        Some(v) => {
            let state: TaskState = serde_json::from_value(v.clone()).map_err(|_| {
                RpcError::invalid_field(
                    "status",
                    "must be a TaskState name such as TASK_STATE_COMPLETED",
                )
            })?;
            filter.state = Some(state);
        }
    }
    let page_size = match params.get("pageSize") {
        None | Some(Value::Null) => DEFAULT_PAGE_SIZE,
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) if n < 1 => {
                return Err(RpcError::invalid_field("pageSize", "minimum page size is 1").into())
            }
            Some(n) if n > MAX_PAGE_SIZE => {
                return Err(RpcError::invalid_field("pageSize", "maximum page size is 100").into())
            }
            Some(n) => n,
            None => return Err(RpcError::invalid_field("pageSize", "must be an integer").into()),
        },
        Some(_) => return Err(RpcError::invalid_field("pageSize", "must be an integer").into()),
    };
    let history_length = validate::history_length(params.get("historyLength"), "historyLength")?;
    match params.get("statusTimestampAfter") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            let ts = DateTime::parse_from_rfc3339(s).map_err(|_| {
                RpcError::invalid_field("statusTimestampAfter", "must be an RFC 3339 timestamp")
            })?;
            filter.status_timestamp_after = Some(ts.with_timezone(&Utc));
        }
        Some(_) => {
            return Err(RpcError::invalid_field(
                "statusTimestampAfter",
                "must be an RFC 3339 timestamp",
            )
            .into())
        }
    }
    let include_artifacts = match params.get("includeArtifacts") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(RpcError::invalid_field("includeArtifacts", "must be a boolean").into())
        }
    };
    let after = match params.get("pageToken") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(token)) => {
            Some(state.cursors.decode(token, &owner, &filter).map_err(|e| {
                let reason = match e {
                    CursorError::Malformed => "malformed",
                    CursorError::BadSignature => "altered or not issued here",
                    CursorError::Foreign => "issued for another listing",
                };
                RpcError::invalid_field("pageToken", e.to_string()).with_meta("pageToken", reason)
            })?)
        }
        Some(_) => return Err(RpcError::invalid_field("pageToken", "must be a string").into()),
    };

    let empty = || json!({"tasks": [], "nextPageToken": "", "pageSize": page_size, "totalSize": 0});
    if impossible || caller.workspace != WorkspaceAccess::Granted {
        return Ok(empty());
    }
    let total = state.store.count(&owner, &filter).await?;
    let mut rows = state
        .store
        .list(&owner, &filter, after, page_size + 1)
        .await?;
    let mut more = rows.len() as i64 > page_size;
    rows.truncate(page_size as usize);

    let visible = evidence(state, caller, &rows).await?;
    let artifacts = if include_artifacts {
        list_artifacts(state, &rows, &visible).await?
    } else {
        HashMap::new()
    };

    // Stay within the result bound: an artifact-heavy page returns fewer tasks and a token that
    // continues exactly after the last one returned.
    let budget = state.config.limits.max_result_bytes.saturating_sub(1024);
    let mut used = 0usize;
    let mut tasks: Vec<Value> = Vec::with_capacity(rows.len());
    let mut last: Option<ListPosition> = None;
    for row in &rows {
        let content_visible = visible.get(&row.task_id).copied().unwrap_or(false);
        let task = render(
            row,
            Snapshot {
                state: row.state.clone(),
                status_message: row.status_message.clone(),
                status_timestamp: row.status_timestamp,
                artifact: artifacts.get(&row.task_id).cloned(),
                content_visible,
            },
            history_length,
        );
        let value = serde_json::to_value(&task).map_err(|_| Fault::Rpc(RpcError::internal()))?;
        let size = serde_json::to_vec(&value)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if used + size + 1 > budget {
            if tasks.is_empty() {
                return Err(RpcError::invalid_agent_response(format!(
                    "task {} exceeds the {} byte result bound even alone; list without includeArtifacts",
                    row.task_id, state.config.limits.max_result_bytes
                ))
                .with_meta("taskId", row.task_id.to_string())
                .into());
            }
            more = true;
            break;
        }
        used += size + 1;
        tasks.push(value);
        last = Some(ListPosition {
            status_timestamp: row.status_timestamp,
            task_id: row.task_id,
        });
    }
    let next_page_token = match (more, last) {
        (true, Some(position)) => state.cursors.encode(&owner, &filter, position),
        _ => String::new(),
    };
    Ok(json!({
        "tasks": tasks,
        "nextPageToken": next_page_token,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

pub async fn cancel_task(
    state: &AppState,
    caller: &Caller,
    params: &Map<String, Value>,
) -> MethodResult {
    validate::refuse_tenant(params)?;
    let id = required_task_id(params)?;
    let row = owned(state, caller, id).await?;
    if row.state.is_terminal() {
        return Err(not_cancelable(&row.state));
    }
    // Persisted before Q is told: from here on no path creates this task's run.
    state.store.request_cancel(row.task_id).await?;
    let row = reload(state, caller, row.task_id).await?;

    let run_id = match &row.run_id {
        Some(run_id) => run_id.clone(),
        None => match state.upstream.run_by_workflow(&row.workflow_id).await {
            Ok(Some(run)) => {
                dispatch::record_run(state, row.task_id, &run).await?;
                run.id
            }
            Ok(None) => {
                state
                    .store
                    .finish_unresolved(
                        row.task_id,
                        &TaskState::Canceled,
                        "canceled before Q started a run",
                    )
                    .await?;
                let row = reload(state, caller, row.task_id).await?;
                return control_or_full(state, caller, &row, None).await;
            }
            Err(e) => return Err(cancel_pending(e)),
        },
    };
    let run = match state
        .upstream
        .cancel_run(&run_id, &caller.principal.principal_id)
        .await
    {
        Ok(run) => run,
        Err(UpstreamError::Refused { status: 409, .. }) => {
            let run = state
                .upstream
                .get_run(&run_id)
                .await
                .map_err(upstream_fault)?;
            if run.status != RunStatus::Canceled {
                let (stored, _) = dispatch::project_run(state, row.task_id, &run).await?;
                return Err(not_cancelable(&stored));
            }
            // Already canceled in Q for this persisted request (the reconciler may have passed
            // it on first): the cancellation took effect.
            run
        }
        Err(e) => return Err(cancel_pending(e)),
    };
    let (stored, _) = dispatch::project_run(state, row.task_id, &run).await?;
    if stored != TaskState::Canceled {
        // Q finished the run first: it is terminal in another state.
        return Err(not_cancelable(&stored));
    }
    let row = reload(state, caller, row.task_id).await?;
    control_or_full(state, caller, &row, Some(run)).await
}

/// The task as CancelTask returns it: complete for a caller who may see its content, a control
/// receipt otherwise.
async fn control_or_full(
    state: &AppState,
    caller: &Caller,
    row: &TaskRow,
    run: Option<Run>,
) -> MethodResult {
    let task = snapshot_task(state, caller, row, run, None, Visibility::HideContent).await?;
    to_result(state, &task)
}

fn not_cancelable(state: &TaskState) -> Fault {
    RpcError::new(
        a2a::error_code::TASK_NOT_CANCELABLE,
        "Task cannot be canceled",
    )
    .with_meta("state", crate::store::state_name(state))
    .into()
}

fn cancel_pending(e: UpstreamError) -> Fault {
    tracing::warn!(error = %e, kind = e.kind(), "cancel not confirmed by Q; persisted for the reconciler");
    RpcError::upstream_unavailable()
        .with_meta("cancellationPersisted", "true")
        .into()
}

pub(crate) fn required_task_id(params: &Map<String, Value>) -> Result<&str, Fault> {
    match params.get("id") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            Err(RpcError::invalid_field("id", "Field is required.").into())
        }
        Some(_) => Err(RpcError::invalid_field("id", "must be a string").into()),
    }
}

/// The caller's own task; anything else is the same -32001 as an unknown id.
pub(crate) async fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<TaskRow, Fault> {
    let task_id = Uuid::parse_str(id).map_err(|_| RpcError::task_not_found())?;
    state
        .store
        .find_owned(task_id, &caller.owner())
        .await?
        .ok_or_else(|| RpcError::task_not_found().into())
}

pub(crate) async fn reload(
    state: &AppState,
    caller: &Caller,
    task_id: Uuid,
) -> Result<TaskRow, Fault> {
    state
        .store
        .find_owned(task_id, &caller.owner())
        .await?
        .ok_or_else(|| RpcError::task_not_found().into())
}

pub(crate) fn upstream_fault(e: UpstreamError) -> Fault {
    tracing::warn!(error = %e, kind = e.kind(), "Q read failed");
    RpcError::upstream_unavailable().into()
}

/// Which of these tasks' content the caller may see (one call to Q for the page).
async fn evidence(
    state: &AppState,
    caller: &Caller,
    rows: &[TaskRow],
) -> Result<HashMap<Uuid, bool>, Fault> {
    let run_ids: Vec<String> = rows.iter().filter_map(|r| r.run_id.clone()).collect();
    let mut granted_runs = HashMap::new();
    if !run_ids.is_empty() {
        let grants = state
            .upstream
            .evidence_grants(&caller.principal.principal_id, run_ids)
            .await
            .map_err(upstream_fault)?;
        for grant in grants.grants {
            granted_runs.insert(grant.run_id, grant.evidence == EvidenceGrant::Granted);
        }
    }
    Ok(rows
        .iter()
        .map(|row| {
            // A task with no run yet has only the caller's own message as content.
            let visible = match &row.run_id {
                Some(run_id) => granted_runs.get(run_id).copied().unwrap_or(false),
                None => true,
            };
            (row.task_id, visible)
        })
        .collect())
}

/// Verified artifacts of the completed, visible tasks of a page, fetched concurrently.
async fn list_artifacts(
    state: &AppState,
    rows: &[TaskRow],
    visible: &HashMap<Uuid, bool>,
) -> Result<HashMap<Uuid, Artifact>, Fault> {
    let wanted: Vec<(Uuid, String)> = rows
        .iter()
        .filter(|r| r.state == TaskState::Completed && visible.get(&r.task_id) == Some(&true))
        .filter_map(|r| r.run_id.clone().map(|run| (r.task_id, run)))
        .collect();
    stream::iter(wanted)
        .map(|(task_id, run_id)| async move {
            let output = state
                .upstream
                .run_output(&run_id)
                .await
                .map_err(upstream_fault)?;
            let artifact = verified_artifact(&output)
                .map_err(|e| Fault::Rpc(e.with_meta("taskId", task_id.to_string())))?;
            Ok::<_, Fault>((task_id, artifact))
        })
        .buffer_unordered(OUTPUT_FETCH_CONCURRENCY)
        .try_collect()
        .await
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
pub(crate) enum Visibility {
    /// The whole task is hidden: -32001, like an unknown id (GetTask).
    NotFound,
    /// The task is returned as a control receipt (SendMessage's repeat, CancelTask).
    HideContent,
}

/// Projects the observed run into the store (the trigger stamps the timestamp) and renders
/// the task, with the verified artifact when the run completed.
pub(crate) async fn snapshot_task(
    state: &AppState,
    caller: &Caller,
    row: &TaskRow,
    run: Option<Run>,
    history_length: Option<usize>,
    on_revoked: Visibility,
) -> Result<Task, Fault> {
    let (mut task_state, mut status_message) = match &run {
        Some(run) => (task_state(run.status), run.status_message.clone()),
        None => (row.state.clone(), row.status_message.clone()),
    };
    let status_timestamp = if task_state != row.state || status_message != row.status_message {
        let (stored, timestamp) = state
            .store
            .record_state(row.task_id, &task_state, status_message.as_deref())
            .await?;
        if stored != task_state {
            // The task was already terminal (e.g. canceled before Q's run reported it).
            task_state = stored;
            status_message = row.status_message.clone();
        }
        timestamp
    } else {
        row.status_timestamp
    };

    // The evidence grant and, for a completed run, its output are independent reads: ask Q for
    // both at once. The output is used only if the grant allows it.
    let mut content_visible = caller.workspace == WorkspaceAccess::Granted;
    let mut artifact = None;
    if let Some(run) = &run {
        let wants_output = content_visible && task_state == TaskState::Completed;
        let (grant, output) = tokio::join!(
            state
                .upstream
                .run_grant(&run.id, &caller.principal.principal_id),
            async {
                if wants_output {
                    Some(state.upstream.run_output(&run.id).await)
                } else {
                    None
                }
            }
        );
        content_visible &= grant.map_err(upstream_fault)?.evidence == EvidenceGrant::Granted;
        if content_visible {
            if let Some(output) = output {
                artifact = Some(verified_artifact(&output.map_err(upstream_fault)?)?);
            }
        }
    }
    if !content_visible && on_revoked == Visibility::NotFound {
        return Err(RpcError::task_not_found().into());
    }
    Ok(render(
        row,
        Snapshot {
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
pub(crate) fn to_result<T: serde::Serialize>(state: &AppState, value: &T) -> MethodResult {
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
