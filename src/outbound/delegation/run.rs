//! One delegation's exchange with its registration: the send, the observation of the remote
//! task within the wait window, and what a repeat of the same taskId does.

use a2a::{SendMessageResponse, Task};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{settled, status_of, target_hash, Answer};
use crate::error::HttpError;
use crate::outbound::client::{OutboundError, Target};
use crate::outbound::credential::BearerCredential;
use crate::outbound::OutboundRoutes;
use crate::store::outbound::{
    Delegation, DelegationKey, DelegationUpdate, Outcome, PgOutboundStore, Reclaim, Registration,
};
use crate::upstream::Delivery;

/// `result` as stored: as is within `max_bytes` of JSON, otherwise only what identifies it (the
/// task's id, context and state, or the message's id and role) and a `truncated` marker with
/// the full size. A repeat answered from the record then shows the marker; the remote still
/// holds the full task.
pub(crate) fn bounded_result(result: &Value, max_bytes: usize) -> Value {
    let bytes = serde_json::to_vec(result).map_or(usize::MAX, |b| b.len());
    if bytes <= max_bytes {
        return result.clone();
    }
    let pick = |v: &Value, keys: &[&str]| -> Value {
        let mut out = serde_json::Map::new();
        for k in keys {
            if let Some(x) = v.get(*k) {
                out.insert((*k).to_string(), x.clone());
            }
        }
        Value::Object(out)
    };
    let mut stored = serde_json::Map::new();
    if let Some(task) = result.get("task") {
        let mut kept = pick(task, &["id", "contextId"]);
        if let Some(status) = task.get("status") {
            kept["status"] = pick(status, &["state", "timestamp"]);
        }
        stored.insert("task".into(), kept);
    } else if let Some(message) = result.get("message") {
        stored.insert(
            "message".into(),
            pick(message, &["messageId", "role", "contextId", "taskId"]),
        );
    }
    stored.insert(
        "truncated".into(),
        json!({"bytes": bytes, "limitBytes": max_bytes}),
    );
    Value::Object(stored)
}

/// One delegation request's work against one registration.
pub(super) struct Run<'a> {
    pub(super) state: &'a OutboundRoutes,
    pub(super) store: &'a PgOutboundStore,
    pub(super) registration: &'a Registration,
    pub(super) key: &'a DelegationKey,
}

