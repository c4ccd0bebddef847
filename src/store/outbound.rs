//! Outbound rows: remote agent registrations (with their sealed credential and the untrusted
//! discovered card) and delegations, in PostgreSQL (`20261101_000000_a2a_outbound`,
//! `20261201_000000_a2a_delegation_identity`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;

use super::{PgPool, StoreError};

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
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const REGISTRATION_COLUMNS: &str = "registration_id, tenant_id, name, endpoint, \
    credential_key_id, credential_nonce, credential_ciphertext, discovered_card, discovered_at, \
    deduplicates_message_ids, created_by, created_at, updated_at";

fn registration_from_row(row: &Row) -> Result<Registration, StoreError> {
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
        created_by: row.try_get("created_by")?,
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
    fn as_str(self) -> &'static str {
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

fn delegation_from_row(row: &Row) -> Result<Delegation, StoreError> {
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
    })
}

const DELEGATION_COLUMNS: &str = "tenant_id, principal_id, task_id, registration_id, \
    content_sha256, context_id, target_sha256, outcome, status, remote_task_id, result, error, \
    send_attempts";

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

/// PostgreSQL store for registrations and delegations (shares the task store's pool).
#[derive(Clone)]
pub struct PgOutboundStore {
    pool: PgPool,
}

impl PgOutboundStore {
    pub fn new(pool: PgPool) -> Self {
        PgOutboundStore { pool }
    }

