//! Discovery: the remote's card is stored as untrusted metadata, fetched without the
//! credential, and changes nothing the registration says.

use reqwest::Method;
use serde_json::{json, Value};

use super::CAROL_ADMIN;
use crate::support::outbound::{id_of, OutboundGateway};
use crate::support::python::Remote;

#[tokio::test]
async fn discovery_stores_the_card_as_untrusted_metadata_only() {
    let gw = OutboundGateway::start(&[]).await;
    let secret = "secret-discovery";
    let remote = Remote::start(&["--require-token", secret]).await;
    let created = gw
        .register("Discoverable", &remote.rpc_url(), Some(secret))
        .await;
    let id = id_of(&created);

    let (status, v) = gw.discover(&id).await;
    assert_eq!(status, 200, "{v}");
    let card = &v["discoveredCard"];
    assert_eq!(card["name"], "Remote Markdown Agent");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        "https://elsewhere.example/a2a/rpc"
    );
    assert_eq!(card["credentials"]["bearer"], "card-supplied-token");
    // Nothing the card says was installed.
    assert_eq!(v["endpoint"], json!(remote.rpc_url()));
    assert_eq!(v["hasCredential"], true);
    assert_eq!(v["credentialKeyId"], created["credentialKeyId"]);
    assert_eq!(
        gw.db.count("SELECT count(*) FROM a2a_remote_agents").await,
        1
    );
    // The card was fetched without the credential.
    let card_requests: Vec<Value> = remote
        .seen()
        .await
        .into_iter()
        .filter(|r| r["path"] == "/.well-known/agent-card.json")
        .collect();
    assert_eq!(card_requests.len(), 1);
    assert_eq!(card_requests[0]["authorization"], Value::Null);

    // Delegation still uses the registered endpoint and credential.
    let (_, d) = gw.delegate("task-disc-1", &id, "Still you?").await;
    assert_eq!(d["status"], "completed", "{d}");
    assert!(remote
        .seen()
        .await
        .iter()
        .filter(|r| r["rpcMethod"] == "SendMessage")
        .all(|r| r["authorization"] == format!("Bearer {secret}")));

    // Another tenant cannot trigger discovery.
    let (status, _) = gw
        .on_registration(Method::POST, &id, "/discover", CAROL_ADMIN, None)
        .await;
    assert_eq!(status, 404);
}
