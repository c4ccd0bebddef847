//! SendMessage: the message is committed under its durable identity (tenant, principal, agent,
//! messageId) before Q is called; a repeat recovers the same task, changed content under the
//! same id is refused and changes nothing. A blocking send then observes the run within the
//! window, holding an observer lease.
//!
//! A blocking send that cannot observe (no lease: a bound is reached or the lease store is
//! down; or no run is known yet because the dispatch is unresolved) answers at once with the
//! current task, and says so in the task's `metadata` when that task is not settled:
//! `"q.observation": "unavailable"` and `"q.observationReason"`, one of [`Unobserved`]'s names.
//! The client then knows to poll GetTask or subscribe rather than take the state as final.

use std::collections::HashMap;
use std::time::Duration;

use a2a::{SendMessageResponse, Task};
use serde_json::{Map, Value};

use super::snapshot::{to_result, Observed};
use super::{MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::task_view::is_settled;
use crate::a2a::validate::{validate_send, ValidatedSend};
use crate::access::Purpose;
use crate::error::{Fault, HttpError, RpcError};
use crate::lease::LeaseError;
use crate::store::{Admission, NewTask, TaskRow};
use crate::upstream::contract::{Run, WorkspaceAccess};

/// Task metadata key saying a blocking send could not observe its run.
pub const OBSERVATION_KEY: &str = "q.observation";
/// Its only value.
pub const OBSERVATION_UNAVAILABLE: &str = "unavailable";
/// Task metadata key naming why.
pub const OBSERVATION_REASON_KEY: &str = "q.observationReason";

/// Why a blocking SendMessage did not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unobserved {
    /// An observer bound (global, tenant or principal) is reached.
    ObserverLimit,
    /// The lease store (Redis) cannot be reached.
    LeaseStoreUnavailable,
    /// Q's answer to the run's creation is still unknown: there is no run to follow yet.
    DispatchUnresolved,
}

impl Unobserved {
    pub fn as_str(self) -> &'static str {
        match self {
            Unobserved::ObserverLimit => "observer_limit",
            Unobserved::LeaseStoreUnavailable => "lease_store_unavailable",
            Unobserved::DispatchUnresolved => "dispatch_unresolved",
        }
    }

    fn of(e: &LeaseError) -> Self {
        match e {
            LeaseError::AtBound(_) => Unobserved::ObserverLimit,
            LeaseError::Unavailable(_) => Unobserved::LeaseStoreUnavailable,
        }
    }

    /// Marks an unsettled task; a settled one is what a wait would have answered anyway.
    fn mark(self, task: &mut Task) {
        if is_settled(&task.status.state) {
            return;
        }
        let metadata = task.metadata.get_or_insert_with(HashMap::new);
        metadata.insert(OBSERVATION_KEY.into(), OBSERVATION_UNAVAILABLE.into());
        metadata.insert(OBSERVATION_REASON_KEY.into(), self.as_str().into());
    }
}

impl TaskService {
    pub async fn send_message(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        let send = validate_send(params, &self.settings.limits)?;
        if caller.workspace != WorkspaceAccess::Granted {
            return Err(HttpError::WorkspaceAccessDenied.into());
        }
        let (row, created) = self.admit_and_dispatch(caller, &send).await?;

        // The wait is an observation and holds a lease; without one (over a bound, or the lease
        // store down) the run still exists and the current task is returned at once, marked.
        let mut lease = None;
        let unobserved = if send.return_immediately {
            None
        } else if row.run_id.is_none() {
            tracing::info!(task_id = %row.task_id, "blocking send returns without waiting: dispatch unresolved");
            Some(Unobserved::DispatchUnresolved)
        } else {
            match self
                .leases
                .acquire(&caller.principal.tenant_id, &caller.principal.principal_id)
                .await
            {
                Ok(held) => {
                    lease = Some(held);
                    None
                }
                Err(e) => {
                    tracing::info!(task_id = %row.task_id, reason = %e, "blocking send returns without waiting");
                    Some(Unobserved::of(&e))
                }
            }
        };
        let window = if lease.is_some() {
            self.settings.observation_window
        } else {
            Duration::ZERO
        };
        // With no wait, the run Q just answered this request's create with is the current run:
        // reading it again would cost a call to Q and say the same.
        let observed = match created {
            Some(run) if window.is_zero() => Some(Observed::from(&run)),
            _ => self.follow_until_settled(&row, window).await,
        };
        if let Some(lease) = lease {
            lease.release().await;
        }
        // Access may have been revoked while the send waited: the answer reflects it now.
        let caller = if window.is_zero() {
            caller.clone()
        } else {
            self.recheck(caller).await?
        };
        let mut task = self
            .snapshot(
                &caller,
                &row,
                observed.into(),
                send.history_length,
                Purpose::Write,
            )
            .await?;
        if let Some(reason) = unobserved {
            reason.mark(&mut task);
        }
        to_result(&SendMessageResponse::Task(task))
    }

    /// Commits the message under its identity and dispatches it (or, for a repeat, recovers
    /// the existing task). Returns the task as stored after dispatch.
    pub(crate) async fn admit(
        &self,
        caller: &Caller,
        send: &ValidatedSend,
    ) -> Result<TaskRow, Fault> {
        Ok(self.admit_and_dispatch(caller, send).await?.0)
    }

    /// [`TaskService::admit`], with the run Q answered the create with when this request
    /// created the task and Q answered: then the row is the one the dispatch record returned,
    /// and no second read is made.
    async fn admit_and_dispatch(
        &self,
        caller: &Caller,
        send: &ValidatedSend,
    ) -> Result<(TaskRow, Option<Run>), Fault> {
        let new = NewTask {
            owner: caller.owner(),
            message_id: send.message_id.clone(),
            content_sha256: send.content_sha256(),
            message: send.stored_message(),
        };
        let row = match self.store.admit(&new).await? {
            Admission::Created(row) => {
                if let Some((stored, run)) = self.dispatcher.create_run(&row, send.texts()).await? {
                    return Ok((stored, Some(run)));
                }
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
        Ok((self.find(caller, row.task_id).await?, None))
    }
}
