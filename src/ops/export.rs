//! `q-a2a-gateway tenant export`: one tenant's A2A data as JSON lines, in batches by key.
//!
//! Records, in this order, each with its `kind` and `key` (what a resumed run continues after):
//! - `task`: the owner and message identity, and the task as GetTask renders it (`task`: its
//!   status, the accepted user message in `history`, and for a completed task the verified
//!   artifact: the one committed in the store, else read from Q's run output; `artifactError`
//!   instead when neither can give it);
//! - `registration`: the management view (never the credential, only whether there is one);
//! - `delegation`: the outcome, status and stored remote result of each delegation;
//! - `retired_route_hits`: the tenant's calls to the retired routes, per route and day.
//!
//! The file starts with an `export` header and ends with an `end` line. Running the command
//! again on the same file goes on after the last whole record, or does nothing once ended.

mod file;

use std::collections::HashMap;
use std::path::PathBuf;

use a2a::TaskState;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::a2a::task_view::{render, verified_artifact, Snapshot};
use crate::outbound::registrations::view;
use crate::store::outbound::PgOutboundStore;
use crate::store::tenant::TenantTable;
use crate::store::{PgTaskStore, StoredArtifact, TaskRow};
use crate::upstream::UpstreamRunApi;
pub use file::{ExportFile, Resume};

/// Outputs read from Q at once.
const OUTPUT_CONCURRENCY: usize = 8;

pub struct ExportOptions {
    pub tenant: String,
    pub out: PathBuf,
    pub batch_size: i64,
}

