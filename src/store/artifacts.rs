//! The verified final artifacts of completed tasks, committed once (`a2a_task_artifacts`).
//!
//! A completed task is immutable: once its output has been read from Q and verified, reads
//! answer from here and never ask Q again. What is stored is what Q answered (text, checksum,
//! declared byte count), so every read verifies it again exactly as it verified Q's answer.
//! An output larger than any answer may carry is stored without its text: its reads are
//! refused from here.

use std::collections::HashMap;
use std::sync::LazyLock;

use uuid::Uuid;

use super::row::{task_from_row, COLUMNS};
use super::{Owner, PgTaskStore, StoreError, TaskRow};
use crate::store::pool::on_connection;
use crate::store::Call;
use crate::upstream::contract::RunOutput;

/// A committed artifact as stored.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredArtifact {
    /// Q's output as it answered it; verified again on every read.
    Output(RunOutput),
    /// Verified once, larger than the result bound: no answer can carry it.
    TooLarge {
        artifact_id: String,
        byte_count: u64,
    },
}

impl StoredArtifact {
    /// Bytes of the artifact's text (as Q declared it).
    pub fn byte_count(&self) -> u64 {
        match self {
            StoredArtifact::Output(output) => output.byte_count,
            StoredArtifact::TooLarge { byte_count, .. } => *byte_count,
        }
    }
}

fn from_row(row: &tokio_postgres::Row) -> Result<StoredArtifact, StoreError> {
    let artifact_id: String = row.try_get("artifact_id")?;
    let byte_count = row.try_get::<_, i64>("byte_count")?.max(0) as u64;
    Ok(match row.try_get::<_, Option<String>>("text")? {
        Some(text) => StoredArtifact::Output(RunOutput {
            artifact_id,
            name: row.try_get("name")?,
            media_type: row.try_get("media_type")?,
            text,
            sha256: row.try_get("sha256")?,
            byte_count,
        }),
        None => StoredArtifact::TooLarge {
            artifact_id,
            byte_count,
        },
    })
}

