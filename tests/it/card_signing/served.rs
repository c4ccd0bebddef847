//! The gateway signs the cards it serves; the official SDK's resolver and verifier accept them,
//! and refuse one whose bytes changed.

use serde_json::Value;

use super::{card_keys, first_header, raw_card, KeysDir, ES256_PEM};
use crate::support::gateway::{preflight, run_command, serve_refused};
use crate::support::python::sdk_card_check;
use crate::support::{Gateway, PUBLIC_BASE};
use q_a2a_gateway::card_signature::{verify, PublicKey};

const ALICE: &str = "tok-alice";

/// The keys of a JWK Set as the gateway's verifier takes them.
fn trusted_keys(jwks: &Value) -> Vec<PublicKey> {
    jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| PublicKey::from_jwk(k).unwrap())
        .collect()
}

#[tokio::test]
async fn the_sdk_verifies_the_served_card_and_fails_it_after_one_byte_changes() {
    let keys = KeysDir::new(&[("2026-12.pem", ES256_PEM)]);
    let env = [("Q_A2A_CARD_SIGNING_KEYS_DIR", keys.path())];
    let gw = Gateway::start_with_env(&env).await;

    // What an operator hands partners: public keys only.
    let jwks = card_keys(&gw, &env).await;
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 1, "{jwks}");
    assert_eq!(jwks["keys"][0]["kid"], "2026-12");
    assert_eq!(jwks["keys"][0]["alg"], "ES256");
    assert!(jwks["keys"][0].get("d").is_none(), "{jwks}");
    let jwks_file = keys.write("partner-jwks.json", jwks.to_string().as_bytes());

    // The SDK's own resolver fetches the card and its verifier accepts it.
    let agent_base = format!("{}/v1/a2a/agents/ag-writer", gw.url);
    let sdk = sdk_card_check(&[
        "resolve",
        "--url",
        &agent_base,
        "--token",
        ALICE,
        "--jwks",
        &jwks_file,
    ])
    .await;
    assert_eq!(sdk["verified"], true, "{sdk}");
    assert_eq!(sdk["name"], "Writer");
    assert_eq!(sdk["signatures"], 1);

    // The exact bytes served verify; with one byte changed they do not.
    let (status, body, etag) = raw_card(&gw.url, "ag-writer", ALICE, &[]).await;
    assert_eq!(status, 200);
    let card: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        first_header(&card),
        serde_json::json!({"alg": "ES256", "kid": "2026-12", "typ": "JOSE"})
    );
    let as_served = keys.write("card.json", &body);
    let sdk = sdk_card_check(&["verify", "--card", &as_served, "--jwks", &jwks_file]).await;
    assert_eq!(sdk["verified"], true, "{sdk}");
    let at = body
        .windows(b"\"Writer\"".len())
        .position(|w| w == b"\"Writer\"")
        .expect("the name in the body")
        + 1;
    let mut changed = body.clone();
    changed[at] = b'V';
    let tampered = keys.write("tampered.json", &changed);
    let sdk = sdk_card_check(&["verify", "--card", &tampered, "--jwks", &jwks_file]).await;
    assert_eq!(sdk["verified"], false, "{sdk}");
    assert_eq!(sdk["error"], "InvalidSignaturesError");

    // The gateway's own verifier agrees on both.
    let trusted = trusted_keys(&jwks);
    let endpoint = format!("{PUBLIC_BASE}/v1/a2a/agents/ag-writer/rpc");
    assert!(verify(&card, &trusted, &endpoint).verified);
    let tampered_card: Value = serde_json::from_slice(&changed).unwrap();
    assert_eq!(
        verify(&tampered_card, &trusted, &endpoint).reason,
        "bad_signature"
    );

    // A card is signed once per content in a process: the next answer is the same bytes (an
    // ES256 signing would draw a fresh nonce) with the same validator, and revalidates.
    let (_, again, etag_again) = raw_card(&gw.url, "ag-writer", ALICE, &[]).await;
    assert_eq!(again, body, "the kept signed card, not a new signing");
    assert_eq!(etag_again, etag);
    let (status, _, _) = raw_card(&gw.url, "ag-writer", ALICE, &[("if-none-match", &etag)]).await;
    assert_eq!(status, 304);
    // Another agent's card has its own content, its own signature and validator.
    let (_, slow, slow_etag) = raw_card(&gw.url, "ag-slow", ALICE, &[]).await;
    assert_ne!(slow_etag, etag);
    let slow: Value = serde_json::from_slice(&slow).unwrap();
    let slow_endpoint = format!("{PUBLIC_BASE}/v1/a2a/agents/ag-slow/rpc");
    assert!(verify(&slow, &trusted, &slow_endpoint).verified);
    // The signature is bound to the card's own interface: Writer's card is not Slow's.
    assert_eq!(
        verify(&card, &trusted, &slow_endpoint).reason,
        "endpoint_not_in_card"
    );
}

