//! GetTask: the task's committed state, optional history and its verified artifact.

use serde_json::{Map, Value};

use super::snapshot::to_result;
use super::{params, MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::validate;

impl TaskService {
    pub async fn get_task(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        validate::refuse_tenant(params)?;
        let id = params::task_id(params)?;
        let history_length =
            validate::history_length(params.get("historyLength"), "historyLength")?;
        let row = self.readable(caller, id).await?;
        let run = match &row.run_id {
            Some(run_id) => Some(self.upstream.get_run(run_id).await?),
            None => None,
        };
        let task = self
            .snapshot(caller, &row, run, None, history_length)
            .await?;
        to_result(&task)
    }
}
