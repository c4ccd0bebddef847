//! Q trusting Q: one gateway verifies another's signed card with the keys the other's
//! `card-keys` printed, discovering it under the agent's path with the credential.

use serde_json::json;

use super::{card_keys, KeysDir, EDDSA_JWK};
use crate::support::outbound::{id_of, OutboundGateway};
use crate::support::Gateway;

/// A loopback port free right now: the remote gateway's cards must name the URL it is
/// registered at, so its public base is chosen before it starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn a_gateway_verifies_another_gateways_signed_card() {
    let keys = KeysDir::new(&[("q-b-1.jwk", EDDSA_JWK)]);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let listen = format!("127.0.0.1:{port}");
    let b_env = [
        ("Q_A2A_LISTEN", listen.as_str()),
        ("Q_A2A_PUBLIC_BASE_URL", base.as_str()),
        ("Q_A2A_CARD_SIGNING_KEYS_DIR", keys.path()),
    ];
    let b = Gateway::start_with_env(&b_env).await;
    assert_eq!(b.url, base);
    let jwks = card_keys(&b, &b_env).await;

    let a = OutboundGateway::start(&[]).await;
    let endpoint = format!("{base}/v1/a2a/agents/ag-writer/rpc");
    let created = a
        .register_with(json!({
            "name": "Q writer", "endpoint": endpoint, "bearerToken": "tok-alice",
            "cardTrust": {"policy": "require", "trustedKeys": jwks},
        }))
        .await;
    let id = id_of(&created);
    let (status, v) = a.discover(&id).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["cardTrust"]["verification"]["verified"], true, "{v}");
    assert_eq!(v["cardTrust"]["verification"]["kid"], "q-b-1");
    assert_eq!(v["discoveredCard"]["name"], "Writer");
    let (_, d) = a.delegate("task-q-to-q-signed", &id, "Hello, Q").await;
    assert_eq!(d["status"], "completed", "{d}");
}
