//! ListTasks: the caller's tasks of one agent, most recent status first, in opaque cursor
//! pages that stay within the result bound (an artifact-heavy page holds fewer tasks).
//!
//! With artifacts, the artifacts of its completed tasks, in page order, share one budget (the
//! result bound less a margin); the page ends before the first that does not fit, and an
//! artifact over the whole budget is refused (-32006) when its task comes first on a page.
//! Committed artifacts come from the store (their sizes first, then the texts of those that
//! fit, in one query each). A completed task whose artifact is not committed yet has its
//! output read from Q once and committed; those reads are bounded the same way: an output
//! whose answer from Q is larger than what is left of the budget (by its declared
//! `Content-Length`, before any of it is read, or as soon as more arrives) is not read, and
//! neither is any after it. So a page holds at most the bound of Q's outputs and then at most
//! the bound of stored texts, however many tasks or however large their outputs. At most eight
//! answers are requested from Q at once.
//!
//! A page reserves its bytes of the response budget (`crate::http::response_budget`) before
//! the texts of its artifacts are read and before it is rendered: each row's allowance (from
//! its stored message) and the stored byte counts of the artifacts that fit. What is granted
//! may be less than asked (the caller's share, its tenant's or the process's almost spent):
//! the page then holds fewer tasks, and a token continues after the last one; when not even
//! its first task fits, the answer is HTTP 503 `response_buffer_full`.

use std::collections::HashMap;

