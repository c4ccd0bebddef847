//! ListTasks: the caller's tasks of one agent, most recent status first, in opaque cursor
//! pages that stay within the result bound (an artifact-heavy page holds fewer tasks).
//!
//! With artifacts, what a page reads from Q is bounded too: the outputs of its completed
//! tasks, in page order, share one budget (the result bound less a margin). An output whose
//! answer from Q is larger than what is left (by its declared `Content-Length`, before any of
//! it is read, or as soon as more arrives) is not read, and neither is any after it: the page
//! ends before that task. So a page never holds more than the bound of Q's outputs, however
//! many tasks or however large their outputs, and an output over the whole budget is refused
//! (-32006) when its task comes first on a page. At most eight answers are requested at once.

use std::collections::HashMap;

use a2a::{Artifact, TaskState};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::{params, MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::cursor::CursorError;
use crate::a2a::task_view::{render, verified_artifact, Snapshot};
use crate::error::{serialization_failed, Fault, RpcError};
use crate::store::{ListPosition, TaskRow};
use crate::upstream::contract::{EvidenceGrant, RunOutput, WorkspaceAccess};

/// Outputs requested from Q at once while building an artifact-bearing ListTasks page.
const OUTPUT_FETCH_CONCURRENCY: usize = 8;

/// A completed task's output, as far as a page read it.
#[derive(Debug)]
enum Fetched {
    Artifact(Artifact),
    /// Larger than a whole page's budget: no page can hold it.
    TooLarge,
    /// Not read: the page's budget was spent before this task.
    Unread,
}

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

        // Stay within the result bound: an artifact-heavy page returns fewer tasks and a token
        // that continues exactly after the last one returned.
        let max_result_bytes = self.settings.limits.max_result_bytes;
        let budget = max_result_bytes.saturating_sub(1024);
        let too_large = |row: &TaskRow| -> Fault {
            RpcError::invalid_agent_response(format!(
                "task {} exceeds the {} byte result bound even alone; list without includeArtifacts",
                row.task_id, max_result_bytes
            ))
            .with_meta("taskId", row.task_id.to_string())
            .into()
        };

        let visible = self.evidence(caller, &rows).await?;
        let mut artifacts = if include_artifacts {
            self.list_artifacts(&rows, &visible, budget).await?
        } else {
            HashMap::new()
        };

        let mut used = 0usize;
        let mut tasks: Vec<Value> = Vec::with_capacity(rows.len());
        let mut last: Option<ListPosition> = None;
        for row in &rows {
            let artifact = match artifacts.remove(&row.task_id) {
                None => None,
                Some(Fetched::Artifact(artifact)) => Some(artifact),
                Some(Fetched::TooLarge) if tasks.is_empty() => return Err(too_large(row)),
                Some(Fetched::TooLarge | Fetched::Unread) => {
                    more = true;
                    break;
                }
            };
            let content_visible = visible.get(&row.task_id).copied().unwrap_or(false);
            let task = render(
                row,
                Snapshot {
                    state: row.state.clone(),
                    status_message: row.status_message.clone(),
                    status_timestamp: row.status_timestamp,
                    artifact,
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
                    return Err(too_large(row));
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

    /// The outputs of the completed, visible tasks of a page, in page order within `budget`
    /// bytes of Q's answers (see the module doc): answers are requested concurrently, bodies
    /// read one at a time in page order, each only if it fits in what is left.
    async fn list_artifacts(
        &self,
        rows: &[TaskRow],
        visible: &HashMap<Uuid, bool>,
        budget: usize,
    ) -> Result<HashMap<Uuid, Fetched>, Fault> {
        let wanted: Vec<(Uuid, String)> = rows
            .iter()
            .filter(|r| r.state == TaskState::Completed && visible.get(&r.task_id) == Some(&true))
            .filter_map(|r| r.run_id.clone().map(|run| (r.task_id, run)))
            .collect();
        let mut fetched: HashMap<Uuid, Fetched> = wanted
            .iter()
            .map(|(task_id, _)| (*task_id, Fetched::Unread))
            .collect();
        let mut answers = stream::iter(wanted)
            .map(|(task_id, run_id)| async move {
                (task_id, self.upstream.run_output_answer(&run_id).await)
            })
            .buffered(OUTPUT_FETCH_CONCURRENCY);
        let mut left = budget;
        while let Some((task_id, answer)) = answers.next().await {
            let output = match answer?.read_within(left).await? {
                Some(output) => output,
                None => {
                    // Over what is left: this task and every later one wait for a next page
                    // (dropping the stream cancels the requests still in flight).
                    if left == budget {
                        fetched.insert(task_id, Fetched::TooLarge);
                    }
                    break;
                }
            };
            left -= output_size(&output).min(left);
            let artifact = verified_artifact(&output)
                .map_err(|e| Fault::Rpc(e.with_meta("taskId", task_id.to_string())))?;
            fetched.insert(task_id, Fetched::Artifact(artifact));
        }
        Ok(fetched)
    }
}

/// What an output holds in memory once read: its strings, the text above all.
fn output_size(output: &RunOutput) -> usize {
    output.text.len()
        + output.artifact_id.len()
        + output.name.len()
        + output.media_type.len()
        + output.sha256.len()
}
