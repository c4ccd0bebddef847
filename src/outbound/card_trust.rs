//! A registration's trust in its remote's card: the `cardTrust` of the management API, what a
//! discovered card leaves stored under it, and the delegation precondition of `require`
//! (docs/outbound.md, "Verifying discovered cards").
//!
//! The policy and the trusted keys are the tenant admin's word (scope `a2a:agents`), like the
//! endpoint and the credential: nothing a card says can add a key, and no key is ever fetched
//! from a URL a card or its signature header names.
//!
//! | policy | discovery | the card stored | delegation |
//! |---|---|---|---|
//! | `ignore` (default) | not checked: `not_checked` | as fetched | allowed |
//! | `prefer` | checked and reported | verified: as the SDK reads it, with its signatures; otherwise as fetched | allowed |
//! | `require` | checked and reported | verified: as for `prefer`; otherwise **none** (a stored one is cleared) | refused unless the stored card is verified |
//!
//! A verified card is stored as the official SDK holds it after parsing (A2A 1.0 fields only)
//! plus its signatures: what the signature covers, so nothing unsigned is kept beside a
//! `verified: true`. Changing the policy or the keys checks the stored card again at once,
//! under the same rules.

use serde::Deserialize;
use serde_json::{json, Value};

use super::invalid;
use crate::card_signature::{self, form, PublicKey, TrustPolicy, Verification};
use crate::error::HttpError;
use crate::store::outbound::{CardTrust, CheckedCard, Registration};

/// Most keys one registration trusts: a rotation's two, with room to spare.
pub const MAX_TRUSTED_KEYS: usize = 8;

/// The `cardTrust` of a create or update body; an absent member keeps its value.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrustBody {
    #[serde(default)]
    policy: Option<Value>,
    #[serde(default)]
    trusted_keys: Option<Value>,
}

/// Applies a body's `cardTrust` to `trust`; refuses, naming the field, anything that is not a
/// policy, a public key or a consistent combination of the two.
pub fn apply(trust: &mut CardTrust, body: &TrustBody) -> Result<(), HttpError> {
    if let Some(policy) = &body.policy {
        trust.policy = policy
            .as_str()
            .and_then(TrustPolicy::parse)
            .ok_or_else(|| invalid("cardTrust.policy", "\"ignore\", \"prefer\" or \"require\""))?;
    }
    if let Some(keys) = &body.trusted_keys {
        trust.keys = parse_keys(keys)?;
    }
    if trust.policy != TrustPolicy::Ignore && trust.keys.is_empty() {
        return Err(invalid(
            "cardTrust.trustedKeys",
            format!(
                "policy {:?} needs at least one trusted key to check signatures with",
                trust.policy.as_str()
            ),
        ));
    }
    Ok(())
}

/// A JWK Set (`{"keys": [...]}`) or a list; each entry a public JWK with its `kid`, or
/// `{"kid", "pem"}` with a PEM `PUBLIC KEY`.
fn parse_keys(value: &Value) -> Result<Vec<PublicKey>, HttpError> {
    let list = value
        .get("keys")
        .unwrap_or(value)
        .as_array()
        .ok_or_else(|| {
            invalid(
                "cardTrust.trustedKeys",
                "a list of public keys (JWKs, or {\"kid\", \"pem\"}), or a JWK Set",
            )
        })?;
    if list.len() > MAX_TRUSTED_KEYS {
        return Err(invalid(
            "cardTrust.trustedKeys",
            format!("at most {MAX_TRUSTED_KEYS} keys"),
        ));
    }
    let mut keys: Vec<PublicKey> = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let field = format!("cardTrust.trustedKeys[{i}]");
        let key = match entry.get("pem") {
            Some(pem) => {
                let kid = entry.get("kid").and_then(Value::as_str).unwrap_or_default();
                let pem = pem
                    .as_str()
                    .ok_or_else(|| invalid(&field, "\"pem\" is a PEM text"))?;
                PublicKey::from_pem(kid, pem)
            }
            None => PublicKey::from_jwk(entry),
        }
        .map_err(|e| invalid(&field, e.0))?;
        if keys.iter().any(|k| k.kid() == key.kid()) {
            return Err(invalid(
                &field,
                format!("key id {:?} given twice", key.kid()),
            ));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// The management view of a registration's trust: public keys only.
pub fn view(trust: &CardTrust) -> Value {
    let verification = trust.verification.as_ref().map(|v| {
        let mut shown = serde_json::to_value(v).expect("a verification serializes");
        shown["checkedAt"] = json!(trust.checked_at);
        shown
    });
    json!({
        "policy": trust.policy.as_str(),
        "trustedKeys": trust.keys_json(),
        "verification": verification,
    })
}

/// What a card fetched from (or stored for) `endpoint` leaves stored under `trust`.
pub fn check(trust: &CardTrust, card: Value, endpoint: &str) -> CheckedCard {
    if trust.policy == TrustPolicy::Ignore {
        return CheckedCard {
            card: Some(card),
            verification: Some(Verification::not_checked()),
        };
    }
    let verification = card_signature::verify(&card, &trust.keys, endpoint);
    metrics::counter!(
        crate::metrics::CARD_VERIFICATIONS,
        "policy" => trust.policy.as_str(),
        "reason" => verification.reason.clone(),
    )
    .increment(1);
    let card = if verification.verified {
        Some(signed_view(&card))
    } else if trust.policy == TrustPolicy::Prefer {
        Some(card)
    } else {
        None
    };
    CheckedCard {
        card,
        verification: Some(verification),
    }
}

/// A stored card checked again under a changed trust: the same rules as discovery.
pub fn recheck(trust: &CardTrust, stored: Option<&Value>, endpoint: &str) -> CheckedCard {
    match stored {
        Some(card) => check(trust, card.clone(), endpoint),
        None => CheckedCard {
            card: None,
            verification: None,
        },
    }
}

/// A verified card as the SDK reads it, with its signatures: what the signature covers.
fn signed_view(card: &Value) -> Value {
    let mut view = form::sdk_view(card).expect("a verified card has a signed form");
    if let Some(signatures) = card.get("signatures") {
        view["signatures"] = signatures.clone();
    }
    view
}

/// Under `require`, delegation needs a stored card verified under the current keys.
pub fn delegation_allowed(registration: &Registration) -> Result<(), HttpError> {
    let trust = &registration.card_trust;
    if trust.policy != TrustPolicy::Require || trust.verified() {
        return Ok(());
    }
    let reason = trust
        .verification
        .as_ref()
        .map_or("not_discovered", |v| v.reason.as_str())
        .to_string();
    Err(HttpError::CardNotVerified { reason })
}

#[cfg(test)]
mod tests;
