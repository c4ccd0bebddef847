//! Q's run change feed in the store: the saved feed position and the projection of each run
//! change onto its task.

use a2a::TaskState;

use super::state::{state_name, TERMINAL_SQL};
use super::tasks::UNFLUSHED;
use super::{PgTaskStore, StoreError};
use crate::store::pool::on_connection;
use crate::store::Call;

/// One change of Q's run feed, as projected onto the task created under its workflow id.
#[derive(Debug, Clone, Copy)]
pub struct RunChange<'a> {
    pub workflow_id: &'a str,
    pub run_id: &'a str,
    pub state: &'a TaskState,
    pub status_message: Option<&'a str>,
}

impl PgTaskStore {
    /// Applies a batch of Q's run change feed, in feed order, to the tasks created under
    /// their workflow ids, in one statement. Each task ends as if its changes were applied one
    /// after another: a terminal task keeps its state, so the first terminal change of a task
    /// wins, and without one its last change. A change that would alter nothing writes
    /// nothing. Returns how many tasks changed.
    ///
    /// Committed without waiting for its WAL flush ([`super::tasks::UNFLUSHED`]): the feed
    /// position saved after the batch ([`Self::save_feed_position`]) waits for its flush, and
    /// with it for every change applied before it; a change lost in a PostgreSQL crash lies
    /// past the saved position and is applied again.
    #[tracing::instrument(target = "otel", name = "db.apply_run_changes", skip_all)]
    pub async fn apply_run_changes(&self, changes: &[RunChange<'_>]) -> Result<u64, StoreError> {
        if changes.is_empty() {
            return Ok(0);
        }
        on_connection!(self.pool, Call::Write, |client| {
            let sql = format!(
                "UPDATE a2a_tasks t
                    SET state = c.state, status_message = c.status_message,
                        run_id = COALESCE(t.run_id, c.run_id),
                        dispatch = CASE WHEN t.dispatch IN ('pending', 'unknown') THEN 'dispatched'
                                        ELSE t.dispatch END
                   FROM (SELECT DISTINCT ON (u.workflow_id)
                                u.workflow_id, u.run_id, u.state, u.status_message
                           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
                                WITH ORDINALITY AS u(workflow_id, run_id, state, status_message, ord)
                          ORDER BY u.workflow_id, u.state IN {TERMINAL_SQL} DESC,
                                   CASE WHEN u.state IN {TERMINAL_SQL} THEN u.ord ELSE -u.ord END) c,
                        {UNFLUSHED}
                  WHERE t.workflow_id = c.workflow_id AND t.state NOT IN {TERMINAL_SQL}
                    AND (t.state IS DISTINCT FROM c.state
                         OR t.status_message IS DISTINCT FROM c.status_message
                         OR t.run_id IS NULL)"
            );
            // Prepared once per connection: the feed applies one batch after another.
            let statement = client.prepare_cached(&sql).await?;
            let workflow_ids: Vec<&str> = changes.iter().map(|c| c.workflow_id).collect();
            let run_ids: Vec<&str> = changes.iter().map(|c| c.run_id).collect();
            let states: Vec<String> = changes.iter().map(|c| state_name(c.state)).collect();
            let messages: Vec<Option<&str>> = changes.iter().map(|c| c.status_message).collect();
            let n = client
                .execute(&statement, &[&workflow_ids, &run_ids, &states, &messages])
                .await?;
            Ok(n)
        })
    }

    pub async fn feed_position(&self) -> Result<u64, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let cursor: i64 = client
                .query_one("SELECT cursor FROM a2a_feed_position WHERE id = 1", &[])
                .await?
                .try_get(0)?;
            Ok(cursor.max(0) as u64)
        })
    }

    /// Starts the feed position over (Q's feed was reset).
    pub async fn reset_feed_position(&self) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            client
                .execute(
                    "UPDATE a2a_feed_position SET cursor = 0, updated_at = now() WHERE id = 1",
                    &[],
                )
                .await?;
            Ok(())
        })
    }

    /// Saves how far the feed has been applied, waiting for the WAL flush (never
    /// [`super::tasks::UNFLUSHED`]): the changes applied before it are durable once it is.
    pub async fn save_feed_position(&self, cursor: u64) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            client
                .execute(
                    "UPDATE a2a_feed_position SET cursor = GREATEST(cursor, $1), updated_at = now()
                      WHERE id = 1",
                    &[&(cursor.min(i64::MAX as u64) as i64)],
                )
                .await?;
            Ok(())
        })
    }
}
