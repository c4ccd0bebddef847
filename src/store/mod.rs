//! The store port: the durable A2A identity of each task, its dispatch record and the status
//! projection used for listing, in PostgreSQL.

pub mod migrate;
pub mod outbound;

use std::time::Duration;

use a2a::TaskState;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Pool, PoolConfig, Runtime, Timeouts};
use serde_json::Value;
use tokio_postgres::{NoTls, Row};
use uuid::Uuid;

use crate::config::DatabaseConfig;
use crate::upstream::contract::RunStatus;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("database pool setup: {0}")]
    Setup(String),
    #[error("stored row is invalid: {0}")]
    Corrupt(String),
}

/// Where a task's dispatch to Q stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Committed; no create is known to have reached Q.
    Pending,
    /// Q's run id is recorded.
    Dispatched,
    /// A create may have reached Q; resolve by workflow identity, never by a blind create.
    Unknown,
    /// Q refused the run; the task's state records it.
    Refused,
}

impl Dispatch {
    fn as_str(self) -> &'static str {
        match self {
            Dispatch::Pending => "pending",
            Dispatch::Dispatched => "dispatched",
            Dispatch::Unknown => "unknown",
            Dispatch::Refused => "refused",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "pending" => Dispatch::Pending,
            "dispatched" => Dispatch::Dispatched,
            "unknown" => Dispatch::Unknown,
            "refused" => Dispatch::Refused,
            other => return Err(StoreError::Corrupt(format!("dispatch {other:?}"))),
        })
    }
}

/// Who a task belongs to: the scope of its message identity and of every read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub tenant_id: String,
    pub principal_id: String,
    pub agent_id: String,
}

#[derive(Debug, Clone)]
pub struct TaskRow {
    pub task_id: Uuid,
    pub owner: Owner,
    pub message_id: String,
    pub content_sha256: String,
    pub context_id: Uuid,
    pub workflow_id: String,
    pub message: Value,
    pub state: TaskState,
    pub status_message: Option<String>,
    pub status_timestamp: DateTime<Utc>,
    pub dispatch: Dispatch,
    pub run_id: Option<String>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// A client cancelled the task: no path may create its run any more.
    pub cancel_requested: bool,
}

impl TaskRow {
    /// The accepted message's text parts, in order (the run's input).
    pub fn texts(&self) -> Vec<String> {
        self.message["parts"]
            .as_array()
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p["text"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// ListTasks filters, applied within one owner.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    pub context_id: Option<Uuid>,
    pub state: Option<TaskState>,
    pub status_timestamp_after: Option<DateTime<Utc>>,
}

/// Position after the last task of a page: `(status_timestamp, task_id)`, strictly descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPosition {
    pub status_timestamp: DateTime<Utc>,
    pub task_id: Uuid,
}

/// A validated message to admit under its identity.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub owner: Owner,
    pub message_id: String,
    pub content_sha256: String,
    /// The accepted message as it will appear in history (without task/context ids).
    pub message: Value,
}

/// Outcome of admitting a message.
#[derive(Debug)]
pub enum Admission {
    /// First time this identity was seen: a new task row was committed.
    Created(TaskRow),
    /// The identity already had a task (same or different content: the caller compares).
    Existing(TaskRow),
}

pub fn state_name(state: &TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "TASK_STATE_UNSPECIFIED".into())
}

fn parse_state(name: &str) -> Result<TaskState, StoreError> {
    serde_json::from_value(Value::String(name.to_string()))
        .map_err(|_| StoreError::Corrupt(format!("state {name:?}")))
}

const COLUMNS: &str = "task_id, tenant_id, principal_id, agent_id, message_id, content_sha256, \
    context_id, workflow_id, message, state, status_message, status_timestamp, dispatch, run_id, \
    deadline_at, created_at, cancel_requested_at";

/// States a task never leaves, as SQL.
const TERMINAL_SQL: &str = "('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', \
    'TASK_STATE_REJECTED')";

fn task_from_row(row: &Row) -> Result<TaskRow, StoreError> {
    Ok(TaskRow {
        task_id: row.try_get("task_id")?,
        owner: Owner {
            tenant_id: row.try_get("tenant_id")?,
            principal_id: row.try_get("principal_id")?,
            agent_id: row.try_get("agent_id")?,
        },
        message_id: row.try_get("message_id")?,
        content_sha256: row.try_get("content_sha256")?,
        context_id: row.try_get("context_id")?,
        workflow_id: row.try_get("workflow_id")?,
        message: row.try_get("message")?,
        state: parse_state(row.try_get("state")?)?,
        status_message: row.try_get("status_message")?,
        status_timestamp: row.try_get("status_timestamp")?,
        dispatch: Dispatch::parse(row.try_get("dispatch")?)?,
        run_id: row.try_get("run_id")?,
        deadline_at: row.try_get("deadline_at")?,
        created_at: row.try_get("created_at")?,
        cancel_requested: row
            .try_get::<_, Option<DateTime<Utc>>>("cancel_requested_at")?
            .is_some(),
    })
}