impl Run<'_> {
    fn target_credential(&self) -> Result<Option<(BearerCredential, String)>, OutboundError> {
        self.state.open_credential(self.registration)
    }

    fn log_failure(&self, call: &'static str, e: &OutboundError) {
        tracing::warn!(
            reason = e.reason(),
            call,
            registration = %self.registration.id,
            task_id = %self.key.task_id,
            may_have_reached_remote = e.delivery() == Delivery::MaybeSent,
            error = %e,
            "outbound call failed"
        );
    }

    /// Stores the update, with its result bounded; the caller's answer keeps all of it.
    async fn record(&self, update: DelegationUpdate) -> Result<Answer, HttpError> {
        let stored = DelegationUpdate {
            result: update
                .result
                .as_ref()
                .map(|r| bounded_result(r, self.state.settings.max_stored_result_bytes)),
            ..update.clone()
        };
        self.store.record_delegation(self.key, &stored).await?;
        Ok(Answer {
            status: update.status,
            remote_task_id: update.remote_task_id,
            result: update.result,
            error: update.error,
        })
    }

    /// The one send of this delegation's message (or a re-send of one certainly never
    /// delivered, or of one a deduplicating remote will recognise), then observation of the
    /// remote task within the wait window.
    pub(super) async fn send(&self, text: &str) -> Result<Answer, HttpError> {
        let deadline = Instant::now() + self.state.settings.delegation_wait;
        let sent = match self.target_credential() {
            Ok(credential) => {
                let target = Target {
                    endpoint: &self.registration.endpoint,
                    credential: credential.as_ref().map(|(c, o)| (c, o.as_str())),
                };
                self.state
                    .client
                    .send_message(&target, &self.key.task_id, text)
                    .await
            }
            Err(e) => Err(e),
        };
        match sent {
            Ok(SendMessageResponse::Message(message)) => {
                self.record(DelegationUpdate {
                    outcome: Outcome::Answered,
                    status: "completed".into(),
                    remote_task_id: None,
                    context_id: message.context_id.clone(),
                    result: Some(json!({ "message": message })),
                    error: None,
                })
                .await
            }
            Ok(SendMessageResponse::Task(task)) => {
                let remote_task_id = task.id.clone();
                let context_id = task.context_id.clone();
                self.record_task(&task).await?;
                self.observe(task, &remote_task_id, &context_id, deadline)
                    .await
            }
            Err(e) => {
                self.log_failure("SendMessage", &e);
                let update = match (&e, e.delivery()) {
                    (_, Delivery::NotSent) => DelegationUpdate {
                        outcome: Outcome::NotSent,
                        status: "failed".into(),
                        remote_task_id: None,
                        context_id: None,
                        result: None,
                        error: Some(e.to_json()),
                    },
                    (OutboundError::Refused { .. }, _) => DelegationUpdate {
                        outcome: Outcome::Refused,
                        status: "rejected".into(),
                        remote_task_id: None,
                        context_id: None,
                        result: None,
                        error: Some(e.to_json()),
                    },
                    _ => DelegationUpdate {
                        outcome: Outcome::Unknown,
                        status: "unknown".into(),
                        remote_task_id: None,
                        context_id: None,
                        result: None,
                        error: Some(e.to_json()),
                    },
                };
                self.record(update).await
            }
        }
    }

    async fn record_task(&self, task: &Task) -> Result<Answer, HttpError> {
        self.record(DelegationUpdate {
            outcome: Outcome::Answered,
            status: status_of(&task.status.state).into(),
            remote_task_id: Some(task.id.clone()),
            context_id: Some(task.context_id.clone()),
            result: Some(json!({ "task": task })),
            error: None,
        })
        .await
    }

    /// Reads the remote task (GetTask, a safe read) until it settles or the window ends.
    async fn observe(
        &self,
        mut task: Task,
        remote_task_id: &str,
        context_id: &str,
        deadline: Instant,
    ) -> Result<Answer, HttpError> {
        let interval = self.state.settings.poll_interval;
        let mut answer = self.answer_for(&task);
        while !settled(status_of(&task.status.state)) && Instant::now() + interval < deadline {
            tokio::time::sleep(interval).await;
            match self.read_remote(remote_task_id, Some(context_id)).await {
                // Most reads of a working task return it unchanged: rewriting up to a result's
                // worth of bytes on every poll would only churn the table.
                Ok(fresh) if fresh == task => {}
                Ok(fresh) => {
                    answer = self.record_task(&fresh).await?;
                    task = fresh;
                }
                Err(e) => return self.lost_track(remote_task_id, &e).await,
            }
        }
        Ok(answer)
    }

    fn answer_for(&self, task: &Task) -> Answer {
        Answer {
            status: status_of(&task.status.state).into(),
            remote_task_id: Some(task.id.clone()),
            result: Some(json!({ "task": task })),
            error: None,
        }
    }

    async fn read_remote(
        &self,
        remote_task_id: &str,
        context_id: Option<&str>,
    ) -> Result<Task, OutboundError> {
        let credential = self.target_credential()?;
        let target = Target {
            endpoint: &self.registration.endpoint,
            credential: credential.as_ref().map(|(c, o)| (c, o.as_str())),
        };
        self.state
            .client
            .get_task(&target, remote_task_id, context_id)
            .await
    }

    /// A read of a task we know failed: the outcome is unknown until a repeat reads it.
    async fn lost_track(
        &self,
        remote_task_id: &str,
        e: &OutboundError,
    ) -> Result<Answer, HttpError> {
        self.log_failure("GetTask", e);
        self.record(DelegationUpdate {
            outcome: Outcome::Unknown,
            status: "unknown".into(),
            remote_task_id: Some(remote_task_id.to_string()),
            context_id: None,
            result: None,
            error: Some(e.to_json()),
        })
        .await
    }

    /// Whether sending this delegation's messageId again cannot act twice: the registration
    /// declares a deduplicating remote, and endpoint and credential are those of the send
    /// whose outcome is unknown (rows from before the fingerprint have none: never).
    fn may_resend(&self, d: &Delegation) -> bool {
        self.registration.deduplicates_message_ids
            && d.target_sha256.as_deref() == Some(target_hash(self.registration).as_str())
    }

    /// Sends the delegation again once it is taken back from `from`; if another request got
    /// there first, that one is sending it.
    async fn resend(&self, from: Reclaim, text: &str) -> Result<Answer, HttpError> {
        let target = target_hash(self.registration);
        if self.store.reclaim(self.key, from, &target).await? {
            self.send(text).await
        } else {
            Ok(Answer::unknown(
                None,
                json!({"reason": "in_progress", "message": "another request is sending this taskId"}),
            ))
        }
    }

    /// A repeat of the same taskId and content.
    pub(super) async fn repeat(&self, d: &Delegation, text: &str) -> Result<Answer, HttpError> {
        match (d.outcome, &d.remote_task_id) {
            (Outcome::NotSent, _) => self.resend(Reclaim::NotSent, text).await,
            (Outcome::Refused, _) => Ok(Answer::from_row(d)),
            (Outcome::Answered, _) if settled(&d.status) => Ok(Answer::from_row(d)),
            (Outcome::Answered | Outcome::Unknown, Some(remote_task_id)) => {
                let deadline = Instant::now() + self.state.settings.delegation_wait;
                match self
                    .read_remote(remote_task_id, d.context_id.as_deref())
                    .await
                {
                    Ok(task) => {
                        let context_id = task.context_id.clone();
                        self.record_task(&task).await?;
                        self.observe(task, remote_task_id, &context_id, deadline)
                            .await
                    }
                    Err(e) => self.lost_track(remote_task_id, &e).await,
                }
            }
            (Outcome::Answered, None) => Ok(Answer::from_row(d)),
            // The operator declared that the remote deduplicates messageIds, and the caller
            // repeats: the same messageId to the same endpoint and credential finds the task
            // the first send may have made, without a second side effect.
            (Outcome::Unknown, None) if self.may_resend(d) => {
                self.resend(Reclaim::Unknown, text).await
            }
            // No remote task id was ever received: the only way to learn more would be to
            // send again, which could repeat the remote side effect. Never done automatically.
            (Outcome::Unknown, None) => Ok(Answer::unknown(
                None,
                d.error
                    .clone()
                    .unwrap_or_else(|| json!({"reason": "unknown"})),
            )),
            (Outcome::Sending, remote) => Ok(Answer::unknown(
                remote.clone(),
                json!({"reason": "in_progress",
                       "message": "a send of this taskId is in flight or was interrupted; it is not repeated"}),
            )),
        }
    }
}
