//! Agent card signatures (A2A 1.0 `AgentCard.signatures`): signing the cards the gateway
//! serves, and verifying the cards it discovers, interoperable with the official Python SDK
//! (a2a-sdk 1.2.2, `a2a.utils.signing`) in both directions (docs/outbound.md).
//!
//! A signature is a JWS with a detached payload: the card's signed form, which is RFC 8785
//! over the card as the SDK reads it, with `signatures` and empty values removed.
//!
//! - [`jcs`]: RFC 8785 canonical JSON
//! - [`form`] (with [`legacy`]): the signed form of a card, the SDK's rules
//! - [`keys`]: ES256 and EdDSA keys from PEM or JWK, through `ring`
//! - [`jws`]: one signature, made or checked
//! - [`keyring`]: the keys that sign served cards, one active
//! - [`signer`]: a served card's signed body and `ETag`
//! - [`verify`]: a discovered card checked against a registration's trusted keys
//!
//! Keys are never fetched: a verifier uses only the keys an operator configured, whatever a
//! card or its header names (`jku`, `x5u`, `jwk`).

pub mod form;
pub mod jcs;
pub mod jws;
pub mod keyring;
pub mod keys;
pub mod legacy;
pub mod signer;
pub mod verify;

pub use keyring::CardKeys;
pub use keys::{KeyError, PublicKey, SigningKey};
pub use signer::{CardSigner, ServedCard};
pub use verify::{verify, TrustPolicy, Verification};