/// Records of each kind written by this run.
pub type Written = Vec<(&'static str, u64)>;

/// The ports an export reads.
pub struct Exporter {
    pub store: PgTaskStore,
    pub outbound: PgOutboundStore,
    /// Where completed tasks' outputs are read; `None`: the database's content only.
    pub upstream: Option<UpstreamRunApi>,
}

impl Exporter {
    /// Writes (or finishes) the export; what this run wrote, and whether the file was already
    /// complete.
    pub async fn run(&self, options: &ExportOptions) -> anyhow::Result<(Written, bool)> {
        let mut out = ExportFile::open(&options.out, &options.tenant)?;
        let (skip_to, mut after) = match &out.resume {
            Resume::Complete => return Ok((Vec::new(), true)),
            Resume::Start => (0, None),
            Resume::After { kind, key } => {
                let at = TenantTable::ALL
                    .iter()
                    .position(|t| t.kind() == kind)
                    .ok_or_else(|| anyhow::anyhow!("unknown record kind {kind:?} in the file"))?;
                (at, Some(key.clone()))
            }
        };
        let mut written = Vec::new();
        for table in &TenantTable::ALL[skip_to..] {
            let n = self.table(*table, options, after.take(), &mut out).await?;
            written.push((table.kind(), n));
        }
        out.write(&json!({"kind": "end", "tenant": options.tenant}))?;
        out.sync()?;
        Ok((written, false))
    }

    /// Every record of `table` after `after`; how many.
    async fn table(
        &self,
        table: TenantTable,
        options: &ExportOptions,
        mut after: Option<Vec<String>>,
        out: &mut ExportFile,
    ) -> anyhow::Result<u64> {
        let tenant = options.tenant.as_str();
        let limit = options.batch_size;
        let mut count = 0;
        loop {
            let key = |i: usize| after.as_ref().and_then(|k| k.get(i)).map(String::as_str);
            let records: Vec<Value> = match table {
                TenantTable::Tasks => {
                    let after = key(0).map(Uuid::parse_str).transpose()?;
                    let rows = self.store.tenant_tasks_after(tenant, after, limit).await?;
                    self.task_records(&rows).await
                }
                TenantTable::Registrations => self
                    .outbound
                    .tenant_registrations_after(tenant, key(0), limit)
                    .await?
                    .iter()
                    .map(|r| {
                        let mut v = view(r);
                        v["kind"] = json!("registration");
                        v["key"] = json!([r.id]);
                        v["createdBy"] = json!(r.created_by);
                        v
                    })
                    .collect(),
                TenantTable::Delegations => {
                    let after = key(0).zip(key(1));
                    self.outbound
                        .tenant_delegations_after(tenant, after, limit)
                        .await?
                        .iter()
                        .map(|d| {
                            json!({
                                "kind": "delegation",
                                "key": [d.key.principal_id, d.key.task_id],
                                "principalId": d.key.principal_id,
                                "taskId": d.key.task_id,
                                "registrationId": d.registration_id,
                                "contextId": d.context_id,
                                "outcome": d.outcome.as_str(),
                                "status": d.status,
                                "remoteTaskId": d.remote_task_id,
                                "result": d.result,
                                "error": d.error,
                                "sendAttempts": d.send_attempts,
                                "createdAt": d.created_at,
                                "updatedAt": d.updated_at,
                            })
                        })
                        .collect()
                }
                TenantTable::RetiredRouteHits => {
                    let after = match (key(0), key(1)) {
                        (Some(route), Some(day)) => Some((route, day.parse()?)),
                        _ => None,
                    };
                    self.store
                        .tenant_retired_days_after(tenant, after, limit)
                        .await?
                        .iter()
                        .map(|d| {
                            json!({
                                "kind": "retired_route_hits",
                                "key": [d.route, d.day.to_string()],
                                "route": d.route,
                                "day": d.day,
                                "hits": d.hits,
                                "lastSeen": d.last_seen,
                            })
                        })
                        .collect()
                }
            };
            for record in &records {
                out.write(record)?;
            }
            out.sync()?;
            count += records.len() as u64;
            let Some(last) = records.last() else {
                return Ok(count);
            };
            after = Some(
                last["key"]
                    .as_array()
                    .map(|k| {
                        k.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            );
            if (records.len() as i64) < limit {
                return Ok(count);
            }
        }
    }

    /// The records of a batch of tasks, completed tasks' outputs read from Q a few at once.
    async fn task_records(&self, rows: &[TaskRow]) -> Vec<Value> {
        let completed: Vec<Uuid> = rows
            .iter()
            .filter(|r| r.state == TaskState::Completed)
            .map(|r| r.task_id)
            .collect();
        let mut committed = self.store.artifacts(&completed).await.unwrap_or_default();
        let wanted: Vec<(Uuid, &str)> = match &self.upstream {
            None => Vec::new(),
            Some(_) => rows
                .iter()
                .filter(|r| r.state == TaskState::Completed)
                .filter(|r| !committed.contains_key(&r.task_id))
                .filter_map(|r| r.run_id.as_deref().map(|run| (r.task_id, run)))
                .collect(),
        };
        let mut outputs: HashMap<Uuid, Result<a2a::Artifact, String>> = stream::iter(wanted)
            .map(|(task_id, run_id)| async move {
                let upstream = self.upstream.as_ref().expect("only asked with Q");
                let artifact = match upstream.run_output(run_id).await {
                    Ok(output) => verified_artifact(&output).map_err(|e| e.message),
                    Err(e) => Err(format!("Q could not give the run's output: {e}")),
                };
                (task_id, artifact)
            })
            .buffer_unordered(OUTPUT_CONCURRENCY)
            .collect()
            .await;
        for (task_id, stored) in committed.drain() {
            let artifact = match stored {
                StoredArtifact::Output(output) => verified_artifact(&output).map_err(|e| e.message),
                StoredArtifact::TooLarge { byte_count, .. } => Err(format!(
                    "the artifact ({byte_count} bytes) is larger than any answer may carry"
                )),
            };
            outputs.insert(task_id, artifact);
        }
        rows.iter()
            .map(|row| {
                let (artifact, error) = match outputs.remove(&row.task_id) {
                    Some(Ok(artifact)) => (Some(artifact), None),
                    Some(Err(e)) => (None, Some(e)),
                    None => (None, None),
                };
                let task = render(
                    row,
                    Snapshot {
                        state: row.state.clone(),
                        status_message: row.status_message.clone(),
                        status_timestamp: row.status_timestamp,
                        artifact,
                        content_visible: true,
                    },
                    None,
                );
                let mut record = json!({
                    "kind": "task",
                    "key": [row.task_id.to_string()],
                    "principalId": row.owner.principal_id,
                    "agentId": row.owner.agent_id,
                    "messageId": row.message_id,
                    "runId": row.run_id,
                    "createdAt": row.created_at,
                    "cancelRequested": row.cancel_requested,
                    "task": task,
                });
                if let Some(e) = error {
                    record["artifactError"] = json!(e);
                }
                record
            })
            .collect()
    }
}
