//! Whether an answer belongs to the request that caused it: a remote must answer our message
//! (the JSON-RPC id is checked where the answer is read), and a task must stay consistent.

use a2a::{Role, SendMessageResponse, Task};

use super::OutboundError;

pub(super) fn uncorrelated(detail: &'static str) -> OutboundError {
    OutboundError::ambiguous("uncorrelated", detail)
}

/// A SendMessage answer (whose JSON-RPC id already matched) belongs to our message:
///
/// - a task is consistent (see [`check_task`]) and, when its history shows user messages,
///   one of them is ours: a task built only from other messages is another exchange;
/// - a message is the agent's, and is not our own message handed back. A2A gives a reply
///   message no field that names the message it answers, so this is as far as it can be
///   checked.
pub(super) fn correlate_send(
    answer: &SendMessageResponse,
    message_id: &str,
) -> Result<(), OutboundError> {
    match answer {
        SendMessageResponse::Task(task) => {
            check_task(task)?;
            let mut users = task
                .history
                .iter()
                .flatten()
                .filter(|m| m.role == Role::User)
                .peekable();
            if users.peek().is_some() && !users.any(|m| m.message_id == message_id) {
                return Err(uncorrelated(
                    "the answer's task was made from other messages than ours",
                ));
            }
            Ok(())
        }
        SendMessageResponse::Message(message) => {
            if message.role != Role::Agent {
                return Err(uncorrelated("the answer's message is not the agent's"));
            }
            if message.message_id == message_id {
                return Err(uncorrelated("the answer is our own message"));
            }
            Ok(())
        }
    }
}

/// A GetTask answer is the task we asked for, consistent, and in the context the remote put
/// it in when we first saw it.
pub(super) fn correlate_read(
    task: &Task,
    task_id: &str,
    context_id: Option<&str>,
) -> Result<(), OutboundError> {
    if task.id != task_id {
        return Err(uncorrelated("GetTask answered with another task"));
    }
    if context_id.is_some_and(|c| c != task.context_id) {
        return Err(uncorrelated("the answer's task moved to another context"));
    }
    check_task(task)
}

/// Every message a task carries (history and status) names this task and the task's context
/// when it names any.
pub(super) fn check_task(task: &Task) -> Result<(), OutboundError> {
    let messages = task
        .history
        .iter()
        .flatten()
        .chain(task.status.message.iter());
    for m in messages {
        if m.context_id
            .as_deref()
            .is_some_and(|c| c != task.context_id)
            || m.task_id.as_deref().is_some_and(|t| t != task.id)
        {
            return Err(uncorrelated(
                "the answer's task carries a message of another task or context",
            ));
        }
    }
    Ok(())
}
