//! A registration's card trust (`20261202_000000_a2a_card_trust`): its policy, the public keys
//! its tenant's admin trusts for its remote's card signatures, and the last check, as read
//! from a row. The writes are in `discovered`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;

use super::StoreError;
use crate::card_signature::{PublicKey, TrustPolicy, Verification};

/// How a registration trusts its remote's card.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardTrust {
    pub policy: TrustPolicy,
    /// Public keys only, each under its `kid`.
    pub keys: Vec<PublicKey>,
    /// The last check of the stored card under this policy and these keys; `None` when no
    /// card was checked since they were set.
    pub verification: Option<Verification>,
    pub checked_at: Option<DateTime<Utc>>,
}

impl CardTrust {
    /// The trusted keys as stored: public JWKs.
    pub fn keys_json(&self) -> Value {
        Value::Array(self.keys.iter().map(PublicKey::to_jwk).collect())
    }

    /// Whether the stored card is verified under the current policy and keys.
    pub fn verified(&self) -> bool {
        self.verification.as_ref().is_some_and(|v| v.verified)
    }
}

/// What discovery or a trust change leaves stored: the card (if any) and its check.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedCard {
    pub card: Option<Value>,
    pub verification: Option<Verification>,
}

pub(super) fn trust_from_row(row: &Row) -> Result<CardTrust, StoreError> {
    let policy: String = row.try_get("card_trust")?;
    let policy = TrustPolicy::parse(&policy)
        .ok_or_else(|| StoreError::Corrupt(format!("card_trust {policy:?}")))?;
    let keys: Value = row.try_get("card_trusted_keys")?;
    let keys = keys
        .as_array()
        .ok_or_else(|| StoreError::Corrupt("card_trusted_keys is not an array".into()))?
        .iter()
        .map(|jwk| {
            PublicKey::from_jwk(jwk)
                .map_err(|e| StoreError::Corrupt(format!("card_trusted_keys: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let verification: Option<Value> = row.try_get("card_verification")?;
    let verification = verification
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("card_verification: {e}")))?;
    Ok(CardTrust {
        policy,
        keys,
        verification,
        checked_at: row.try_get("card_checked_at")?,
    })
}
