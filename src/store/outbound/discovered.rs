//! Writes of a registration's discovered card and card trust
//! (`20261202_000000_a2a_card_trust`). The decisions are the caller's
//! (`outbound::card_trust`); each write here is one statement, or one transaction with the
//! row it depends on, so a discovery and a change of trust cannot interleave.

use serde_json::Value;

use super::row::{registration_from_row, REGISTRATION_COLUMNS};
use super::trust::CheckedCard;
use super::{split, written, PgOutboundStore, Registration, StoreError};
use crate::card_signature::Verification;
use crate::store::pool::on_connection;
use crate::store::Call;

fn verification_json(v: &Option<Verification>) -> Option<Value> {
    v.as_ref()
        .map(|v| serde_json::to_value(v).expect("a verification serializes"))
}

impl PgOutboundStore {
    /// Writes name, endpoint, credential, the deduplication declaration and the card trust of
    /// an existing registration, under a lock on its row. A changed endpoint clears the
    /// discovered card and its check: they described the old one. A changed policy or key set
    /// hands the stored card to `recheck`, whose answer is stored (in the same transaction, so
    /// a discovery cannot slip in between).
    pub async fn update_registration(
        &self,
        r: &Registration,
        recheck: impl Fn(Option<&Value>) -> CheckedCard,
    ) -> Result<Option<Registration>, StoreError> {
        // Sets every column to what `r` and the check say: a second run writes the same.
        on_connection!(self.pool, Call::Write, |client| {
            let tx = client.transaction().await?;
            let Some(current) = tx
                .query_opt(
                    &format!(
                        "SELECT {REGISTRATION_COLUMNS} FROM a2a_remote_agents
                          WHERE tenant_id = $1 AND registration_id = $2 FOR UPDATE"
                    ),
                    &[&r.tenant_id, &r.id],
                )
                .await?
            else {
                return Ok(None);
            };
            let current = registration_from_row(&current)?;
            let checked = if current.endpoint != r.endpoint {
                CheckedCard {
                    card: None,
                    verification: None,
                }
            } else if current.card_trust.policy != r.card_trust.policy
                || current.card_trust.keys != r.card_trust.keys
            {
                recheck(current.discovered_card.as_ref())
            } else {
                CheckedCard {
                    card: current.discovered_card.clone(),
                    verification: current.card_trust.verification.clone(),
                }
            };
            let kept_check = checked.verification == current.card_trust.verification
                && checked.card == current.discovered_card;
            let credential = split(&r.credential);
            let mut params = written(r, &credential).to_vec();
            let policy = r.card_trust.policy.as_str();
            let keys = r.card_trust.keys_json();
            let verification = verification_json(&checked.verification);
            params.extend_from_slice(&[&policy, &keys, &checked.card, &verification, &kept_check]);
            let row = tx
                .query_one(
                    &format!(
                        "UPDATE a2a_remote_agents SET name = $3,
                            discovered_card = $11,
                            discovered_at = CASE WHEN $11::jsonb IS NULL THEN NULL
                                                 ELSE discovered_at END,
                            endpoint = $4, credential_key_id = $5, credential_nonce = $6,
                            credential_ciphertext = $7, deduplicates_message_ids = $8,
                            card_trust = $9, card_trusted_keys = $10, card_verification = $12,
                            card_checked_at = CASE WHEN $13 THEN card_checked_at
                                                   WHEN $12::jsonb IS NULL THEN NULL
                                                   ELSE now() END,
                            updated_at = now()
                         WHERE tenant_id = $1 AND registration_id = $2
                         RETURNING {REGISTRATION_COLUMNS}"
                    ),
                    &params,
                )
                .await?;
            tx.commit().await?;
            registration_from_row(&row).map(Some)
        })
    }

    /// Stores what discovery found and checked, only if the registration still has the
    /// endpoint it was fetched from and the trust it was checked under. `None` when it no
    /// longer does (or is gone); nothing is written then.
    pub async fn record_discovered_card(
        &self,
        r: &Registration,
        checked: &CheckedCard,
    ) -> Result<Option<Registration>, StoreError> {
        let verification = verification_json(&checked.verification);
        let policy = r.card_trust.policy.as_str();
        let keys = r.card_trust.keys_json();
        self.registration_row(
            Call::Write,
            &format!(
                "UPDATE a2a_remote_agents SET discovered_card = $4,
                    discovered_at = CASE WHEN $4::jsonb IS NULL THEN NULL ELSE now() END,
                    card_verification = $5, card_checked_at = now()
                 WHERE tenant_id = $1 AND registration_id = $2 AND endpoint = $3
                   AND card_trust = $6 AND card_trusted_keys = $7
                 RETURNING {REGISTRATION_COLUMNS}"
            ),
            &[
                &r.tenant_id,
                &r.id,
                &r.endpoint,
                &checked.card,
                &verification,
                &policy,
                &keys,
            ],
        )
        .await
    }
}
