//! Signing the cards the gateway serves, and the validators (`ETag`) that follow them.
//!
//! A card is signed as served: after every per-agent field (name, description, version, the
//! interface URL from the public base) is filled in, so the signature covers exactly what a
//! client receives. The signature is computed over the card's signed form ([`super::form`]) with
//! the active key, once per card content in a process (`a2a::card::ServedCards` keeps the
//! result); an ES256 signature differs on every signing (ECDSA draws a fresh nonce), so two
//! replicas serve different signatures of one content, an EdDSA one does not, and either
//! verifies.
//!
//! The `ETag` of a signed card is the SHA-256 of the card's RFC 8785 form without signatures,
//! followed by the signing key's id (an unsigned card's is the SHA-256 of its body). So it changes with the signed content and with the key that signs it,
//! and two signings of the same card under the same key share it, on every replica: a client
//! revalidating after a key switch gets the card signed by the new key, and one revalidating
//! the same content under the same key gets a 304 (its copy's signature is as valid as a new
//! one). The card's `Last-Modified` follows the `ETag` (`a2a::card`).

use a2a::{AgentCard, AgentCardSignature};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::form::{self, FormError};
use super::jcs;
use super::jws;
use super::keyring::CardKeys;
use super::keys::KeyError;
use crate::config::CardSigningConfig;

/// Signs served cards with the active key, or serves them unsigned when no key is configured.
#[derive(Debug, Default)]
pub struct CardSigner {
    keys: Option<CardKeys>,
}

/// A card ready to serve: its JSON body and weak `ETag`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedCard {
    pub body: Vec<u8>,
    pub etag: String,
}

impl CardSigner {
    /// Cards are served unsigned.
    pub fn unsigned() -> CardSigner {
        CardSigner { keys: None }
    }

    /// Cards are signed with `keys`' active key.
    pub fn new(keys: CardKeys) -> CardSigner {
        CardSigner { keys: Some(keys) }
    }

    /// The signer `config` describes: unsigned without `keys_dir`, otherwise every key there
    /// loaded (a key that cannot be used is an error, not a key left out).
    pub fn from_config(config: &CardSigningConfig) -> Result<CardSigner, KeyError> {
        match &config.keys_dir {
            None => Ok(CardSigner::unsigned()),
            Some(dir) => CardKeys::load(dir, &config.active_key).map(CardSigner::new),
        }
    }

    /// The configured keys, if cards are signed.
    pub fn keys(&self) -> Option<&CardKeys> {
        self.keys.as_ref()
    }

    /// Counts one signed card served (`a2a_cards_signed_total{kid}`), whether signed for this
    /// answer or kept from an earlier one (`a2a::card::ServedCards`); nothing when unsigned.
    pub fn count_served(&self) {
        if let Some(keys) = &self.keys {
            metrics::counter!(crate::metrics::CARDS_SIGNED, "kid" => keys.active().kid().to_string())
                .increment(1);
        }
    }

    /// The body and `ETag` of `card` (whose own `signatures` are replaced).
    pub fn serve(&self, card: &AgentCard) -> Result<ServedCard, FormError> {
        let mut card = card.clone();
        card.signatures = None;
        let Some(keys) = &self.keys else {
            // Unsigned: the body is all there is, and its hash the validator.
            let body = serde_json::to_vec(&card).expect("AgentCard serializes");
            return Ok(ServedCard {
                etag: etag(Sha256::digest(&body).into()),
                body,
            });
        };
        let unsigned: Value = serde_json::to_value(&card).expect("AgentCard serializes");
        let key = keys.active();
        let signature = jws::sign(key, &form::signed_bytes(&unsigned)?);
        card.signatures = Some(vec![AgentCardSignature {
            protected: signature.protected,
            signature: signature.signature,
            header: None,
        }]);
        let mut tag = Sha256::new();
        tag.update(jcs::canonicalize(&unsigned)?);
        tag.update([0]);
        tag.update(key.kid().as_bytes());
        Ok(ServedCard {
            body: serde_json::to_vec(&card).expect("AgentCard serializes"),
            etag: etag(tag.finalize().into()),
        })
    }
}

fn etag(digest: [u8; 32]) -> String {
    format!("W/\"{}\"", hex::encode(digest))
}

#[cfg(test)]
mod tests;
