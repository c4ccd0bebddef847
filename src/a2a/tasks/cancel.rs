//! CancelTask: the cancellation is persisted first (from then on no path creates the task's
//! run), then Q is told. A terminal task is -32002; a caller can always cancel its own task,
//! and without access to its content gets a control receipt.

use a2a::TaskState;
use serde_json::{Map, Value};

use super::snapshot::{to_result, Observed};
use super::{params, MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::validate;
use crate::access::Purpose;
use crate::error::{cancel_not_confirmed, Fault, RpcError};
use crate::store::TaskRow;
use crate::upstream::contract::{ErrorCode, Run, RunStatus};

impl TaskService {
    pub async fn cancel_task(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        validate::refuse_tenant(params)?;
        let id = params::task_id(params)?;
        let row = self.owned(caller, id).await?;
        if row.state.is_terminal() {
            return Err(not_cancelable(&row.state));
        }
        // Persisted before Q is told: from here on no path creates this task's run.
        self.store.request_cancel(row.task_id).await?;
        let row = self.find(caller, row.task_id).await?;

        let run_id = match &row.run_id {
            Some(run_id) => run_id.clone(),
            None => match self.upstream.run_by_workflow(&row.workflow_id).await {
                Ok(Some(run)) => {
                    self.dispatcher.record_run(row.task_id, &run).await?;
                    run.id
                }
                Ok(None) => {
                    self.store
                        .finish_unresolved(
                            row.task_id,
                            &TaskState::Canceled,
                            "canceled before Q started a run",
                        )
                        .await?;
                    let row = self.find(caller, row.task_id).await?;
                    return self.receipt(caller, &row, None).await;
                }
                Err(e) => return Err(cancel_not_confirmed(&e).into()),
            },
        };
        let run = match self
            .upstream
            .cancel_run(&run_id, &caller.principal.principal_id)
            .await
        {
            Ok(run) => run,
            Err(e) if e.is(ErrorCode::RunTerminal) => {
                let run = self.upstream.get_run(&run_id).await?;
                if run.status != RunStatus::Canceled {
                    let (stored, _) = self.dispatcher.project_run(row.task_id, &run).await?;
                    return Err(not_cancelable(&stored));
                }
                // Already canceled in Q for this persisted request (the reconciler may have
                // passed it on first): the cancellation took effect.
                run
            }
            Err(e) => return Err(cancel_not_confirmed(&e).into()),
        };
        let (stored, _) = self.dispatcher.project_run(row.task_id, &run).await?;
        if stored.is_terminal() && stored != TaskState::Canceled {
            // Q finished the run first: it is terminal in another state.
            return Err(not_cancelable(&stored));
        }
        // Otherwise CANCELED, or Q took the cancellation and stops the run on its own time
        // (its answer still shows it running): the receipt shows the task as it stands, the
        // cancellation stays persisted and the reconciler repeats it until the run is terminal.
        let row = self.find(caller, row.task_id).await?;
        self.receipt(caller, &row, Some(run)).await
    }

    /// The task as CancelTask returns it: complete for a caller who may see its content, a
    /// control receipt otherwise.
    async fn receipt(&self, caller: &Caller, row: &TaskRow, run: Option<Run>) -> MethodResult {
        let observed = run.as_ref().map(Observed::from);
        let task = self
            .snapshot(caller, row, observed.into(), None, Purpose::Current)
            .await?;
        to_result(&task)
    }
}

fn not_cancelable(state: &TaskState) -> Fault {
    RpcError::new(
        a2a::error_code::TASK_NOT_CANCELABLE,
        "Task cannot be canceled",
    )
    .with_meta("state", crate::store::state_name(state))
    .into()
}
