//! Parameters of the task methods beyond the message itself (`crate::a2a::validate`): the task
//! id, and ListTasks' filters, page size and flags. Each refusal is a -32602 naming its field.

use a2a::TaskState;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::a2a::validate;
use crate::error::{Fault, RpcError};
use crate::store::ListFilter;

/// ListTasks page size when the request names none, and the largest allowed.
pub const DEFAULT_PAGE_SIZE: i64 = 50;
pub const MAX_PAGE_SIZE: i64 = 100;

/// The required `id` parameter of GetTask, CancelTask and SubscribeToTask.
pub fn task_id(params: &Map<String, Value>) -> Result<&str, Fault> {
    match params.get("id") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            Err(RpcError::invalid_field("id", "Field is required.").into())
        }
        Some(_) => Err(RpcError::invalid_field("id", "must be a string").into()),
    }
}

/// ListTasks' parameters, validated.
#[derive(Debug)]
pub struct ListParams<'a> {
    pub filter: ListFilter,
    /// A filter no task can match (a context id that is not a server-assigned UUID).
    pub impossible: bool,
    pub page_size: i64,
    pub history_length: Option<usize>,
    pub include_artifacts: bool,
    /// The page token as sent; decoded against the caller and filter by the caller.
    pub page_token: Option<&'a str>,
}

/// Reads ListTasks' parameters in the order the refusals are reported.
pub fn list(params: &Map<String, Value>) -> Result<ListParams<'_>, Fault> {
    validate::refuse_tenant(params)?;
    let mut filter = ListFilter::default();
    let mut impossible = false;
    match params.get("contextId") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => match Uuid::parse_str(s) {
            Ok(id) => filter.context_id = Some(id),
            // Context ids are server-assigned UUIDs: anything else matches no task.
            Err(_) => impossible = true,
        },
        Some(_) => return Err(RpcError::invalid_field("contextId", "must be a string").into()),
    }
    match params.get("status") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() || s == "TASK_STATE_UNSPECIFIED" => {}
        Some(v) => {
            let state: TaskState = serde_json::from_value(v.clone()).map_err(|_| {
                RpcError::invalid_field(
                    "status",
                    "must be a TaskState name such as TASK_STATE_COMPLETED",
                )
            })?;
            filter.state = Some(state);
        }
    }
    let page_size = match params.get("pageSize") {
        None | Some(Value::Null) => DEFAULT_PAGE_SIZE,
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) if n < 1 => {
                return Err(RpcError::invalid_field("pageSize", "minimum page size is 1").into())
            }
            Some(n) if n > MAX_PAGE_SIZE => {
                return Err(RpcError::invalid_field("pageSize", "maximum page size is 100").into())
            }
            Some(n) => n,
            None => return Err(RpcError::invalid_field("pageSize", "must be an integer").into()),
        },
        Some(_) => return Err(RpcError::invalid_field("pageSize", "must be an integer").into()),
    };
    let history_length = validate::history_length(params.get("historyLength"), "historyLength")?;
    match params.get("statusTimestampAfter") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            let ts = DateTime::parse_from_rfc3339(s).map_err(|_| {
                RpcError::invalid_field("statusTimestampAfter", "must be an RFC 3339 timestamp")
            })?;
            filter.status_timestamp_after = Some(ts.with_timezone(&Utc));
        }
        Some(_) => {
            return Err(RpcError::invalid_field(
                "statusTimestampAfter",
                "must be an RFC 3339 timestamp",
            )
            .into())
        }
    }
    let include_artifacts = match params.get("includeArtifacts") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(RpcError::invalid_field("includeArtifacts", "must be a boolean").into())
        }
    };
    let page_token = match params.get("pageToken") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(token)) => Some(token.as_str()),
        Some(_) => return Err(RpcError::invalid_field("pageToken", "must be a string").into()),
    };
    Ok(ListParams {
        filter,
        impossible,
        page_size,
        history_length,
        include_artifacts,
        page_token,
    })
}
