//! Q's run change feed in the store: the saved feed position and the projection of each run
//! change onto its task.

use std::sync::LazyLock;

use a2a::TaskState;

use super::row::{task_from_row, COLUMNS};
use super::state::{state_name, TERMINAL_SQL};
use super::tasks::UNFLUSHED;
use super::{PgTaskStore, StoreError, TaskRow};
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

/// What one batch of Q's run feed did in the store ([`PgTaskStore::apply_feed_batch`]).
#[derive(Debug, Default)]
pub struct FeedBatch {
    /// Tasks whose state, status message or run changed.
    pub changed: u64,
    /// The tasks of the batch's live runs on which a cancellation is pending, as stored before
    /// the batch. When there are any, the position was not saved.
    pub cancelling: Vec<TaskRow>,
    /// The feed position as stored after the batch, when it saved one (the greater of the one
    /// given and the one it found).
    pub position: Option<u64>,
}

/// The projection of a batch of changes (`$1` to `$4`: workflow ids, run ids, states, status
/// messages, in feed order), the feed position saved with it (`$5`, none: not saved) and the
/// tasks of `$6` (workflow ids) with a cancellation pending, in one statement: `changed` on
/// every row, the task's columns on rows of a cancelling task (one row of NULLs when none).
/// With a cancelling task the position is not saved: its late run is cancelled first.
static APPLY_FEED_BATCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH c AS (
             SELECT DISTINCT ON (u.workflow_id) u.workflow_id, u.run_id, u.state, u.status_message
               FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
                    WITH ORDINALITY AS u(workflow_id, run_id, state, status_message, ord)
              ORDER BY u.workflow_id, u.state IN {TERMINAL_SQL} DESC,
                       CASE WHEN u.state IN {TERMINAL_SQL} THEN u.ord ELSE -u.ord END),
         applied AS (
             UPDATE a2a_tasks t
                SET state = c.state, status_message = c.status_message,
                    run_id = COALESCE(t.run_id, c.run_id),
                    dispatch = CASE WHEN t.dispatch IN ('pending', 'unknown') THEN 'dispatched'
                                    ELSE t.dispatch END
               FROM c
              WHERE t.workflow_id = c.workflow_id AND t.state NOT IN {TERMINAL_SQL}
                AND (t.state IS DISTINCT FROM c.state
                     OR t.status_message IS DISTINCT FROM c.status_message
                     OR t.run_id IS NULL)
          RETURNING t.task_id),
         cancelling AS (
             SELECT {COLUMNS} FROM a2a_tasks
              WHERE workflow_id = ANY($6) AND cancel_requested_at IS NOT NULL),
         saved AS (
             UPDATE a2a_feed_position SET cursor = GREATEST(cursor, $5), updated_at = now()
              WHERE id = 1 AND $5::bigint IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cancelling)
          RETURNING cursor)
         SELECT (SELECT count(*) FROM applied) AS changed,
                (SELECT cursor FROM saved) AS position, k.*
           FROM (SELECT 1) AS one
          CROSS JOIN {UNFLUSHED}
           LEFT JOIN cancelling k ON true"
    )
});

impl PgTaskStore {
    /// Applies a batch of Q's run change feed, in feed order, to the tasks created under
    /// their workflow ids; saves the feed position `cursor` with it (when given, and only when
    /// no task is returned); and returns the tasks of `live` (workflow ids of the batch's runs
    /// still running) on which a cancellation is pending. One statement, one transaction.
    /// With such a task the caller cancels its late run and then saves the position
    /// ([`Self::save_feed_position`]), so a crash in between finds the batch again.
    ///
    /// Each task ends as if its changes were applied one after another: a terminal task keeps
    /// its state, so the first terminal change of a task wins, and without one its last
    /// change. A change that would alter nothing writes nothing.
    ///
    /// Committed without waiting for its WAL flush ([`UNFLUSHED`]): the changes and the
    /// position after them are one transaction, durable together or lost together, and WAL is
    /// durable in order, so a position that survives a PostgreSQL crash never stands past a
    /// change that did not. A batch the crash loses lies past the position that survived and
    /// is applied again (applying a change twice changes nothing). Before, the batch was an
    /// unflushed statement and the position a second one that waited for its flush: two
    /// transactions and a flush per feed answer, now one and none.
    #[tracing::instrument(target = "otel", name = "db.apply_feed_batch", skip_all)]
    pub async fn apply_feed_batch(
        &self,
        changes: &[RunChange<'_>],
        live: &[&str],
        cursor: Option<u64>,
    ) -> Result<FeedBatch, StoreError> {
        if changes.is_empty() && live.is_empty() && cursor.is_none() {
            return Ok(FeedBatch::default());
        }
        on_connection!(self.pool, Call::Write, |client| {
            // Prepared once per connection: the feed applies one batch after another.
            let statement = client.prepare_cached(&APPLY_FEED_BATCH).await?;
            let workflow_ids: Vec<&str> = changes.iter().map(|c| c.workflow_id).collect();
            let run_ids: Vec<&str> = changes.iter().map(|c| c.run_id).collect();
            let states: Vec<String> = changes.iter().map(|c| state_name(c.state)).collect();
            let messages: Vec<Option<&str>> = changes.iter().map(|c| c.status_message).collect();
            let cursor = cursor.map(|c| c.min(i64::MAX as u64) as i64);
            let rows = client
                .query(
                    &statement,
                    &[&workflow_ids, &run_ids, &states, &messages, &cursor, &live],
                )
                .await?;
            let mut batch = FeedBatch::default();
            for row in &rows {
                batch.changed = row.try_get::<_, i64>("changed")?.max(0) as u64;
                batch.position = row
                    .try_get::<_, Option<i64>>("position")?
                    .map(|p| p.max(0) as u64);
                if row.try_get::<_, Option<uuid::Uuid>>("task_id")?.is_some() {
                    batch.cancelling.push(task_from_row(row)?);
                }
            }
            Ok(batch)
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
    /// Returns the position as stored (the greater of `cursor` and the one it found).
    pub async fn save_feed_position(&self, cursor: u64) -> Result<u64, StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            let stored: i64 = client
                .query_one(
                    "UPDATE a2a_feed_position SET cursor = GREATEST(cursor, $1), updated_at = now()
                      WHERE id = 1 RETURNING cursor",
                    &[&(cursor.min(i64::MAX as u64) as i64)],
                )
                .await?
                .try_get(0)?;
            Ok(stored.max(0) as u64)
        })
    }
}
