//! The task as a read returns it: the observed state projected into the store (the database
//! stamps the status timestamp), the caller's evidence grant (through the access cache), and
//! for a completed task its verified artifact, committed to the store the first time it is
//! read from Q and answered from there ever after.

use a2a::{Artifact, Task, TaskState};
use uuid::Uuid;

use super::TaskService;
use crate::a2a::caller::Caller;
use crate::a2a::task_view::{render, verified_artifact, Snapshot};
use crate::access::{Clearance, Purpose};
use crate::error::{result_too_large, Fault};
use crate::store::{task_state, StoredArtifact, TaskRow};
use crate::upstream::contract::{Run, RunStatus};

/// A run's state as last observed (read from Q, or reported by the run feed).
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub run_id: String,
    pub status: RunStatus,
    pub status_message: Option<String>,
}

impl From<&Run> for Observed {
    fn from(run: &Run) -> Self {
        Observed {
            run_id: run.id.clone(),
            status: run.status,
            status_message: run.status_message.clone(),
        }
    }
}

/// What the caller of [`TaskService::snapshot`] already knows about the task, so it is not
/// read again.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// The run's state as last observed; `None` answers from the row.
    pub observed: Option<Observed>,
    /// The task's committed artifact, read with the task.
    pub committed: Option<StoredArtifact>,
}

impl From<Option<Observed>> for Known {
    fn from(observed: Option<Observed>) -> Self {
        Known {
            observed,
            ..Known::default()
        }
    }
}

impl TaskService {
    /// Projects the observed run into the store and renders the task. Its content (history,
    /// Q's text, the artifact) goes in only with a [`Clearance`] taken now under the
    /// freshness rule; without one the task is a control receipt: the caller's own task stays
    /// visible, its content does not.
    pub(crate) async fn snapshot(
        &self,
        caller: &Caller,
        row: &TaskRow,
        known: Known,
        history_length: Option<usize>,
        purpose: Purpose,
    ) -> Result<Task, Fault> {
        let Known {
            observed,
            committed,
        } = known;
        let (mut state, mut status_message) = match &observed {
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

        let run_id = row
            .run_id
            .clone()
            .or_else(|| observed.map(|run| run.run_id));
        let clearance = self.clearance(caller, run_id.as_deref(), purpose).await?;
        let artifact = match (&clearance, &run_id) {
            (Some(_), Some(run_id)) if state == TaskState::Completed => {
                Some(self.artifact(row.task_id, run_id, committed).await?)
            }
            _ => None,
        };
        Ok(render(
            row,
            Snapshot {
                state,
                status_message,
                status_timestamp,
                artifact,
                clearance,
            },
            history_length,
        ))
    }

    /// The freshness rule for this caller and task (`crate::access`): the only way to
    /// content.
    pub(crate) async fn clearance(
        &self,
        caller: &Caller,
        run_id: Option<&str>,
        purpose: Purpose,
    ) -> Result<Option<Clearance>, Fault> {
        Ok(self
            .access()
            .clearance(caller.who(), run_id, purpose)
            .await?)
    }

    /// A completed task's verified artifact: from the store when committed, otherwise read from
    /// Q once, verified and committed. What the store holds is verified again on every read;
    /// an output over the result bound is refused (-32006) either way.
    /// `committed` is the task's artifact when the caller already read it with the task.
    pub(crate) async fn artifact(
        &self,
        task_id: Uuid,
        run_id: &str,
        committed: Option<StoredArtifact>,
    ) -> Result<Artifact, Fault> {
        let max = self.settings.limits.max_result_bytes;
        let committed = match committed {
            Some(artifact) => Some(artifact),
            None => self.store.artifact(task_id).await?,
        };
        match committed {
            Some(StoredArtifact::Output(output)) => Ok(verified_artifact(&output)?),
            Some(StoredArtifact::TooLarge { .. }) => Err(result_too_large(max).into()),
            None => {
                let output = self.upstream.run_output(run_id).await?;
                let artifact = verified_artifact(&output)?;
                self.store.commit_artifact(task_id, &output, max).await?;
                Ok(artifact)
            }
        }
    }
}

/// A task as a JSON-RPC result. The 1 MiB result bound is enforced on the serialised answer by
/// the RPC route, in the same pass that writes it.
pub(crate) fn to_result<T: serde::Serialize>(value: &T) -> super::MethodResult {
    serde_json::to_value(value).map_err(|e| Fault::Rpc(crate::error::serialization_failed(e)))
}
