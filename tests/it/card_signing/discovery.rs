//! Discovery verifies cards the official SDK signed (`create_agent_card_signer`) and served from
//! its own card route (`create_agent_card_routes`), under each trust policy; `require` keeps
//! an unverified card out and refuses delegation; no key is ever fetched from the card.

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::outbound::{id_of, OutboundGateway, ADMIN};
use crate::support::python::Remote;

/// A registration of `remote` with this card trust.
async fn register(gw: &OutboundGateway, remote: &Remote, trust: Value) -> String {
    let created = gw
        .register_with(json!({
            "name": "Signed remote", "endpoint": remote.rpc_url(), "cardTrust": trust,
        }))
        .await;
    assert_eq!(
        created["cardTrust"]["verification"],
        Value::Null,
        "{created}"
    );
    id_of(&created)
}

#[tokio::test]
async fn discovery_verifies_what_the_sdk_signed_with_either_algorithm() {
    let gw = OutboundGateway::start(&[]).await;
    let es256 = Remote::start(&["--sign", "ES256", "--card-url", "self"]).await;
    let eddsa = Remote::start(&[
        "--sign",
        "EdDSA",
        "--card-url",
        "self",
        "--sign-kid",
        "ed-1",
    ])
    .await;

    let id = register(
        &gw,
        &es256,
        json!({"policy": "require", "trustedKeys": [es256.card_key().await]}),
    )
    .await;
    let (status, v) = gw.discover(&id).await;
    assert_eq!(status, 200, "{v}");
    let verification = &v["cardTrust"]["verification"];
    assert_eq!(verification["verified"], true, "{v}");
    assert_eq!(verification["reason"], "verified");
    assert_eq!(verification["kid"], "remote-1");
    assert!(verification["checkedAt"].is_string());
    // Stored as the SDK reads it, with its signature.
    let card = &v["discoveredCard"];
    assert_eq!(card["name"], "Remote Markdown Agent");
    assert_eq!(card["supportedInterfaces"][0]["url"], es256.rpc_url());
    assert_eq!(card["signatures"].as_array().unwrap().len(), 1);
    // The registration is delegated to as before.
    let (_, d) = gw.delegate("task-signed-1", &id, "Signed?").await;
    assert_eq!(d["status"], "completed", "{d}");

    // `prefer` reports a verified EdDSA card just the same; a JWK Set is accepted as is.
    let jwks = json!({"keys": [eddsa.card_key().await]});
    let id = register(
        &gw,
        &eddsa,
        json!({"policy": "prefer", "trustedKeys": jwks}),
    )
    .await;
    let (_, v) = gw.discover(&id).await;
    assert_eq!(v["cardTrust"]["verification"]["verified"], true, "{v}");
    assert_eq!(v["cardTrust"]["verification"]["kid"], "ed-1");
    assert_eq!(v["cardTrust"]["trustedKeys"][0]["alg"], "EdDSA");

    // `ignore` (the default) checks nothing and says so.
    let (_, created) = gw
        .post_registration(json!({"name": "Unchecked", "endpoint": es256.rpc_url()}))
        .await;
    assert_eq!(created["cardTrust"]["policy"], "ignore");
    let (_, v) = gw.discover(&id_of(&created)).await;
    assert_eq!(v["cardTrust"]["verification"]["verified"], false);
    assert_eq!(v["cardTrust"]["verification"]["reason"], "not_checked");
    assert!(v["discoveredCard"]["signatures"].is_array());
}

