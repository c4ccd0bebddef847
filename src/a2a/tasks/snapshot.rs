//! The task as a read returns it: the observed run projected into the store (the database
//! stamps the status timestamp), the caller's evidence grant, and for a completed run the
//! verified artifact.

use a2a::{Task, TaskState};

use super::TaskService;
use crate::a2a::caller::Caller;
use crate::a2a::task_view::{render, verified_artifact, Snapshot};
use crate::error::Fault;
use crate::store::{task_state, TaskRow};
use crate::upstream::contract::{EvidenceGrant, Run, WorkspaceAccess};

impl TaskService {
    /// Projects the observed run into the store and renders the task. `grant` is the caller's
    /// evidence grant on the run when the caller already read it (Q is asked otherwise).
    /// Without the grant the task is a control receipt: the caller's own task stays visible,
    /// its content does not.
    pub(crate) async fn snapshot(
        &self,
        caller: &Caller,
        row: &TaskRow,
        run: Option<Run>,
        grant: Option<bool>,
        history_length: Option<usize>,
    ) -> Result<Task, Fault> {
        let (mut state, mut status_message) = match &run {
            // A status Q's contract does not define leaves the stored state as it is.
            Some(run) => match task_state(run.status) {
                Some(state) => (state, run.status_message.clone()),
                None => (row.state.clone(), row.status_message.clone()),
            },
            None => (row.state.clone(), row.status_message.clone()),
        };
        let status_timestamp = if state != row.state || status_message != row.status_message {
            let (stored, timestamp) = self
                .store
                .record_state(row.task_id, Some(&state), status_message.as_deref())
                .await?;
            if stored != state {
                // The task was already terminal (e.g. canceled before Q's run reported it).
                state = stored;
                status_message = row.status_message.clone();
            }
            timestamp
        } else {
            row.status_timestamp
        };

        // The evidence grant and, for a completed run, its output are independent reads: ask Q
        // for both at once. The output is used only if the grant allows it.
        let mut content_visible = caller.workspace == WorkspaceAccess::Granted;
        let mut artifact = None;
        if let Some(run) = &run {
            let wants_output = content_visible && state == TaskState::Completed;
            let (granted, output) = tokio::join!(
                async {
                    match grant {
                        Some(granted) => Ok(granted),
                        None => self
                            .upstream
                            .run_grant(&run.id, &caller.principal.principal_id)
                            .await
                            .map(|g| g.evidence == EvidenceGrant::Granted),
                    }
                },
                async {
                    if wants_output {
                        Some(self.upstream.run_output(&run.id).await)
                    } else {
                        None
                    }
                }
            );
            content_visible &= granted?;
            if content_visible {
                if let Some(output) = output {
                    artifact = Some(verified_artifact(&output?)?);
                }
            }
        }
        Ok(render(
            row,
            Snapshot {
                state,
                status_message,
                status_timestamp,
                artifact,
                content_visible,
            },
            history_length,
        ))
    }
}

/// A task as a JSON-RPC result. The 1 MiB result bound is enforced on the serialised answer by
/// the RPC route, in the same pass that writes it.
pub(crate) fn to_result<T: serde::Serialize>(value: &T) -> super::MethodResult {
    serde_json::to_value(value).map_err(|e| Fault::Rpc(crate::error::serialization_failed(e)))
}
