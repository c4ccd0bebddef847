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
    /// A value this contract revision does not define; never read as `granted`.
    #[serde(other)]
    Unknown,
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
    /// A status this contract revision does not define (a newer Q). Never terminal: nothing
    /// final is inferred from it, the run is read again later.
    #[serde(other)]
    Unknown,
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
    /// On the answer to `POST /runs` only: the evidence grant of the run's own principal
    /// (`principal_id`) on this run as Q answers it, as `GET /runs/{id}/grants/{principal_id}`
    /// would. Optional: without it the gateway asks that route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal_evidence: Option<EvidenceGrant>,
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
    /// The run's own event sequence number of this change (`RunEvent::seq`); 0 from a Q that
    /// does not report it.
    #[serde(default)]
    pub seq: u64,
    pub at: DateTime<Utc>,
}

/// `GET /internal/v1/changes/runs?after=N&wait_ms=M&limit=L` (long poll, M ≤ 30000,
/// L ≤ 1000): changes with `cursor > N`, oldest first. `cursor` is where to continue; `head`
/// is the newest cursor Q has committed; `epoch` names the feed's history and `floor` is the
/// oldest position it still answers completely ([`FeedPosition`] says how a reader tells a
/// reset, a failover or a compaction from them).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunChanges {
    pub changes: Vec<RunChange>,
    pub cursor: u64,
    pub head: u64,
    pub epoch: String,
    pub floor: u64,
}

/// Where a feed answer stands, whichever feed: what a reader needs to know whether it can
/// continue from its own position or has lost its place.
///
/// - `epoch` names one history of the feed. It changes whenever cursors stop meaning what they
///   meant (the feed was rebuilt, reset, or is now served by an instance with another history,
///   as after a failover); a reader that sees another epoch than the one it followed has lost
///   its place, whatever the cursors say.
/// - `floor`: every change with a cursor above it is still served; changes at or below it may
///   have been compacted away (0 until Q compacts). A reader whose position is below `floor`
///   has missed changes.
/// - `head`: the newest cursor Q has committed, read from the same source of truth as the
///   answers of the access and run APIs (a feed served from a lagging copy still reports the
///   primary's head). A reader whose position is below `head` after an answer is not caught
///   up; one whose position is above it has lost its place (the feed was reset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPosition<'a> {
    pub epoch: &'a str,
    pub floor: u64,
    pub head: u64,
}

/// What a feed answer means for a reader at `position` of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedContinuity {
    /// The answer continues the reader's history.
    Continues,
    /// Another epoch: the feed was reset or is served from another history.
    EpochChanged,
    /// The reader's position is below the feed's floor: changes were compacted away.
    Compacted,
    /// The reader's position is above the feed's head: the feed was reset under it.
    HeadBelowPosition,
}

impl FeedPosition<'_> {
    /// Whether a reader at `position` of `epoch` can continue from this answer.
    pub fn continuity(&self, epoch: &str, position: u64) -> FeedContinuity {
        if self.epoch != epoch {
            FeedContinuity::EpochChanged
        } else if position < self.floor {
            FeedContinuity::Compacted
        } else if position > self.head {
            FeedContinuity::HeadBelowPosition
        } else {
            FeedContinuity::Continues
        }
    }
}

/// What an access change is about.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AccessChangeKind {
    /// A principal's membership of a workspace was granted, revoked or restored
    /// (`workspace_id`, `principal_id`).
    WorkspaceMembership,
    /// A principal's evidence grant on a run changed (`run_id`, `principal_id`).
    EvidenceGrant,
    /// An agent was created, changed, moved to another workspace, made unavailable or
    /// removed (`tenant_id`, `agent_id`).
    Agent,
    /// A kind this contract revision does not define: the reader must forget everything it
    /// holds about access, since it cannot tell what changed.
    #[serde(other)]
    Unknown,
}

/// One entry of Q's access change feed: something that may change who may use an agent or
/// see a run's content. It names what changed, never the new value: the reader forgets what
/// it holds about those ids and asks Q again. Each id is present when Q knows it; an entry
/// missing the ids its kind names is read like [`AccessChangeKind::Unknown`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AccessChange {
    /// Position in the feed; strictly increasing.
    pub cursor: u64,
    pub kind: AccessChangeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub at: DateTime<Utc>,
}

