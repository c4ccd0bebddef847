//! Task rows: admission under the message identity, reads, dispatch and state writes (the
//! queries the reconciler works from are in `due.rs`).

use std::sync::LazyLock;
use std::time::Duration;

use a2a::TaskState;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::row::{task_from_row, COLUMNS};
use super::state::{parse_state, state_name, TERMINAL_SQL};
use super::{Dispatch, Owner, PgTaskStore, StoreError, TaskRow};
use crate::store::pool::on_connection;
use crate::store::Call;

/// A validated message to admit under its identity.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub owner: Owner,
    pub message_id: String,
    pub content_sha256: String,
    /// The accepted message as it will appear in history (without task/context ids).
    pub message: Value,
    /// How long the admitting request holds the dispatch claim (the right to send the create).
    pub dispatch_claim: Duration,
    /// The task's execution deadline, from its admission (`deadline_at`, the deadline its run
    /// is created with).
    pub execution_timeout: Duration,
}

/// Outcome of admitting a message.
#[derive(Debug)]
pub enum Admission {
    /// First time this identity was seen: a new task row was committed.
    Created(TaskRow),
    /// The identity already had a task (same or different content: the caller compares).
    Existing(TaskRow),
    /// The identity's task was removed by retention: only its tombstone is left.
    Retained(Tombstone),
}

/// What retention keeps of a removed task: enough to answer a repeat of its messageId.
#[derive(Debug, Clone)]
pub struct Tombstone {
    pub task_id: Uuid,
    pub context_id: Uuid,
    /// The message's content hash (hex), as the task had it.
    pub content_sha256: String,
    pub state: TaskState,
    pub status_timestamp: DateTime<Utc>,
}

impl PgTaskStore {
    /// Inserts the task under its message identity, or returns the row that already holds the
    /// identity. Concurrent duplicates all see the same row.
    ///
    /// A new identity costs one statement, the insert, which finds a conflict through the
    /// identity's unique index itself: no lookup by identity is planned unless the identity is
    /// taken. (A lookup in the same statement would run on every admission, and the planner may
    /// serve it from the listing index, which shares the identity's first three columns: a scan
    /// of every task of the principal, per message.)
    ///
    /// Safe to run again when its connection fails under it ([`Call::Write`]): the task and
    /// context ids are drawn once, before the first attempt, so an insert that committed but
    /// whose answer was lost is found by the identity lookup of the second attempt as this
    /// call's own row (its task id), and answered as created, with the dispatch claim it took.
    #[tracing::instrument(target = "otel", name = "db.admit", skip_all)]
    pub async fn admit(&self, new: &NewTask) -> Result<Admission, StoreError> {
        self.admit_as(Uuid::new_v4(), Uuid::new_v4(), new).await
    }

    /// [`Self::admit`] with the new task's id and context id drawn by the caller: what each
    /// attempt of an admission runs. Run again with the same ids after its insert committed,
    /// it answers [`Admission::Created`] with that row.
    pub async fn admit_as(
        &self,
        task_id: Uuid,
        context_id: Uuid,
        new: &NewTask,
    ) -> Result<Admission, StoreError> {
        let workflow_id = format!("a2a-task-{task_id}");
        on_connection!(self.pool, Call::Write, |client| {
            let admit = client.prepare_cached(&ADMIT).await?;
            // The admission answers from its own snapshot: an identity inserted by a concurrent
            // transaction that committed after it began makes the insert wait for it and then
            // do nothing, and its row is not in that snapshot. The lookups that follow, each a
            // statement of its own, see it. The loop only covers a row that disappears between
            // them.
            for _ in 0..5 {
                let answered = client
                    .query(
                        &admit,
                        &[
                            &task_id,
                            &new.owner.tenant_id,
                            &new.owner.principal_id,
                            &new.owner.agent_id,
                            &new.message_id,
                            &new.content_sha256,
                            &context_id,
                            &workflow_id,
                            &new.message,
                            &new.dispatch_claim.as_secs_f64(),
                            &new.execution_timeout.as_secs_f64(),
                        ],
                    )
                    .await?;
                // At most one row of each kind; a task before a tombstone.
                let mut tombstone = None;
                for row in &answered {
                    match row.try_get::<_, &str>("admitted")? {
                        "created" => return Ok(Admission::Created(task_from_row(row)?)),
                        "existing" => return Ok(existing(task_id, task_from_row(row)?)),
                        _ => tombstone = Some(row),
                    }
                }
                if let Some(row) = tombstone {
                    return Ok(Admission::Retained(tombstone_from_row(row)?));
                }
                let lookup = client.prepare_cached(&IDENTITY_LOOKUP).await?;
                let found = client
                    .query_opt(&lookup, &new.owner.and_message(&new.message_id))
                    .await?;
                if let Some(row) = found {
                    return Ok(existing(task_id, task_from_row(&row)?));
                }
                let lookup = client.prepare_cached(TOMBSTONE_LOOKUP).await?;
                let kept = client
                    .query_opt(&lookup, &new.owner.and_message(&new.message_id))
                    .await?;
                if let Some(row) = kept {
                    return Ok(Admission::Retained(tombstone_from_row(&row)?));
                }
            }
            Err(StoreError::Corrupt(
                "message identity neither inserted nor found".into(),
            ))
        })
    }

