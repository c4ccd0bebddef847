//! Observer leases over TLS (`rediss://`): a private Redis that speaks TLS only, its server
//! certificate signed by a test CA the gateway is told to trust. A gateway that does not trust
//! that CA refuses the server and fails observation closed.

use std::time::Duration;

use crate::support::certs::ServerCerts;
use crate::support::gateway::redis_key_prefix;
use crate::support::redis::PrivateRedis;
use crate::support::{Gateway, GatewayOptions};

use super::{approver, waiting_task};

/// Live members of one lease key, read over TLS with the test CA.
async fn live(redis: &PrivateRedis, certs: &ServerCerts, key: &str) -> i64 {
    let client = redis::Client::build_with_tls(
        redis.tls_url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(certs.ca_pem.clone().into_bytes()),
        },
    )
    .unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    redis::cmd("ZCOUNT")
        .arg(key)
        .arg(format!("({}", s * 1000 + us / 1000))
        .arg("+inf")
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn leases_work_over_tls_and_an_untrusted_server_fails_closed() {
    let certs = ServerCerts::generate();
    let redis = PrivateRedis::start_tls(&certs).await;
    let ca = certs.ca().display().to_string();
    let trusting = GatewayOptions::with_env(&[
        ("Q_A2A_REDIS_URL", &redis.tls_url()),
        ("Q_A2A_REDIS_TLS_CA_FILE", &ca),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "1"),
    ]);
    let gw = Gateway::start_with(trusting).await;
    let body = gw.wait_readyz(200, Duration::from_secs(20)).await;
    assert_eq!(body["checks"]["redis"]["ok"], true, "{body}");

    let watch = approver(&gw, "tok-alice");
    let id = waiting_task(&gw, "tok-alice").await;
    let mut held = watch.subscribe(&id).await;
    assert!(held.is_sse(), "{}", held.status);
    held.next_result().await.unwrap();
    let principal_key = format!(
        "{{{}:leases}}:principal:6:t-acme:7:p-alice",
        redis_key_prefix(&gw.db)
    );
    assert_eq!(live(&redis, &certs, &principal_key).await, 1);
    let second = watch.subscribe(&id).await;
    assert_eq!(second.status, 429, "the bound is counted in the TLS Redis");

    // The same server, with only another CA trusted: the handshake fails, observation with it.
    let foreign = certs.foreign_ca().display().to_string();
    let distrusting = gw
        .start_replica(&GatewayOptions::with_env(&[
            ("Q_A2A_REDIS_URL", &redis.tls_url()),
            ("Q_A2A_REDIS_TLS_CA_FILE", &foreign),
        ]))
        .await;
    let refused = distrusting
        .caller("tok-bob")
        .agent("ag-approver")
        .subscribe(&waiting_task(&gw, "tok-bob").await)
        .await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json()["error"], "observation_unavailable");
    let readyz: serde_json::Value = reqwest::get(format!("{}/readyz", distrusting.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(readyz["checks"]["redis"]["ok"], false, "{readyz}");
    drop(held);
}
