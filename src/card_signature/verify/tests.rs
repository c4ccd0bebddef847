use super::*;
use crate::card_signature::jws::sign;
use crate::card_signature::keys::SigningKey;
use serde_json::json;

const ED: &str = r#"{"x": "Pm3d9z-FAsXWU-X8C0HSEaQnUWJkcMVTkmvT6Nj6raE", "d": "_MBttLFXPewhJ7CvER_loOKATtIC2rhhyAtFmjMh-q0", "kty": "OKP", "crv": "Ed25519"}"#;
const EC: &str = r#"{"kty": "EC", "crv": "P-256", "x": "HgWKBChOcx0x1i9Qjj-9wch14faM_SI6XdVMz22b0zw", "y": "JylMNu_xggKolatLIdwHdVT5NZl4gc0X173pAPj3HfI", "d": "oF_JyI3fFHsngbC30-knqAc5m0bQ3uSk-e2ji3afXiw"}"#;
const ENDPOINT: &str = "https://remote.example/a2a/rpc";

fn card() -> Value {
    json!({
        "name": "Remote", "version": "1",
        "supportedInterfaces": [
            {"url": "https://remote.example/a2a/grpc", "protocolBinding": "GRPC"},
            {"url": ENDPOINT, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
    })
}

/// `card` signed by each of `keys`, in order.
fn signed(mut card: Value, keys: &[&SigningKey]) -> Value {
    let form = form::signed_bytes(&card).unwrap();
    let signatures: Vec<Value> = keys
        .iter()
        .map(|k| {
            let s = sign(k, &form);
            json!({"protected": s.protected, "signature": s.signature})
        })
        .collect();
    card["signatures"] = json!(signatures);
    card
}

fn key(kid: &str, jwk: &str) -> SigningKey {
    SigningKey::parse(kid, jwk).unwrap()
}

#[test]
fn a_card_signed_by_a_trusted_key_and_naming_the_endpoint_verifies() {
    let k1 = key("k1", EC);
    let card = signed(card(), &[&k1]);
    let v = verify(&card, &[k1.public_key().clone()], ENDPOINT);
    assert_eq!(
        v,
        Verification {
            verified: true,
            reason: "verified".into(),
            kid: Some("k1".into()),
            detail: None
        }
    );
    // A trailing slash on either side is the same endpoint.
    assert!(verify(&card, &[k1.public_key().clone()], &format!("{ENDPOINT}/")).verified);
}

#[test]
fn each_failure_has_its_reason() {
    let k1 = key("k1", EC);
    let other = key("k1", ED);
    let trusted = [k1.public_key().clone()];
    assert_eq!(verify(&card(), &trusted, ENDPOINT).reason, "unsigned");
    let mut empty = card();
    empty["signatures"] = json!([]);
    assert_eq!(verify(&empty, &trusted, ENDPOINT).reason, "unsigned");

    let mut changed = signed(card(), &[&k1]);
    changed["name"] = json!("Remote!");
    assert_eq!(verify(&changed, &trusted, ENDPOINT).reason, "bad_signature");

    let by_unknown = signed(card(), &[&key("k9", EC)]);
    let v = verify(&by_unknown, &trusted, ENDPOINT);
    assert_eq!(v.reason, "unknown_key");
    assert_eq!(
        v.detail.as_deref(),
        Some("signature 1 (kid \"k9\"): unknown_key")
    );

    // Same kid, another algorithm: never verified with the trusted key.
    let confused = signed(card(), &[&other]);
    assert_eq!(
        verify(&confused, &trusted, ENDPOINT).reason,
        "algorithm_mismatch"
    );

    let mut malformed = signed(card(), &[&k1]);
    malformed["supportedInterfaces"] = json!("not a list");
    assert_eq!(
        verify(&malformed, &trusted, ENDPOINT).reason,
        "malformed_card"
    );

    let elsewhere = signed(card(), &[&k1]);
    let v = verify(&elsewhere, &trusted, "https://attacker.example/a2a/rpc");
    assert!(!v.verified);
    assert_eq!(v.reason, "endpoint_not_in_card");
}

#[test]
fn the_most_telling_failure_is_reported_and_every_one_listed() {
    let k1 = key("k1", EC);
    let mut card = signed(card(), &[&key("k9", ED), &k1]);
    card["signatures"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"protected": "!", "signature": "x"}));
    card["description"] = json!("changed after signing");
    let v = verify(&card, &[k1.public_key().clone()], ENDPOINT);
    assert_eq!(v.reason, "bad_signature");
    assert_eq!(
        v.detail.as_deref(),
        Some(
            "signature 1 (no kid): malformed_signature; signature 2 (kid \"k9\"): unknown_key; \
             signature 3 (kid \"k1\"): bad_signature"
        )
    );
}

