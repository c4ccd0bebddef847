//! GetTask: the task's committed state, optional history and its verified artifact.
//!
//! A terminal task is immutable: it is answered from the store alone (its artifact committed
//! once, its evidence grant from the access cache), without asking Q about the run. Only a
//! task whose run may still change is read from Q.

use serde_json::{Map, Value};

use super::snapshot::{to_result, Known, Observed};
use super::{params, MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::validate;
use crate::access::Purpose;

impl TaskService {
    pub async fn get_task(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        validate::refuse_tenant(params)?;
        let id = params::task_id(params)?;
        let history_length =
            validate::history_length(params.get("historyLength"), "historyLength")?;
        let (row, committed) = self.readable_with_artifact(caller, id).await?;
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
        to_result(&task)
    }
}
