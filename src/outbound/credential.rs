//! The credential registry's cryptography: bearer credentials of remote agents are sealed with
//! AES-256-GCM under a configured key, and bound to where they may be used.
//!
//! - Keys come from configuration with ids (`k1:<base64 32 bytes>,k2:...`); new seals use the
//!   active key, opening uses the key id stored with the ciphertext, so keys can rotate without
//!   re-encrypting everything at once.
//! - The additional authenticated data binds a ciphertext to its tenant, its registration and
//!   the endpoint's origin (`scheme://host:port`). A ciphertext copied to another tenant's or
//!   registration's row, or kept after the endpoint moved to another origin, does not open.
//! - [`BearerCredential`] never prints its value (`Debug` is redacted; there is no `Display`).

use std::collections::HashMap;

use crate::store::outbound::SealedCredential;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;

/// A bearer credential in clear, in memory only.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerCredential(String);

impl BearerCredential {
    pub fn new(value: String) -> Self {
        BearerCredential(value)
    }
    /// The value, for the one place that sends it: the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for BearerCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerCredential(<redacted>)")
    }
}

/// Who and where a credential is for; the additional authenticated data.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    pub tenant_id: &'a str,
    pub registration_id: &'a str,
    /// `scheme://host:port` of the registered endpoint.
    pub origin: &'a str,
}

impl Binding<'_> {
    fn aad(&self) -> Vec<u8> {
        // Length-prefixed fields: no two bindings share an encoding.
        let mut aad = b"q-a2a-credential/v1".to_vec();
        for field in [self.tenant_id, self.registration_id, self.origin] {
            aad.extend_from_slice(&(field.len() as u32).to_be_bytes());
            aad.extend_from_slice(field.as_bytes());
        }
        aad
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("no credential key is configured (Q_A2A_CREDENTIAL_KEYS)")]
    NotConfigured,
    #[error("credential key {0:?} is not configured")]
    UnknownKey(String),
    /// Wrong key, tampered ciphertext, or a binding (tenant, registration, origin) other than
    /// the one it was sealed for.
    #[error("stored credential does not open for this binding")]
    Open,
    #[error("sealing failed")]
    Seal,
    #[error("invalid credential key configuration: {0}")]
    Config(String),
}

/// The configured keys; `Debug` shows ids only.
#[derive(Clone, Default)]
pub struct CredentialKeys {
    keys: HashMap<String, Key<Aes256Gcm>>,
    active: Option<String>,
}

impl std::fmt::Debug for CredentialKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<&String> = self.keys.keys().collect();
        ids.sort();
        f.debug_struct("CredentialKeys")
            .field("ids", &ids)
            .field("active", &self.active)
            .finish()
    }
}

