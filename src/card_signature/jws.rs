//! One card signature as A2A writes it: a JWS (RFC 7515) over the card's signed form with a
//! detached payload, kept as `{"protected": <base64url header>, "signature": <base64url>}`.
//! The signing input is `protected || '.' || base64url(signed form)`, exactly what the
//! official SDK hands PyJWT.
//!
//! The protected header carries `alg`, `kid` and `typ: JOSE`. When checking one, only `alg`
//! and `kid` are used: the key comes from the verifier's own trusted keys, never from the
//! header (`jku`, `x5u`, `jwk` and `x5c` are ignored, nothing is fetched), and a header that
//! marks extensions critical (`crit`) or an unencoded payload (`b64`) is refused, since the
//! gateway implements neither.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

use super::keys::{PublicKey, SigningKey};

/// A signature as it appears in a card's `signatures`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardSignature {
    pub protected: String,
    pub signature: String,
}

/// Signs a card's signed form with `key`.
pub fn sign(key: &SigningKey, signed_form: &[u8]) -> CardSignature {
    let header = json!({"alg": key.algorithm().jws_name(), "kid": key.kid(), "typ": "JOSE"});
    let protected = URL_SAFE_NO_PAD.encode(header.to_string());
    let signature = key.sign(&signing_input(&protected, signed_form));
    CardSignature {
        protected,
        signature: URL_SAFE_NO_PAD.encode(signature),
    }
}

fn signing_input(protected: &str, signed_form: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(protected.len() + 1 + signed_form.len() * 4 / 3 + 4);
    input.extend_from_slice(protected.as_bytes());
    input.push(b'.');
    input.extend_from_slice(URL_SAFE_NO_PAD.encode(signed_form).as_bytes());
    input
}

/// Why one signature did not verify, from the least to the most telling: when no signature of
/// a card verifies, the most telling reason among them is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rejection {
    /// Not an object with base64url `protected` and `signature`, or a header that is not a
    /// JSON object with `alg` and `kid`.
    Malformed,
    /// The header marks something the gateway does not implement (`crit`, `b64`).
    UnsupportedHeader,
    /// No trusted key has the header's `kid`.
    UnknownKey,
    /// The trusted key with that `kid` is not of the header's `alg`.
    AlgorithmMismatch,
    /// The trusted key does not verify the signature over the card's signed form.
    BadSignature,
}

impl Rejection {
    /// The `reason` reported for it.
    pub fn reason(self) -> &'static str {
        match self {
            Rejection::Malformed => "malformed_signature",
            Rejection::UnsupportedHeader => "unsupported_header",
            Rejection::UnknownKey => "unknown_key",
            Rejection::AlgorithmMismatch => "algorithm_mismatch",
            Rejection::BadSignature => "bad_signature",
        }
    }
}

/// One signature checked against the trusted keys: the `kid` that verified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The header's `kid`, when it had one.
    pub kid: Option<String>,
    pub outcome: Result<(), Rejection>,
}

