//! A fill of the access cache that raced a revocation: Q read its answer before the
//! revocation, the revocation reached the gateway through the feed while the answer was on its
//! way, and the answer arrived after. The older answer must not stand (an entry stamped before
//! a change that names it is invalid, whichever reached the cache first).

use std::time::Duration;

use serde_json::json;

use super::{carries_content, held};
use crate::support::{new_id, GatewayOptions, InProcessGateway};

#[tokio::test]
async fn a_grant_read_before_its_revocation_and_cached_after_it_is_never_served() {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let task = writer.send_text(&new_id(), "secret words").await.task_id();
    let run = gw.db.run_id(&task).await;
    // A change that alters nothing but names the grant: the cached answer is not used again.
    gw.upstream.grant_evidence(&run, "p-alice", true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    gw.upstream.faults(json!({"hold": {"run_grant": 1}})).await;
    let reader = writer.clone();
    let racing = tokio::spawn({
        let task = task.clone();
        async move { reader.get_task(&task).await }
    });
    held(&gw).await;
    // Q's answer ("granted") is computed and held; now the revocation, and the feed carries it.
    gw.upstream.grant_evidence(&run, "p-alice", false).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    gw.upstream.post("/admin/barrier/release", json!({})).await;
    let raced = racing.await.unwrap();
    // The racing read started before the revocation: what it answered is within the rule.
    assert_eq!(raced.status, 200, "{}", raced.body);
    for _ in 0..5 {
        let after = writer.get_task(&task).await;
        assert!(
            !carries_content(&after.body),
            "the answer read before the revocation stood in the cache: {}",
            after.body
        );
    }
}

#[tokio::test]
async fn a_workspace_access_read_before_its_revocation_and_cached_after_it_is_never_served() {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    assert_eq!(writer.card().await.status, 200);
    // Unrelated to the access itself, but it names alice: the cached answer is not used again.
    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", true)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    gw.upstream
        .faults(json!({"hold": {"agent_access": 1}}))
        .await;
    let reader = writer.clone();
    let racing = tokio::spawn(async move { reader.card().await });
    held(&gw).await;
    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", false)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    gw.upstream.post("/admin/barrier/release", json!({})).await;
    assert_eq!(racing.await.unwrap().status, 200);
    for _ in 0..5 {
        let card = writer.card().await;
        assert_eq!(
            card.status, 403,
            "the access read before the revocation stood: {}",
            card.body
        );
    }
}
