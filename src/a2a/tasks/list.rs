//! ListTasks: the caller's tasks of one agent, most recent status first, in opaque cursor
//! pages that stay within the result bound (an artifact-heavy page holds fewer tasks).

use std::collections::HashMap;

use a2a::{Artifact, TaskState};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::{params, MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::cursor::CursorError;
use crate::a2a::task_view::{render, verified_artifact, Snapshot};
use crate::error::{serialization_failed, Fault, RpcError};
use crate::store::{ListPosition, TaskRow};
use crate::upstream::contract::{EvidenceGrant, WorkspaceAccess};

/// Outputs fetched at once while building an artifact-bearing ListTasks page.
const OUTPUT_FETCH_CONCURRENCY: usize = 8;

impl TaskService {
    pub async fn list_tasks(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        let owner = caller.owner();
        let params::ListParams {
            filter,
            impossible,
            page_size,
            history_length,
            include_artifacts,
            page_token,
        } = params::list(params)?;
        let after = match page_token {
            None => None,
            Some(token) => Some(self.cursors.decode(token, &owner, &filter).map_err(|e| {
                let reason = match e {
                    CursorError::Malformed => "malformed",
                    CursorError::BadSignature => "altered or not issued here",
                    CursorError::Foreign => "issued for another listing",
                };
                RpcError::invalid_field("pageToken", e.to_string()).with_meta("pageToken", reason)
            })?),
        };

        let empty =
            || json!({"tasks": [], "nextPageToken": "", "pageSize": page_size, "totalSize": 0});
        if impossible || caller.workspace != WorkspaceAccess::Granted {
            return Ok(empty());
        }
        let total = self.store.count(&owner, &filter).await?;
        let mut rows = self
            .store
            .list(&owner, &filter, after, page_size + 1)
            .await?;
        let mut more = rows.len() as i64 > page_size;
        rows.truncate(page_size as usize);

        let visible = self.evidence(caller, &rows).await?;
        let artifacts = if include_artifacts {
            self.list_artifacts(&rows, &visible).await?
        } else {
            HashMap::new()
        };

        // Stay within the result bound: an artifact-heavy page returns fewer tasks and a token
        // that continues exactly after the last one returned.
        let max_result_bytes = self.settings.limits.max_result_bytes;
        let budget = max_result_bytes.saturating_sub(1024);
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
            let value = serde_json::to_value(&task).map_err(serialization_failed)?;
            let size = serde_json::to_vec(&value)
                .map(|v| v.len())
                .unwrap_or(usize::MAX);
            if used + size + 1 > budget {
                if tasks.is_empty() {
                    return Err(RpcError::invalid_agent_response(format!(
                        "task {} exceeds the {} byte result bound even alone; list without includeArtifacts",
                        row.task_id, max_result_bytes
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
            (true, Some(position)) => self.cursors.encode(&owner, &filter, position),
            _ => String::new(),
        };
        Ok(json!({
            "tasks": tasks,
            "nextPageToken": next_page_token,
            "pageSize": page_size,
            "totalSize": total,
        }))
    }

    /// Which of these tasks' content the caller may see (one call to Q for the page).
    async fn evidence(
        &self,
        caller: &Caller,
        rows: &[TaskRow],
    ) -> Result<HashMap<Uuid, bool>, Fault> {
        let run_ids: Vec<String> = rows.iter().filter_map(|r| r.run_id.clone()).collect();
        let mut granted_runs = HashMap::new();
        if !run_ids.is_empty() {
            let grants = self
                .upstream
                .evidence_grants(&caller.principal.principal_id, run_ids)
                .await?;
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
        &self,
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
                let output = self.upstream.run_output(&run_id).await?;
                let artifact = verified_artifact(&output)
                    .map_err(|e| Fault::Rpc(e.with_meta("taskId", task_id.to_string())))?;
                Ok::<_, Fault>((task_id, artifact))
            })
            .buffer_unordered(OUTPUT_FETCH_CONCURRENCY)
            .try_collect()
            .await
    }
}
