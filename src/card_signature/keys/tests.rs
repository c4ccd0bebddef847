//! Test keys made with Python's `cryptography` (OpenSSL), so the PEM and JWK readers are
//! exercised on documents another implementation wrote. They sign nothing outside tests.

use super::*;

const P256_PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgoF/JyI3fFHsngbC3
0+knqAc5m0bQ3uSk+e2ji3afXiyhRANCAAQeBYoEKE5zHTHWL1COP73ByHXh9oz9
Ijpd1UzPbZvTPCcpTDbv8YICqJWrSyHcB3VU+TWZeIHNF9e96QD49x3y
-----END PRIVATE KEY-----
";
const P256_SPKI: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEHgWKBChOcx0x1i9Qjj+9wch14faM
/SI6XdVMz22b0zwnKUw27/GCAqiVq0sh3Ad1VPk1mXiBzRfXvekA+Pcd8g==
-----END PUBLIC KEY-----
";
const P256_SEC1: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIKBfyciN3xR7J4Gwt9PpJ6gHOZtG0N7kpPnto4t2n14soAoGCCqGSM49
AwEHoUQDQgAEHgWKBChOcx0x1i9Qjj+9wch14faM/SI6XdVMz22b0zwnKUw27/GC
AqiVq0sh3Ad1VPk1mXiBzRfXvekA+Pcd8g==
-----END EC PRIVATE KEY-----
";
const P256_JWK: &str = r#"{"kty": "EC", "crv": "P-256", "x": "HgWKBChOcx0x1i9Qjj-9wch14faM_SI6XdVMz22b0zw", "y": "JylMNu_xggKolatLIdwHdVT5NZl4gc0X173pAPj3HfI", "d": "oF_JyI3fFHsngbC30-knqAc5m0bQ3uSk-e2ji3afXiw"}"#;
/// OpenSSL's PKCS#8 v1: the private key without its public half.
const ED25519_PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIPzAbbSxVz3sISewrxEf5aDigE7SAtq4YcgLRZozIfqt
-----END PRIVATE KEY-----
";
const ED25519_SPKI: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAPm3d9z+FAsXWU+X8C0HSEaQnUWJkcMVTkmvT6Nj6raE=
-----END PUBLIC KEY-----
";
const ED25519_JWK: &str = r#"{"x": "Pm3d9z-FAsXWU-X8C0HSEaQnUWJkcMVTkmvT6Nj6raE", "d": "_MBttLFXPewhJ7CvER_loOKATtIC2rhhyAtFmjMh-q0", "kty": "OKP", "crv": "Ed25519"}"#;
/// Signatures over `message`, made by `cryptography` with the keys above.
const ES256_SIGNATURE: &str =
    "fyaqsU0kf7BywMGJz9RGrfkGTRZO1Z4ykFRGmWoJ6Utal9KvUtI4I9hS--PKjPl9-eiamntud8kpdBT3KP1zPA";
const ED25519_SIGNATURE: &str =
    "opEl8zP2zB4nddZitwL5uMEPNBozVcGQY-pxu0lvHAErR9ofn_VA1BAtAJPSmmscfXzylDK0TgMCN4WyRVkSBw";

fn b64(s: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(s).unwrap()
}

#[test]
fn pem_and_jwk_of_one_key_are_the_same_key() {
    for (pem, jwk, spki, alg) in [
        (P256_PKCS8, P256_JWK, P256_SPKI, Algorithm::Es256),
        (ED25519_PKCS8, ED25519_JWK, ED25519_SPKI, Algorithm::EdDsa),
    ] {
        let from_pem = SigningKey::parse("k1", pem).unwrap();
        let from_jwk = SigningKey::parse("k1", jwk).unwrap();
        assert_eq!(from_pem.algorithm(), alg);
        assert_eq!(from_pem.public_key(), from_jwk.public_key());
        assert_eq!(
            from_pem.public_key(),
            &PublicKey::from_pem("k1", spki).unwrap()
        );
        // The published JWK reads back as the same public key.
        let published = from_pem.public_key().to_jwk();
        assert_eq!(published["kid"], "k1");
        assert_eq!(published["use"], "sig");
        assert_eq!(published["alg"], alg.jws_name());
        assert!(published.get("d").is_none());
        assert_eq!(
            &PublicKey::from_jwk(&published).unwrap(),
            from_pem.public_key()
        );
        // What one signs, the other's public key verifies; one changed byte does not.
        let signature = from_jwk.sign(b"message");
        assert_eq!(signature.len(), 64);
        assert!(from_pem.public_key().verifies(b"message", &signature));
        assert!(!from_pem.public_key().verifies(b"messagE", &signature));
    }
}