#[tokio::test]
async fn a_tampered_card_is_refused_under_require_and_reported_under_prefer() {
    let gw = OutboundGateway::start(&[]).await;
    let remote = Remote::start(&["--sign", "ES256", "--card-url", "self", "--tamper"]).await;
    let key = remote.card_key().await;
    let id = register(
        &gw,
        &remote,
        json!({"policy": "require", "trustedKeys": [key]}),
    )
    .await;

    let (status, v) = gw.discover(&id).await;
    assert_eq!(status, 200, "{v}");
    let verification = &v["cardTrust"]["verification"];
    assert_eq!(verification["verified"], false, "{v}");
    assert_eq!(verification["reason"], "bad_signature");
    assert_eq!(
        verification["detail"],
        "signature 1 (kid \"remote-1\"): bad_signature"
    );
    assert_eq!(v["discoveredCard"], Value::Null, "not stored under require");
    assert_eq!(
        gw.db
            .count("SELECT count(*) FROM a2a_remote_agents WHERE discovered_card IS NOT NULL")
            .await,
        0
    );

    // Delegation is refused before anything is written or sent.
    let (status, d) = gw.delegate("task-tampered-1", &id, "Hello?").await;
    assert_eq!(status, 409, "{d}");
    assert_eq!(d["error"], "card_not_verified");
    assert_eq!(d["reason"], "bad_signature");
    assert!(d["message"].as_str().unwrap().contains("nothing was sent"));
    assert_eq!(remote.count("SendMessage").await, 0);
    assert_eq!(gw.db.count("SELECT count(*) FROM a2a_delegations").await, 0);

    // Under `prefer` the same card is stored, reported as unverified, and delegation goes on.
    let (status, v) = gw
        .patch(&id, json!({"cardTrust": {"policy": "prefer"}}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["cardTrust"]["verification"],
        Value::Null,
        "no card to check again"
    );
    let (_, v) = gw.discover(&id).await;
    assert_eq!(v["cardTrust"]["verification"]["reason"], "bad_signature");
    assert_eq!(
        v["discoveredCard"]["description"],
        "Answers in Markdown (outbound test agent)!"
    );
    let (_, d) = gw.delegate("task-tampered-2", &id, "Hello?").await;
    assert_eq!(d["status"], "completed", "{d}");
}

#[tokio::test]
async fn keys_come_only_from_the_registration_never_from_the_card() {
    let gw = OutboundGateway::start(&[]).await;
    // The card's header names a key set at the remote itself (`jku`), which holds the key
    // that really signed it: fetching it would verify the card.
    let remote = Remote::start(&[
        "--sign",
        "ES256",
        "--card-url",
        "self",
        "--sign-jku",
        "self",
    ])
    .await;
    let mut impostor: Value =
        serde_json::from_str(r#"{"kty": "EC", "crv": "P-256", "x": "HgWKBChOcx0x1i9Qjj-9wch14faM_SI6XdVMz22b0zw", "y": "JylMNu_xggKolatLIdwHdVT5NZl4gc0X173pAPj3HfI"}"#).unwrap();
    impostor["kid"] = json!("remote-1");
    let id = register(
        &gw,
        &remote,
        json!({"policy": "require", "trustedKeys": [impostor]}),
    )
    .await;
    let (_, v) = gw.discover(&id).await;
    assert_eq!(
        v["cardTrust"]["verification"]["reason"], "bad_signature",
        "{v}"
    );
    let mut other = remote.card_key().await;
    other["kid"] = json!("someone-else");
    let (status, v) = gw
        .patch(&id, json!({"cardTrust": {"trustedKeys": [other]}}))
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = gw.discover(&id).await;
    assert_eq!(
        v["cardTrust"]["verification"]["reason"], "unknown_key",
        "{v}"
    );
    assert!(
        remote.seen().await.iter().all(|r| r["path"] != "/_jwks"),
        "the jku was fetched"
    );

    // A card signed by the trusted key but naming another endpoint is someone else's card.
    let elsewhere = Remote::start(&["--sign", "ES256"]).await;
    let id = register(
        &gw,
        &elsewhere,
        json!({"policy": "require", "trustedKeys": [elsewhere.card_key().await]}),
    )
    .await;
    let (_, v) = gw.discover(&id).await;
    assert_eq!(
        v["cardTrust"]["verification"]["reason"], "endpoint_not_in_card",
        "{v}"
    );
    assert_eq!(v["discoveredCard"], Value::Null);
}

#[tokio::test]
async fn changing_the_trusted_keys_checks_the_stored_card_again() {
    let gw = OutboundGateway::start(&[]).await;
    let remote = Remote::start(&["--sign", "EdDSA", "--card-url", "self"]).await;
    let key = remote.card_key().await;
    let id = register(
        &gw,
        &remote,
        json!({"policy": "require", "trustedKeys": [key.clone()]}),
    )
    .await;
    let (_, v) = gw.discover(&id).await;
    assert_eq!(v["cardTrust"]["verification"]["verified"], true, "{v}");

    // Another key replaces the trusted one: the stored card no longer verifies, so under
    // `require` it is cleared at once and delegation stops.
    let mut replacement = key.clone();
    replacement["kid"] = json!("next");
    let (status, v) = gw
        .patch(&id, json!({"cardTrust": {"trustedKeys": [replacement]}}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["cardTrust"]["verification"]["reason"], "unknown_key",
        "{v}"
    );
    assert_eq!(v["discoveredCard"], Value::Null);
    let (status, d) = gw.delegate("task-rekeyed-1", &id, "Still?").await;
    assert_eq!(
        (status, d["reason"].clone()),
        (409, json!("unknown_key")),
        "{d}"
    );

    // Trusted again, it takes a discovery to have a card again.
    let (_, v) = gw
        .patch(&id, json!({"cardTrust": {"trustedKeys": [key]}}))
        .await;
    assert_eq!(v["cardTrust"]["verification"], Value::Null, "{v}");
    let (status, d) = gw.delegate("task-rekeyed-2", &id, "Still?").await;
    assert_eq!(
        (status, d["reason"].clone()),
        (409, json!("not_discovered")),
        "{d}"
    );
    let (_, v) = gw.discover(&id).await;
    assert_eq!(v["cardTrust"]["verification"]["verified"], true, "{v}");
    let (_, d) = gw.delegate("task-rekeyed-3", &id, "Still?").await;
    assert_eq!(d["status"], "completed", "{d}");
    // A new endpoint clears the card and its check: they described the old one.
    let (_, v) = gw
        .patch(
            &id,
            json!({"endpoint": format!("{}/other/rpc", remote.url)}),
        )
        .await;
    assert_eq!(v["discoveredCard"], Value::Null);
    assert_eq!(v["cardTrust"]["verification"], Value::Null);
}

#[tokio::test]
async fn bad_card_trust_is_refused_and_writes_nothing() {
    let gw = OutboundGateway::start(&[]).await;
    let remote = Remote::start(&["--sign", "ES256", "--card-url", "self"]).await;
    let key = remote.card_key().await;
    let mut private: Value = serde_json::from_str(super::EDDSA_JWK).unwrap();
    private["kid"] = json!("leaked");
    for (trust, field) in [
        (json!({"policy": "require"}), "cardTrust.trustedKeys"),
        (
            json!({"policy": "always", "trustedKeys": [key.clone()]}),
            "cardTrust.policy",
        ),
        (
            json!({"policy": "prefer", "trustedKeys": [private]}),
            "cardTrust.trustedKeys[0]",
        ),
        (
            json!({"trustedKeys": [{"kid": "k", "pem": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}]}),
            "cardTrust.trustedKeys[0]",
        ),
        (
            json!({"trustedKeys": [key.clone(), key.clone()]}),
            "cardTrust.trustedKeys[1]",
        ),
    ] {
        let (status, v) = gw
            .post_registration(
                json!({"name": "x", "endpoint": remote.rpc_url(), "cardTrust": trust}),
            )
            .await;
        assert_eq!(
            (status, v["field"].as_str()),
            (400, Some(field)),
            "{trust}: {v}"
        );
        // The private key is not echoed back.
        assert!(!v.to_string().contains("_MBttLFX"), "{v}");
    }
    let (status, v) = gw
        .post_registration(json!({"name": "x", "endpoint": remote.rpc_url(), "cardTrust": {"jku": "https://keys.example"}}))
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        gw.db.count("SELECT count(*) FROM a2a_remote_agents").await,
        0
    );

    // An update that fails changes nothing either.
    let id = register(
        &gw,
        &remote,
        json!({"policy": "prefer", "trustedKeys": [key]}),
    )
    .await;
    let before = gw.registration(&id).await.1;
    let (status, _) = gw
        .on_registration(
            Method::PATCH,
            &id,
            "",
            ADMIN,
            Some(json!({"name": "renamed", "cardTrust": {"trustedKeys": []}})),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(gw.registration(&id).await.1, before);
}

#[tokio::test]
async fn retention_clears_a_verified_card_body_but_keeps_its_check() {
    let gw = OutboundGateway::start(&[
        ("Q_A2A_RECONCILER_ENABLED", "true"),
        ("Q_A2A_RECONCILER_INTERVAL_MS", "200"),
        ("Q_A2A_RETENTION_DISCOVERED_CARDS_SECONDS", "86400"),
    ])
    .await;
    let remote = Remote::start(&["--sign", "EdDSA", "--card-url", "self"]).await;
    let id = register(
        &gw,
        &remote,
        json!({"policy": "require", "trustedKeys": [remote.card_key().await]}),
    )
    .await;
    let (_, v) = gw.discover(&id).await;
    assert_eq!(v["cardTrust"]["verification"]["verified"], true, "{v}");
    gw.db
        .client()
        .await
        .batch_execute("UPDATE a2a_remote_agents SET discovered_at = now() - interval '2 days'")
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    while gw
        .db
        .count("SELECT count(*) FROM a2a_remote_agents WHERE discovered_card IS NOT NULL")
        .await
        > 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the card was never cleared"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (_, v) = gw.registration(&id).await;
    assert_eq!(v["discoveredCard"], Value::Null);
    assert_eq!(v["cardTrust"]["verification"]["verified"], true, "{v}");
    let (_, d) = gw
        .delegate("task-after-retention", &id, "Still trusted?")
        .await;
    assert_eq!(d["status"], "completed", "{d}");
}
