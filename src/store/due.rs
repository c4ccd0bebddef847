//! The queries the reconciler works from: the tasks due for a pass and the backlog. (The
//! pending cancellations among a feed answer's runs come with its projection:
//! `feed::APPLY_FEED_BATCH`.)

use std::time::Duration;

use super::row::{task_from_row, COLUMNS};
use super::state::TERMINAL_SQL;
use super::{PgTaskStore, StoreError, TaskRow};
use crate::store::pool::on_connection;
use crate::store::Call;

/// Which tasks a reconciler pass works on; `grace` spares those whose request may still be at
/// work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// The dispatch is unresolved and older than `grace` (found among the SUBMITTED tasks:
    /// a task leaves that state only with its run recorded, or terminal).
    Unresolved,
    /// Dispatched, not terminal, and either had a cancel requested more than `grace` ago
    /// (younger ones belong to the CancelTask request still telling Q) or past the execution
    /// deadline: Q is asked about them. The deadline is the stored one: the task's own, written
    /// at admission, or Q's for its run if that is earlier (`tasks::RECORD_DISPATCHED`). A task
    /// admitted before migration 20261206_171800 may have none (a run learnt from Q's run
    /// feed, which carries none, after its create's answer was lost): then its admission plus
    /// `execution_timeout`.
    OverdueOrCancelling { execution_timeout: Duration },
}

/// Tasks whose dispatch is not resolved yet (the reconciler's work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unresolved {
    /// Dispatch `pending` or `unknown`, not terminal.
    pub backlog: i64,
    /// Of those, dispatch `unknown`: the run may or may not exist in Q.
    pub unknown: i64,
}

impl PgTaskStore {
    /// The tasks a reconciler pass works on, oldest first and at most `limit`.
    #[tracing::instrument(target = "otel", name = "db.due", skip_all)]
    pub async fn due(
        &self,
        due: Due,
        grace: Duration,
        limit: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let (condition, execution_timeout) = match due {
            // Among the SUBMITTED tasks (a2a_tasks_submitted): a task leaves that state only
            // with its run recorded, or terminal (migration 20261206_171800).
            Due::Unresolved => (
                "state = 'TASK_STATE_SUBMITTED' AND dispatch IN ('pending', 'unknown')
                AND created_at < now() - make_interval(secs => $1)",
                None,
            ),
            // A run whose deadline is not recorded is still due by its task's: without that, a
            // run learnt from the feed whose end the feed then lost (a failover to a copy
            // without it, compaction) was never read again and its task never ended.
            Due::OverdueOrCancelling { execution_timeout } => (
                "run_id IS NOT NULL
                AND (cancel_requested_at < now() - make_interval(secs => $1)
                     OR deadline_at < now()
                     OR (deadline_at IS NULL
                         AND created_at < now() - make_interval(secs => $3)))",
                Some(execution_timeout.as_secs_f64()),
            ),
        };
        on_connection!(self.pool, Call::Read, |client| {
            let sql = format!(
                "SELECT {COLUMNS} FROM a2a_tasks
                  WHERE state NOT IN {TERMINAL_SQL} AND {condition}
                  ORDER BY created_at LIMIT $2"
            );
            let grace = grace.as_secs_f64();
            // Prepared once per connection: the leader asks every pass.
            let statement = client.prepare_cached(&sql).await?;
            let rows = match &execution_timeout {
                Some(timeout) => client.query(&statement, &[&grace, &limit, timeout]).await?,
                None => client.query(&statement, &[&grace, &limit]).await?,
            };
            rows.iter().map(task_from_row).collect()
        })
    }

    /// How many tasks wait for dispatch resolution (the reconciler backlog), and how many of
    /// those have an `unknown` dispatch (the run may or may not exist in Q).
    #[tracing::instrument(target = "otel", name = "db.unresolved_count", skip_all)]
    pub async fn unresolved_count(&self) -> Result<Unresolved, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            // Prepared once per connection: every replica asks every 2 s. Among the
            // SUBMITTED tasks, as the reconciler's query (a2a_tasks_submitted).
            let statement = client
                .prepare_cached(
                    "SELECT count(*), count(*) FILTER (WHERE dispatch = 'unknown') FROM a2a_tasks
                      WHERE state = 'TASK_STATE_SUBMITTED' AND dispatch IN ('pending', 'unknown')",
                )
                .await?;
            let row = client.query_one(&statement, &[]).await?;
            Ok(Unresolved {
                backlog: row.try_get(0)?,
                unknown: row.try_get(1)?,
            })
        })
    }
}