#[test]
fn signatures_made_by_another_implementation_verify() {
    let p256 = PublicKey::from_pem("a", P256_SPKI).unwrap();
    assert!(p256.verifies(b"message", &b64(ES256_SIGNATURE)));
    assert!(!p256.verifies(b"message!", &b64(ES256_SIGNATURE)));
    let ed = PublicKey::from_pem("b", ED25519_SPKI).unwrap();
    assert!(ed.verifies(b"message", &b64(ED25519_SIGNATURE)));
    // A signature is tied to its key's algorithm.
    assert!(!ed.verifies(b"message", &b64(ES256_SIGNATURE)));
}

#[test]
fn unusable_keys_are_refused_with_the_reason() {
    let refused = |kid: &str, text: &str| SigningKey::parse(kid, text).unwrap_err().0;
    assert!(refused("k1", P256_SEC1).contains("openssl pkcs8 -topk8"));
    assert!(refused("k1", P256_SPKI).contains("PRIVATE KEY"));
    assert!(refused("k1", "not a key").contains("no PEM block"));
    assert!(refused("k1", &format!("{P256_PKCS8}{ED25519_PKCS8}")).contains("one PEM block"));
    let mut jwk: Value = serde_json::from_str(P256_JWK).unwrap();
    jwk["kid"] = json!("other");
    assert!(refused("k1", &jwk.to_string()).contains("differs"));
    jwk["kid"] = json!("k1");
    jwk["alg"] = json!("EdDSA");
    assert!(refused("k1", &jwk.to_string()).contains("does not fit"));
    // A JWK whose public half is not its private key's.
    let mut mixed: Value = serde_json::from_str(P256_JWK).unwrap();
    mixed["d"] = json!(URL_SAFE_NO_PAD.encode([7u8; 32]));
    assert!(refused("k1", &mixed.to_string()).contains("rejected"));
    assert!(refused("bad kid!", P256_PKCS8).contains("key id"));
    assert!(refused(&"k".repeat(MAX_KID_CHARS + 1), P256_PKCS8).contains("key id"));
}

#[test]
fn trusted_keys_must_be_public_and_named() {
    let private: Value = serde_json::from_str(ED25519_JWK).unwrap();
    let mut named = private.clone();
    named["kid"] = json!("k1");
    assert!(PublicKey::from_jwk(&named)
        .unwrap_err()
        .0
        .contains("private key"));
    named.as_object_mut().unwrap().remove("d");
    assert!(PublicKey::from_jwk(&named).is_ok());
    named.as_object_mut().unwrap().remove("kid");
    assert!(PublicKey::from_jwk(&named).unwrap_err().0.contains("kid"));
    assert!(PublicKey::from_pem("k1", P256_PKCS8)
        .unwrap_err()
        .0
        .contains("public key only"));
    let short = json!({"kty": "OKP", "crv": "Ed25519", "x": "AAAA", "kid": "k"});
    assert!(PublicKey::from_jwk(&short).unwrap_err().0.contains("bytes"));
    let rsa = json!({"kty": "RSA", "n": "AQAB", "e": "AQAB", "kid": "k"});
    assert!(PublicKey::from_jwk(&rsa)
        .unwrap_err()
        .0
        .contains("unsupported key type"));
}

#[test]
fn debug_never_shows_key_material() {
    let key = SigningKey::parse("k1", P256_JWK).unwrap();
    let shown = format!("{key:?}");
    assert!(shown.contains("k1") && shown.contains("ES256"), "{shown}");
    assert!(
        !shown.contains("oF_J") && !shown.contains("HgWK"),
        "{shown}"
    );
}
