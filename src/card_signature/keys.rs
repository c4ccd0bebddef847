//! Card signing keys: ES256 (ECDSA P-256 with SHA-256, fixed-size `r‖s` signatures as JWS
//! needs) and EdDSA (Ed25519), through `ring`, the crypto the TLS stack already uses.
//!
//! A private key is read from PEM (PKCS#8 `PRIVATE KEY`, what `openssl genpkey` writes) or a
//! JWK with `d`. A public key, trusted to verify a remote's cards, from PEM
//! (`PUBLIC KEY`, SubjectPublicKeyInfo) or a JWK without `d`. Every key has a `kid`: the
//! protected header names it, and a verifier looks the key up by it. Private keys never leave
//! this module: `Debug` shows the key id and algorithm only.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use rustls_pki_types::pem::{PemObject, SectionKind};
use serde_json::{json, Map, Value};

/// Longest key id accepted.
pub const MAX_KID_CHARS: usize = 64;

/// A JWS signature algorithm the gateway signs and verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// ECDSA on P-256 with SHA-256 (RFC 7518 §3.4).
    Es256,
    /// Ed25519 (RFC 8037), named `EdDSA` in JWS; RFC 9864's `Ed25519` is accepted too.
    EdDsa,
}

impl Algorithm {
    /// The `alg` written into a protected header.
    pub fn jws_name(self) -> &'static str {
        match self {
            Algorithm::Es256 => "ES256",
            Algorithm::EdDsa => "EdDSA",
        }
    }

    /// Whether a protected header's `alg` names this algorithm.
    pub fn is_named(self, alg: &str) -> bool {
        match self {
            Algorithm::Es256 => alg == "ES256",
            Algorithm::EdDsa => alg == "EdDSA" || alg == "Ed25519",
        }
    }
}

/// A key that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(pub String);

fn error(message: impl Into<String>) -> KeyError {
    KeyError(message.into())
}

/// A key id: 1 to [`MAX_KID_CHARS`] characters of `A-Z a-z 0-9 . _ -`, so it is safe in a file
/// name, a header and a log line.
pub fn check_kid(kid: &str) -> Result<(), KeyError> {
    let ok = !kid.is_empty()
        && kid.chars().count() <= MAX_KID_CHARS
        && kid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(error(format!(
            "key id {kid:?}: 1 to {MAX_KID_CHARS} characters of A-Z, a-z, 0-9, '.', '_', '-'"
        )))
    }
}

/// A public key, trusted to verify card signatures made under its `kid`.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    kid: String,
    algorithm: Algorithm,
    /// P-256: the uncompressed point `04‖x‖y` (65 bytes); Ed25519: the 32-byte key.
    bytes: Vec<u8>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicKey")
            .field("kid", &self.kid)
            .field("alg", &self.algorithm.jws_name())
            .finish()
    }
}