    pub async fn insert_registration(&self, r: &Registration) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let (key_id, nonce, ciphertext) = split(&r.credential);
        client
            .execute(
                "INSERT INTO a2a_remote_agents (registration_id, tenant_id, name, endpoint,
                    credential_key_id, credential_nonce, credential_ciphertext,
                    deduplicates_message_ids, created_by, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)",
                &[
                    &r.id,
                    &r.tenant_id,
                    &r.name,
                    &r.endpoint,
                    &key_id,
                    &nonce,
                    &ciphertext,
                    &r.deduplicates_message_ids,
                    &r.created_by,
                    &r.created_at,
                ],
            )
            .await?;
        Ok(())
    }

    /// The registration if it belongs to `tenant_id`.
    pub async fn registration(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Option<Registration>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {REGISTRATION_COLUMNS} FROM a2a_remote_agents
                     WHERE tenant_id = $1 AND registration_id = $2"
                ),
                &[&tenant_id, &id],
            )
            .await?;
        row.as_ref().map(registration_from_row).transpose()
    }

    pub async fn registrations(
        &self,
        tenant_id: &str,
        limit: i64,
    ) -> Result<Vec<Registration>, StoreError> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {REGISTRATION_COLUMNS} FROM a2a_remote_agents WHERE tenant_id = $1
                     ORDER BY created_at, registration_id LIMIT $2"
                ),
                &[&tenant_id, &limit],
            )
            .await?;
        rows.iter().map(registration_from_row).collect()
    }

    /// Writes name, endpoint, credential and the deduplication declaration of an existing
    /// registration. A changed endpoint clears the discovered card: it described the old one.
    pub async fn update_registration(
        &self,
        r: &Registration,
    ) -> Result<Option<Registration>, StoreError> {
        let client = self.pool.get().await?;
        let (key_id, nonce, ciphertext) = split(&r.credential);
        let row = client
            .query_opt(
                &format!(
                    "UPDATE a2a_remote_agents SET name = $3,
                        discovered_card = CASE WHEN endpoint = $4 THEN discovered_card END,
                        discovered_at = CASE WHEN endpoint = $4 THEN discovered_at END,
                        endpoint = $4, credential_key_id = $5, credential_nonce = $6,
                        credential_ciphertext = $7, deduplicates_message_ids = $8,
                        updated_at = now()
                     WHERE tenant_id = $1 AND registration_id = $2
                     RETURNING {REGISTRATION_COLUMNS}"
                ),
                &[
                    &r.tenant_id,
                    &r.id,
                    &r.name,
                    &r.endpoint,
                    &key_id,
                    &nonce,
                    &ciphertext,
                    &r.deduplicates_message_ids,
                ],
            )
            .await?;
        row.as_ref().map(registration_from_row).transpose()
    }

    pub async fn delete_registration(&self, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let n = client
            .execute(
                "DELETE FROM a2a_remote_agents WHERE tenant_id = $1 AND registration_id = $2",
                &[&tenant_id, &id],
            )
            .await?;
        Ok(n == 1)
    }

    /// Stores a discovered card, only if the registration still has the endpoint it was
    /// fetched for. Touches nothing else.
    pub async fn record_discovered_card(
        &self,
        tenant_id: &str,
        id: &str,
        endpoint: &str,
        card: &Value,
    ) -> Result<Option<Registration>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                &format!(
                    "UPDATE a2a_remote_agents SET discovered_card = $4, discovered_at = now()
                     WHERE tenant_id = $1 AND registration_id = $2 AND endpoint = $3
                     RETURNING {REGISTRATION_COLUMNS}"
                ),
                &[&tenant_id, &id, &endpoint, card],
            )
            .await?;
        row.as_ref().map(registration_from_row).transpose()
    }

    /// Inserts the delegation in state `sending`, or returns the row that holds its key: the
    /// caller's own, or [`DelegationAdmission::HeldByAnother`] when another principal holds
    /// the taskId on this registration. `target_sha256` fingerprints where it is sent.
    pub async fn admit_delegation(
        &self,
        key: &DelegationKey,
        registration_id: &str,
        content_sha256: &str,
        target_sha256: &str,
    ) -> Result<DelegationAdmission, StoreError> {
        let client = self.pool.get().await?;
        // Either key may conflict: (tenant, principal, taskId) or (tenant, registration,
        // taskId). A concurrent insert of either is waited for, then seen below.
        let inserted = client
            .query_opt(
                &format!(
                    "INSERT INTO a2a_delegations (tenant_id, principal_id, task_id,
                        registration_id, content_sha256, target_sha256, outcome, status,
                        send_attempts)
                     VALUES ($1, $2, $3, $4, $5, $6, 'sending', 'unknown', 1)
                     ON CONFLICT DO NOTHING
                     RETURNING {DELEGATION_COLUMNS}"
                ),
                &[
                    &key.tenant_id,
                    &key.principal_id,
                    &key.task_id,
                    &registration_id,
                    &content_sha256,
                    &target_sha256,
                ],
            )
            .await?;
        if let Some(row) = inserted {
            return Ok(DelegationAdmission::Created(delegation_from_row(&row)?));
        }
        let own = client
            .query_opt(
                &format!(
                    "SELECT {DELEGATION_COLUMNS} FROM a2a_delegations
                     WHERE tenant_id = $1 AND principal_id = $2 AND task_id = $3"
                ),
                &[&key.tenant_id, &key.principal_id, &key.task_id],
            )
            .await?;
        match own {
            Some(row) => Ok(DelegationAdmission::Existing(delegation_from_row(&row)?)),
            None => Ok(DelegationAdmission::HeldByAnother),
        }
    }

    /// Takes a delegation that was certainly never delivered back to `sending`, recording
    /// where it is now sent; false when another request got there first or it is no longer
    /// `not_sent`.
    pub async fn reclaim_not_sent(
        &self,
        key: &DelegationKey,
        target_sha256: &str,
    ) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let n = client
            .execute(
                "UPDATE a2a_delegations SET outcome = 'sending', send_attempts = send_attempts + 1,
                    target_sha256 = $4, updated_at = now()
                 WHERE tenant_id = $1 AND principal_id = $2 AND task_id = $3
                   AND outcome = 'not_sent'",
                &[
                    &key.tenant_id,
                    &key.principal_id,
                    &key.task_id,
                    &target_sha256,
                ],
            )
            .await?;
        Ok(n == 1)
    }

    /// Takes an `unknown` delegation without a remote task id back to `sending`, for a send of
    /// the same messageId to the same target (`target_sha256` unchanged) that deduplicates it.
    /// False when another request got there first or anything else changed.
    pub async fn reclaim_unknown(
        &self,
        key: &DelegationKey,
        target_sha256: &str,
    ) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let n = client
            .execute(
                "UPDATE a2a_delegations SET outcome = 'sending', send_attempts = send_attempts + 1,
                    updated_at = now()
                 WHERE tenant_id = $1 AND principal_id = $2 AND task_id = $3
                   AND outcome = 'unknown' AND remote_task_id IS NULL AND target_sha256 = $4",
                &[
                    &key.tenant_id,
                    &key.principal_id,
                    &key.task_id,
                    &target_sha256,
                ],
            )
            .await?;
        Ok(n == 1)
    }

    pub async fn record_delegation(
        &self,
        key: &DelegationKey,
        update: &DelegationUpdate,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE a2a_delegations SET outcome = $4, status = $5,
                    remote_task_id = COALESCE($6, remote_task_id), result = COALESCE($7, result),
                    error = $8, context_id = COALESCE($9, context_id), updated_at = now()
                 WHERE tenant_id = $1 AND principal_id = $2 AND task_id = $3",
                &[
                    &key.tenant_id,
                    &key.principal_id,
                    &key.task_id,
                    &update.outcome.as_str(),
                    &update.status,
                    &update.remote_task_id,
                    &update.result,
                    &update.error,
                    &update.context_id,
                ],
            )
            .await?;
        Ok(())
    }
}

type CredentialColumns = (Option<String>, Option<Vec<u8>>, Option<Vec<u8>>);

fn split(credential: &Option<SealedCredential>) -> CredentialColumns {
    match credential {
        Some(c) => (
            Some(c.key_id.clone()),
            Some(c.nonce.clone()),
            Some(c.ciphertext.clone()),
        ),
        None => (None, None, None),
    }
}
