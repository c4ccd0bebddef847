//! Rotating the card signing key (docs/rollout.md, "Rotating the card signing key"): the next
//! key is published while the old one signs, the active key is switched, and during the
//! overlap a partner trusting both verifies every card, whichever key signed it.

use serde_json::Value;

use super::{card_keys, first_header, only, raw_card, KeysDir, EDDSA_JWK, ES256_PEM};
use crate::support::python::sdk_card_check;
use crate::support::{Gateway, GatewayOptions};

const ALICE: &str = "tok-alice";

#[tokio::test]
async fn switching_the_active_key_keeps_cards_verifiable_during_the_overlap() {
    let keys = KeysDir::new(&[("2026-11.pem", ES256_PEM), ("2026-12.jwk", EDDSA_JWK)]);
    let old_active = [
        ("Q_A2A_CARD_SIGNING_KEYS_DIR", keys.path()),
        ("Q_A2A_CARD_SIGNING_ACTIVE_KEY", "2026-11"),
    ];
    let mut gw = Gateway::start_with_env(&old_active).await;

    // Step 1: both keys are published, the old one first (it signs).
    let jwks = card_keys(&gw, &old_active).await;
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids, ["2026-11", "2026-12"]);
    let both = keys.write("both.json", jwks.to_string().as_bytes());
    let old_only = keys.write("old.json", only(&jwks, &["2026-11"]).to_string().as_bytes());
    let new_only = keys.write("new.json", only(&jwks, &["2026-12"]).to_string().as_bytes());

    let (_, before, etag_before) = raw_card(&gw.url, "ag-writer", ALICE, &[]).await;
    let card_before: Value = serde_json::from_slice(&before).unwrap();
    assert_eq!(first_header(&card_before)["kid"], "2026-11");
    assert_eq!(first_header(&card_before)["alg"], "ES256");
    let before_file = keys.write("before.json", &before);
    let agent_base = format!("{}/v1/a2a/agents/ag-writer", gw.url);
    for jwks_file in [&both, &old_only] {
        let sdk = sdk_card_check(&[
            "resolve",
            "--url",
            &agent_base,
            "--token",
            ALICE,
            "--jwks",
            jwks_file,
        ])
        .await;
        assert_eq!(sdk["verified"], true, "{jwks_file}: {sdk}");
    }

    // Step 2: the active key is switched (a rollout with the new value).
    let new_active = [
        ("Q_A2A_CARD_SIGNING_KEYS_DIR", keys.path()),
        ("Q_A2A_CARD_SIGNING_ACTIVE_KEY", "2026-12"),
    ];
    gw.restart(&GatewayOptions::with_env(&new_active)).await;
    let switched = card_keys(&gw, &new_active).await;
    assert_eq!(
        switched["keys"][0], jwks["keys"][1],
        "the new key first: it signs"
    );
    assert_eq!(switched["keys"][1], jwks["keys"][0]);
    let (_, after, etag_after) = raw_card(&gw.url, "ag-writer", ALICE, &[]).await;
    let card_after: Value = serde_json::from_slice(&after).unwrap();
    assert_eq!(first_header(&card_after)["kid"], "2026-12");
    assert_eq!(first_header(&card_after)["alg"], "EdDSA");
    // A new signing key is a new representation: a client revalidating its old copy gets the
    // card the new key signed.
    assert_ne!(etag_after, etag_before);
    let (status, revalidated, _) = raw_card(
        &gw.url,
        "ag-writer",
        ALICE,
        &[("if-none-match", &etag_before)],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        first_header(&serde_json::from_slice(&revalidated).unwrap())["kid"],
        "2026-12"
    );

    // The overlap: a partner trusting both keys verifies the new cards and the copies it
    // still holds of the old ones.
    let agent_base = format!("{}/v1/a2a/agents/ag-writer", gw.url);
    let sdk = sdk_card_check(&[
        "resolve",
        "--url",
        &agent_base,
        "--token",
        ALICE,
        "--jwks",
        &both,
    ])
    .await;
    assert_eq!(sdk["verified"], true, "{sdk}");
    let sdk = sdk_card_check(&["verify", "--card", &before_file, "--jwks", &both]).await;
    assert_eq!(
        sdk["verified"], true,
        "an old copy, during the overlap: {sdk}"
    );
    let sdk = sdk_card_check(&[
        "resolve",
        "--url",
        &agent_base,
        "--token",
        ALICE,
        "--jwks",
        &new_only,
    ])
    .await;
    assert_eq!(sdk["verified"], true, "{sdk}");
    // Why the new key is published before the switch: a partner that never added it cannot
    // verify what it signs.
    let sdk = sdk_card_check(&[
        "resolve",
        "--url",
        &agent_base,
        "--token",
        ALICE,
        "--jwks",
        &old_only,
    ])
    .await;
    assert_eq!(sdk["verified"], false, "{sdk}");
    assert_eq!(sdk["error"], "InvalidSignaturesError");

    // Step 3: once partners dropped it, the old key leaves the directory.
    std::fs::remove_file(std::path::Path::new(keys.path()).join("2026-11.pem")).unwrap();
    gw.restart(&GatewayOptions::with_env(&new_active)).await;
    assert_eq!(card_keys(&gw, &new_active).await, only(&jwks, &["2026-12"]));
    let agent_base = format!("{}/v1/a2a/agents/ag-writer", gw.url);
    let sdk = sdk_card_check(&[
        "resolve",
        "--url",
        &agent_base,
        "--token",
        ALICE,
        "--jwks",
        &new_only,
    ])
    .await;
    assert_eq!(sdk["verified"], true, "{sdk}");
}
