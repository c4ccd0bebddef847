//! Task states as stored: their names, the terminal ones, and Q's run status as a task state.

use a2a::TaskState;
use serde_json::Value;

use super::StoreError;
use crate::upstream::contract::RunStatus;

pub fn state_name(state: &TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "TASK_STATE_UNSPECIFIED".into())
}

pub(super) fn parse_state(name: &str) -> Result<TaskState, StoreError> {
    serde_json::from_value(Value::String(name.to_string()))
        .map_err(|_| StoreError::Corrupt(format!("state {name:?}")))
}

/// States a task never leaves, as SQL.
pub(super) const TERMINAL_SQL: &str = "('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', \
    'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')";

/// Q's run status as an A2A task state. Approvals and additional-input requests are
/// `TASK_STATE_INPUT_REQUIRED` (the profile's choice; the spec's §7.6 example uses
/// AUTH_REQUIRED); a run past its execution deadline has failed. A status this contract
/// revision does not define is `None`: the stored state stands until Q reports a known one.
pub fn task_state(status: RunStatus) -> Option<TaskState> {
    Some(match status {
        RunStatus::Queued => TaskState::Submitted,
        RunStatus::Running => TaskState::Working,
        RunStatus::AwaitingApproval | RunStatus::AwaitingInput => TaskState::InputRequired,
        RunStatus::Succeeded => TaskState::Completed,
        RunStatus::Failed | RunStatus::TimedOut => TaskState::Failed,
        RunStatus::Canceled => TaskState::Canceled,
        RunStatus::Unknown => return None,
    })
}