    /// The task, only if it belongs to exactly this owner.
    #[tracing::instrument(target = "otel", name = "db.find_owned", skip_all)]
    pub async fn find_owned(
        &self,
        task_id: Uuid,
        owner: &Owner,
    ) -> Result<Option<TaskRow>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let sql = format!(
                "SELECT {COLUMNS} FROM a2a_tasks
                  WHERE task_id = $1 AND tenant_id = $2 AND principal_id = $3 AND agent_id = $4"
            );
            let statement = client.prepare_cached(&sql).await?;
            let row = client
                .query_opt(&statement, &owner.and_task(&task_id))
                .await?;
            row.as_ref().map(task_from_row).transpose()
        })
    }

    /// The task by id, whoever owns it: read again by the reconciler before it fails a task
    /// Q never confirmed, and by a blocking send or a stream (already checked against its
    /// caller) looking again while the task's dispatch is unresolved.
    #[tracing::instrument(target = "otel", name = "db.find_by_id", skip_all)]
    pub async fn find_by_id(&self, task_id: Uuid) -> Result<Option<TaskRow>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let row = client
                .query_opt(
                    &format!("SELECT {COLUMNS} FROM a2a_tasks WHERE task_id = $1"),
                    &[&task_id],
                )
                .await?;
            row.as_ref().map(task_from_row).transpose()
        })
    }

    /// Records Q's run for the task and the run's current state. Returns the task as stored
    /// after it (`None` only for a task id no row has).
    #[tracing::instrument(target = "otel", name = "db.record_dispatched", skip_all)]
    pub async fn record_dispatched(
        &self,
        task_id: Uuid,
        run_id: &str,
        state: Option<&TaskState>,
        status_message: Option<&str>,
        deadline_at: DateTime<Utc>,
    ) -> Result<Option<TaskRow>, StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            let statement = client.prepare_cached(&RECORD_DISPATCHED).await?;
            let row = client
                .query_opt(
                    &statement,
                    &[
                        &task_id,
                        &run_id,
                        &state.map(state_name),
                        &status_message,
                        &deadline_at,
                    ],
                )
                .await?;
            row.as_ref().map(task_from_row).transpose()
        })
    }

    /// Marks a dispatch whose outcome is not known (only while no run is recorded).
    #[tracing::instrument(target = "otel", name = "db.record_dispatch_unknown", skip_all)]
    pub async fn record_dispatch_unknown(
        &self,
        task_id: Uuid,
        reason: &str,
    ) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            client
                .execute(
                    // The claim stays until it expires: the create may still commit in Q.
                    "UPDATE a2a_tasks SET dispatch = $2, dispatch_error = $3
                      WHERE task_id = $1 AND dispatch IN ('pending', 'unknown')",
                    &[&task_id, &Dispatch::Unknown.as_str(), &reason],
                )
                .await?;
            Ok(())
        })
    }

    /// Records Q's definite refusal as the task's terminal state.
    #[tracing::instrument(target = "otel", name = "db.record_refused", skip_all)]
    pub async fn record_refused(&self, task_id: Uuid, reason: &str) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            client
                .execute(
                    &format!(
                        "UPDATE a2a_tasks
                            SET dispatch = 'refused', dispatch_error = $2,
                                state = 'TASK_STATE_REJECTED', status_message = $2,
                                dispatch_claimed_until = NULL
                          WHERE task_id = $1 AND dispatch IN ('pending', 'unknown')
                            AND state NOT IN {TERMINAL_SQL}"
                    ),
                    &[&task_id, &reason],
                )
                .await?;
            Ok(())
        })
    }

    /// Takes the dispatch claim of a task whose run is not recorded, if nobody holds it (or
    /// its holder's time is up): the task as stored, or `None` when a create is in flight
    /// elsewhere (or the dispatch is resolved, or the task terminal).
    #[tracing::instrument(target = "otel", name = "db.claim_dispatch", skip_all)]
    pub async fn claim_dispatch(
        &self,
        task_id: Uuid,
        claim: Duration,
    ) -> Result<Option<TaskRow>, StoreError> {
        on_connection!(self.pool, Call::WriteOnce, |client| {
            let sql = format!(
                "UPDATE a2a_tasks SET dispatch_claimed_until = now() + make_interval(secs => $2)
                  WHERE task_id = $1 AND run_id IS NULL AND dispatch IN ('pending', 'unknown')
                    AND state NOT IN {TERMINAL_SQL}
                    AND (dispatch_claimed_until IS NULL OR dispatch_claimed_until < now())
              RETURNING {COLUMNS}"
            );
            let statement = client.prepare_cached(&sql).await?;
            let row = client
                .query_opt(&statement, &[&task_id, &claim.as_secs_f64()])
                .await?;
            row.as_ref().map(task_from_row).transpose()
        })
    }

    /// Gives the dispatch claim back (the create never left, or Q could not be asked).
    #[tracing::instrument(target = "otel", name = "db.release_dispatch", skip_all)]
    pub async fn release_dispatch(&self, task_id: Uuid) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            client
                .execute(
                    "UPDATE a2a_tasks SET dispatch_claimed_until = NULL WHERE task_id = $1",
                    &[&task_id],
                )
                .await?;
            Ok(())
        })
    }

    /// Projects an observed state; the trigger stamps `status_timestamp` if the state moved.
    /// A terminal task keeps its state, and so does every task when the observed state is
    /// unknown (`None`). Returns the stored state and status timestamp; [`StoreError::TaskGone`]
    /// when the task was deleted meanwhile.
    ///
    /// Committed without waiting for its WAL flush ([`UNFLUSHED`]): the state is Q's, which Q
    /// keeps, and a projection lost in a PostgreSQL crash is projected again by the reconciler,
    /// which follows Q's run feed from its saved position (saved waiting for its flush, and
    /// with it for every earlier commit) and keeps reading every unfinished task's run.
    #[tracing::instrument(target = "otel", name = "db.record_state", skip_all)]
    pub async fn record_state(
        &self,
        task_id: Uuid,
        state: Option<&TaskState>,
        status_message: Option<&str>,
    ) -> Result<(TaskState, DateTime<Utc>), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            let sql = format!(
                "UPDATE a2a_tasks
                    SET state = CASE WHEN state IN {TERMINAL_SQL} OR $2::text IS NULL
                                     THEN state ELSE $2 END,
                        status_message = CASE WHEN state IN {TERMINAL_SQL} OR $2::text IS NULL
                                              THEN status_message ELSE $3 END
                   FROM {UNFLUSHED}
                  WHERE task_id = $1
              RETURNING state, status_timestamp"
            );
            // Prepared once per connection: an unnamed statement costs a second round trip per call.
            let statement = client.prepare_cached(&sql).await?;
            let row = client
                .query_opt(
                    &statement,
                    &[&task_id, &state.map(state_name), &status_message],
                )
                .await?
                .ok_or(StoreError::TaskGone)?;
            Ok((parse_state(row.try_get(0)?)?, row.try_get(1)?))
        })
    }

    /// Persists a cancellation request (idempotent).
    #[tracing::instrument(target = "otel", name = "db.request_cancel", skip_all)]
    pub async fn request_cancel(&self, task_id: Uuid) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            client
                .execute(
                    "UPDATE a2a_tasks SET cancel_requested_at = COALESCE(cancel_requested_at, now())
                      WHERE task_id = $1",
                    &[&task_id],
                )
                .await?;
            Ok(())
        })
    }

    /// Ends a task locally in a terminal state (cancelled before any run existed, or never
    /// confirmed by Q within its execution deadline).
    #[tracing::instrument(target = "otel", name = "db.finish_unresolved", skip_all)]
    pub async fn finish_unresolved(
        &self,
        task_id: Uuid,
        state: &TaskState,
        reason: &str,
    ) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Write, |client| {
            let sql = format!(
                "UPDATE a2a_tasks SET state = $2, status_message = $3
                  WHERE task_id = $1 AND run_id IS NULL AND state NOT IN {TERMINAL_SQL}"
            );
            let statement = client.prepare_cached(&sql).await?;
            client
                .execute(&statement, &[&task_id, &state_name(state), &reason])
                .await?;
            Ok(())
        })
    }
}

