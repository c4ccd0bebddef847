//! Retention of terminal tasks: the batch the reconciler leader deletes
//! (`20261201_071531_a2a_task_retention`).

use std::time::Duration;

use super::state::TERMINAL_SQL;
use super::{PgTaskStore, StoreError};

impl PgTaskStore {
    /// Deletes at most `batch` tasks that reached a terminal state more than `age` ago, oldest
    /// first; how many. One short statement: the rows are found through the partial index of
    /// terminal tasks, rows another transaction holds are skipped (the next batch takes them),
    /// and the condition is checked again on each row deleted. Tables referencing a task
    /// cascade, so a task goes whole or not at all.
    pub async fn delete_expired_tasks(&self, age: Duration, batch: i64) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        let expired = format!(
            "state IN {TERMINAL_SQL} AND status_timestamp < now() - make_interval(secs => $1)"
        );
        let sql = format!(
            "DELETE FROM a2a_tasks
              WHERE task_id IN (
                    SELECT task_id FROM a2a_tasks WHERE {expired}
                     ORDER BY status_timestamp LIMIT $2
                       FOR UPDATE SKIP LOCKED)
                AND {expired}"
        );
        let statement = client.prepare_cached(&sql).await?;
        Ok(client
            .execute(&statement, &[&age.as_secs_f64(), &batch])
            .await?)
    }
}
