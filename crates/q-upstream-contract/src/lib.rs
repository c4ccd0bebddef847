//! Wire types of the Q upstream contract (`docs/upstream-api.md`, `docs/upstream-openapi.yaml`).
//!
//! These are the only shapes the gateway exchanges with Q's identity, agent, run and approval
//! services. The gateway (as `q_a2a_gateway::upstream::contract`) and the reference upstream
//! (`q-reference-upstream`) both depend on this crate, so the contract is written once and both
//! sides compile against it.
//!
//! Every `/internal/v1/*` call carries `Authorization: Bearer <service token>`; the gateway
//! forwards the caller's identity as explicit fields, never the caller's bearer token.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Contract revision; `GET /internal/v1/health` reports it and the gateway refuses a mismatch.
pub const CONTRACT_VERSION: &str = "1";

/// Path prefix of every contract route.
pub const PREFIX: &str = "/internal/v1";

/// `POST /internal/v1/identity/introspect` request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntrospectRequest {
    pub token: String,
}

/// `POST /internal/v1/identity/introspect` response. An unknown, expired or revoked token
/// answers `200 {"active": false}`; the other fields are then absent.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Introspection {
    pub active: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal_id: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub tenant_features: Vec<String>,
}

/// An agent as Q's agent API describes it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Agent {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub description: String,
    pub version: String,
    pub workspace_id: String,
}

/// The principal's access to the agent's workspace, evaluated now (grants can be revoked).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceAccess {
    Granted,
    Revoked,
    None,
}

/// `GET /internal/v1/tenants/{tenant_id}/agents/{agent_id}/access?principal_id=P`.
/// An agent of another tenant answers 404 exactly like an unknown one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentAccess {
    pub agent: Agent,
    pub workspace_access: WorkspaceAccess,
}

/// Input of a run: the validated text of the A2A message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInput {
    /// Text parts in order.
    pub parts: Vec<String>,
}

/// `POST /internal/v1/runs`: idempotent on `workflow_id`. The same `workflow_id` with the same
/// input returns the existing run (200); with a different input, 409 `workflow_id_conflict`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CreateRunRequest {
    pub workflow_id: String,
    pub tenant_id: String,
    pub principal_id: String,
    pub agent_id: String,
    pub input: RunInput,
    /// Execution deadline the workflow runs under (the profile's one hour).
    pub execution_timeout_seconds: u64,
}

/// Run status as Q's run API reports it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    AwaitingApproval,
    AwaitingInput,
    Succeeded,
    Failed,
    Canceled,
    TimedOut,
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Canceled | RunStatus::TimedOut
        )
    }

    pub fn is_interrupted(self) -> bool {
        matches!(self, RunStatus::AwaitingApproval | RunStatus::AwaitingInput)
    }
}

/// A durable run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Run {
    pub id: String,
    pub workflow_id: String,
    pub tenant_id: String,
    pub principal_id: String,
    pub agent_id: String,
    pub status: RunStatus,
    /// Human-readable detail Q gives for the status (approval prompt, failure reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deadline_at: DateTime<Utc>,
    /// sha256 (hex) of the canonical JSON of the input, used for create idempotency.
    pub input_sha256: String,
}

/// `POST /internal/v1/runs/{run_id}/cancel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CancelRunRequest {
    pub principal_id: String,
}

/// `GET /internal/v1/runs/{run_id}/output`: the verified-by-checksum final output.
/// 404 `output_not_ready` until the run succeeded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunOutput {
    pub artifact_id: String,
    pub name: String,
    pub media_type: String,
    pub text: String,
    /// Lowercase hex sha256 of the UTF-8 bytes of `text`.
    pub sha256: String,
    /// Length of `text` in UTF-8 bytes.
    pub byte_count: u64,
}

/// One entry of `GET /internal/v1/runs/{run_id}/events`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunEvent {
    pub seq: u64,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    pub at: DateTime<Utc>,
}

/// `GET /internal/v1/runs/{run_id}/events?after_seq=N&wait_ms=M` (long poll, M ≤ 30000).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunEvents {
    pub events: Vec<RunEvent>,
    pub last_seq: u64,
}

