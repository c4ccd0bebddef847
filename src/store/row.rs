//! The task row: its type, its owner and dispatch record, and its decoding from PostgreSQL.

use a2a::TaskState;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use super::state::parse_state;
use super::StoreError;

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
    pub(super) fn as_str(self) -> &'static str {
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

/// A statement's parameters.
pub(super) type Params<'a, const N: usize> = [&'a (dyn ToSql + Sync); N];

impl Owner {
    /// `$1` the task id, `$2`..`$4` the owner: the parameters of a read of one owned task.
    pub(super) fn and_task<'a>(&'a self, task_id: &'a Uuid) -> Params<'a, 4> {
        [task_id, &self.tenant_id, &self.principal_id, &self.agent_id]
    }

    /// `$1`..`$3` the owner, `$4` the messageId: a message identity's parameters.
    pub(super) fn and_message<'a>(&'a self, message_id: &'a String) -> Params<'a, 4> {
        [
            &self.tenant_id,
            &self.principal_id,
            &self.agent_id,
            message_id,
        ]
    }
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
    /// When the task's execution must have ended: its admission plus the execution timeout.
    /// Fixed at admission, so a run created late (a create lost and sent again) runs only for
    /// the rest of it, and a task with no run confirmed by then is failed. `created_at` is the
    /// database's clock and is compared with the replica's: a skew between the two moves the
    /// deadline by the skew.
    pub fn execution_deadline(&self, timeout: chrono::Duration) -> DateTime<Utc> {
        self.created_at + timeout
    }

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

pub(super) const COLUMNS: &str = "task_id, tenant_id, principal_id, agent_id, message_id, \
    content_sha256, context_id, workflow_id, message, state, status_message, status_timestamp, \
    dispatch, run_id, deadline_at, created_at, cancel_requested_at";

pub(super) fn task_from_row(row: &Row) -> Result<TaskRow, StoreError> {
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
