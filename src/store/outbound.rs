//! Outbound rows in PostgreSQL: remote agent registrations (with their sealed credential, the
//! discovered card and its trust) and delegations (`20261101_000000_a2a_outbound`,
//! `20261201_000000_a2a_delegation_identity`, `20261202_000000_a2a_card_trust`). The rows
//! themselves are in `row`, the card trust in `trust`, its writes in `discovered`.

mod discovered;
mod row;
mod seals;
mod tenant;
mod trust;

use tokio_postgres::types::ToSql;

use super::{Call, PgPool, StoreError};
use crate::store::pool::on_connection;
use row::{
    delegation_from_row, registration_from_row, summary_from_row, DELEGATION_COLUMNS,
    REGISTRATION_COLUMNS, SUMMARY_COLUMNS,
};

pub use row::{
    Delegation, DelegationAdmission, DelegationKey, DelegationUpdate, Outcome, Registration,
    RegistrationPosition, RegistrationSummary, SealedCredential,
};
pub use trust::{CardTrust, CheckedCard};

/// Where a delegation may be taken back from to be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// `not_sent`: certainly never delivered, so sent wherever the registration now points
    /// (the new target is recorded).
    NotSent,
    /// `unknown` without a remote task id: only for a send of the same messageId to the same
    /// target (`target_sha256` unchanged), whose remote deduplicates it.
    Unknown,
}

/// PostgreSQL store for registrations and delegations (shares the task store's pool).
#[derive(Clone)]
pub struct PgOutboundStore {
    pool: PgPool,
}

type Params<'a> = [&'a (dyn ToSql + Sync)];

impl PgOutboundStore {
    pub fn new(pool: PgPool) -> Self {
        PgOutboundStore { pool }
    }

    async fn execute(&self, call: Call, sql: &str, params: &Params<'_>) -> Result<u64, StoreError> {
        on_connection!(self.pool, call, |client| {
            // Prepared once per connection: an unnamed statement costs a second round trip
            // (and PostgreSQL counts it as a transaction of its own).
            let statement = client.prepare_cached(sql).await?;
            Ok(client.execute(&statement, params).await?)
        })
    }