#[tokio::test]
async fn public_keys_are_served_only_when_configured() {
    let keys = KeysDir::new(&[("2026-12.pem", ES256_PEM)]);
    let dir = [("Q_A2A_CARD_SIGNING_KEYS_DIR", keys.path())];
    let gw = Gateway::start_with_env(&dir).await;
    let jwks_path = "/v1/a2a/.well-known/jwks.json";
    let off = reqwest::get(format!("{}{jwks_path}", gw.url))
        .await
        .unwrap();
    assert_eq!(off.status().as_u16(), 404);

    let publish = [
        ("Q_A2A_CARD_SIGNING_KEYS_DIR", keys.path()),
        ("Q_A2A_CARD_SIGNING_PUBLISH_KEYS", "true"),
    ];
    let published = Gateway::start_with_env(&publish).await;
    // No credential: public keys are meant to be handed out.
    let on = reqwest::get(format!("{}{jwks_path}", published.url))
        .await
        .unwrap();
    assert_eq!(on.status().as_u16(), 200);
    assert_eq!(on.headers()["content-type"], "application/jwk-set+json");
    assert_eq!(on.headers()["cache-control"], "public, max-age=300");
    let served: Value = on.json().await.unwrap();
    assert_eq!(served, card_keys(&published, &publish).await);
    assert!(!served.to_string().contains("\"d\""));
}