/// Checks one entry of a card's `signatures` over `signed_form`.
pub fn check(entry: &Value, signed_form: &[u8], trusted: &[PublicKey]) -> Checked {
    let malformed = |kid: Option<String>| Checked {
        kid,
        outcome: Err(Rejection::Malformed),
    };
    let (Some(protected), Some(signature)) = (
        entry.get("protected").and_then(Value::as_str),
        entry.get("signature").and_then(Value::as_str),
    ) else {
        return malformed(None);
    };
    let Some(header) = URL_SAFE_NO_PAD
        .decode(protected)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .filter(Value::is_object)
    else {
        return malformed(None);
    };
    let kid = header.get("kid").and_then(Value::as_str).map(str::to_owned);
    let Some(alg) = header.get("alg").and_then(Value::as_str) else {
        return malformed(kid);
    };
    let Some(kid_value) = kid.clone() else {
        return malformed(None);
    };
    let reject = |rejection| Checked {
        kid: Some(kid_value.clone()),
        outcome: Err(rejection),
    };
    if header.get("crit").is_some() || header.get("b64").is_some() {
        return reject(Rejection::UnsupportedHeader);
    }
    let Some(key) = trusted.iter().find(|k| k.kid() == kid_value) else {
        return reject(Rejection::UnknownKey);
    };
    if !key.algorithm().is_named(alg) {
        return reject(Rejection::AlgorithmMismatch);
    }
    let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else {
        return reject(Rejection::Malformed);
    };
    if !key.verifies(&signing_input(protected, signed_form), &signature) {
        return reject(Rejection::BadSignature);
    }
    Checked {
        kid: Some(kid_value),
        outcome: Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card_signature::keys::SigningKey;

    const JWK: &str = r#"{"x": "Pm3d9z-FAsXWU-X8C0HSEaQnUWJkcMVTkmvT6Nj6raE", "d": "_MBttLFXPewhJ7CvER_loOKATtIC2rhhyAtFmjMh-q0", "kty": "OKP", "crv": "Ed25519"}"#;

    fn entry(s: &CardSignature) -> Value {
        json!({"protected": s.protected, "signature": s.signature})
    }

    fn header(fields: Value) -> String {
        URL_SAFE_NO_PAD.encode(fields.to_string())
    }

    #[test]
    fn a_signature_verifies_over_its_form_only() {
        let key = SigningKey::parse("k1", JWK).unwrap();
        let trusted = [key.public_key().clone()];
        let signed = sign(&key, b"{\"name\":\"a\"}");
        let decoded: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&signed.protected).unwrap()).unwrap();
        assert_eq!(decoded, json!({"alg": "EdDSA", "kid": "k1", "typ": "JOSE"}));
        let ok = check(&entry(&signed), b"{\"name\":\"a\"}", &trusted);
        assert_eq!(ok.outcome, Ok(()));
        assert_eq!(ok.kid.as_deref(), Some("k1"));
        let changed = check(&entry(&signed), b"{\"name\":\"b\"}", &trusted);
        assert_eq!(changed.outcome, Err(Rejection::BadSignature));
        // The header is signed too: another header with the same signature fails.
        let mut swapped = entry(&signed);
        swapped["protected"] = json!(header(json!({"alg": "EdDSA", "kid": "k1"})));
        assert_eq!(
            check(&swapped, b"{\"name\":\"a\"}", &trusted).outcome,
            Err(Rejection::BadSignature)
        );
    }

    #[test]
    fn the_key_comes_from_the_trusted_keys_never_from_the_header() {
        let key = SigningKey::parse("k1", JWK).unwrap();
        let signed = sign(&key, b"{}");
        // Not trusted: however the header points at the key, nothing verifies.
        assert_eq!(
            check(&entry(&signed), b"{}", &[]).outcome,
            Err(Rejection::UnknownKey)
        );
        let mut with_jku = entry(&signed);
        with_jku["protected"] = json!(header(json!({
            "alg": "EdDSA", "kid": "k1", "jku": "https://attacker.example/jwks.json",
            "jwk": key.public_key().to_jwk(),
        })));
        assert_eq!(
            check(&with_jku, b"{}", &[]).outcome,
            Err(Rejection::UnknownKey)
        );
    }

    #[test]
    fn headers_the_gateway_cannot_honour_are_refused() {
        let key = SigningKey::parse("k1", JWK).unwrap();
        let trusted = [key.public_key().clone()];
        for (fields, rejection) in [
            (
                json!({"alg": "EdDSA", "kid": "k1", "crit": ["exp"]}),
                Rejection::UnsupportedHeader,
            ),
            (
                json!({"alg": "EdDSA", "kid": "k1", "b64": false}),
                Rejection::UnsupportedHeader,
            ),
            (
                json!({"alg": "ES256", "kid": "k1"}),
                Rejection::AlgorithmMismatch,
            ),
            (
                json!({"alg": "none", "kid": "k1"}),
                Rejection::AlgorithmMismatch,
            ),
            (json!({"alg": "EdDSA"}), Rejection::Malformed),
            (json!({"kid": "k1"}), Rejection::Malformed),
        ] {
            let e = json!({"protected": header(fields.clone()), "signature": "AAAA"});
            assert_eq!(
                check(&e, b"{}", &trusted).outcome,
                Err(rejection),
                "{fields}"
            );
        }
        for e in [
            json!({"protected": "!!", "signature": "AAAA"}),
            json!({"protected": header(json!([1])), "signature": "AAAA"}),
            json!({"signature": "AAAA"}),
            json!("a string"),
        ] {
            assert_eq!(
                check(&e, b"{}", &trusted).outcome,
                Err(Rejection::Malformed),
                "{e}"
            );
        }
    }
}
