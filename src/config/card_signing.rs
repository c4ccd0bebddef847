//! The `[card_signing]` section: the keys that sign the agent cards this gateway serves
//! (docs/outbound.md, "Signed agent cards").

use std::path::PathBuf;

use serde::Deserialize;

/// Signing of served agent cards; off while `keys_dir` is unset.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CardSigningConfig {
    /// Directory of private keys, one file per key named by its id: `<kid>.pem` (PKCS#8) or
    /// `<kid>.jwk` / `<kid>.json` (a private JWK); ES256 (P-256) or EdDSA (Ed25519). The Helm
    /// chart mounts its Secret here. Unset: cards are served unsigned.
    pub keys_dir: Option<PathBuf>,
    /// Id of the key that signs; may be empty when the directory holds exactly one key. The
    /// others are published (`card-keys`) but sign nothing: the next key of a rotation.
    pub active_key: String,
    /// Serve the public keys as a JWK Set, unauthenticated, at
    /// `/v1/a2a/.well-known/jwks.json`. Off: operators hand partners the output of
    /// `q-a2a-gateway card-keys` instead.
    pub publish_keys: bool,
}
