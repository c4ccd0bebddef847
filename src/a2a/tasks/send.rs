//! SendMessage: the message is committed under its durable identity (tenant, principal, agent,
//! messageId) before Q is called; a repeat recovers the same task, changed content under the
//! same id is refused and changes nothing.
//!
//! A blocking send is an observation, exactly as a stream is: it takes an observer lease
//! *before anything is created*, and without one it is refused with nothing written and
//! nothing sent to Q (HTTP 429 with `Retry-After` at a bound, 503 with the lease store down).
//! It then waits within the observation window ([`super::follow`]): until the run settles,
//! the window ends, the lease is lost, or the caller's right to observe lapses
//! ([`super::vigil`]). `returnImmediately` needs no lease.

use a2a::{SendMessageResponse, Task};
use serde_json::{Map, Value};

use super::follow::Waited;
use super::snapshot::{to_result, Observed};
use super::{MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::task_view::receipt_of;
use crate::a2a::validate::{validate_send, ValidatedSend};
use crate::access::Purpose;
use crate::dispatch::Dispatcher;
use crate::error::{Fault, HttpError, RpcError};
use crate::store::{Admission, NewTask, TaskRow};
use crate::upstream::contract::{Run, WorkspaceAccess};

impl TaskService {
    pub async fn send_message(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        let send = validate_send(params, &self.settings.limits)?;
        if caller.workspace != WorkspaceAccess::Granted {
            return Err(HttpError::WorkspaceAccessDenied.into());
        }
        if send.return_immediately {
            let (row, created) = match self.admit_and_dispatch(caller, &send).await? {
                Admitted::Task(row, created) => (row, created),
                Admitted::Retained(receipt) => {
                    return to_result(&SendMessageResponse::Task(receipt))
                }
            };
            // The run Q just answered this request's create with is the current run: reading
            // it again would cost a call to Q and say the same.
            let observed = created.as_ref().map(Observed::from);
            return self.answer_send(caller, &row, observed, &send).await;
        }
        // Refused observers change nothing: the lease comes before the task.
        let mut lease = self.observer_lease(caller).await?;
        let row = match self.admit_and_dispatch(caller, &send).await? {
            Admitted::Task(row, _) => row,
            Admitted::Retained(receipt) => {
                lease.release().await;
                return to_result(&SendMessageResponse::Task(receipt));
            }
        };
        let waited = self
            .follow_until_settled(caller, row, self.settings.observation_window, &mut lease)
            .await;
        lease.release().await;
        let Waited { row, observed } = waited?;
        self.answer_send(caller, &row, observed, &send).await
    }

    /// SendMessage's answer: the task as `observed` leaves it, its content cleared for the
    /// caller now.
    async fn answer_send(
        &self,
        caller: &Caller,
        row: &TaskRow,
        observed: Option<Observed>,
        send: &ValidatedSend,
    ) -> MethodResult {
        let task = self
            .snapshot(
                caller,
                row,
                observed.into(),
                send.history_length,
                Purpose::Current,
            )
            .await?;
        to_result(&SendMessageResponse::Task(task))
    }

    /// Commits the message under its identity and dispatches it (or, for a repeat, recovers
    /// the existing task, or the tombstone of one retention removed). With the task, the run Q
    /// answered the create with when this request created the task and Q answered: then the
    /// row is the one the dispatch record returned, and no second read is made.
    pub(crate) async fn admit_and_dispatch(
        &self,
        caller: &Caller,
        send: &ValidatedSend,
    ) -> Result<Admitted, Fault> {
        let new = NewTask {
            owner: caller.owner(),
            message_id: send.message_id.clone(),
            content_sha256: send.content_sha256(),
            message: send.stored_message(),
            dispatch_claim: self.dispatcher.claim(),
            execution_timeout: self.dispatcher.execution_timeout(),
        };
        let row = match self.store.admit(&new).await? {
            Admission::Created(row) => {
                // Q's answer carries the caller's evidence grant on the run: the snapshot's
                // clearance reads it from the access cache instead of asking Q again.
                let stamp = self.access().stamp();
                if let Some((stored, run)) = self.dispatcher.create_run(&row, send.texts()).await? {
                    self.access().created_run(&run, stamp);
                    return Ok(Admitted::Task(stored, Some(run)));
                }
                row
            }
            Admission::Existing(row) => {
                if row.content_sha256 != new.content_sha256 {
                    return Err(changed_content(row.task_id));
                }
                tracing::info!(task_id = %row.task_id, "repeated messageId: recovering the existing task");
                if Dispatcher::settled(&row) {
                    // Nothing to resolve: the row the admission read is the task as it is.
                    return Ok(Admitted::Task(row, None));
                }
                self.dispatcher.resolve(&row).await?;
                row
            }
            Admission::Retained(tombstone) => {
                if tombstone.content_sha256 != new.content_sha256 {
                    return Err(changed_content(tombstone.task_id));
                }
                tracing::info!(task_id = %tombstone.task_id, "repeated messageId of a task retention removed: its receipt");
                return Ok(Admitted::Retained(receipt_of(&tombstone)));
            }
        };
        Ok(Admitted::Task(self.find(caller, row.task_id).await?, None))
    }
}

/// What admitting a message gave.
pub(crate) enum Admitted {
    /// The message's task, and the run Q answered this request's create with, if it did.
    Task(TaskRow, Option<Run>),
    /// The message's task was removed by retention: its content-free receipt, from the
    /// tombstone that keeps its identity.
    Retained(Task),
}

/// The messageId is taken by other content: refused, nothing changed.
fn changed_content(task_id: uuid::Uuid) -> Fault {
    RpcError::invalid_field(
        "message.messageId",
        "this messageId was already used with different content; nothing was changed. Use a new messageId for new content",
    )
    .with_meta("taskId", task_id.to_string())
    .into()
}