/// `GET /internal/v1/changes/access?after=N&wait_ms=M&limit=L`: the same long-poll, cursor,
/// `head`, `epoch` and `floor` rules as [`RunChanges`], with cursors of its own. A reader
/// that lost its place ([`FeedContinuity`]) forgets everything it holds about access and
/// follows again from the head. A reader that is not caught up, or cannot follow the feed,
/// must not trust what it cached beyond what it asked Q itself within its bound.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AccessChanges {
    pub changes: Vec<AccessChange>,
    pub cursor: u64,
    pub head: u64,
    pub epoch: String,
    pub floor: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    ToolApproval,
    AdditionalInput,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
    #[serde(other)]
    Unknown,
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
    /// A value this contract revision does not define; never read as `granted`.
    #[serde(other)]
    Unknown,
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
    /// Machine-readable code, one of [`ErrorCode`] (`agent_not_found`, `run_not_found`, ...).
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The error codes the contract defines (`docs/upstream-api.md`, "Error codes"), each with the
/// one HTTP status it comes with. Anything else (a proxy's answer, a code of a newer Q) is
/// [`ErrorCode::Unknown`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Unauthorized,
    WorkspaceAccessDenied,
    AgentNotFound,
    RunNotFound,
    OutputNotReady,
    ApprovalNotFound,
    WorkflowIdConflict,
    RunTerminal,
    ApprovalNotPending,
    Invalid,
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The code as written in an `ErrorBody`; `Unknown` for any code the contract does not
    /// define.
    pub fn parse(code: &str) -> ErrorCode {
        serde_json::from_value(serde_json::Value::String(code.to_owned()))
            .unwrap_or(ErrorCode::Unknown)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::WorkspaceAccessDenied => "workspace_access_denied",
            ErrorCode::AgentNotFound => "agent_not_found",
            ErrorCode::RunNotFound => "run_not_found",
            ErrorCode::OutputNotReady => "output_not_ready",
            ErrorCode::ApprovalNotFound => "approval_not_found",
            ErrorCode::WorkflowIdConflict => "workflow_id_conflict",
            ErrorCode::RunTerminal => "run_terminal",
            ErrorCode::ApprovalNotPending => "approval_not_pending",
            ErrorCode::Invalid => "invalid",
            ErrorCode::Unknown => "unknown",
        }
    }

    /// The HTTP status the contract answers this code with (`None` for `Unknown`).
    pub fn status(self) -> Option<u16> {
        match self {
            ErrorCode::Unauthorized => Some(401),
            ErrorCode::WorkspaceAccessDenied => Some(403),
            ErrorCode::AgentNotFound
            | ErrorCode::RunNotFound
            | ErrorCode::OutputNotReady
            | ErrorCode::ApprovalNotFound => Some(404),
            ErrorCode::WorkflowIdConflict
            | ErrorCode::RunTerminal
            | ErrorCode::ApprovalNotPending => Some(409),
            ErrorCode::Invalid => Some(422),
            ErrorCode::Unknown => None,
        }
    }
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

    #[test]
    fn unknown_enum_values_and_extra_fields_are_read_as_unknown() {
        let run: Run = serde_json::from_value(serde_json::json!({
            "id": "run-1", "workflow_id": "wf", "tenant_id": "t", "principal_id": "p",
            "agent_id": "a", "status": "paused_for_review", "priority": "high",
            "created_at": "2026-11-30T13:09:15Z", "updated_at": "2026-11-30T13:09:15Z",
            "deadline_at": "2026-11-30T14:09:15Z", "input_sha256": "00"
        }))
        .unwrap();
        assert_eq!(run.status, RunStatus::Unknown);
        assert!(!run.status.is_terminal());
        let grant: RunGrant = serde_json::from_value(
            serde_json::json!({"run_id": "r", "principal_id": "p", "evidence": "partial"}),
        )
        .unwrap();
        assert_eq!(grant.evidence, EvidenceGrant::Unknown);
        let access: WorkspaceAccess = serde_json::from_value("guest".into()).unwrap();
        assert_eq!(access, WorkspaceAccess::Unknown);
    }

    #[test]
    fn a_feed_answer_tells_a_reader_whether_it_lost_its_place() {
        let at = |epoch, floor, head| FeedPosition { epoch, floor, head };
        assert_eq!(
            at("e1", 0, 10).continuity("e1", 7),
            FeedContinuity::Continues
        );
        assert_eq!(
            at("e1", 0, 10).continuity("e1", 10),
            FeedContinuity::Continues
        );
        // A failover to another history whose head is above the reader's position.
        assert_eq!(
            at("e2", 0, 50).continuity("e1", 7),
            FeedContinuity::EpochChanged
        );
        assert_eq!(
            at("e1", 8, 50).continuity("e1", 7),
            FeedContinuity::Compacted
        );
        assert_eq!(
            at("e1", 7, 50).continuity("e1", 7),
            FeedContinuity::Continues
        );
        assert_eq!(
            at("e1", 0, 3).continuity("e1", 7),
            FeedContinuity::HeadBelowPosition
        );
    }

    #[test]
    fn error_codes_parse_with_their_status_and_anything_else_is_unknown() {
        assert_eq!(ErrorCode::parse("run_not_found"), ErrorCode::RunNotFound);
        assert_eq!(ErrorCode::RunNotFound.status(), Some(404));
        assert_eq!(ErrorCode::parse("unauthorized").status(), Some(401));
        assert_eq!(ErrorCode::parse("not_found"), ErrorCode::Unknown);
        assert_eq!(ErrorCode::parse(""), ErrorCode::Unknown);
        for code in [
            ErrorCode::Unauthorized,
            ErrorCode::WorkspaceAccessDenied,
            ErrorCode::AgentNotFound,
            ErrorCode::RunNotFound,
            ErrorCode::OutputNotReady,
            ErrorCode::ApprovalNotFound,
            ErrorCode::WorkflowIdConflict,
            ErrorCode::RunTerminal,
            ErrorCode::ApprovalNotPending,
            ErrorCode::Invalid,
        ] {
            assert_eq!(ErrorCode::parse(code.as_str()), code);
        }
    }
}
