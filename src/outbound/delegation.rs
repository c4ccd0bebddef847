//! `POST /v1/a2a/tasks`: the delegation wrapper. Sends a message to a registered remote agent
//! and answers with the remote's standard A2A task or message inside the existing result
//! wrapper:
//!
//! ```json
//! {"taskId": "...", "agentId": "reg-...", "status": "completed",
//!  "result": {"task": {...}} | {"message": {...}} | null, "remoteTaskId": "..." | null,
//!  "error": {...} | null}
//! ```
//!
//! The caller's `taskId` is the outbound `messageId`. The row keyed by (tenant, principal,
//! taskId) is committed before the send, so the repeat rule holds across replicas:
//!
//! - different content under the same `taskId` → 409, nothing is sent;
//! - a send that certainly never left (policy refusal, connection refused) → `failed`; a
//!   repeat may send it;
//! - a send that may have reached the remote (timeout, reset, 5xx, 3xx, oversized,
//!   unparseable or uncorrelated answer) → HTTP 200 with `status: "unknown"`. It is never sent
//!   again. A repeat reconciles through the remote's `GetTask` when a remote task id was
//!   received, and otherwise answers `unknown` again without contacting the remote;
//! - a remote task that is not finished is read again (GetTask) on a repeat;
//! - a definite remote refusal (HTTP 4xx, JSON-RPC error) → `rejected`, kept as is.

use std::sync::Arc;

use a2a::{SendMessageResponse, Task, TaskState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::client::{OutboundError, Target};
use super::credential::Binding;
use super::policy::origin;
use super::{invalid, read_json, OutboundRoutes, REGISTRATION_PREFIX};
use crate::error::HttpError;
use crate::store::outbound::{
    Delegation, DelegationAdmission, DelegationKey, DelegationUpdate, Outcome, PgOutboundStore,
    Registration,
};
use crate::upstream::Delivery;

pub const DELEGATE_SCOPES: &[&str] = &["ai:answer", "a2a:delegate"];
const MAX_TASK_ID_CHARS: usize = 256;
/// Local Q agents were addressed as `q.<name>` by the retired wrapper.
const LOCAL_PREFIX: &str = "q.";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DelegateBody {
    task_id: Option<String>,
    agent_id: Option<String>,
    text: Option<String>,
}

/// What one delegation request answers.
struct Answer {
    status: String,
    remote_task_id: Option<String>,
    result: Option<Value>,
    error: Option<Value>,
}

impl Answer {
    fn from_row(d: &Delegation) -> Self {
        Answer {
            status: d.status.clone(),
            remote_task_id: d.remote_task_id.clone(),
            result: d.result.clone(),
            error: d.error.clone(),
        }
    }

    fn unknown(remote_task_id: Option<String>, error: Value) -> Self {
        Answer {
            status: "unknown".into(),
            remote_task_id,
            result: None,
            error: Some(error),
        }
    }
}

/// The wrapper's status for a remote task state. AUTH_REQUIRED is reported as
/// `input_required`, as the profile does for approvals.
fn status_of(state: &TaskState) -> &'static str {
    match state {
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        TaskState::Rejected => "rejected",
        TaskState::InputRequired | TaskState::AuthRequired => "input_required",
        _ => "unknown",
    }
}

/// Whether a wrapper status is settled: terminal or waiting for the caller.
fn settled(status: &str) -> bool {
    matches!(
        status,
        "completed" | "failed" | "canceled" | "rejected" | "input_required"
    )
}

fn content_hash(agent_id: &str, text: &str) -> String {
    let mut h = Sha256::new();
    h.update(agent_id.as_bytes());
    h.update([0]);
    h.update(text.as_bytes());
    hex::encode(h.finalize())
}

