//! Q's run change feed in the store: the saved feed position and the projection of each run
//! change onto its task.

use a2a::TaskState;

use super::state::{state_name, TERMINAL_SQL};
use super::tasks::UNFLUSHED;
use super::{PgTaskStore, StoreError};

impl PgTaskStore {
    /// Applies one entry of Q's run change feed to the task created under `workflow_id`, if
    /// any. Returns whether a row changed.
    ///
    /// Committed without waiting for its WAL flush ([`super::tasks::UNFLUSHED`]): the feed
    /// position saved after the batch ([`Self::save_feed_position`]) waits for its flush, and
    /// with it for every change applied before it; a change lost in a PostgreSQL crash lies
    /// past the saved position and is applied again.
    pub async fn apply_run_change(
        &self,
        workflow_id: &str,
        run_id: &str,
        state: &TaskState,
        status_message: Option<&str>,
    ) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let sql = format!(
            "UPDATE a2a_tasks
                SET state = $3, status_message = $4,
                    run_id = COALESCE(run_id, $2),
                    dispatch = CASE WHEN dispatch IN ('pending', 'unknown') THEN 'dispatched'
                                    ELSE dispatch END
               FROM {UNFLUSHED}
              WHERE workflow_id = $1 AND state NOT IN {TERMINAL_SQL}
                AND (state IS DISTINCT FROM $3 OR status_message IS DISTINCT FROM $4
                     OR run_id IS NULL)"
        );
        // Prepared once per connection: the feed applies one change after another.
        let statement = client.prepare_cached(&sql).await?;
        let n = client
            .execute(
                &statement,
                &[&workflow_id, &run_id, &state_name(state), &status_message],
            )
            .await?;
        Ok(n > 0)
    }

    pub async fn feed_position(&self) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        let cursor: i64 = client
            .query_one("SELECT cursor FROM a2a_feed_position WHERE id = 1", &[])
            .await?
            .try_get(0)?;
        Ok(cursor.max(0) as u64)
    }

    /// Starts the feed position over (Q's feed was reset).
    pub async fn reset_feed_position(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE a2a_feed_position SET cursor = 0, updated_at = now() WHERE id = 1",
                &[],
            )
            .await?;
        Ok(())
    }

    /// Saves how far the feed has been applied, waiting for the WAL flush (never
    /// [`super::tasks::UNFLUSHED`]): the changes applied before it are durable once it is.
    pub async fn save_feed_position(&self, cursor: u64) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE a2a_feed_position SET cursor = GREATEST(cursor, $1), updated_at = now()
                  WHERE id = 1",
                &[&(cursor.min(i64::MAX as u64) as i64)],
            )
            .await?;
        Ok(())
    }
}