/// One entry of Q's run change feed: a status change of any run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunChange {
    /// Position in the feed; strictly increasing across all runs.
    pub cursor: u64,
    pub run_id: String,
    pub workflow_id: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    pub at: DateTime<Utc>,
}

/// `GET /internal/v1/changes/runs?after=N&wait_ms=M&limit=L` (long poll, M ≤ 30000,
/// L ≤ 1000): changes with `cursor > N`, oldest first. `cursor` is where to continue; `head`
/// is the newest cursor Q has issued. A `head` below the caller's position means Q's feed was
/// reset: the caller starts again from 0 (applying a change twice is harmless).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunChanges {
    pub changes: Vec<RunChange>,
    pub cursor: u64,
    pub head: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    ToolApproval,
    AdditionalInput,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Approval {
    pub id: String,
    pub kind: ApprovalKind,
    pub prompt: String,
    pub status: ApprovalStatus,
}

/// `GET /internal/v1/runs/{run_id}/approvals`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Approvals {
    pub approvals: Vec<Approval>,
}

/// `POST /internal/v1/runs/{run_id}/approvals/{approval_id}/approve` (Q's approval API; the
/// gateway never calls it, clients of Q do).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApproveRequest {
    pub principal_id: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceGrant {
    Granted,
    Revoked,
}

/// `GET /internal/v1/runs/{run_id}/grants/{principal_id}`: may this principal still see the
/// run's retained content (input history, output)?
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunGrant {
    pub run_id: String,
    pub principal_id: String,
    pub evidence: EvidenceGrant,
}

/// `POST /internal/v1/evidence-grants/query`: the principal's current evidence grant on many
/// runs at once (unknown run ids are answered `revoked`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvidenceQuery {
    pub principal_id: String,
    pub run_ids: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvidenceGrants {
    pub grants: Vec<RunGrant>,
}

/// `GET /internal/v1/health`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Health {
    pub status: String,
    pub contract_version: String,
}

/// Body of every non-2xx contract answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// Machine-readable code: `agent_not_found`, `run_not_found`, `workflow_id_conflict`,
    /// `workspace_access_denied`, `output_not_ready`, `run_terminal`, `unauthorized`, `invalid`.
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// sha256 (hex) of the canonical JSON of a run input; both sides compute it the same way.
pub fn input_sha256(input: &RunInput) -> String {
    use sha2::{Digest, Sha256};
    let canonical = serde_json::to_vec(input).expect("RunInput serializes");
    hex::encode(Sha256::digest(canonical))
}

/// sha256 (hex) of output text.
pub fn text_sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_hash_is_order_sensitive_and_stable() {
        let a = RunInput {
            parts: vec!["x".into(), "y".into()],
        };
        let b = RunInput {
            parts: vec!["y".into(), "x".into()],
        };
        assert_eq!(input_sha256(&a), input_sha256(&a.clone()));
        assert_ne!(input_sha256(&a), input_sha256(&b));
    }

    #[test]
    fn input_hash_is_over_the_canonical_json_the_contract_documents() {
        // docs/upstream-api.md: the exact bytes of {"parts":[...]} as serde_json writes them.
        let input = RunInput {
            parts: vec!["first part".into(), "second part".into()],
        };
        assert_eq!(
            input_sha256(&input),
            text_sha256(r#"{"parts":["first part","second part"]}"#)
        );
    }

    #[test]
    fn absent_optional_fields_are_omitted_and_enums_are_snake_case() {
        let inactive = serde_json::to_value(Introspection::default()).unwrap();
        assert_eq!(
            inactive,
            serde_json::json!({"active": false, "scopes": [], "tenant_features": []})
        );
        assert_eq!(
            serde_json::to_value(RunStatus::AwaitingApproval).unwrap(),
            "awaiting_approval"
        );
        let error = serde_json::to_value(ErrorBody {
            error: "run_not_found".into(),
            message: None,
        })
        .unwrap();
        assert_eq!(error, serde_json::json!({"error": "run_not_found"}));
    }
}
