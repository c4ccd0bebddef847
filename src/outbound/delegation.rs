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
//! - a `taskId` another principal of the tenant used on this registration → 409, nothing is
//!   sent: every principal sends with the registration's one credential, so at the remote it
//!   would be the same message;
//! - a send that certainly never left (policy refusal, connection refused) → `failed`; a
//!   repeat may send it;
//! - a send that may have reached the remote (timeout, reset, 5xx, 3xx, oversized,
//!   unparseable or uncorrelated answer) → HTTP 200 with `status: "unknown"`. It is never sent
//!   again on the gateway's own initiative. A repeat reconciles through the remote's `GetTask`
//!   when a remote task id was received. Otherwise it answers `unknown` again without
//!   contacting the remote, unless the operator declared that the remote deduplicates
//!   messageIds: then the repeat sends the same messageId once more, to the same endpoint
//!   with the same credential, and the remote answers with the task it already has;
//! - a remote task that is not finished is read again (GetTask) on a repeat;
//! - a definite remote refusal (HTTP 4xx, JSON-RPC error) → `rejected`, kept as is;
//! - a registration whose card trust is `require` without a verified card → 409
//!   `card_not_verified`, nothing written or sent.

mod run;

use crate::http::response_budget::charged_to;
use std::sync::Arc;

use a2a::TaskState;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{invalid, read_json, OutboundRoutes, REGISTRATION_PREFIX};
use crate::error::HttpError;
use crate::store::outbound::{Delegation, DelegationAdmission, DelegationKey, Registration};
use run::Run;

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

/// Fingerprint of where a message goes: the endpoint and the sealed credential (each seal has
/// its own nonce, so a credential set again is another one). A remote deduplicates per
/// endpoint and credential (Q: per principal and agent); a resend is only safe to the same.
pub(crate) fn target_hash(registration: &Registration) -> String {
    let mut h = Sha256::new();
    h.update(registration.endpoint.as_bytes());
    h.update([0]);
    if let Some(c) = &registration.credential {
        h.update(c.key_id.as_bytes());
        h.update([0]);
        h.update(&c.nonce);
    }
    hex::encode(h.finalize())
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
    // Under `require`, nothing goes to a remote whose card is not verified: refused before
    // anything is written or sent.
    super::card_trust::delegation_allowed(&registration)?;
    // Held until the answer is made: the send and the whole wait window.
    let _permit = state.delegation_permit(&principal).await?;

    let key = DelegationKey {
        tenant_id: principal.tenant_id.clone(),
        principal_id: principal.principal_id.clone(),
        task_id: task_id.clone(),
    };
    let hash = content_hash(&agent_id, &text);
    let delegation = store
        .admit_delegation(&key, &registration.id, &hash, &target_hash(&registration))
        .await?;
    let run = Run {
        state: &state,
        store: &store,
        registration: &registration,
        key: &key,
    };
    let answer = match delegation {
        DelegationAdmission::Created(_) => run.send(&text).await?,
        DelegationAdmission::HeldByAnother => {
            return Err(HttpError::Conflict {
                code: "task_id_conflict",
                message: "this taskId is already used with this agent in your tenant; choose another; nothing was sent".into(),
            })
        }
        DelegationAdmission::Existing(d) if d.content_sha256 != hash => {
            return Err(HttpError::Conflict {
                code: "task_id_conflict",
                message: "this taskId was already used with other content; nothing was sent".into(),
            })
        }
        DelegationAdmission::Existing(d) => run.repeat(&d, &text).await?,
    };
    let answer = Json(json!({
        "taskId": task_id,
        "agentId": agent_id,
        "status": answer.status,
        "result": answer.result,
        "remoteTaskId": answer.remote_task_id,
        "error": answer.error,
    }));
    Ok(charged_to(
        answer.into_response(),
        &principal.tenant_id,
        &principal.principal_id,
    ))
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

#[cfg(test)]
mod tests;