/// The task found under the message identity: this call's own insert when it has this call's
/// task id (committed by an attempt whose answer was lost), answered as created.
fn existing(task_id: Uuid, row: TaskRow) -> Admission {
    if row.task_id == task_id {
        Admission::Created(row)
    } else {
        Admission::Existing(row)
    }
}

/// A tombstone from a row's last five columns: task id, context id, content hash (hex),
/// state, status timestamp.
fn tombstone_from_row(row: &tokio_postgres::Row) -> Result<Tombstone, StoreError> {
    let first = row.len() - 5;
    Ok(Tombstone {
        task_id: row.try_get(first)?,
        context_id: row.try_get(first + 1)?,
        content_sha256: row.try_get(first + 2)?,
        state: parse_state(row.try_get::<_, &str>(first + 3)?)?,
        status_timestamp: row.try_get(first + 4)?,
    })
}

/// The admission insert: a new task under its message identity, or nothing if the identity is
/// taken. The gateway sends it within [`ADMIT`], whose lookups a new identity does not run.
/// `scripts/bench` runs this statement in pgbench as the ceiling of SendMessage
/// (bench/benchlib.py reads it from here).
static ADMIT_INSERT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO a2a_tasks (task_id, tenant_id, principal_id, agent_id, message_id,
                                content_sha256, context_id, workflow_id, message,
                                dispatch_claimed_until, deadline_at)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, now() + make_interval(secs => $10),
                now() + make_interval(secs => $11)
          WHERE NOT EXISTS (SELECT 1 FROM a2a_task_tombstones
                             WHERE identity = a2a_message_identity($2, $3, $4, $5))
         ON CONFLICT ON CONSTRAINT a2a_tasks_message_identity DO NOTHING
         RETURNING {COLUMNS}"
    )
});

