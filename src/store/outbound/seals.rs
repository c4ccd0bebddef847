//! Sealed credentials across every tenant, for re-sealing under the active key
//! (`q-a2a-gateway credentials reseal`) and for preflight's count of what still needs an old key.

use super::row::REGISTRATION_COLUMNS;
use super::{split, PgOutboundStore, Registration, SealedCredential, StoreError};
use crate::store::pool::on_connection;
use crate::store::Call;

impl PgOutboundStore {
    /// Registrations whose credential is sealed under a key other than `active`, after `after`
    /// in id order, at most `limit`.
    pub async fn sealed_elsewhere_after(
        &self,
        active: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Registration>, StoreError> {
        self.registrations_page(
            "registration_id > $1 AND credential_key_id IS NOT NULL AND credential_key_id <> $2",
            &[&after.unwrap_or(""), &active, &limit],
        )
        .await
    }

    /// Replaces the registration's sealed credential with `new`, only if the row still holds
    /// exactly `old` for the same endpoint (compare and swap: a credential set or an endpoint
    /// moved meanwhile wins). In the same transaction, the delegations that were sent with
    /// the old seal (`old_target`) are marked as sent with the new one (`new_target`): it is the
    /// same credential, so a resend stays a resend to the same target. False when the row
    /// changed.
    pub async fn replace_seal(
        &self,
        r: &Registration,
        old: &SealedCredential,
        new: &SealedCredential,
        old_target: &str,
        new_target: &str,
    ) -> Result<bool, StoreError> {
        let (old_key, old_nonce, old_ciphertext) = split(&Some(old.clone()));
        let (new_key, new_nonce, new_ciphertext) = split(&Some(new.clone()));
        // Once: a second run after the first committed would answer "changed meanwhile".
        on_connection!(self.pool, Call::WriteOnce, |client| {
            let tx = client.transaction().await?;
            let n = tx
                .execute(
                    "UPDATE a2a_remote_agents SET credential_key_id = $4, credential_nonce = $5,
                            credential_ciphertext = $6
                      WHERE tenant_id = $1 AND registration_id = $2 AND endpoint = $3
                        AND credential_key_id = $7 AND credential_nonce = $8
                        AND credential_ciphertext = $9",
                    &[
                        &r.tenant_id,
                        &r.id,
                        &r.endpoint,
                        &new_key,
                        &new_nonce,
                        &new_ciphertext,
                        &old_key,
                        &old_nonce,
                        &old_ciphertext,
                    ],
                )
                .await?;
            if n != 1 {
                return Ok(false);
            }
            tx.execute(
                "UPDATE a2a_delegations SET target_sha256 = $4
                  WHERE tenant_id = $1 AND registration_id = $2 AND target_sha256 = $3",
                &[&r.tenant_id, &r.id, &old_target, &new_target],
            )
            .await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    /// How many credentials are sealed under each key id.
    pub async fn seals_by_key(&self) -> Result<Vec<(String, i64)>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    "SELECT credential_key_id, count(*) FROM a2a_remote_agents
                      WHERE credential_key_id IS NOT NULL GROUP BY 1 ORDER BY 1",
                    &[],
                )
                .await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect()
        })
    }

    /// The registration, whatever its tenant (the re-sealer's re-read of a row that changed).
    pub async fn registration_by_id(&self, id: &str) -> Result<Option<Registration>, StoreError> {
        self.registration_row(
            Call::Read,
            &format!(
                "SELECT {REGISTRATION_COLUMNS} FROM a2a_remote_agents WHERE registration_id = $1"
            ),
            &[&id],
        )
        .await
    }
}