#[test]
fn during_a_rotation_either_trusted_key_verifies() {
    let old = key("2026-11", EC);
    let new = key("2026-12", ED);
    let both = [old.public_key().clone(), new.public_key().clone()];
    let by_old = signed(card(), &[&old]);
    let by_new = signed(card(), &[&new]);
    assert_eq!(
        verify(&by_old, &both, ENDPOINT).kid.as_deref(),
        Some("2026-11")
    );
    assert_eq!(
        verify(&by_new, &both, ENDPOINT).kid.as_deref(),
        Some("2026-12")
    );
    // A verifier that only knows the old key cannot verify the new key's cards.
    assert_eq!(
        verify(&by_new, &[old.public_key().clone()], ENDPOINT).reason,
        "unknown_key"
    );
}

#[test]
fn only_the_first_signatures_are_checked() {
    let k1 = key("k1", EC);
    let mut card = signed(card(), &[&k1]);
    let good = card["signatures"][0].clone();
    let junk = json!({"protected": "e30", "signature": "AA"});
    let mut list = vec![junk; MAX_SIGNATURES];
    list.push(good);
    card["signatures"] = json!(list);
    assert!(!verify(&card, &[k1.public_key().clone()], ENDPOINT).verified);
}

#[test]
fn remote_key_ids_are_shown_bounded_and_printable() {
    let long = format!("{}\n", "x".repeat(100));
    let shown = shown(&long);
    assert!(!shown.contains('\n'));
    assert!(shown.chars().count() < 70, "{shown}");
}

#[test]
fn policies_read_and_write_their_names() {
    for p in [
        TrustPolicy::Ignore,
        TrustPolicy::Prefer,
        TrustPolicy::Require,
    ] {
        assert_eq!(TrustPolicy::parse(p.as_str()), Some(p));
    }
    assert_eq!(TrustPolicy::parse("REQUIRE"), None);
    assert_eq!(TrustPolicy::default(), TrustPolicy::Ignore);
}

#[test]
fn every_reason_reported_is_listed() {
    let k1 = key("k1", EC);
    let trusted = [k1.public_key().clone()];
    let mut seen = std::collections::BTreeSet::new();
    let mut changed = signed(card(), &[&k1]);
    changed["name"] = json!("x");
    let mut malformed = signed(card(), &[&k1]);
    malformed["name"] = json!(1);
    let mut crit = card();
    crit["signatures"] = json!([{"protected": "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIiwiY3JpdCI6W119", "signature": "AA"}]);
    let mut junk = card();
    junk["signatures"] = json!([{"protected": "e30", "signature": "AA"}]);
    for (c, endpoint) in [
        (signed(card(), &[&k1]), ENDPOINT),
        (card(), ENDPOINT),
        (malformed, ENDPOINT),
        (junk, ENDPOINT),
        (crit, ENDPOINT),
        (signed(card(), &[&key("k9", EC)]), ENDPOINT),
        (signed(card(), &[&key("k1", ED)]), ENDPOINT),
        (changed, ENDPOINT),
        (signed(card(), &[&k1]), "https://other.example/rpc"),
    ] {
        seen.insert(verify(&c, &trusted, endpoint).reason);
    }
    let listed: std::collections::BTreeSet<String> =
        REASONS.iter().map(|r| r.to_string()).collect();
    assert_eq!(seen, listed);
}