/// The admission, one statement in every case but a race: the insert ([`ADMIT_INSERT`]), and
/// only when it inserted nothing, the task holding the identity, or the identity's tombstone.
/// Rows are `admitted` (`created`, `existing`, `retained`), the task's columns and the
/// tombstone's last five.
///
/// It names no other table: a statement locks every table it names, whichever of its parts
/// run, so reading a repeat's artifact here would make every admission wait behind whatever
/// holds `a2a_task_artifacts` (`tests/it/neighbours_store.rs`). A completed task's artifact is
/// read by a statement of its own.
///
/// The lookups run only when the insert returned nothing: `NOT EXISTS (SELECT 1 FROM ins)` is
/// planned as a one-time filter over them, so a new identity costs what the insert alone did.
/// The lookup of the task states the identity's four columns and not the listing index's
/// predicate, so, like [`IDENTITY_LOOKUP`], only the identity's unique index serves it
/// (`tests/it/store_plans.rs`). The whole statement sees one snapshot: a row a concurrent
/// transaction committed after it began is found by the separate lookups that follow.
pub(super) static ADMIT: LazyLock<String> = LazyLock::new(|| {
    let tasks = |prefix: &str| -> String {
        COLUMNS
            .split(", ")
            .map(|c| format!("{prefix}{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let no_task = COLUMNS
        .split(", ")
        .map(|c| format!("NULL AS {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let no_tombstone = "NULL::uuid AS tomb_task_id, NULL::uuid AS tomb_context_id, \
                        NULL::text AS tomb_sha256, NULL::text AS tomb_state, \
                        NULL::timestamptz AS tomb_status_timestamp";
    format!(
        "WITH ins AS ({insert})
         SELECT 'created'::text AS admitted, {created}, {no_tombstone} FROM ins
         UNION ALL
         SELECT 'existing', {found}, NULL, NULL, NULL, NULL, NULL
           FROM a2a_tasks t
          WHERE NOT EXISTS (SELECT 1 FROM ins)
            AND t.tenant_id = $2 AND t.principal_id = $3 AND t.agent_id = $4
            AND t.message_id = $5
         UNION ALL
         SELECT 'retained', {no_task}, k.task_id, k.context_id,
                encode(k.content_sha256, 'hex'), k.state, k.status_timestamp
           FROM a2a_task_tombstones k
          WHERE NOT EXISTS (SELECT 1 FROM ins)
            AND k.identity = a2a_message_identity($2, $3, $4, $5)",
        insert = ADMIT_INSERT.as_str(),
        created = tasks("ins."),
        found = tasks("t."),
    )
});

/// The task holding a message identity. Only the identity's unique index can serve it: the
/// listing index, which shares its first three columns, is partial and only statements that
/// state its predicate ([`super::listing::LISTING_PREDICATE`]) can use it. Without that, a
/// table whose statistics lag (freshly loaded, or autovacuum off) has the planner scan every
/// task of the principal through the listing index for each repeated messageId.
pub(super) static IDENTITY_LOOKUP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {COLUMNS} FROM a2a_tasks
          WHERE tenant_id = $1 AND principal_id = $2 AND agent_id = $3 AND message_id = $4"
    )
});

/// The tombstone of a message identity whose task retention removed.
const TOMBSTONE_LOOKUP: &str = "SELECT task_id, context_id, encode(content_sha256, 'hex'),
                                       state, status_timestamp
                                  FROM a2a_task_tombstones
                                 WHERE identity = a2a_message_identity($1, $2, $3, $4)";

/// Joined into an `UPDATE` (`FROM {UNFLUSHED}`): the statement's own transaction commits
/// without waiting for its WAL flush (`synchronous_commit` off until that transaction ends;
/// the connection's next statement waits for its flush as before). A commit that waits
/// flushes every earlier one with it, so such a write is lost only in a PostgreSQL crash
/// before the next write that waits, or before the WAL writer's next flush (within
/// `3 × wal_writer_delay`, 600 ms by default). Only for writes something else makes again.
pub(crate) const UNFLUSHED: &str =
    "(SELECT set_config('synchronous_commit', 'off', true)) AS unflushed";

/// Q's run recorded on its task, the task as stored after it returned (so the request that
/// dispatched it needs no second read). The deadline kept is the earlier of the task's own
/// (written by the admission) and Q's, the task's unless Q's clock runs behind: with the state
/// unchanged (Q's run still queued) the record changes no indexed column, and PostgreSQL makes
/// it a HOT update (migration 20261206_171800; `tests/it/dispatch_record.rs`).
/// Committed without waiting for its WAL flush ([`UNFLUSHED`]): a dispatch record lost in a
/// PostgreSQL crash is found again, the task's dispatch being unresolved, by the reconciler,
/// which finds Q's run by its workflow id (`crate::dispatch`).
static RECORD_DISPATCHED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE a2a_tasks
            SET dispatch = 'dispatched', dispatch_error = NULL, run_id = $2,
                deadline_at = LEAST(deadline_at, $5), dispatch_claimed_until = NULL,
                state = CASE WHEN state IN {TERMINAL_SQL} OR $3::text IS NULL
                             THEN state ELSE $3 END,
                status_message = CASE WHEN state IN {TERMINAL_SQL} OR $3::text IS NULL
                                      THEN status_message ELSE $4 END
           FROM {UNFLUSHED}
          WHERE task_id = $1
      RETURNING {COLUMNS}"
    )
});