/// GetTask's read: the task of exactly one owner with its committed artifact, built once.
static FIND_OWNED_WITH_ARTIFACT: LazyLock<String> = LazyLock::new(|| {
    let columns = COLUMNS
        .split(", ")
        .map(|c| format!("t.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT {columns}, a.artifact_id, a.name, a.media_type, a.text, a.sha256,
                a.byte_count
           FROM a2a_tasks t LEFT JOIN a2a_task_artifacts a ON a.task_id = t.task_id
          WHERE t.task_id = $1 AND t.tenant_id = $2 AND t.principal_id = $3
            AND t.agent_id = $4"
    )
});

impl PgTaskStore {
    /// The task, only if it belongs to exactly this owner, with its committed artifact if any,
    /// in one query (GetTask's read of a completed task).
    pub async fn find_owned_with_artifact(
        &self,
        task_id: Uuid,
        owner: &Owner,
    ) -> Result<Option<(TaskRow, Option<StoredArtifact>)>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let statement = client.prepare_cached(&FIND_OWNED_WITH_ARTIFACT).await?;
            let row = client
                .query_opt(&statement, &owner.and_task(&task_id))
                .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let task = task_from_row(&row)?;
            let artifact = match row.try_get::<_, Option<String>>("artifact_id")? {
                Some(_) => Some(from_row(&row)?),
                None => None,
            };
            Ok(Some((task, artifact)))
        })
    }

    /// Commits a completed task's verified output once; a second commit changes nothing. An
    /// output over `max_result_bytes` (the result bound) is stored with its identity and size
    /// only: no answer can carry it.
    pub async fn commit_artifact(
        &self,
        task_id: Uuid,
        output: &RunOutput,
        max_result_bytes: usize,
    ) -> Result<(), StoreError> {
        self.commit_artifacts(&[(task_id, output)], max_result_bytes)
            .await
    }

    /// [`Self::commit_artifact`] for many tasks, in one statement.
    pub async fn commit_artifacts(
        &self,
        outputs: &[(Uuid, &RunOutput)],
        max_result_bytes: usize,
    ) -> Result<(), StoreError> {
        if outputs.is_empty() {
            return Ok(());
        }
        on_connection!(self.pool, Call::Write, |client| {
            let statement = client
                .prepare_cached(
                    "INSERT INTO a2a_task_artifacts
                            (task_id, artifact_id, name, media_type, text, sha256, byte_count)
                     SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[],
                                          $5::text[], $6::text[], $7::bigint[])
                     ON CONFLICT (task_id) DO NOTHING",
                )
                .await?;
            let column = |f: fn(&RunOutput) -> &str| -> Vec<&str> {
                outputs.iter().map(|(_, o)| f(o)).collect()
            };
            let task_ids: Vec<Uuid> = outputs.iter().map(|(id, _)| *id).collect();
            let texts: Vec<Option<&str>> = outputs
                .iter()
                .map(|(_, o)| (o.byte_count <= max_result_bytes as u64).then_some(o.text.as_str()))
                .collect();
            let byte_counts: Vec<i64> = outputs
                .iter()
                .map(|(_, o)| o.byte_count.min(i64::MAX as u64) as i64)
                .collect();
            client
                .execute(
                    &statement,
                    &[
                        &task_ids,
                        &column(|o| &o.artifact_id),
                        &column(|o| &o.name),
                        &column(|o| &o.media_type),
                        &texts,
                        &column(|o| &o.sha256),
                        &byte_counts,
                    ],
                )
                .await?;
            Ok(())
        })
    }

    /// The tasks created under `workflow_ids` that are completed with a run and have no
    /// committed artifact yet: `(task_id, run_id)`.
    pub async fn completed_without_artifact(
        &self,
        workflow_ids: &[String],
    ) -> Result<Vec<(Uuid, String)>, StoreError> {
        if workflow_ids.is_empty() {
            return Ok(Vec::new());
        }
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    "SELECT t.task_id, t.run_id FROM a2a_tasks t
                       LEFT JOIN a2a_task_artifacts a ON a.task_id = t.task_id
                      WHERE t.workflow_id = ANY($1) AND t.state = 'TASK_STATE_COMPLETED'
                        AND t.run_id IS NOT NULL AND a.task_id IS NULL",
                    &[&workflow_ids],
                )
                .await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect()
        })
    }

    /// The committed artifact of a task, if any.
    pub async fn artifact(&self, task_id: Uuid) -> Result<Option<StoredArtifact>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            // Prepared once per connection, as the other reads of a request: an unnamed
            // statement costs a second round trip (and transaction) per call.
            let statement = client
                .prepare_cached(
                    "SELECT artifact_id, name, media_type, text, sha256, byte_count
                       FROM a2a_task_artifacts WHERE task_id = $1",
                )
                .await?;
            let row = client.query_opt(&statement, &[&task_id]).await?;
            row.as_ref().map(from_row).transpose()
        })
    }

    /// The byte counts of those of `task_ids` whose artifact is committed (text or not).
    pub async fn artifact_sizes(
        &self,
        task_ids: &[Uuid],
    ) -> Result<HashMap<Uuid, u64>, StoreError> {
        if task_ids.is_empty() {
            return Ok(HashMap::new());
        }
        on_connection!(self.pool, Call::Read, |client| {
            let statement = client
                .prepare_cached(
                    "SELECT task_id, byte_count FROM a2a_task_artifacts WHERE task_id = ANY($1)",
                )
                .await?;
            let rows = client.query(&statement, &[&task_ids]).await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get::<_, i64>(1)?.max(0) as u64)))
                .collect()
        })
    }

    /// The committed artifacts of `task_ids`, in one query.
    pub async fn artifacts(
        &self,
        task_ids: &[Uuid],
    ) -> Result<HashMap<Uuid, StoredArtifact>, StoreError> {
        if task_ids.is_empty() {
            return Ok(HashMap::new());
        }
        on_connection!(self.pool, Call::Read, |client| {
            let statement = client
                .prepare_cached(
                    "SELECT task_id, artifact_id, name, media_type, text, sha256, byte_count
                       FROM a2a_task_artifacts WHERE task_id = ANY($1)",
                )
                .await?;
            let rows = client.query(&statement, &[&task_ids]).await?;
            rows.iter()
                .map(|r| Ok((r.try_get("task_id")?, from_row(r)?)))
                .collect()
        })
    }
}