impl CredentialKeys {
    /// Parses `k1:<base64 32 bytes>[,k2:...]` and the active key id. Both empty: no keys (a
    /// registration can then not hold a credential).
    pub fn parse(list: &str, active: &str) -> Result<Self, CredentialError> {
        let mut keys = HashMap::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (id, encoded) = entry
                .split_once(':')
                .ok_or_else(|| CredentialError::Config("expected id:base64".into()))?;
            let id = id.trim();
            if id.is_empty()
                || id.len() > 64
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(CredentialError::Config(format!("invalid key id {id:?}")));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map_err(|_| CredentialError::Config(format!("key {id:?} is not base64")))?;
            if bytes.len() != 32 {
                return Err(CredentialError::Config(format!(
                    "key {id:?} has {} bytes, expected 32",
                    bytes.len()
                )));
            }
            if keys
                .insert(id.to_string(), *Key::<Aes256Gcm>::from_slice(&bytes))
                .is_some()
            {
                return Err(CredentialError::Config(format!("key {id:?} given twice")));
            }
        }
        let active = active.trim();
        let active =
            match (keys.is_empty(), active.is_empty()) {
                (true, true) => None,
                (false, true) if keys.len() == 1 => keys.keys().next().cloned(),
                (false, true) => return Err(CredentialError::Config(
                    "several keys configured: name the active one (Q_A2A_CREDENTIAL_ACTIVE_KEY)"
                        .into(),
                )),
                (_, false) if keys.contains_key(active) => Some(active.to_string()),
                (_, false) => return Err(CredentialError::UnknownKey(active.to_string())),
            };
        Ok(CredentialKeys { keys, active })
    }

    /// How many keys are configured (the active one and those kept for reading).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a key of this id is configured (for opening, if not the active one).
    pub fn has_key(&self, id: &str) -> bool {
        self.keys.contains_key(id)
    }

    pub fn active_key_id(&self) -> Option<&str> {
        self.active.as_deref()
    }

    /// Seals `credential` for `binding` under the active key, with a fresh random nonce.
    pub fn seal(
        &self,
        credential: &BearerCredential,
        binding: Binding<'_>,
    ) -> Result<SealedCredential, CredentialError> {
        let key_id = self.active.as_ref().ok_or(CredentialError::NotConfigured)?;
        let cipher = Aes256Gcm::new(&self.keys[key_id]);
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let aad = binding.aad();
        let ciphertext = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: credential.expose().as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| CredentialError::Seal)?;
        Ok(SealedCredential {
            key_id: key_id.clone(),
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// Opens a stored credential; fails unless `binding` is the one it was sealed for.
    pub fn open(
        &self,
        sealed: &SealedCredential,
        binding: Binding<'_>,
    ) -> Result<BearerCredential, CredentialError> {
        let key = self
            .keys
            .get(&sealed.key_id)
            .ok_or_else(|| CredentialError::UnknownKey(sealed.key_id.clone()))?;
        if sealed.nonce.len() != 12 {
            return Err(CredentialError::Open);
        }
        let aad = binding.aad();
        let clear = Aes256Gcm::new(key)
            .decrypt(
                Nonce::from_slice(&sealed.nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| CredentialError::Open)?;
        String::from_utf8(clear)
            .map(BearerCredential)
            .map_err(|_| CredentialError::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "HxwdHhscGhkYFxYVFBMSERAPDg0MCwoJCAcGBQQDAgE=";

    fn binding<'a>(tenant: &'a str, registration: &'a str, origin: &'a str) -> Binding<'a> {
        Binding {
            tenant_id: tenant,
            registration_id: registration,
            origin,
        }
    }

    fn secret() -> BearerCredential {
        BearerCredential::new("s3cret-remote-token".into())
    }

    #[test]
    fn seals_and_opens_for_the_same_binding() {
        let keys = CredentialKeys::parse(&format!("k1:{K1}"), "k1").unwrap();
        let b = binding("t-acme", "reg-1", "https://remote.example:443");
        let sealed = keys.seal(&secret(), b).unwrap();
        assert_eq!(sealed.key_id, "k1");
        assert!(!sealed
            .ciphertext
            .windows(secret().expose().len())
            .any(|w| w == secret().expose().as_bytes()));
        assert_eq!(keys.open(&sealed, b).unwrap(), secret());
    }

    #[test]
    fn wrong_tenant_registration_or_origin_does_not_open() {
        let keys = CredentialKeys::parse(&format!("k1:{K1}"), "k1").unwrap();
        let sealed = keys
            .seal(
                &secret(),
                binding("t-acme", "reg-1", "https://remote.example:443"),
            )
            .unwrap();
        for wrong in [
            binding("t-globex", "reg-1", "https://remote.example:443"),
            binding("t-acme", "reg-2", "https://remote.example:443"),
            binding("t-acme", "reg-1", "https://other.example:443"),
            binding("t-acme", "reg-1", "http://remote.example:443"),
            binding("t-acme", "reg-1", "https://remote.example:8443"),
            // Field boundaries are part of the binding.
            binding("t-acmereg-1", "", "https://remote.example:443"),
        ] {
            assert_eq!(keys.open(&sealed, wrong), Err(CredentialError::Open));
        }
        let mut tampered = sealed.clone();
        tampered.ciphertext[0] ^= 1;
        assert_eq!(
            keys.open(
                &tampered,
                binding("t-acme", "reg-1", "https://remote.example:443")
            ),
            Err(CredentialError::Open)
        );
    }

    #[test]
    fn rotation_seals_with_active_and_opens_with_stored_key_id() {
        let old = CredentialKeys::parse(&format!("k1:{K1}"), "k1").unwrap();
        let b = binding("t-acme", "reg-1", "https://remote.example:443");
        let sealed_k1 = old.seal(&secret(), b).unwrap();
        let rotated = CredentialKeys::parse(&format!("k1:{K1},k2:{K2}"), "k2").unwrap();
        assert_eq!(rotated.open(&sealed_k1, b).unwrap(), secret());
        assert_eq!(rotated.seal(&secret(), b).unwrap().key_id, "k2");
        let retired = CredentialKeys::parse(&format!("k2:{K2}"), "k2").unwrap();
        assert_eq!(
            retired.open(&sealed_k1, b),
            Err(CredentialError::UnknownKey("k1".into()))
        );
    }

    #[test]
    fn configuration_errors_are_refused() {
        assert!(CredentialKeys::parse("k1:short", "k1").is_err());
        assert!(CredentialKeys::parse(&format!("k1{K1}"), "").is_err());
        assert!(CredentialKeys::parse(&format!("k1:{K1}"), "k9").is_err());
        assert!(CredentialKeys::parse(&format!("k1:{K1},k2:{K2}"), "").is_err());
        assert!(CredentialKeys::parse(&format!("k1:{K1},k1:{K2}"), "k1").is_err());
        let none = CredentialKeys::parse("", "").unwrap();
        assert_eq!(
            none.seal(&secret(), binding("t", "r", "o")),
            Err(CredentialError::NotConfigured)
        );
    }

    #[test]
    fn debug_never_shows_secrets() {
        assert_eq!(format!("{:?}", secret()), "BearerCredential(<redacted>)");
        let keys = CredentialKeys::parse(&format!("k1:{K1}"), "k1").unwrap();
        let shown = format!("{keys:?}");
        assert!(!shown.contains(K1) && shown.contains("k1"));
    }
}
