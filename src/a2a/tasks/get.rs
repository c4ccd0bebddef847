//! GetTask: the task's committed state, optional history and its verified artifact.
//!
//! A terminal task is immutable: it is answered from the store alone (its artifact committed
//! once, its evidence grant from the access cache), without asking Q about the run, and once
//! read it is kept in process for the next reads ([`super::finished`]). Only a task whose run
//! may still change is read from Q.

use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::finished::{Content, Finished};
use super::snapshot::{to_result, Known, Observed};
use super::{params, Answer, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::task_view::{answer_allowance, json_len, render, Snapshot};
use crate::a2a::validate;
use crate::access::Purpose;
use crate::error::{result_too_large, serialization_failed, Fault, RpcError};
use crate::http::response_budget::AnswerSpace;
use crate::upstream::contract::WorkspaceAccess;

impl TaskService {
    pub async fn get_task(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
        space: &AnswerSpace,
    ) -> Result<Answer, Fault> {
        validate::refuse_tenant(params)?;
        let id = params::task_id(params)?;
        let history_length =
            validate::history_length(params.get("historyLength"), "historyLength")?;
        if caller.workspace == WorkspaceAccess::Granted {
            if let Ok(task_id) = Uuid::parse_str(id) {
                match self.finished.get(caller, task_id) {
                    Ok(Some(finished)) => {
                        return self
                            .finished_task(caller, &finished, history_length, space)
                            .await
                    }
                    Ok(None) => {}
                    Err(()) => return Err(RpcError::task_not_found().into()),
                }
            }
        }
        let (row, committed) = self.readable_with_artifact(caller, id).await?;
        let kept = self.finished.keep(&row, committed.as_ref());
        self.finished.count_read(kept.is_some());
        if let Some(finished) = kept {
            return self
                .finished_task(caller, &finished, history_length, space)
                .await;
        }
        // Its bytes are reserved before the answer is built: the row's allowance and the
        // committed artifact's stored byte count (an output still read from Q is bounded by
        // the result bound, and counted when the answer is handed over).
        let artifact = committed.as_ref().map_or(0, |a| a.byte_count() as usize);
        let want = answer_allowance(&row) + artifact;
        space.reserve(want, want)?;
        let observed = match &row.run_id {
            Some(run_id) if !row.state.is_terminal() => {
                Some(Observed::from(&self.upstream.get_run(run_id).await?))
            }
            _ => None,
        };
        let task = self
            .snapshot(
                caller,
                &row,
                Known {
                    observed,
                    committed,
                },
                history_length,
                Purpose::Read,
            )
            .await?;
        to_result(&task).map(Answer::Value)
    }

    /// A finished task as [`TaskService::snapshot`] answers one from the store: its content
    /// only with a clearance taken now. The answer with content and no `historyLength`, and
    /// the receipt, are serialised once per kept task.
    async fn finished_task(
        &self,
        caller: &Caller,
        finished: &Finished,
        history_length: Option<usize>,
        space: &AnswerSpace,
    ) -> Result<Answer, Fault> {
        let row = &finished.row;
        let clearance = self
            .clearance(caller, row.run_id.as_deref(), Purpose::Read)
            .await?;
        let kept = match (&clearance, history_length) {
            (None, _) => Some(&finished.receipt),
            (Some(_), None) => Some(&finished.with_content),
            (Some(_), Some(_)) => None,
        };
        if let Some(answer) = kept.and_then(OnceLock::get) {
            return Ok(Answer::Serialized(answer.clone()));
        }
        let artifact = match (&clearance, &finished.content) {
            (Some(_), Content::Artifact(artifact)) => Some(artifact.clone()),
            (Some(_), Content::TooLarge) => {
                return Err(Fault::from(result_too_large(
                    self.settings.limits.max_result_bytes,
                )))
            }
            _ => None,
        };
        // Built now: its bytes are reserved first (an answer kept serialised above exists
        // already, and counts when it is handed over).
        let want = answer_allowance(row) + artifact.as_ref().map_or(0, json_len);
        space.reserve(want, want)?;
        let task = render(
            row,
            Snapshot::stored(row, artifact, clearance),
            history_length,
        );
        // The same bytes the RPC route would write for the value.
        let answer =
            Bytes::from(serde_json::to_vec(&to_result(&task)?).map_err(serialization_failed)?);
        if let Some(cell) = kept {
            let _ = cell.set(answer.clone());
        }
        Ok(Answer::Serialized(answer))
    }
}
