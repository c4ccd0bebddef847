//! Retention of terminal tasks: the batches the reconciler leader writes and deletes
//! (`20261201_071531_a2a_task_retention`, `20261202_020000_a2a_task_tombstones`).
//!
//! Content goes, identity stays: an expired task first gets its tombstone (message identity,
//! content hash, task id, context, final state and its time), in one statement; the task row
//! itself (and what cascades from it) is deleted only once its tombstone is older than
//! `settle`. An admission is one statement that looks for a tombstone and inserts the task
//! (`tasks::ADMIT_INSERT`); it runs within the statement timeout, so one that began before the
//! tombstone committed still meets the task row when it inserts, and one that began after
//! sees the tombstone: a repeat of the messageId never finds neither and starts a second run.

use std::time::Duration;

use super::state::TERMINAL_SQL;
use super::{PgTaskStore, StoreError};
use crate::store::pool::on_connection;
use crate::store::Call;

/// The tasks retention may remove: terminal for longer than `$1` seconds.
fn expired(table: &str) -> String {
    format!(
        "{table}.state IN {TERMINAL_SQL}
         AND {table}.status_timestamp < now() - make_interval(secs => $1)"
    )
}

impl PgTaskStore {
    /// Writes the tombstones of at most `batch` expired tasks that have none yet, oldest
    /// first; how many. Found through the partial index of terminal tasks.
    pub async fn tombstone_expired_tasks(
        &self,
        age: Duration,
        batch: i64,
    ) -> Result<u64, StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            let sql = format!(
                "INSERT INTO a2a_task_tombstones
                        (identity, tenant_id, task_id, context_id, content_sha256, state,
                         status_timestamp)
                 SELECT a2a_message_identity(t.tenant_id, t.principal_id, t.agent_id, t.message_id),
                        t.tenant_id, t.task_id, t.context_id, decode(t.content_sha256, 'hex'),
                        t.state, t.status_timestamp
                   FROM a2a_tasks t
                  WHERE {}
                    AND NOT EXISTS (
                        SELECT 1 FROM a2a_task_tombstones b
                         WHERE b.identity = a2a_message_identity(t.tenant_id, t.principal_id,
                                                                 t.agent_id, t.message_id))
                  ORDER BY t.status_timestamp LIMIT $2
                 ON CONFLICT (identity) DO NOTHING",
                expired("t")
            );
            let statement = client.prepare_cached(&sql).await?;
            Ok(client
                .execute(&statement, &[&age.as_secs_f64(), &batch])
                .await?)
        })
    }

    /// Deletes at most `batch` expired tasks whose tombstone was written more than `settle`
    /// ago, oldest first; how many. Rows another transaction holds are skipped (the next batch
    /// takes them), and the condition is checked again on each row deleted. Tables referencing
    /// a task cascade, so a task goes whole or not at all.
    pub async fn delete_expired_tasks(
        &self,
        age: Duration,
        settle: Duration,
        batch: i64,
    ) -> Result<u64, StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            let sql = format!(
                "DELETE FROM a2a_tasks
                  WHERE task_id IN (
                        SELECT t.task_id FROM a2a_tasks t
                          JOIN a2a_task_tombstones b
                            ON b.identity = a2a_message_identity(t.tenant_id, t.principal_id,
                                                                 t.agent_id, t.message_id)
                         WHERE {} AND b.task_id = t.task_id
                           AND b.created_at < now() - make_interval(secs => $3)
                         ORDER BY t.status_timestamp LIMIT $2
                           FOR UPDATE OF t SKIP LOCKED)
                    AND {}",
                expired("t"),
                expired("a2a_tasks")
            );
            let statement = client.prepare_cached(&sql).await?;
            Ok(client
                .execute(
                    &statement,
                    &[&age.as_secs_f64(), &batch, &settle.as_secs_f64()],
                )
                .await?)
        })
    }
}