pub async fn delegate(
    State(state): State<Arc<OutboundRoutes>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let principal = state
        .authorizer
        .authorize(&headers, DELEGATE_SCOPES)
        .await?;
    let body: DelegateBody = read_json(state.settings.max_body_bytes, &headers, body).await?;

    let task_id = body.task_id.unwrap_or_default();
    if task_id.is_empty() {
        return Err(invalid(
            "taskId",
            "required: the caller's stable id, sent as the outbound messageId",
        ));
    }
    if task_id.chars().count() > MAX_TASK_ID_CHARS || task_id.chars().any(char::is_control) {
        return Err(invalid(
            "taskId",
            format!("at most {MAX_TASK_ID_CHARS} characters, no control characters"),
        ));
    }
    let agent_id = body.agent_id.unwrap_or_default();
    if agent_id.is_empty() {
        return Err(invalid("agentId", "required: a registration id (reg-...)"));
    }
    if let Some(local) = agent_id.strip_prefix(LOCAL_PREFIX) {
        let base = format!(
            "{}/v1/a2a/agents/{}",
            &state.settings.public_base,
            urlencode(local)
        );
        return Err(HttpError::LocalTargetRetired {
            agent_id,
            card_url: format!("{base}/.well-known/agent-card.json"),
            rpc_url: format!("{base}/rpc"),
        });
    }
    let text = body.text.unwrap_or_default();
    let chars = text.chars().count();
    let max = state.settings.max_text_chars;
    if chars == 0 || chars > max {
        return Err(invalid("text", format!("1 to {max} characters")));
    }
    let store = state.store.clone();
    let registration = if agent_id.starts_with(REGISTRATION_PREFIX) {
        store.registration(&principal.tenant_id, &agent_id).await?
    } else {
        None
    }
    .ok_or(HttpError::AgentNotFound)?;

    let key = DelegationKey {
        tenant_id: principal.tenant_id.clone(),
        principal_id: principal.principal_id.clone(),
        task_id: task_id.clone(),
    };
    let hash = content_hash(&agent_id, &text);
    let context_id = format!("q-ctx-{}", uuid::Uuid::new_v4());
    let delegation = store
        .admit_delegation(&key, &registration.id, &hash, &context_id)
        .await?;
    let run = Run {
        state: &state,
        store: &store,
        registration: &registration,
        key: &key,
    };
    let answer = match delegation {
        DelegationAdmission::Created(d) => run.send(&d, &text).await?,
        DelegationAdmission::Existing(d) if d.content_sha256 != hash => {
            return Err(HttpError::Conflict {
                code: "task_id_conflict",
                message: "this taskId was already used with other content; nothing was sent".into(),
            })
        }
        DelegationAdmission::Existing(d) => run.repeat(&d, &text).await?,
    };
    Ok(Json(json!({
        "taskId": task_id,
        "agentId": agent_id,
        "status": answer.status,
        "result": answer.result,
        "remoteTaskId": answer.remote_task_id,
        "error": answer.error,
    }))
    .into_response())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One delegation request's work against one registration.
struct Run<'a> {
    state: &'a OutboundRoutes,
    store: &'a PgOutboundStore,
    registration: &'a Registration,
    key: &'a DelegationKey,
}

