//! Dispatch of a committed task to Q's run API under its saved workflow identity.
//!
//! The task row is committed before anything here runs. Outcomes:
//! - clear success: the run id and state are recorded;
//! - clear refusal (one of the contract's error codes for a create: `workspace_access_denied`,
//!   `agent_not_found`, `invalid`): the task is REJECTED with Q's reason;
//! - never delivered (connection refused): the row stays `pending`;
//! - maybe delivered (timeout, reset, 5xx, unreadable answer) or no definite answer (401/403 of
//!   the service credential, 408, 429, a proxy's 404, an unknown code): the row is marked
//!   `unknown`. Neither is final: the task stays pending.
//!
//! A later attempt first asks Q by workflow identity; only when Q has no run under it is the
//! create repeated, with the *same* identity, which Q deduplicates. No path creates a run under
//! a new identity, so a lost response or a repeated message cannot make a second run.
//!
//! **One create in flight per identity**, by the gateway itself rather than by Q's
//! deduplication alone: sending a create needs the task's dispatch claim
//! (`dispatch_claimed_until`). The admission insert takes it for the request that created the
//! task; recording Q's answer (a run, a refusal, a 5xx or any other answer), or a create that
//! never left, gives it back; a create that got no answer at all (a timeout, a reset) keeps it
//! until it expires, so Q has the rest of the claim to commit a late create before anyone
//! looks it up. Whoever else would resolve the
//! dispatch (a repeat of the messageId, the reconciler leader) must take the claim first, and
//! does nothing while another holds it: a repeat answers the task as it stands (a blocking
//! send waits for the run to be recorded), and the reconciler tries again on a later pass. A
//! replica that died mid-create is taken over once its claim expires: the claim lasts twice
//! the upstream request timeout plus [`CLAIM_MARGIN`].

use std::time::Duration;

use a2a::TaskState;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::store::{task_state, Dispatch, PgTaskStore, StoreError, TaskRow};
use crate::upstream::contract::{CreateRunRequest, ErrorCode, Run, RunInput};
use crate::upstream::{Cause, Delivery, UpstreamError, UpstreamRunApi};

/// What a dispatch claim lasts beyond twice the upstream request timeout.
pub const CLAIM_MARGIN: Duration = Duration::from_secs(5);

/// Creates runs for committed tasks and records what Q answered.
#[derive(Clone)]
pub struct Dispatcher {
    store: PgTaskStore,
    upstream: UpstreamRunApi,
    /// Every task's execution deadline, counted from its admission; its run is created with
    /// what is left of it (Q enforces it).
    execution_timeout_seconds: u64,
    /// How long a dispatch claim lasts.
    claim: Duration,
}

impl Dispatcher {
    /// `request_timeout` is the upstream request timeout: the longest a create can take.
    pub fn new(
        store: PgTaskStore,
        upstream: UpstreamRunApi,
        execution_timeout_seconds: u64,
        request_timeout: Duration,
    ) -> Self {
        Dispatcher {
            store,
            upstream,
            execution_timeout_seconds,
            claim: request_timeout * 2 + CLAIM_MARGIN,
        }
    }

    /// How long the request that admits a task holds its dispatch claim.
    pub fn claim(&self) -> Duration {
        self.claim
    }

    /// Every task's execution deadline, counted from its admission.
    pub fn execution_timeout(&self) -> Duration {
        Duration::from_secs(self.execution_timeout_seconds)
    }

    /// What is left of the task's execution deadline at `now`, in whole seconds rounded up;
    /// `None` once it has passed. The deadline is fixed when the task is admitted: a run created
    /// late (its first create lost, sent again after the claim expired or Q came back) runs
    /// only for the rest of it.
    fn remaining_seconds(&self, row: &TaskRow, now: DateTime<Utc>) -> Option<u64> {
        let timeout = chrono::Duration::seconds(self.execution_timeout_seconds as i64);
        let left_ms = (row.execution_deadline(timeout) - now).num_milliseconds();
        (left_ms > 0).then(|| (left_ms as u64).div_ceil(1000))
    }

