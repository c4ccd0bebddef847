//! SendMessage: the message is committed under its durable identity (tenant, principal, agent,
//! messageId) before Q is called; a repeat recovers the same task, changed content under the
//! same id is refused and changes nothing. A blocking send then observes the run within the
//! window, holding an observer lease.

use std::time::Duration;

use a2a::SendMessageResponse;
use serde_json::{Map, Value};

use super::snapshot::to_result;
use super::{MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::validate::{validate_send, ValidatedSend};
use crate::error::{Fault, HttpError, RpcError};
use crate::store::{Admission, NewTask, TaskRow};
use crate::upstream::contract::WorkspaceAccess;

impl TaskService {
    pub async fn send_message(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        let send = validate_send(params, &self.settings.limits)?;
        if caller.workspace != WorkspaceAccess::Granted {
            return Err(HttpError::WorkspaceAccessDenied.into());
        }
        let row = self.admit(caller, &send).await?;

        // The wait is an observation and holds a lease; without one (over a bound, or the lease
        // store down) the run still exists and the current task is returned at once.
        let mut lease = None;
        let window = if send.return_immediately {
            Duration::ZERO
        } else {
            match self
                .leases
                .acquire(&caller.principal.tenant_id, &caller.principal.principal_id)
                .await
            {
                Ok(held) => {
                    lease = Some(held);
                    self.settings.observation_window
                }
                Err(e) => {
                    tracing::info!(task_id = %row.task_id, reason = %e, "blocking send returns without waiting");
                    Duration::ZERO
                }
            }
        };
        let run = self.follow_until_settled(&row, window).await;
        if let Some(lease) = lease {
            lease.release().await;
        }
        let task = self
            .snapshot(caller, &row, run, None, send.history_length)
            .await?;
        to_result(&SendMessageResponse::Task(task))
    }

    /// Commits the message under its identity and dispatches it (or, for a repeat, recovers
    /// the existing task). Returns the task as stored after dispatch.
    pub(crate) async fn admit(
        &self,
        caller: &Caller,
        send: &ValidatedSend,
    ) -> Result<TaskRow, Fault> {
        let new = NewTask {
            owner: caller.owner(),
            message_id: send.message_id.clone(),
            content_sha256: send.content_sha256(),
            message: send.stored_message(),
        };
        let row = match self.store.admit(&new).await? {
            Admission::Created(row) => {
                self.dispatcher.create_run(&row, send.texts()).await?;
                row
            }
            Admission::Existing(row) => {
                if row.content_sha256 != new.content_sha256 {
                    return Err(RpcError::invalid_field(
                        "message.messageId",
                        "this messageId was already used with different content; nothing was changed. Use a new messageId for new content",
                    )
                    .with_meta("taskId", row.task_id.to_string())
                    .into());
                }
                tracing::info!(task_id = %row.task_id, "repeated messageId: recovering the existing task");
                self.dispatcher.resolve(&row).await?;
                row
            }
        };
        self.find(caller, row.task_id).await
    }
}
