//! The outbound rows, registrations and delegations, and their decoding from PostgreSQL.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;

use super::trust::{trust_from_row, CardTrust};
use crate::store::StoreError;

/// What is stored: the key id, the nonce and the ciphertext (with its tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedCredential {
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

/// A tenant's registration of a remote agent.
#[derive(Debug, Clone)]
pub struct Registration {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    /// The exact JSON-RPC endpoint URL.
    pub endpoint: String,
    pub credential: Option<SealedCredential>,
    pub discovered_card: Option<Value>,
    pub discovered_at: Option<DateTime<Utc>>,
    /// Declared by the operator: the remote deduplicates messageIds (a Q gateway does).
    pub deduplicates_message_ids: bool,
    /// How the remote's card signatures are treated, and the last check.
    pub card_trust: CardTrust,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub(super) const REGISTRATION_COLUMNS: &str = "registration_id, tenant_id, name, endpoint, \
    credential_key_id, credential_nonce, credential_ciphertext, discovered_card, discovered_at, \
    deduplicates_message_ids, created_by, created_at, updated_at, card_trust, card_trusted_keys, \
    card_verification, card_checked_at";

pub(super) fn registration_from_row(row: &Row) -> Result<Registration, StoreError> {
    let key_id: Option<String> = row.try_get("credential_key_id")?;
    let nonce: Option<Vec<u8>> = row.try_get("credential_nonce")?;
    let ciphertext: Option<Vec<u8>> = row.try_get("credential_ciphertext")?;
    let credential = match (key_id, nonce, ciphertext) {
        (Some(key_id), Some(nonce), Some(ciphertext)) => Some(SealedCredential {
            key_id,
            nonce,
            ciphertext,
        }),
        (None, None, None) => None,
        _ => return Err(StoreError::Corrupt("partial credential".into())),
    };
    Ok(Registration {
        id: row.try_get("registration_id")?,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        endpoint: row.try_get("endpoint")?,
        credential,
        discovered_card: row.try_get("discovered_card")?,
        discovered_at: row.try_get("discovered_at")?,
        deduplicates_message_ids: row.try_get("deduplicates_message_ids")?,
        card_trust: trust_from_row(row)?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// A registration as its tenant's listing shows it: neither the discovered card nor the sealed
/// credential is read.
#[derive(Debug, Clone)]
pub struct RegistrationSummary {
    pub id: String,
    pub name: String,
    pub endpoint: String,
    /// The key the stored credential is sealed under; `None` without a credential.
    pub credential_key_id: Option<String>,
    pub discovered_at: Option<DateTime<Utc>>,
    pub deduplicates_message_ids: bool,
    pub card_trust: CardTrust,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Registration {
    pub fn summary(&self) -> RegistrationSummary {
        RegistrationSummary {
            id: self.id.clone(),
            name: self.name.clone(),
            endpoint: self.endpoint.clone(),
            credential_key_id: self.credential.as_ref().map(|c| c.key_id.clone()),
            discovered_at: self.discovered_at,
            deduplicates_message_ids: self.deduplicates_message_ids,
            card_trust: self.card_trust.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// Where a registration listing goes on: after this `(created_at, registration_id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationPosition {
    pub created_at: DateTime<Utc>,
    pub registration_id: String,
}

impl RegistrationSummary {
    pub fn position(&self) -> RegistrationPosition {
        RegistrationPosition {
            created_at: self.created_at,
            registration_id: self.id.clone(),
        }
    }
}

/// A credential's key id is present exactly when the credential is (a table constraint).
pub(super) const SUMMARY_COLUMNS: &str = "registration_id, name, endpoint, credential_key_id, \
    discovered_at, deduplicates_message_ids, created_at, updated_at, card_trust, \
    card_trusted_keys, card_verification, card_checked_at";

pub(super) fn summary_from_row(row: &Row) -> Result<RegistrationSummary, StoreError> {
    Ok(RegistrationSummary {
        id: row.try_get("registration_id")?,
        name: row.try_get("name")?,
        endpoint: row.try_get("endpoint")?,
        credential_key_id: row.try_get("credential_key_id")?,
        discovered_at: row.try_get("discovered_at")?,
        deduplicates_message_ids: row.try_get("deduplicates_message_ids")?,
        card_trust: trust_from_row(row)?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The key of a delegation: the caller's `taskId` within its tenant and principal. A taskId is
/// also unique per registration within the tenant, whichever principal used it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationKey {
    pub tenant_id: String,
    pub principal_id: String,
    pub task_id: String,
}

/// Where a delegation's send stands; see the migration for the meaning of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Sending,
    Answered,
    Unknown,
    NotSent,
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Sending => "sending",
            Outcome::Answered => "answered",
            Outcome::Unknown => "unknown",
            Outcome::NotSent => "not_sent",
            Outcome::Refused => "refused",
        }
    }
    fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "sending" => Outcome::Sending,
            "answered" => Outcome::Answered,
            "unknown" => Outcome::Unknown,
            "not_sent" => Outcome::NotSent,
            "refused" => Outcome::Refused,
            other => return Err(StoreError::Corrupt(format!("outcome {other:?}"))),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Delegation {
    pub key: DelegationKey,
    pub registration_id: String,
    pub content_sha256: String,
    /// The context the remote put its task in, from its answer.
    pub context_id: Option<String>,
    /// Endpoint and sealed credential of the last send that may have reached a remote.
    pub target_sha256: Option<String>,
    pub outcome: Outcome,
    pub status: String,
    pub remote_task_id: Option<String>,
    pub result: Option<Value>,
    pub error: Option<Value>,
    pub send_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a delegation records after a remote call.
#[derive(Debug, Clone)]
pub struct DelegationUpdate {
    pub outcome: Outcome,
    pub status: String,
    pub remote_task_id: Option<String>,
    /// The remote task's context; kept once known.
    pub context_id: Option<String>,
    pub result: Option<Value>,
    pub error: Option<Value>,
}

pub(super) fn delegation_from_row(row: &Row) -> Result<Delegation, StoreError> {
    Ok(Delegation {
        key: DelegationKey {
            tenant_id: row.try_get("tenant_id")?,
            principal_id: row.try_get("principal_id")?,
            task_id: row.try_get("task_id")?,
        },
        registration_id: row.try_get("registration_id")?,
        content_sha256: row.try_get("content_sha256")?,
        context_id: row.try_get("context_id")?,
        target_sha256: row.try_get("target_sha256")?,
        outcome: Outcome::parse(row.try_get("outcome")?)?,
        status: row.try_get("status")?,
        remote_task_id: row.try_get("remote_task_id")?,
        result: row.try_get("result")?,
        error: row.try_get("error")?,
        send_attempts: row.try_get("send_attempts")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(super) const DELEGATION_COLUMNS: &str = "tenant_id, principal_id, task_id, registration_id, \
    content_sha256, context_id, target_sha256, outcome, status, remote_task_id, result, error, \
    send_attempts, created_at, updated_at";

/// Whether a delegation row was created by this request or already existed.
#[derive(Debug)]
pub enum DelegationAdmission {
    Created(Delegation),
    /// The caller's own row under this taskId.
    Existing(Delegation),
    /// Another principal of the tenant holds this taskId on this registration. Its row is not
    /// returned: nothing of it is the caller's to see.
    HeldByAnother,
}