    /// Creates the task's run (idempotent on its workflow identity) and records the outcome;
    /// the caller holds the task's dispatch claim. When Q answered with the run, returns it
    /// with the task as stored after recording it; after any other outcome the caller reads
    /// the task again if it needs it.
    pub async fn create_run(
        &self,
        row: &TaskRow,
        texts: Vec<String>,
    ) -> Result<Option<(TaskRow, Run)>, StoreError> {
        let state = self;
        let Some(execution_timeout_seconds) = self.remaining_seconds(row, Utc::now()) else {
            // Nothing left to run in: the reconciler fails the task (never confirmed in time).
            tracing::info!(task_id = %row.task_id, "execution deadline passed before Q confirmed a run; not creating one");
            state.store.release_dispatch(row.task_id).await?;
            return Ok(None);
        };
        let request = CreateRunRequest {
            workflow_id: row.workflow_id.clone(),
            tenant_id: row.owner.tenant_id.clone(),
            principal_id: row.owner.principal_id.clone(),
            agent_id: row.owner.agent_id.clone(),
            input: RunInput { parts: texts },
            execution_timeout_seconds,
        };
        match state.upstream.create_run(&request).await {
            Ok(created) => {
                tracing::info!(task_id = %row.task_id, run_id = %created.run.id, new_run = created.new, "dispatched");
                let stored = self.record_run(row.task_id, &created.run).await?;
                Ok(stored.map(|stored| (stored, created.run)))
            }
            Err(UpstreamError::Refused {
                code: ErrorCode::WorkflowIdConflict,
                ..
            }) => {
                // The identity exists in Q with other input: never expected, since the identity is
                // derived from a fresh task id. Leave it for an operator rather than guess.
                tracing::error!(task_id = %row.task_id, workflow_id = %row.workflow_id, "workflow identity conflict in Q");
                state
                    .store
                    .record_dispatch_unknown(row.task_id, "workflow identity conflict in Q")
                    .await?;
                Ok(None)
            }
            Err(UpstreamError::Refused {
                status,
                code,
                message,
                ..
            }) => {
                let code = code.as_str();
                tracing::info!(task_id = %row.task_id, status, code, "Q refused the run");
                let reason = message.unwrap_or_else(|| format!("Q refused the run: {code}"));
                state.store.record_refused(row.task_id, &reason).await?;
                Ok(None)
            }
            Err(UpstreamError::Failed {
                delivery: Delivery::NotSent,
                reason,
                ..
            }) => {
                tracing::warn!(task_id = %row.task_id, %reason, "run create not delivered; task stays pending");
                state.store.release_dispatch(row.task_id).await?;
                Ok(None)
            }
            Err(UpstreamError::Failed {
                delivery: Delivery::MaybeSent,
                cause,
                reason,
                ..
            }) => {
                tracing::warn!(task_id = %row.task_id, %reason, "run create outcome unknown; left for reconciliation");
                state
                    .store
                    .record_dispatch_unknown(row.task_id, &reason)
                    .await?;
                // Q answered (a 5xx, a 429, an answer off the contract): it is done with this
                // create, whatever it did. Without an answer it may still be committing it:
                // the claim stays until it expires.
                if cause != Cause::Transport {
                    state.store.release_dispatch(row.task_id).await?;
                }
                Ok(None)
            }
        }
    }

    /// Records Q's run as the task's run, with its state and execution deadline. Returns the
    /// task as stored after it.
    pub async fn record_run(
        &self,
        task_id: Uuid,
        run: &Run,
    ) -> Result<Option<TaskRow>, StoreError> {
        self.store
            .record_dispatched(
                task_id,
                &run.id,
                task_state(run.status).as_ref(),
                run.status_message.as_deref(),
                run.deadline_at,
            )
            .await
    }