#[tokio::test]
async fn unusable_signing_keys_stop_the_gateway_at_start() {
    let gw = Gateway::start().await;
    // Without keys there is nothing to print, and the command says where keys come from.
    let out = run_command(&gw.db, &gw.upstream.url, &[], &["card-keys"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Q_A2A_CARD_SIGNING_KEYS_DIR"));

    let sec1 = KeysDir::new(&[(
        "old.pem",
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKBfyciN3xR7J4Gwt9PpJ6gHOZtG0N7kpPnto4t2n14soAoGCCqGSM49\nAwEHoUQDQgAEHgWKBChOcx0x1i9Qjj+9wch14faM/SI6XdVMz22b0zwnKUw27/GC\nAqiVq0sh3Ad1VPk1mXiBzRfXvekA+Pcd8g==\n-----END EC PRIVATE KEY-----\n",
    )]);
    let two = KeysDir::new(&[("a.pem", ES256_PEM), ("b.jwk", super::EDDSA_JWK)]);
    // Preflight tells the same before a rollout.
    let card_signing_line = |stdout: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with("card_signing"))
            .unwrap_or_default()
            .to_string()
    };
    let out = preflight(
        &gw.db,
        &gw.upstream.url,
        &[("Q_A2A_CARD_SIGNING_KEYS_DIR", sec1.path())],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(card_signing_line(&stdout).contains("FAIL"), "{stdout}");
    assert!(stdout.contains("openssl pkcs8"), "{stdout}");
    let out = preflight(
        &gw.db,
        &gw.upstream.url,
        &[
            ("Q_A2A_CARD_SIGNING_KEYS_DIR", two.path()),
            ("Q_A2A_CARD_SIGNING_ACTIVE_KEY", "b"),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = card_signing_line(&stdout);
    assert!(
        line.contains("pass") && line.contains("2 key(s), active \"b\" (EdDSA)"),
        "{stdout}"
    );
    for (env, says) in [
        (
            vec![("Q_A2A_CARD_SIGNING_KEYS_DIR", sec1.path())],
            "openssl pkcs8",
        ),
        (
            vec![("Q_A2A_CARD_SIGNING_KEYS_DIR", two.path())],
            "no active key",
        ),
        (
            vec![
                ("Q_A2A_CARD_SIGNING_KEYS_DIR", two.path()),
                ("Q_A2A_CARD_SIGNING_ACTIVE_KEY", "c"),
            ],
            "not among the keys",
        ),
        (
            vec![("Q_A2A_CARD_SIGNING_PUBLISH_KEYS", "true")],
            "keys_dir",
        ),
    ] {
        let mut env = env;
        env.extend([
            ("Q_A2A_LISTEN", "127.0.0.1:0"),
            ("Q_A2A_DATABASE_URL", gw.db.url.as_str()),
            ("Q_A2A_UPSTREAM_URL", gw.upstream.url.as_str()),
            (
                "Q_A2A_UPSTREAM_SERVICE_TOKEN",
                crate::support::SERVICE_TOKEN,
            ),
        ]);
        let output = serve_refused(&env).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{says}: {stderr}");
        // Key material is never printed.
        assert!(
            !stderr.contains("MHcCAQEE") && !stderr.contains("_MBttLFX"),
            "{stderr}"
        );
    }
}

/// Renames `ag-writer` in Q, then reads its card every 50 ms: the time from the change to the
/// first card with the new name, which must be a new signing that verifies.
async fn card_follows_a_rename(gw: &Gateway, env: &[(&str, &str)]) -> std::time::Duration {
    let jwks = card_keys(gw, env).await;
    let trusted = trusted_keys(&jwks);
    let (status, before, etag) = raw_card(&gw.url, "ag-writer", ALICE, &[]).await;
    assert_eq!(status, 200);
    let renamed = std::time::Instant::now();
    gw.upstream
        .post(
            "/admin/agents/ag-writer/describe",
            serde_json::json!({"name": "Writer II", "description": "Writes more", "version": "2.0.0"}),
        )
        .await;
    loop {
        let (status, body, new_etag) = raw_card(&gw.url, "ag-writer", ALICE, &[]).await;
        assert_eq!(status, 200);
        let card: Value = serde_json::from_slice(&body).unwrap();
        if card["name"] == "Writer II" {
            let took = renamed.elapsed();
            assert_eq!(card["version"], "2.0.0");
            assert_ne!(new_etag, etag, "new content, new validator");
            assert_ne!(body, before);
            let endpoint = format!("{PUBLIC_BASE}/v1/a2a/agents/ag-writer/rpc");
            assert!(verify(&card, &trusted, &endpoint).verified, "{card}");
            // The old validator no longer revalidates.
            let (status, _, _) =
                raw_card(&gw.url, "ag-writer", ALICE, &[("if-none-match", &etag)]).await;
            assert_eq!(status, 200);
            return took;
        }
        assert_eq!(body, before, "the kept card, until Q's record changes");
        assert!(renamed.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The access bound the card's agent record is read under (docs/architecture.md, the freshness
/// rule), and what scheduling on a loaded machine adds to a read every 50 ms.
const AGENT_RECORD_BOUND: std::time::Duration = std::time::Duration::from_millis(1000 + 300);

/// The kept signed card is not a cache with a bound of its own: it is picked only while Q's
/// record of the agent is the one it was made from, and that record is read under the freshness
/// rule. So an agent renamed in Q shows in its card within the access bound, with the access
/// feed announcing the change and with the feed down.
#[tokio::test]
async fn a_kept_card_follows_q_within_the_access_bound() {
    let keys = KeysDir::new(&[("2026-12.pem", ES256_PEM)]);
    let env = [("Q_A2A_CARD_SIGNING_KEYS_DIR", keys.path())];
    {
        let gw = Gateway::start_with_env(&env).await;
        let took = card_follows_a_rename(&gw, &env).await;
        assert!(took <= AGENT_RECORD_BOUND, "feed healthy: {took:?}");
    }

    let gw = Gateway::start_with_env(&env).await;
    raw_card(&gw.url, "ag-writer", ALICE, &[]).await;
    gw.upstream
        .faults(serde_json::json!({"status": {"route": "access_changes", "status": 503, "count": 100000}}))
        .await;
    // Every long poll in flight has met the fault (the follower's are 300 ms).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let took = card_follows_a_rename(&gw, &env).await;
    assert!(took <= AGENT_RECORD_BOUND, "feed down: {took:?}");
}