/// The DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, a 66-byte bit
/// string); the uncompressed point follows.
const P256_SPKI_PREFIX: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// The DER prefix of an Ed25519 SubjectPublicKeyInfo (id-Ed25519, a 33-byte bit string).
const ED25519_SPKI_PREFIX: &[u8] = &[
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

impl PublicKey {
    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// A public JWK (`kty`, `crv`, `x`, `y` for P-256; `kty`, `crv`, `x` for Ed25519) with
    /// `kid`, `alg` and `use: sig`.
    pub fn to_jwk(&self) -> Value {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        let mut jwk = match self.algorithm {
            Algorithm::Es256 => json!({
                "kty": "EC", "crv": "P-256",
                "x": b64(&self.bytes[1..33]), "y": b64(&self.bytes[33..65]),
            }),
            Algorithm::EdDsa => json!({"kty": "OKP", "crv": "Ed25519", "x": b64(&self.bytes)}),
        };
        jwk["kid"] = json!(self.kid);
        jwk["alg"] = json!(self.algorithm.jws_name());
        jwk["use"] = json!("sig");
        jwk
    }

    /// A public JWK; its `kid` is required. A JWK carrying private material (`d`) is refused:
    /// a verifier needs only the public half, and storing the private one would leak it.
    pub fn from_jwk(jwk: &Value) -> Result<PublicKey, KeyError> {
        let jwk = jwk
            .as_object()
            .ok_or_else(|| error("a JWK is a JSON object"))?;
        if jwk.contains_key("d") {
            return Err(error(
                "this JWK holds a private key (\"d\"); give the public key only",
            ));
        }
        let kid = text(jwk, "kid")?.ok_or_else(|| error("the JWK has no \"kid\""))?;
        check_kid(kid)?;
        let (algorithm, bytes) = public_material(jwk)?;
        Ok(PublicKey {
            kid: kid.to_string(),
            algorithm,
            bytes,
        })
    }

    /// A PEM `PUBLIC KEY` (SubjectPublicKeyInfo) of a P-256 or Ed25519 key, under `kid`.
    pub fn from_pem(kid: &str, pem: &str) -> Result<PublicKey, KeyError> {
        check_kid(kid)?;
        let mut sections = <(SectionKind, Vec<u8>)>::pem_slice_iter(pem.as_bytes());
        let (kind, der) = match sections.next() {
            Some(Ok(section)) => section,
            Some(Err(e)) => return Err(error(format!("not a PEM document: {e}"))),
            None => return Err(error("no PEM block found")),
        };
        if sections.next().is_some() {
            return Err(error("one PEM block per key"));
        }
        if kind != SectionKind::PublicKey {
            return Err(error(format!(
                "expected a PUBLIC KEY block, found {kind:?}; give the public key only"
            )));
        }
        let (algorithm, bytes) = if let Some(point) = der.strip_prefix(P256_SPKI_PREFIX) {
            (Algorithm::Es256, point.to_vec())
        } else if let Some(key) = der.strip_prefix(ED25519_SPKI_PREFIX) {
            (Algorithm::EdDsa, key.to_vec())
        } else {
            return Err(error("not a P-256 or Ed25519 public key"));
        };
        let expected = match algorithm {
            Algorithm::Es256 => 65,
            Algorithm::EdDsa => 32,
        };
        if bytes.len() != expected || (algorithm == Algorithm::Es256 && bytes[0] != 0x04) {
            return Err(error("malformed public key"));
        }
        Ok(PublicKey {
            kid: kid.to_string(),
            algorithm,
            bytes,
        })
    }

    /// Whether `signature` is this key's over `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        let algorithm: &dyn signature::VerificationAlgorithm = match self.algorithm {
            Algorithm::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
            Algorithm::EdDsa => &signature::ED25519,
        };
        UnparsedPublicKey::new(algorithm, &self.bytes)
            .verify(message, signature)
            .is_ok()
    }
}

fn text<'a>(jwk: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, KeyError> {
    match jwk.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(error(format!("the JWK's \"{name}\" is not a string"))),
    }
}