    /// Projects a run Q reported into the task's stored state (a terminal task keeps its state;
    /// the database stamps the status timestamp). Returns the stored state and timestamp.
    pub async fn project_run(
        &self,
        task_id: Uuid,
        run: &Run,
    ) -> Result<(TaskState, DateTime<Utc>), StoreError> {
        self.store
            .record_state(
                task_id,
                task_state(run.status).as_ref(),
                run.status_message.as_deref(),
            )
            .await
    }

    /// Resolves a task whose dispatch is pending or unknown: looks the run up by workflow identity
    /// and records it, or, when Q has none, submits again under the same identity. A cancelled
    /// task is never submitted: without a run in Q it ends CANCELED.
    ///
    /// Submitting needs the task's dispatch claim: while another request or replica holds it
    /// (a create in flight), a lookup that finds no run does nothing more, and the task stays
    /// as it stands.
    pub async fn resolve(&self, row: &TaskRow) -> Result<(), StoreError> {
        let state = self;
        if Self::settled(row) {
            return Ok(());
        }
        match state.upstream.run_by_workflow(&row.workflow_id).await {
            Ok(Some(run)) => {
                tracing::info!(task_id = %row.task_id, run_id = %run.id, "recovered run by workflow identity");
                self.record_run(row.task_id, &run).await.map(drop)
            }
            Ok(None) if row.cancel_requested => {
                state
                    .store
                    .finish_unresolved(
                        row.task_id,
                        &a2a::TaskState::Canceled,
                        "canceled before Q started a run",
                    )
                    .await
            }
            Ok(None) => self.submit_if_unclaimed(row).await,
            Err(e) => {
                tracing::warn!(task_id = %row.task_id, error = %e, "lookup by workflow identity failed; still unresolved");
                Ok(())
            }
        }
    }

    /// Whether the task's dispatch needs nothing more: Q's run is recorded (or its create
    /// failed for good), or the task ended. [`Dispatcher::resolve`] does nothing to such a row,
    /// so the row stays as read.
    pub fn settled(row: &TaskRow) -> bool {
        !matches!(row.dispatch, Dispatch::Pending | Dispatch::Unknown) || row.state.is_terminal()
    }

    /// [`Dispatcher::resolve`], but only once no create is in flight for the task (its claim
    /// came back or expired): for a wait that looks again often, and asks Q nothing meanwhile.
    pub async fn resolve_if_unclaimed(&self, row: &TaskRow) -> Result<(), StoreError> {
        if Self::settled(row) {
            return Ok(());
        }
        let Some(claimed) = self.store.claim_dispatch(row.task_id, self.claim).await? else {
            return Ok(());
        };
        self.lookup_or_submit(&claimed).await
    }

    /// Q had no run under the task's identity: submits it again if this caller can take the
    /// claim (a lookup made without it may be stale by now, so it is made again with it).
    async fn submit_if_unclaimed(&self, row: &TaskRow) -> Result<(), StoreError> {
        let Some(claimed) = self.store.claim_dispatch(row.task_id, self.claim).await? else {
            tracing::debug!(task_id = %row.task_id, "a create for this task is in flight elsewhere; not sending another");
            return Ok(());
        };
        self.lookup_or_submit(&claimed).await
    }

    /// With the claim held: the run Q has under the identity, else a create (or, for a
    /// cancelled task, its end).
    async fn lookup_or_submit(&self, row: &TaskRow) -> Result<(), StoreError> {
        match self.upstream.run_by_workflow(&row.workflow_id).await {
            Ok(Some(run)) => {
                tracing::info!(task_id = %row.task_id, run_id = %run.id, "recovered run by workflow identity");
                self.record_run(row.task_id, &run).await.map(drop)
            }
            Ok(None) if row.cancel_requested => {
                self.store
                    .finish_unresolved(
                        row.task_id,
                        &a2a::TaskState::Canceled,
                        "canceled before Q started a run",
                    )
                    .await
            }
            Ok(None) => self.create_run(row, row.texts()).await.map(drop),
            Err(e) => {
                tracing::warn!(task_id = %row.task_id, error = %e, "lookup by workflow identity failed; still unresolved");
                self.store.release_dispatch(row.task_id).await
            }
        }
    }
}