impl Run<'_> {
    /// Opens the credential for this registration's current origin; `Err` means it cannot be
    /// used (wrong key, moved origin, tampered row), and nothing is sent.
    fn target_credential(
        &self,
    ) -> Result<Option<(super::credential::BearerCredential, String)>, OutboundError> {
        let Some(sealed) = &self.registration.credential else {
            return Ok(None);
        };
        let url = self
            .state
            .client
            .policy()
            .check_url(&self.registration.endpoint)?;
        let origin = origin(&url);
        let credential = self
            .state
            .keys
            .open(
                sealed,
                Binding {
                    tenant_id: &self.registration.tenant_id,
                    registration_id: &self.registration.id,
                    origin: &origin,
                },
            )
            .map_err(|e| {
                tracing::error!(registration = %self.registration.id, error = %e, "stored credential unusable");
                OutboundError::Policy(super::policy::PolicyRefusal {
                    reason: "credential_unusable",
                    target: self.registration.id.clone(),
                })
            })?;
        Ok(Some((credential, origin)))
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

    async fn record(&self, update: DelegationUpdate) -> Result<Answer, HttpError> {
        self.store.record_delegation(self.key, &update).await?;
        Ok(Answer {
            status: update.status,
            remote_task_id: update.remote_task_id,
            result: update.result,
            error: update.error,
        })
    }

    /// The one send of this delegation's message (or a re-send of one certainly never
    /// delivered), then observation of the remote task within the wait window.
    async fn send(&self, d: &Delegation, text: &str) -> Result<Answer, HttpError> {
        let deadline = Instant::now() + self.state.settings.delegation_wait;
        let sent = match self.target_credential() {
            Ok(credential) => {
                let target = Target {
                    endpoint: &self.registration.endpoint,
                    credential: credential.as_ref().map(|(c, o)| (c, o.as_str())),
                };
                self.state
                    .client
                    .send_message(&target, &self.key.task_id, &d.context_id, text)
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
                    result: Some(json!({ "message": message })),
                    error: None,
                })
                .await
            }
            Ok(SendMessageResponse::Task(task)) => {
                let remote_task_id = task.id.clone();
                self.record_task(&task).await?;
                self.observe(task, &remote_task_id, &d.context_id, deadline)
                    .await
            }
            Err(e) => {
                self.log_failure("SendMessage", &e);
                let update = match (&e, e.delivery()) {
                    (_, Delivery::NotSent) => DelegationUpdate {
                        outcome: Outcome::NotSent,
                        status: "failed".into(),
                        remote_task_id: None,
                        result: None,
                        error: Some(e.to_json()),
                    },
                    (OutboundError::Refused { .. }, _) => DelegationUpdate {
                        outcome: Outcome::Refused,
                        status: "rejected".into(),
                        remote_task_id: None,
                        result: None,
                        error: Some(e.to_json()),
                    },
                    _ => DelegationUpdate {
                        outcome: Outcome::Unknown,
                        status: "unknown".into(),
                        remote_task_id: None,
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
            match self.read_remote(remote_task_id, context_id).await {
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
        context_id: &str,
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
            result: None,
            error: Some(e.to_json()),
        })
        .await
    }

    /// A repeat of the same taskId and content.
    async fn repeat(&self, d: &Delegation, text: &str) -> Result<Answer, HttpError> {
        match (d.outcome, &d.remote_task_id) {
            (Outcome::NotSent, _) => {
                if self.store.reclaim_not_sent(self.key).await? {
                    self.send(d, text).await
                } else {
                    Ok(Answer::unknown(
                        None,
                        json!({"reason": "in_progress", "message": "another request is sending this taskId"}),
                    ))
                }
            }
            (Outcome::Refused, _) => Ok(Answer::from_row(d)),
            (Outcome::Answered, _) if settled(&d.status) => Ok(Answer::from_row(d)),
            (Outcome::Answered | Outcome::Unknown, Some(remote_task_id)) => {
                let deadline = Instant::now() + self.state.settings.delegation_wait;
                match self.read_remote(remote_task_id, &d.context_id).await {
                    Ok(task) => {
                        self.record_task(&task).await?;
                        self.observe(task, remote_task_id, &d.context_id, deadline)
                            .await
                    }
                    Err(e) => self.lost_track(remote_task_id, &e).await,
                }
            }
            (Outcome::Answered, None) => Ok(Answer::from_row(d)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_hash_separates_agent_and_text() {
        assert_ne!(content_hash("reg-a", "bc"), content_hash("reg-ab", "c"));
        assert_eq!(content_hash("reg-a", "x"), content_hash("reg-a", "x"));
    }

    #[test]
    fn statuses() {
        assert_eq!(status_of(&TaskState::AuthRequired), "input_required");
        assert!(settled("completed") && !settled("working") && !settled("unknown"));
    }
}
