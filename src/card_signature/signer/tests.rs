use super::*;
use crate::card_signature::keys::SigningKey;
use crate::card_signature::verify::verify;
use a2a::{AgentCapabilities, AgentInterface};

const ED: &str = r#"{"x": "Pm3d9z-FAsXWU-X8C0HSEaQnUWJkcMVTkmvT6Nj6raE", "d": "_MBttLFXPewhJ7CvER_loOKATtIC2rhhyAtFmjMh-q0", "kty": "OKP", "crv": "Ed25519"}"#;
const EC: &str = r#"{"kty": "EC", "crv": "P-256", "x": "HgWKBChOcx0x1i9Qjj-9wch14faM_SI6XdVMz22b0zw", "y": "JylMNu_xggKolatLIdwHdVT5NZl4gc0X173pAPj3HfI", "d": "oF_JyI3fFHsngbC30-knqAc5m0bQ3uSk-e2ji3afXiw"}"#;
const RPC: &str = "https://q.example/v1/a2a/agents/ag-1/rpc";

fn card(name: &str) -> AgentCard {
    let mut interface = AgentInterface::new(RPC, "JSONRPC");
    interface.protocol_version = "1.0".into();
    AgentCard {
        name: name.into(),
        description: "d".into(),
        version: "1".into(),
        supported_interfaces: vec![interface],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: None,
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/markdown".into()],
        skills: vec![],
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: None,
        security_requirements: None,
        signatures: None,
    }
}

fn keys(active: &str) -> CardKeys {
    CardKeys::new(
        vec![
            SigningKey::parse("a", ED).unwrap(),
            SigningKey::parse("b", EC).unwrap(),
        ],
        active,
    )
    .unwrap()
}

fn body(served: &ServedCard) -> Value {
    serde_json::from_slice(&served.body).unwrap()
}

#[test]
fn a_served_card_carries_one_signature_by_the_active_key() {
    let signer = CardSigner::new(keys("b"));
    let served = signer.serve(&card("Writer")).unwrap();
    let v = body(&served);
    assert_eq!(v["signatures"].as_array().unwrap().len(), 1);
    let trusted = [signer.keys().unwrap().active().public_key().clone()];
    let verification = verify(&v, &trusted, RPC);
    assert!(verification.verified, "{verification:?}");
    assert_eq!(verification.kid.as_deref(), Some("b"));
    // The same body with one character of content changed does not verify.
    let text = String::from_utf8(served.body.clone()).unwrap();
    let tampered: Value = serde_json::from_str(&text.replace("Writer", "Writes")).unwrap();
    assert_eq!(verify(&tampered, &trusted, RPC).reason, "bad_signature");
}

#[test]
fn the_etag_follows_the_signed_content_and_the_key_not_the_signing() {
    let signer = CardSigner::new(keys("b"));
    let first = signer.serve(&card("Writer")).unwrap();
    let again = signer.serve(&card("Writer")).unwrap();
    // ES256 draws a fresh nonce: two signings differ, their validator does not.
    assert_ne!(body(&first)["signatures"], body(&again)["signatures"]);
    assert_eq!(first.etag, again.etag);
    assert_ne!(first.etag, signer.serve(&card("Reader")).unwrap().etag);
    let switched = CardSigner::new(keys("a")).serve(&card("Writer")).unwrap();
    assert_ne!(
        first.etag, switched.etag,
        "a new signing key is a new representation"
    );
    let unsigned = CardSigner::unsigned().serve(&card("Writer")).unwrap();
    assert!(body(&unsigned).get("signatures").is_none());
    assert_ne!(unsigned.etag, first.etag);
    assert!(first.etag.starts_with("W/\"") && first.etag.len() == 64 + 4);
}

#[test]
fn eddsa_signatures_are_deterministic() {
    let signer = CardSigner::new(keys("a"));
    let one = signer.serve(&card("Writer")).unwrap();
    let two = signer.serve(&card("Writer")).unwrap();
    assert_eq!(one.body, two.body);
    let protected = body(&one)["signatures"][0]["protected"]
        .as_str()
        .unwrap()
        .to_string();
    let header: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, protected)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        header,
        serde_json::json!({"alg": "EdDSA", "kid": "a", "typ": "JOSE"})
    );
}
