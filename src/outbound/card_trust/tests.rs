use super::*;
use crate::card_signature::jws::sign;
use crate::card_signature::SigningKey;

const ED: &str = r#"{"x": "Pm3d9z-FAsXWU-X8C0HSEaQnUWJkcMVTkmvT6Nj6raE", "d": "_MBttLFXPewhJ7CvER_loOKATtIC2rhhyAtFmjMh-q0", "kty": "OKP", "crv": "Ed25519"}"#;
const ED_SPKI: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAPm3d9z+FAsXWU+X8C0HSEaQnUWJkcMVTkmvT6Nj6raE=
-----END PUBLIC KEY-----
";
const ENDPOINT: &str = "https://remote.example/rpc";

fn key() -> SigningKey {
    SigningKey::parse("k1", ED).unwrap()
}

fn body(v: Value) -> TrustBody {
    serde_json::from_value(v).unwrap()
}

fn signed_card() -> Value {
    let mut card = json!({
        "name": "Remote", "supportedInterfaces": [{"url": ENDPOINT, "protocolBinding": "JSONRPC"}],
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "credentials": {"bearer": "not part of a card"},
    });
    let s = sign(&key(), &form::signed_bytes(&card).unwrap());
    card["signatures"] = json!([{"protected": s.protected, "signature": s.signature}]);
    card
}

fn trust(policy: TrustPolicy) -> CardTrust {
    CardTrust {
        policy,
        keys: vec![key().public_key().clone()],
        ..CardTrust::default()
    }
}

fn field_of(e: HttpError) -> String {
    match e {
        HttpError::Invalid { field, .. } => field,
        other => panic!("{other:?}"),
    }
}

#[test]
fn keys_come_as_jwks_lists_or_pem_and_only_public() {
    let jwk = key().public_key().to_jwk();
    let mut t = CardTrust::default();
    apply(
        &mut t,
        &body(json!({"policy": "require", "trustedKeys": {"keys": [jwk.clone()]}})),
    )
    .unwrap();
    assert_eq!(t.policy, TrustPolicy::Require);
    assert_eq!(t.keys, vec![key().public_key().clone()]);
    let mut from_pem = CardTrust::default();
    apply(
        &mut from_pem,
        &body(json!({"policy": "prefer", "trustedKeys": [{"kid": "k1", "pem": ED_SPKI}]})),
    )
    .unwrap();
    assert_eq!(from_pem.keys, t.keys);
    // A member left out keeps its value.
    apply(&mut t, &body(json!({"policy": "prefer"}))).unwrap();
    assert_eq!(t.keys.len(), 1);

    let mut private: Value = serde_json::from_str(ED).unwrap();
    private["kid"] = json!("k1");
    for (bad, field) in [
        (json!({"policy": "strict"}), "cardTrust.policy"),
        (
            json!({"policy": "require", "trustedKeys": []}),
            "cardTrust.trustedKeys",
        ),
        (
            json!({"trustedKeys": [private]}),
            "cardTrust.trustedKeys[0]",
        ),
        (
            json!({"trustedKeys": [jwk.clone(), jwk.clone()]}),
            "cardTrust.trustedKeys[1]",
        ),
        (json!({"trustedKeys": "k1"}), "cardTrust.trustedKeys"),
        (
            json!({"trustedKeys": vec![jwk.clone(); MAX_TRUSTED_KEYS + 1]}),
            "cardTrust.trustedKeys",
        ),
    ] {
        let mut t = CardTrust::default();
        assert_eq!(
            field_of(apply(&mut t, &body(bad.clone())).unwrap_err()),
            field,
            "{bad}"
        );
    }
    assert!(serde_json::from_value::<TrustBody>(json!({"jku": "https://x"})).is_err());
}

#[test]
fn what_each_policy_stores() {
    let card = signed_card();
    let ignored = check(&CardTrust::default(), card.clone(), ENDPOINT);
    assert_eq!(ignored.card.as_ref(), Some(&card));
    assert_eq!(ignored.verification.unwrap().reason, "not_checked");

    let verified = check(&trust(TrustPolicy::Require), card.clone(), ENDPOINT);
    assert!(verified.verification.as_ref().unwrap().verified);
    let stored = verified.card.unwrap();
    // What the signature covers, with the signatures: nothing unsigned beside `verified`.
    assert!(stored.get("credentials").is_none(), "{stored}");
    assert_eq!(stored["signatures"], card["signatures"]);
    assert_eq!(stored["name"], "Remote");
    // Stored that way, it verifies again.
    assert!(
        crate::card_signature::verify(&stored, &trust(TrustPolicy::Require).keys, ENDPOINT)
            .verified
    );

    let mut tampered = card.clone();
    tampered["name"] = json!("Remote?");
    let preferred = check(&trust(TrustPolicy::Prefer), tampered.clone(), ENDPOINT);
    assert_eq!(preferred.card.as_ref(), Some(&tampered));
    assert_eq!(preferred.verification.unwrap().reason, "bad_signature");
    let required = check(&trust(TrustPolicy::Require), tampered, ENDPOINT);
    assert_eq!(
        required.card, None,
        "under require an unverified card is not stored"
    );
    assert_eq!(required.verification.unwrap().reason, "bad_signature");

    assert_eq!(
        recheck(&trust(TrustPolicy::Require), None, ENDPOINT),
        CheckedCard {
            card: None,
            verification: None
        }
    );
}

#[test]
fn require_refuses_delegation_until_a_card_is_verified() {
    let now = chrono::Utc::now();
    let mut r = Registration {
        id: "reg-1".into(),
        tenant_id: "t".into(),
        name: "n".into(),
        endpoint: ENDPOINT.into(),
        credential: None,
        discovered_card: None,
        discovered_at: None,
        deduplicates_message_ids: false,
        card_trust: trust(TrustPolicy::Require),
        created_by: "p".into(),
        created_at: now,
        updated_at: now,
    };
    assert_eq!(
        delegation_allowed(&r),
        Err(HttpError::CardNotVerified {
            reason: "not_discovered".into()
        })
    );
    let checked = check(&r.card_trust, signed_card(), ENDPOINT);
    r.card_trust.verification = checked.verification;
    assert_eq!(delegation_allowed(&r), Ok(()));
    r.card_trust.verification =
        check(&r.card_trust, json!({"name": "unsigned"}), ENDPOINT).verification;
    assert_eq!(
        delegation_allowed(&r),
        Err(HttpError::CardNotVerified {
            reason: "unsigned".into()
        })
    );
    r.card_trust.policy = TrustPolicy::Prefer;
    assert_eq!(delegation_allowed(&r), Ok(()));
}