    /// The registration a statement returns, if any.
    async fn registration_row(
        &self,
        call: Call,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Option<Registration>, StoreError> {
        on_connection!(self.pool, call, |client| {
            let statement = client.prepare_cached(sql).await?;
            let row = client.query_opt(&statement, params).await?;
            row.as_ref().map(registration_from_row).transpose()
        })
    }

    /// Inserts the registration unless its tenant already holds `quota`; false (nothing
    /// written) when it does. Counted in SQL under a per-tenant transaction lock, so concurrent
    /// creates cannot pass the quota together.
    pub async fn insert_registration_within(
        &self,
        r: &Registration,
        quota: i64,
    ) -> Result<bool, StoreError> {
        on_connection!(self.pool, Call::WriteOnce, |client| {
            let tx = client.transaction().await?;
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('a2a_remote_agents:' || $1, 0))",
                &[&r.tenant_id],
            )
            .await?;
            let held: i64 = tx
                .query_one(
                    "SELECT count(*) FROM a2a_remote_agents WHERE tenant_id = $1",
                    &[&r.tenant_id],
                )
                .await?
                .get(0);
            if held >= quota {
                return Ok(false);
            }
            let credential = split(&r.credential);
            let mut params = written(r, &credential).to_vec();
            let policy = r.card_trust.policy.as_str();
            let keys = r.card_trust.keys_json();
            params.extend_from_slice(&[&r.created_by, &r.created_at, &policy, &keys]);
            tx.execute(
                "INSERT INTO a2a_remote_agents (tenant_id, registration_id, name, endpoint,
                    credential_key_id, credential_nonce, credential_ciphertext,
                    deduplicates_message_ids, created_by, created_at, updated_at,
                    card_trust, card_trusted_keys)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12)",
                &params,
            )
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// The registration if it belongs to `tenant_id`.
    pub async fn registration(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Option<Registration>, StoreError> {
        self.registration_row(
            Call::Read,
            &format!(
                "SELECT {REGISTRATION_COLUMNS} FROM a2a_remote_agents
                 WHERE tenant_id = $1 AND registration_id = $2"
            ),
            &[&tenant_id, &id],
        )
        .await
    }

    /// A page of `tenant_id`'s registrations, oldest first (`created_at`, then id), after
    /// `after`: at most `limit`, summaries only (the discovered card is not read). Keyset
    /// pagination on `a2a_remote_agents_by_tenant`.
    pub async fn registration_page(
        &self,
        tenant_id: &str,
        after: Option<&RegistrationPosition>,
        limit: i64,
    ) -> Result<Vec<RegistrationSummary>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let rows = match after {
                None => {
                    client
                        .query(
                            &format!(
                                "SELECT {SUMMARY_COLUMNS} FROM a2a_remote_agents
                                 WHERE tenant_id = $1
                                 ORDER BY created_at, registration_id LIMIT $2"
                            ),
                            &[&tenant_id, &limit],
                        )
                        .await?
                }
                Some(after) => {
                    client
                        .query(
                            &format!(
                                "SELECT {SUMMARY_COLUMNS} FROM a2a_remote_agents
                                 WHERE tenant_id = $1
                                   AND (created_at, registration_id) > ($2, $3)
                                 ORDER BY created_at, registration_id LIMIT $4"
                            ),
                            &[
                                &tenant_id,
                                &after.created_at,
                                &after.registration_id,
                                &limit,
                            ],
                        )
                        .await?
                }
            };
            rows.iter().map(summary_from_row).collect()
        })
    }

    pub async fn delete_registration(&self, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
        let n = self
            .execute(
                Call::WriteOnce,
                "DELETE FROM a2a_remote_agents WHERE tenant_id = $1 AND registration_id = $2",
                &[&tenant_id, &id],
            )
            .await?;
        Ok(n == 1)
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
        on_connection!(self.pool, Call::WriteOnce, |client| {
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
        })
    }

    /// Takes a delegation back to `sending` for one more send to `target_sha256`; false when
    /// another request got there first or the row no longer is what `from` says.
    pub async fn reclaim(
        &self,
        key: &DelegationKey,
        from: Reclaim,
        target_sha256: &str,
    ) -> Result<bool, StoreError> {
        let sql = match from {
            Reclaim::NotSent => {
                "UPDATE a2a_delegations SET outcome = 'sending', send_attempts = send_attempts + 1,
                    target_sha256 = $4, updated_at = now()
                 WHERE tenant_id = $1 AND principal_id = $2 AND task_id = $3
                   AND outcome = 'not_sent'"
            }
            Reclaim::Unknown => {
                "UPDATE a2a_delegations SET outcome = 'sending', send_attempts = send_attempts + 1,
                    updated_at = now()
                 WHERE tenant_id = $1 AND principal_id = $2 AND task_id = $3
                   AND outcome = 'unknown' AND remote_task_id IS NULL AND target_sha256 = $4"
            }
        };
        let params: &Params = &[
            &key.tenant_id,
            &key.principal_id,
            &key.task_id,
            &target_sha256,
        ];
        Ok(self.execute(Call::WriteOnce, sql, params).await? == 1)
    }

    /// Writes the delegation's outcome, only when something in it changed: an unchanged row is
    /// not rewritten (no new tuple, no WAL, `updated_at` keeps the last change).
    pub async fn record_delegation(
        &self,
        key: &DelegationKey,
        update: &DelegationUpdate,
    ) -> Result<(), StoreError> {
        self.execute(
            Call::Write,
            "UPDATE a2a_delegations SET outcome = $4, status = $5,
                remote_task_id = COALESCE($6, remote_task_id), result = COALESCE($7, result),
                error = $8, context_id = COALESCE($9, context_id), updated_at = now()
             WHERE tenant_id = $1 AND principal_id = $2 AND task_id = $3
               AND (outcome IS DISTINCT FROM $4 OR status IS DISTINCT FROM $5
                    OR remote_task_id IS DISTINCT FROM COALESCE($6, remote_task_id)
                    OR result IS DISTINCT FROM COALESCE($7, result)
                    OR error IS DISTINCT FROM $8
                    OR context_id IS DISTINCT FROM COALESCE($9, context_id))",
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

impl PgOutboundStore {
    /// Deletes at most `batch` delegations unchanged for `age`; how many. Whatever their
    /// outcome: a row younger than `age` (a send in flight included) is never touched, and the
    /// age is re-checked on the row deleted, so one changed meanwhile stays.
    pub async fn delete_stale_delegations(
        &self,
        age: std::time::Duration,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let seconds = age.as_secs_f64();
        self.execute(
            Call::Write,
            "DELETE FROM a2a_delegations
             WHERE (tenant_id, principal_id, task_id) IN (
                    SELECT tenant_id, principal_id, task_id FROM a2a_delegations
                    WHERE updated_at < now() - make_interval(secs => $1)
                    ORDER BY updated_at LIMIT $2)
               AND updated_at < now() - make_interval(secs => $1)",
            &[&seconds, &batch],
        )
        .await
    }

    /// Clears at most `batch` discovered cards older than `age`; how many. The registrations
    /// stay; discovering again stores a fresh card.
    pub async fn clear_stale_cards(
        &self,
        age: std::time::Duration,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let seconds = age.as_secs_f64();
        self.execute(
            Call::Write,
            "UPDATE a2a_remote_agents SET discovered_card = NULL, discovered_at = NULL
             WHERE registration_id IN (
                    SELECT registration_id FROM a2a_remote_agents
                    WHERE discovered_at < now() - make_interval(secs => $1)
                    ORDER BY discovered_at LIMIT $2)
               AND discovered_at < now() - make_interval(secs => $1)",
            &[&seconds, &batch],
        )
        .await
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

/// What a registration write sets, as `$1`..`$8`: tenant, id, name, endpoint, the credential's
/// three columns and the deduplication declaration.
fn written<'a>(
    r: &'a Registration,
    credential: &'a CredentialColumns,
) -> [&'a (dyn ToSql + Sync); 8] {
    [
        &r.tenant_id,
        &r.id,
        &r.name,
        &r.endpoint,
        &credential.0,
        &credential.1,
        &credential.2,
        &r.deduplicates_message_ids,
    ]
}
