//! `q-a2a-gateway tenant export`: one tenant's A2A data as JSON lines, in batches by key.
//!
//! Records, in this order, each with its `kind` and `key` (what a resumed run continues after):
//! - `task`: the owner and message identity, and the task as GetTask renders it (`task`: its
//!   status, the accepted user message in `history`, and for a completed task the verified
//!   artifact: the one committed in the store, else read from Q's run output; `artifactError`
//!   instead when neither can give it). Content goes in under the same freshness rule as any
//!   answer (`crate::access`): only where Q confirms now the owner's workspace access and
//!   evidence grant. A task whose content Q does not confirm (revoked, or the export was run
//!   without Q) is a content-free receipt with `contentWithheld` saying why (`not_granted`: Q says the owner may not see it now;
//!   `unconfirmed`: exported with `--receipts-only`, Q was not asked);
//! - `task_tombstone`: what retention kept of a removed task: the hash of its message identity,
//!   the task's id, context, final state and its time;
//! - `registration`: the management view (never the credential, only whether there is one);
//! - `delegation`: the outcome, status and stored remote result of each delegation;
//! - `retired_route_hits`: the tenant's calls to the retired routes, per route and day.
//!
//! The file starts with an `export` header and ends with an `end` line. Running the command
//! again on the same file goes on after the last whole record, or does nothing once ended. The
//! file is created readable by its owner only (0600), and an existing path that is a symbolic
//! link is refused rather than followed.

mod file;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use a2a::TaskState;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::a2a::task_view::{render, verified_artifact, Snapshot};
use crate::access::{AccessCache, Clearances, Purpose, Who};
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
    /// Q: who may still see which task's content, and completed tasks' outputs not committed
    /// in the store. `None`: every task is a content-free receipt.
    pub q: Option<ExportQ>,
}

/// What an export asks Q.
pub struct ExportQ {
    pub upstream: UpstreamRunApi,
    pub access: Arc<AccessCache>,
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
                    self.task_records(tenant, &rows).await?
                }
                TenantTable::TaskTombstones => self
                    .store
                    .tenant_tombstones_after(tenant, key(0), limit)
                    .await?
                    .iter()
                    .map(|t| {
                        json!({
                            "kind": "task_tombstone",
                            "key": [t.identity],
                            "taskId": t.task_id,
                            "contextId": t.context_id,
                            "state": t.state,
                            "statusTimestamp": t.status_timestamp,
                        })
                    })
                    .collect(),
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

    /// Who may see the content of each task of a batch, by task: Q's answer now, for each
    /// owner (principal and agent) of the batch.
    async fn clearances(
        &self,
        tenant: &str,
        rows: &[TaskRow],
    ) -> anyhow::Result<HashMap<(String, String), Clearances>> {
        let mut by_owner: HashMap<(String, String), Vec<String>> = HashMap::new();
        for row in rows {
            let runs = by_owner
                .entry((row.owner.principal_id.clone(), row.owner.agent_id.clone()))
                .or_default();
            runs.extend(row.run_id.clone());
        }
        let mut clearances = HashMap::with_capacity(by_owner.len());
        let Some(q) = &self.q else {
            return Ok(clearances);
        };
        for ((principal, agent), runs) in by_owner {
            let who = Who {
                tenant_id: tenant,
                agent_id: &agent,
                principal_id: &principal,
                last_known: false,
            };
            let cleared = q
                .access
                .clearances(who, &runs, Purpose::Current)
                .await
                .map_err(|e| anyhow::anyhow!("Q could not confirm who may see the tasks' content ({e}); run the export again to resume"))?;
            clearances.insert((principal, agent), cleared);
        }
        Ok(clearances)
    }

    /// The records of a batch of tasks, completed tasks' outputs read from Q a few at once.
    async fn task_records(&self, tenant: &str, rows: &[TaskRow]) -> anyhow::Result<Vec<Value>> {
        let clearances = self.clearances(tenant, rows).await?;
        let cleared = |row: &TaskRow| {
            clearances
                .get(&(row.owner.principal_id.clone(), row.owner.agent_id.clone()))
                .and_then(|c| c.of(row.run_id.as_deref()))
        };
        let completed: Vec<Uuid> = rows
            .iter()
            .filter(|r| r.state == TaskState::Completed && cleared(r).is_some())
            .map(|r| r.task_id)
            .collect();
        let mut committed = self.store.artifacts(&completed).await.unwrap_or_default();
        let wanted: Vec<(Uuid, &str)> = match &self.q {
            None => Vec::new(),
            Some(_) => rows
                .iter()
                .filter(|r| completed.contains(&r.task_id))
                .filter(|r| !committed.contains_key(&r.task_id))
                .filter_map(|r| r.run_id.as_deref().map(|run| (r.task_id, run)))
                .collect(),
        };
        let mut outputs: HashMap<Uuid, Result<a2a::Artifact, String>> = stream::iter(wanted)
            .map(|(task_id, run_id)| async move {
                let upstream = &self.q.as_ref().expect("only asked with Q").upstream;
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
        Ok(rows
            .iter()
            .map(|row| {
                let (artifact, error) = match outputs.remove(&row.task_id) {
                    Some(Ok(artifact)) => (Some(artifact), None),
                    Some(Err(e)) => (None, Some(e)),
                    None => (None, None),
                };
                let clearance = cleared(row);
                let withheld = match (&clearance, &self.q) {
                    (Some(_), _) => None,
                    (None, Some(_)) => Some("not_granted"),
                    (None, None) => Some("unconfirmed"),
                };
                let task = render(row, Snapshot::stored(row, artifact, clearance), None);
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
                if let Some(why) = withheld {
                    record["contentWithheld"] = json!(why);
                }
                record
            })
            .collect())
    }
}
