//! Rotating the credential key: `q-a2a-gateway credentials reseal` seals every stored credential
//! again under the active key while a replica keeps discovering and delegating with them, and
//! none of those calls fails; preflight warns while a credential still needs the old key, and
//! a replica with only the new key can use every credential afterwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::gateway::{preflight, run_command, GatewayOptions};
use crate::support::outbound::{id_of, OutboundGateway, ADMIN, KEY_K1};
use crate::support::python::Remote;
use crate::support::{new_id, Reply};

const SECRET: &str = "rotated-remote-token-0815";
const KEY_K2: &str = "k2:HxwdHhscGhkYFxYVFBMSERAPDg0MCwoJCAcGBQQDAgE=";

/// A call to a replica's outbound API as the tenant admin.
async fn call(base: &str, path: &str, body: Option<Value>) -> Reply {
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(ADMIN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    Reply::send(request).await
}

/// Discovers and delegates through `base` until `stop`; every call must succeed. How many.
async fn use_credentials(base: String, registrations: Vec<String>, stop: Arc<AtomicBool>) -> usize {
    let mut calls = 0;
    while !stop.load(Ordering::Relaxed) {
        for reg in &registrations {
            let found = call(&base, &format!("/v1/a2a/agents/{reg}/discover"), None).await;
            assert_eq!(found.status, 200, "discovery: {}", found.body);
            let body = json!({"taskId": new_id(), "agentId": reg, "text": "hi"});
            let sent = call(&base, "/v1/a2a/tasks", Some(body)).await;
            assert_eq!(
                (sent.status, sent.body["status"].as_str()),
                (200, Some("completed")),
                "delegation: {}",
                sent.body
            );
            calls += 2;
        }
    }
    calls
}

/// What `target_hash` fingerprints: the endpoint and the seal's key id and nonce.
fn target(endpoint: &str, key_id: &str, nonce: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(endpoint.as_bytes());
    h.update([0]);
    h.update(key_id.as_bytes());
    h.update([0]);
    h.update(nonce);
    hex::encode(h.finalize())
}

#[tokio::test]
async fn resealing_while_replicas_use_the_credentials_fails_no_call() {
    let gw = OutboundGateway::start(&[]).await;
    let remote = Remote::start(&["--require-token", SECRET]).await;
    let mut registrations = Vec::new();
    for i in 0..6 {
        let name = format!("R{i}");
        registrations.push(id_of(
            &gw.register(&name, &remote.rpc_url(), Some(SECRET)).await,
        ));
    }
    let (status, v) = gw
        .delegate("before-rotation", &registrations[0], "hi")
        .await;
    assert_eq!(status, 200, "{v}");

    // Step 1 of the rotation: every replica gets both keys, the new one active.
    let both = format!("{KEY_K1},{KEY_K2}");
    let rotated = [
        ("Q_A2A_CREDENTIAL_KEYS", both.as_str()),
        ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k2"),
    ];
    let mut env = vec![
        ("Q_A2A_OUTBOUND_ALLOW_HTTP", "true"),
        ("Q_A2A_OUTBOUND_ALLOW_CIDRS", "127.0.0.1/32"),
        ("Q_A2A_RECONCILER_ENABLED", "false"),
    ];
    env.extend_from_slice(&rotated);
    let replica = gw
        .start_replica(&GatewayOptions {
            profile_enabled: false,
            ..GatewayOptions::with_env(&env)
        })
        .await;
    let before = preflight(&gw.db, &gw.upstream.url, &rotated).await;
    let printed = String::from_utf8_lossy(&before.stdout);
    let line = printed
        .lines()
        .find(|l| l.starts_with("credential_seals"))
        .unwrap();
    assert!(
        line.contains("warn") && line.contains("6 under \"k1\""),
        "{printed}"
    );

    // Step 2: re-seal, one registration per batch, while the replica uses every credential.
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(use_credentials(
                replica.url.clone(),
                registrations.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let args = ["credentials", "reseal", "--batch-size", "1"];
    let out = run_command(&gw.db, &gw.upstream.url, &rotated, &args).await;
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(printed.contains("resealed 6 credential(s)"), "{printed}");
    // A few more rounds on the new seals.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut calls = 0;
    for reader in readers {
        calls += reader.await.expect("no discovery or delegation failed");
    }
    assert!(calls > 0);
    eprintln!("{calls} discoveries and delegations while re-sealing");
    assert!(remote
        .seen()
        .await
        .iter()
        .filter(|r| r["rpcMethod"].is_string())
        .all(|r| r["authorization"] == format!("Bearer {SECRET}")));

    assert_eq!(
        gw.db
            .count("SELECT count(*) FROM a2a_remote_agents WHERE credential_key_id = 'k2'")
            .await,
        6
    );
    // The delegation sent before keeps the same target: a resend stays possible.
    let row = gw
        .db
        .client()
        .await
        .query_one(
            "SELECT r.endpoint, r.credential_key_id, r.credential_nonce, d.target_sha256
               FROM a2a_delegations d JOIN a2a_remote_agents r USING (registration_id)
              WHERE d.task_id = 'before-rotation'",
            &[],
        )
        .await
        .unwrap();
    let (endpoint, key, nonce, stored): (String, String, Vec<u8>, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(stored, target(&endpoint, &key, &nonce));

    let after = preflight(&gw.db, &gw.upstream.url, &rotated).await;
    let printed = String::from_utf8_lossy(&after.stdout);
    let line = printed
        .lines()
        .find(|l| l.starts_with("credential_seals"))
        .unwrap();
    assert!(line.contains("pass"), "{printed}");
    let again = run_command(&gw.db, &gw.upstream.url, &rotated, &args).await;
    assert!(String::from_utf8_lossy(&again.stdout).contains("resealed 0"));

    // Step 3: the old key goes; every credential still works.
    let mut only_new = env.clone();
    only_new.retain(|(k, _)| !k.starts_with("Q_A2A_CREDENTIAL"));
    only_new.extend_from_slice(&[
        ("Q_A2A_CREDENTIAL_KEYS", KEY_K2),
        ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k2"),
    ]);
    let last = gw
        .start_replica(&GatewayOptions {
            profile_enabled: false,
            ..GatewayOptions::with_env(&only_new)
        })
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let once = tokio::spawn(use_credentials(
        last.url.clone(),
        registrations,
        stop.clone(),
    ));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    stop.store(true, Ordering::Relaxed);
    assert!(once.await.expect("every credential opens under k2 alone") > 0);
}