type SqlParam = Box<dyn tokio_postgres::types::ToSql + Sync + Send>;

/// WHERE clause and parameters shared by ListTasks' page and count queries.
fn list_where(
    owner: &Owner,
    filter: &ListFilter,
    after: Option<ListPosition>,
) -> (String, Vec<SqlParam>) {
    let mut clauses = vec![
        "tenant_id = $1".to_string(),
        "principal_id = $2".to_string(),
        "agent_id = $3".to_string(),
    ];
    let mut params: Vec<SqlParam> = vec![
        Box::new(owner.tenant_id.clone()),
        Box::new(owner.principal_id.clone()),
        Box::new(owner.agent_id.clone()),
    ];
    if let Some(context_id) = filter.context_id {
        params.push(Box::new(context_id));
        clauses.push(format!("context_id = ${}", params.len()));
    }
    if let Some(state) = &filter.state {
        params.push(Box::new(state_name(state)));
        clauses.push(format!("state = ${}", params.len()));
    }
    if let Some(ts) = filter.status_timestamp_after {
        params.push(Box::new(ts));
        clauses.push(format!("status_timestamp >= ${}", params.len()));
    }
    if let Some(position) = after {
        params.push(Box::new(position.status_timestamp));
        let ts = params.len();
        params.push(Box::new(position.task_id));
        clauses.push(format!(
            "(status_timestamp, task_id) < (${ts}, ${})",
            params.len()
        ));
    }
    (clauses.join(" AND "), params)
}

/// PostgreSQL implementation of the task store.
#[derive(Clone)]
pub struct PgTaskStore {
    pool: Pool,
}