fn b64_field(jwk: &Map<String, Value>, name: &str, len: usize) -> Result<Vec<u8>, KeyError> {
    let value = text(jwk, name)?.ok_or_else(|| error(format!("the JWK has no \"{name}\"")))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(value)
        .map_err(|_| error(format!("the JWK's \"{name}\" is not base64url")))?;
    if bytes.len() != len {
        return Err(error(format!(
            "the JWK's \"{name}\" holds {} bytes, not {len}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// The algorithm and public bytes a JWK describes; `alg` and `use`, when present, must agree.
fn public_material(jwk: &Map<String, Value>) -> Result<(Algorithm, Vec<u8>), KeyError> {
    let kty = text(jwk, "kty")?.unwrap_or_default();
    let crv = text(jwk, "crv")?.unwrap_or_default();
    let (algorithm, bytes) = match (kty, crv) {
        ("EC", "P-256") => {
            let mut point = vec![0x04];
            point.extend(b64_field(jwk, "x", 32)?);
            point.extend(b64_field(jwk, "y", 32)?);
            (Algorithm::Es256, point)
        }
        ("OKP", "Ed25519") => (Algorithm::EdDsa, b64_field(jwk, "x", 32)?),
        _ => {
            return Err(error(format!(
                "unsupported key type {kty:?}/{crv:?}: EC P-256 (ES256) or OKP Ed25519 (EdDSA)"
            )))
        }
    };
    if let Some(alg) = text(jwk, "alg")? {
        if !algorithm.is_named(alg) {
            return Err(error(format!(
                "the JWK's \"alg\" {alg:?} does not fit its key type"
            )));
        }
    }
    if let Some(usage) = text(jwk, "use")? {
        if usage != "sig" {
            return Err(error(format!(
                "the JWK's \"use\" is {usage:?}, not \"sig\""
            )));
        }
    }
    Ok((algorithm, bytes))
}

enum Signer {
    Es256(EcdsaKeyPair),
    EdDsa(Ed25519KeyPair),
}

/// A private key that signs the cards this gateway serves.
pub struct SigningKey {
    signer: Signer,
    public: PublicKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.public.kid)
            .field("alg", &self.public.algorithm.jws_name())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    pub fn kid(&self) -> &str {
        &self.public.kid
    }

    pub fn algorithm(&self) -> Algorithm {
        self.public.algorithm
    }

    /// Its public half: what partners are given to verify with.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The JWS signature over `message`: `r‖s` (64 bytes) for ES256, 64 bytes for Ed25519.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match &self.signer {
            Signer::Es256(pair) => pair
                .sign(&self.rng, message)
                .expect("ECDSA signing fails only without system randomness")
                .as_ref()
                .to_vec(),
            Signer::EdDsa(pair) => pair.sign(message).as_ref().to_vec(),
        }
    }

    /// A private key from a PEM document (PKCS#8) or a JWK (JSON with `d`), under `kid`. A
    /// JWK's own `kid`, when present, must be `kid`.
    pub fn parse(kid: &str, text: &str) -> Result<SigningKey, KeyError> {
        check_kid(kid)?;
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') {
            let jwk: Value =
                serde_json::from_str(trimmed).map_err(|e| error(format!("not a JSON JWK: {e}")))?;
            SigningKey::from_jwk(kid, &jwk)
        } else {
            SigningKey::from_pem(kid, text)
        }
    }

    fn from_pem(kid: &str, pem: &str) -> Result<SigningKey, KeyError> {
        let mut sections = <(SectionKind, Vec<u8>)>::pem_slice_iter(pem.as_bytes());
        let (kind, der) = match sections.next() {
            Some(Ok(section)) => section,
            Some(Err(e)) => return Err(error(format!("not a PEM document: {e}"))),
            None => return Err(error("no PEM block found (PEM or JWK expected)")),
        };
        if sections.next().is_some() {
            return Err(error("one PEM block per key file"));
        }
        match kind {
            SectionKind::PrivateKey => {}
            SectionKind::EcPrivateKey => {
                return Err(error(
                    "an EC PRIVATE KEY (SEC1) block: convert it to PKCS#8 with \
                     `openssl pkcs8 -topk8 -nocrypt -in key.pem -out key.pkcs8.pem`",
                ))
            }
            other => {
                return Err(error(format!(
                    "expected a PRIVATE KEY (PKCS#8) block, found {other:?}"
                )))
            }
        }
        let rng = SystemRandom::new();
        if let Ok(pair) =
            EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng)
        {
            return Ok(SigningKey::es256(kid, pair, rng));
        }
        // `maybe_unchecked` also reads PKCS#8 v1 documents, which carry no public key
        // (OpenSSL writes those).
        match Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
            Ok(pair) => Ok(SigningKey::ed25519(kid, pair, rng)),
            Err(_) => Err(error(
                "not a P-256 (ES256) or Ed25519 (EdDSA) private key in PKCS#8",
            )),
        }
    }

    fn from_jwk(kid: &str, jwk: &Value) -> Result<SigningKey, KeyError> {
        let object = jwk
            .as_object()
            .ok_or_else(|| error("a JWK is a JSON object"))?;
        if let Some(own) = text(object, "kid")? {
            if own != kid {
                return Err(error(format!(
                    "the JWK's \"kid\" {own:?} differs from the key id {kid:?} it is loaded as"
                )));
            }
        }
        let (algorithm, public) = public_material(object)?;
        let rng = SystemRandom::new();
        let rejected = |e: ring::error::KeyRejected| error(format!("key rejected: {e}"));
        match algorithm {
            Algorithm::Es256 => {
                let d = b64_field(object, "d", 32)?;
                let pair = EcdsaKeyPair::from_private_key_and_public_key(
                    &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &d,
                    &public,
                    &rng,
                )
                .map_err(rejected)?;
                Ok(SigningKey::es256(kid, pair, rng))
            }
            Algorithm::EdDsa => {
                let d = b64_field(object, "d", 32)?;
                let pair =
                    Ed25519KeyPair::from_seed_and_public_key(&d, &public).map_err(rejected)?;
                Ok(SigningKey::ed25519(kid, pair, rng))
            }
        }
    }

    fn es256(kid: &str, pair: EcdsaKeyPair, rng: SystemRandom) -> SigningKey {
        let public = PublicKey {
            kid: kid.to_string(),
            algorithm: Algorithm::Es256,
            bytes: pair.public_key().as_ref().to_vec(),
        };
        SigningKey {
            signer: Signer::Es256(pair),
            public,
            rng,
        }
    }

    fn ed25519(kid: &str, pair: Ed25519KeyPair, rng: SystemRandom) -> SigningKey {
        let public = PublicKey {
            kid: kid.to_string(),
            algorithm: Algorithm::EdDsa,
            bytes: pair.public_key().as_ref().to_vec(),
        };
        SigningKey {
            signer: Signer::EdDsa(pair),
            public,
            rng,
        }
    }
}

#[cfg(test)]
mod tests;
