//! GetTask: the task's committed state, optional history and its verified artifact.

use serde_json::{Map, Value};

use super::snapshot::to_result;
use super::{params, MethodResult, TaskService};
use crate::a2a::caller::Caller;
use crate::a2a::validate;
use crate::error::RpcError;
use crate::upstream::contract::WorkspaceAccess;

impl TaskService {
    pub async fn get_task(&self, caller: &Caller, params: &Map<String, Value>) -> MethodResult {
        validate::refuse_tenant(params)?;
        let id = params::task_id(params)?;
        let history_length =
            validate::history_length(params.get("historyLength"), "historyLength")?;
        if caller.workspace != WorkspaceAccess::Granted {
            return Err(RpcError::task_not_found().into());
        }
        let mut row = self.owned(caller, id).await?;
        // Only a task whose run is not yet recorded can change here; a recorded run is what the
        // row just read says (re-reading it would cost a database round trip per GetTask).
        if row.run_id.is_none() {
            self.dispatcher.resolve(&row).await?;
            row = self.find(caller, row.task_id).await?;
        }
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