impl PgTaskStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let mut pg = deadpool_postgres::Config::new();
        pg.url = Some(config.url.expose().to_owned());
        let wait = Duration::from_millis(config.acquire_timeout_ms);
        pg.pool = Some(PoolConfig {
            max_size: config.pool_size,
            timeouts: Timeouts {
                wait: Some(wait),
                create: Some(wait),
                recycle: Some(wait),
            },
            ..PoolConfig::default()
        });
        let pool = pg
            .create_pool(Some(Runtime::Tokio1), NoTls)
            .map_err(|e| StoreError::Setup(e.to_string()))?;
        Ok(PgTaskStore { pool })
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Inserts the task under its message identity in one statement, or returns the row that
    /// already holds the identity. Concurrent duplicates all see the same row.
    pub async fn admit(&self, new: &NewTask) -> Result<Admission, StoreError> {
        let client = self.pool.get().await?;
        let task_id = Uuid::new_v4();
        let context_id = Uuid::new_v4();
        let workflow_id = format!("a2a-task-{task_id}");
        let sql = format!(
            "WITH inserted AS (
                INSERT INTO a2a_tasks (task_id, tenant_id, principal_id, agent_id, message_id,
                                       content_sha256, context_id, workflow_id, message)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                ON CONFLICT ON CONSTRAINT a2a_tasks_message_identity DO NOTHING
                RETURNING {COLUMNS}
            )
            SELECT true AS created, {COLUMNS} FROM inserted
            UNION ALL
            SELECT false AS created, {COLUMNS} FROM a2a_tasks
             WHERE tenant_id = $2 AND principal_id = $3 AND agent_id = $4 AND message_id = $5"
        );
        let statement = client.prepare_cached(&sql).await?;
        // A conflicting row committed by a concurrent transaction after this statement's
        // snapshot is invisible to the SELECT arm; the next attempt sees it.
        for _ in 0..5 {
            let rows = client
                .query(
                    &statement,
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
                    ],
                )
                .await?;
            if let Some(row) = rows.first() {
                let created: bool = row.try_get("created")?;
                let task = task_from_row(row)?;
                return Ok(if created {
                    Admission::Created(task)
                } else {
                    Admission::Existing(task)
                });
            }
        }
        Err(StoreError::Corrupt(
            "message identity neither inserted nor found".into(),
        ))
    }

    /// The task, only if it belongs to exactly this owner.
    pub async fn find_owned(
        &self,
        task_id: Uuid,
        owner: &Owner,
    ) -> Result<Option<TaskRow>, StoreError> {
        let client = self.pool.get().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM a2a_tasks
              WHERE task_id = $1 AND tenant_id = $2 AND principal_id = $3 AND agent_id = $4"
        );
        let statement = client.prepare_cached(&sql).await?;
        let row = client
            .query_opt(
                &statement,
                &[
                    &task_id,
                    &owner.tenant_id,
                    &owner.principal_id,
                    &owner.agent_id,
                ],
            )
            .await?;
        row.as_ref().map(task_from_row).transpose()
    }

    /// Records Q's run for the task and the run's current state.
    pub async fn record_dispatched(
        &self,
        task_id: Uuid,
        run_id: &str,
        state: &TaskState,
        status_message: Option<&str>,
        deadline_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                &format!(
                    "UPDATE a2a_tasks
                        SET dispatch = 'dispatched', dispatch_error = NULL, run_id = $2,
                            deadline_at = $5,
                            state = CASE WHEN state IN {TERMINAL_SQL} THEN state ELSE $3 END,
                            status_message = CASE WHEN state IN {TERMINAL_SQL}
                                                  THEN status_message ELSE $4 END
                      WHERE task_id = $1"
                ),
                &[
                    &task_id,
                    &run_id,
                    &state_name(state),
                    &status_message,
                    &deadline_at,
                ],
            )
            .await?;
        Ok(())
    }

    /// Marks a dispatch whose outcome is not known (only while no run is recorded).
    pub async fn record_dispatch_unknown(
        &self,
        task_id: Uuid,
        reason: &str,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE a2a_tasks SET dispatch = $2, dispatch_error = $3
                  WHERE task_id = $1 AND dispatch IN ('pending', 'unknown')",
                &[&task_id, &Dispatch::Unknown.as_str(), &reason],
            )
            .await?;
        Ok(())
    }

    /// Records Q's definite refusal as the task's terminal state.
    pub async fn record_refused(&self, task_id: Uuid, reason: &str) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                &format!(
                    "UPDATE a2a_tasks
                        SET dispatch = 'refused', dispatch_error = $2,
                            state = 'TASK_STATE_REJECTED', status_message = $2
                      WHERE task_id = $1 AND dispatch IN ('pending', 'unknown')
                        AND state NOT IN {TERMINAL_SQL}"
                ),
                &[&task_id, &reason],
            )
            .await?;
        Ok(())
    }

    /// Projects an observed state; the trigger stamps `status_timestamp` if the state moved.
    /// A terminal task keeps its state. Returns the stored state and status timestamp.
    pub async fn record_state(
        &self,
        task_id: Uuid,
        state: &TaskState,
        status_message: Option<&str>,
    ) -> Result<(TaskState, DateTime<Utc>), StoreError> {
        let client = self.pool.get().await?;
        let sql = format!(
            "UPDATE a2a_tasks
                SET state = CASE WHEN state IN {TERMINAL_SQL} THEN state ELSE $2 END,
                    status_message = CASE WHEN state IN {TERMINAL_SQL} THEN status_message ELSE $3 END
              WHERE task_id = $1
          RETURNING state, status_timestamp"
        );
        let row = client
            .query_one(&sql, &[&task_id, &state_name(state), &status_message])
            .await?;
        Ok((parse_state(row.try_get(0)?)?, row.try_get(1)?))
    }

    /// Applies one entry of Q's run change feed to the task created under `workflow_id`, if
    /// any. Returns whether a row changed.
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
              WHERE workflow_id = $1 AND state NOT IN {TERMINAL_SQL}
                AND (state IS DISTINCT FROM $3 OR status_message IS DISTINCT FROM $4
                     OR run_id IS NULL)"
        );
        let n = client
            .execute(
                &sql,
                &[&workflow_id, &run_id, &state_name(state), &status_message],
            )
            .await?;
        Ok(n > 0)
    }

    /// The task created under `workflow_id` if a cancellation is pending on it.
    pub async fn cancelling_by_workflow(
        &self,
        workflow_id: &str,
    ) -> Result<Option<TaskRow>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM a2a_tasks
                      WHERE workflow_id = $1 AND cancel_requested_at IS NOT NULL"
                ),
                &[&workflow_id],
            )
            .await?;
        row.as_ref().map(task_from_row).transpose()
    }

    /// Persists a cancellation request (idempotent).
    pub async fn request_cancel(&self, task_id: Uuid) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE a2a_tasks SET cancel_requested_at = COALESCE(cancel_requested_at, now())
                  WHERE task_id = $1",
                &[&task_id],
            )
            .await?;
        Ok(())
    }

    /// Ends a task locally in a terminal state (cancelled before any run existed, or never
    /// confirmed by Q within its execution deadline).
    pub async fn finish_unresolved(
        &self,
        task_id: Uuid,
        state: &TaskState,
        reason: &str,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let sql = format!(
            "UPDATE a2a_tasks SET state = $2, status_message = $3
              WHERE task_id = $1 AND run_id IS NULL AND state NOT IN {TERMINAL_SQL}"
        );
        client
            .execute(&sql, &[&task_id, &state_name(state), &reason])
            .await?;
        Ok(())
    }

    /// Tasks whose dispatch is unresolved and older than `grace`, oldest first.
    pub async fn unresolved(
        &self,
        grace: Duration,
        limit: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let client = self.pool.get().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM a2a_tasks
              WHERE dispatch IN ('pending', 'unknown') AND state NOT IN {TERMINAL_SQL}
                AND created_at < now() - make_interval(secs => $1)
              ORDER BY created_at LIMIT $2"
        );
        let rows = client.query(&sql, &[&grace.as_secs_f64(), &limit]).await?;
        rows.iter().map(task_from_row).collect()
    }

    /// Dispatched tasks that are not terminal and either had a cancel requested more than
    /// `grace` ago (younger ones belong to the CancelTask request still telling Q) or are past
    /// their execution deadline: the reconciler asks Q about them.
    pub async fn overdue_or_cancelling(
        &self,
        grace: Duration,
        limit: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let client = self.pool.get().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM a2a_tasks
              WHERE run_id IS NOT NULL AND state NOT IN {TERMINAL_SQL}
                AND (cancel_requested_at < now() - make_interval(secs => $2)
                     OR deadline_at < now())
              ORDER BY created_at LIMIT $1"
        );
        let rows = client.query(&sql, &[&limit, &grace.as_secs_f64()]).await?;
        rows.iter().map(task_from_row).collect()
    }

    /// How many tasks wait for dispatch resolution (the reconciler backlog).
    pub async fn unresolved_count(&self) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        let sql = format!(
            "SELECT count(*) FROM a2a_tasks
              WHERE dispatch IN ('pending', 'unknown') AND state NOT IN {TERMINAL_SQL}"
        );
        Ok(client.query_one(&sql, &[]).await?.try_get(0)?)
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

    /// One ListTasks page: the owner's tasks matching `filter`, after `after`, ordered by
    /// `(status_timestamp desc, task_id desc)`, at most `limit`.
    pub async fn list(
        &self,
        owner: &Owner,
        filter: &ListFilter,
        after: Option<ListPosition>,
        limit: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let client = self.pool.get().await?;
        let (where_sql, params) = list_where(owner, filter, after);
        let sql = format!(
            "SELECT {COLUMNS} FROM a2a_tasks WHERE {where_sql}
              ORDER BY status_timestamp DESC, task_id DESC LIMIT {limit}"
        );
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p.as_ref() as _).collect();
        let rows = client.query(&sql, &refs).await?;
        rows.iter().map(task_from_row).collect()
    }

    /// Number of the owner's tasks matching `filter` (ListTasks `totalSize`).
    pub async fn count(&self, owner: &Owner, filter: &ListFilter) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        let (where_sql, params) = list_where(owner, filter, None);
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p.as_ref() as _).collect();
        let row = client
            .query_one(
                &format!("SELECT count(*) FROM a2a_tasks WHERE {where_sql}"),
                &refs,
            )
            .await?;
        Ok(row.try_get(0)?)
    }

    /// The task row for a workflow identity (any owner): for the reconciler and the feed.
    pub async fn find_by_id(&self, task_id: Uuid) -> Result<Option<TaskRow>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM a2a_tasks WHERE task_id = $1"),
                &[&task_id],
            )
            .await?;
        row.as_ref().map(task_from_row).transpose()
    }

    pub async fn migration_applied(&self, version: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        Ok(migrate::is_applied(&client, version).await?)
    }

    /// A round trip to the database on a pooled connection.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client.query_one("SELECT 1", &[]).await?;
        Ok(())
    }
}
/// Q's run status as an A2A task state. Approvals and additional-input requests are
/// `TASK_STATE_INPUT_REQUIRED` (the profile's choice; the spec's §7.6 example uses
/// AUTH_REQUIRED); a run past its execution deadline has failed.
pub fn task_state(status: RunStatus) -> TaskState {
    match status {
        RunStatus::Queued => TaskState::Submitted,
        RunStatus::Running => TaskState::Working,
        RunStatus::AwaitingApproval | RunStatus::AwaitingInput => TaskState::InputRequired,
        RunStatus::Succeeded => TaskState::Completed,
        RunStatus::Failed | RunStatus::TimedOut => TaskState::Failed,
        RunStatus::Canceled => TaskState::Canceled,
    }
}