use a2a::{Artifact, TaskState};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::{params, MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::cursor::CursorError;
use crate::a2a::task_view::{answer_allowance, json_len, render, verified_artifact, Snapshot};
use crate::access::{Clearances, Purpose};
use crate::error::{serialization_failed, Fault, RpcError};
use crate::http::response_budget::AnswerSpace;
use crate::store::share::ReadPermit;
use crate::store::{ListPosition, Owner, Page, StoredArtifact, TaskRow};
use crate::upstream::contract::{RunOutput, WorkspaceAccess};

/// A page's keys, counts, token and the JSON-RPC envelope around it, generously.
const PAGE_FRAME_BYTES: usize = 512;

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
    pub async fn list_tasks(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
        space: &AnswerSpace,
    ) -> MethodResult {
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
        // The caller's share of the store pool is held while a store call runs, never while
        // Q is asked.
        let share = self.store.read_share(&owner).await?;
        let page = self.store.list(&owner, &filter, after, page_size + 1).await;
        drop(share);
        let Page { mut rows, total } = page?;
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

        let run_ids: Vec<String> = rows.iter().filter_map(|r| r.run_id.clone()).collect();
        let clearances = self
            .access()
            .clearances(caller.who(), &run_ids, Purpose::Read)
            .await?;
        // The page's bytes are reserved before it is built: its rows' allowances, and the
        // stored byte counts of the artifacts it may carry.
        let mut allowances: Vec<usize> = rows.iter().map(answer_allowance).collect();
        // The page's own keys and token ride with its first task.
        if let Some(first) = allowances.first_mut() {
            *first += PAGE_FRAME_BYTES;
        }
        let (mut artifacts, mut granted) = if include_artifacts {
            self.list_artifacts(&owner, &rows, &clearances, budget, space, &allowances)
                .await?
        } else {
            let want = allowances.iter().sum::<usize>().min(budget);
            let first = allowances.first().copied().unwrap_or(0);
            (HashMap::new(), space.reserve(want, first.min(want))?)
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
            let task = render(
                row,
                Snapshot::stored(row, artifact, clearances.of(row.run_id.as_deref())),
                history_length,
            );
            let value = serde_json::to_value(&task).map_err(serialization_failed)?;
            let size = json_len(&value);
            if used + size + 1 > budget {
                if tasks.is_empty() {
                    return Err(too_large(row));
                }
                more = true;
                break;
            }
            // Past what was reserved (an allowance short of the task): the rest is asked for
            // now; refused, the page ends before this task (or, first on its page, the
            // answer is refused).
            let reached = PAGE_FRAME_BYTES + used + size + 1;
            if reached > granted {
                let short = reached - granted;
                if tasks.is_empty() {
                    granted += space.reserve(short, short)?;
                } else if space.top_up(short) {
                    granted += short;
                } else {
                    more = true;
                    break;
                }
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

    /// The artifacts of the completed, visible tasks of a page, in page order within `budget`
    /// bytes (see the module doc), and the bytes reserved for the page: committed ones from
    /// the store; the others first read from Q (once, within the budget, in page order) and
    /// committed. Once their sizes are known, the page reserves its rows' `allowances` and the
    /// artifacts that fit the budget (at least its first task and that task's artifact), and
    /// reads the texts of those that fit what was granted.
    async fn list_artifacts(
        &self,
        owner: &Owner,
        rows: &[TaskRow],
        clearances: &Clearances,
        budget: usize,
        space: &AnswerSpace,
        allowances: &[usize],
    ) -> Result<(HashMap<Uuid, Fetched>, usize), Fault> {
        let wanted: Vec<(Uuid, String)> = rows
            .iter()
            .filter(|r| {
                r.state == TaskState::Completed && clearances.of(r.run_id.as_deref()).is_some()
            })
            .filter_map(|r| r.run_id.clone().map(|run| (r.task_id, run)))
            .collect();
        let ids: Vec<Uuid> = wanted.iter().map(|(id, _)| *id).collect();
        let share = self.share_for(owner, &ids).await?;
        let mut sizes: HashMap<Uuid, u64> = self.store.artifact_sizes(&ids).await?;
        drop(share);
        let missing: Vec<(Uuid, String)> = wanted
            .iter()
            .filter(|(id, _)| !sizes.contains_key(id))
            .cloned()
            .collect();
        if !missing.is_empty() {
            sizes.extend(self.commit_from_q(missing, budget).await?);
        }

        // The reservation: every row's allowance and the artifacts that fit the budget, in
        // page order; at least the first task with its artifact.
        let size_of = |id: &Uuid| sizes.get(id).copied().unwrap_or(u64::MAX);
        let mut artifact_bytes = 0u64;
        for (task_id, _) in &wanted {
            let size = size_of(task_id);
            if artifact_bytes + size > budget as u64 {
                break;
            }
            artifact_bytes += size;
        }
        let first = rows.first().map_or(0, |row| {
            let artifact = match wanted.first() {
                // One over the budget is never read (the page is refused with -32006).
                Some((id, _)) if *id == row.task_id && size_of(id) <= budget as u64 => {
                    size_of(id) as usize
                }
                _ => 0,
            };
            allowances[0] + artifact
        });
        let want = allowances.iter().sum::<usize>() + artifact_bytes as usize;
        let want = want.min(budget);
        let granted = space.reserve(want, first.min(want))?;

        // In page order, as many as fit what was granted; the first that does not fit ends
        // the page.
        let mut fetched = HashMap::new();
        let mut chosen = Vec::new();
        let mut left = granted.min(budget) as u64;
        for (task_id, _) in &wanted {
            match sizes.get(task_id) {
                Some(&size) if size <= left => {
                    left -= size;
                    chosen.push(*task_id);
                }
                size => {
                    let alone_too_large = size.is_none_or(|&size| size > budget as u64);
                    fetched.insert(
                        *task_id,
                        if chosen.is_empty() && alone_too_large {
                            Fetched::TooLarge
                        } else {
                            Fetched::Unread
                        },
                    );
                    break;
                }
            }
        }
        for task_id in &ids {
            fetched.entry(*task_id).or_insert(Fetched::Unread);
        }
        let share = self.share_for(owner, &chosen).await?;
        let mut stored = self.store.artifacts(&chosen).await?;
        drop(share);
        for task_id in chosen {
            let entry = match stored.remove(&task_id) {
                Some(StoredArtifact::Output(output)) => Fetched::Artifact(
                    verified_artifact(&output)
                        .map_err(|e| Fault::Rpc(e.with_meta("taskId", task_id.to_string())))?,
                ),
                Some(StoredArtifact::TooLarge { .. }) => Fetched::TooLarge,
                None => Fetched::Unread,
            };
            fetched.insert(task_id, entry);
        }
        Ok((fetched, granted))
    }

    /// The caller's share of the store pool for a read of the artifacts of `ids`: none for no
    /// task, which reads nothing.
    async fn share_for(&self, owner: &Owner, ids: &[Uuid]) -> Result<Option<ReadPermit>, Fault> {
        if ids.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.store.read_share(owner).await?))
    }

    /// Reads from Q the outputs of completed tasks not committed yet, in page order, within
    /// `budget` bytes of Q's answers in all (answers requested concurrently, bodies read one at
    /// a time, each only if it fits in what is left), and commits each verified one. Returns
    /// the size of each one read; one over what was left is `budget + 1`, and none after it
    /// is read.
    async fn commit_from_q(
        &self,
        missing: Vec<(Uuid, String)>,
        budget: usize,
    ) -> Result<HashMap<Uuid, u64>, Fault> {
        let max = self.settings.limits.max_result_bytes;
        let mut sizes = HashMap::new();
        let mut answers = stream::iter(missing)
            .map(|(task_id, run_id)| async move {
                (task_id, self.upstream.run_output_answer(&run_id).await)
            })
            .buffered(OUTPUT_FETCH_CONCURRENCY);
        let mut left = budget;
        while let Some((task_id, answer)) = answers.next().await {
            let Some(output) = answer?.read_within(left).await? else {
                // Over what is left: this task and every later one wait for a next page
                // (dropping the stream cancels the requests still in flight).
                sizes.insert(task_id, budget as u64 + 1);
                break;
            };
            left -= output_size(&output).min(left);
            verified_artifact(&output)
                .map_err(|e| Fault::Rpc(e.with_meta("taskId", task_id.to_string())))?;
            self.store.commit_artifact(task_id, &output, max).await?;
            sizes.insert(task_id, output.byte_count);
        }
        Ok(sizes)
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
