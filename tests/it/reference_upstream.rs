//! The reference upstream's own `/admin` behaviour, driven over HTTP (no gateway, no database).

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::*;

fn create_body(workflow_id: &str) -> Value {
    json!({
        "workflow_id": workflow_id,
        "tenant_id": "t-acme",
        "principal_id": "p-alice",
        "agent_id": "ag-writer",
        "input": {"parts": ["hello"]},
        "execution_timeout_seconds": 3600,
    })
}

async fn create_run(q: &Upstream, workflow_id: &str) -> Value {
    let response = q
        .internal(Method::POST, "/runs", Some(create_body(workflow_id)))
        .await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

async fn changes_after(q: &Upstream, after: u64) -> Value {
    q.internal_get(&format!("/changes/runs?after={after}"))
        .await
}

async fn wait_for_status(q: &Upstream, workflow_id: &str, status: &str) {
    for _ in 0..100 {
        let runs = q.runs(Some(workflow_id)).await;
        if runs.first().is_some_and(|r| r["status"] == status) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run of {workflow_id} never reached {status}");
}

#[tokio::test]
async fn reset_clears_runs_faults_stats_grants_and_the_change_feed() {
    let q = Upstream::start().await;
    create_run(&q, "wf-before-reset").await;
    wait_for_status(&q, "wf-before-reset", "succeeded").await;
    assert_eq!(
        changes_after(&q, 0).await["head"],
        3,
        "queued, running, succeeded"
    );
    q.faults(
        json!({"read_fail_500": 5, "create_delay_ms": 10, "cancel_async": 1,
                    "extra_fields": true,
                    "status": {"route": "create_run", "status": 429, "count": 2}}),
    )
    .await;
    q.post("/admin/workflow-dedup", json!({"enabled": false}))
        .await;
    q.post("/admin/tokens/revoke", json!({"token": "tok-alice"}))
        .await;
    q.post(
        "/admin/grants/workspace",
        json!({"workspace_id": "ws-acme-main", "principal_id": "p-bob", "granted": false}),
    )
    .await;

    q.post("/admin/reset", json!({})).await;

    assert!(q.runs(None).await.is_empty());
    assert_eq!(
        q.admin(Method::GET, "/admin/faults", None).await,
        json!({
            "create_drop_after_commit": 0, "create_fail_500_before_commit": 0,
            "create_fail_500_after_commit": 0, "create_delay_ms": 0, "create_delay_count": 0,
            "read_fail_500": 0, "introspect_fail_500": 0, "introspect_delay_ms": 0,
            "introspect_delay_count": 0, "create_refuse_403": 0,
            "status": {}, "cancel_fail_500": 0, "cancel_fail_500_after_commit": 0,
            "cancel_delay_ms": 0, "cancel_delay_count": 0, "cancel_async": 0,
            "cancel_async_ms": 0, "extra_fields": false, "unknown_enum_values": false,
        })
    );
    assert_eq!(
        q.admin(Method::GET, "/admin/stats", None).await,
        json!({"create_requests": 0, "runs_created": 0, "introspect_requests": 0})
    );
    let introspection: Value = q
        .internal(
            Method::POST,
            "/identity/introspect",
            Some(json!({"token": "tok-alice"})),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(introspection["active"], true, "the revocation is gone");
    let access: Value = q
        .internal(
            Method::GET,
            "/tenants/t-acme/agents/ag-writer/access?principal_id=p-bob",
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        access["workspace_access"], "granted",
        "the grant override is gone"
    );

    // The feed starts over: nothing issued, and a follower behind the old head sees `head`
    // below its position (the contract's signal that Q's feed was reset).
    assert_eq!(
        changes_after(&q, 0).await,
        json!({"changes": [], "cursor": 0, "head": 0})
    );
    assert_eq!(changes_after(&q, 3).await["head"], 0);
    let first_run = create_run(&q, "wf-after-reset").await;
    let replay = q
        .internal(Method::POST, "/runs", Some(create_body("wf-after-reset")))
        .await;
    assert_eq!(replay.status(), 200, "deduplicated again after the reset");
    assert_eq!(replay.json::<Value>().await.unwrap()["id"], first_run["id"]);
    assert_eq!(
        q.runs(Some("wf-after-reset")).await.len(),
        1,
        "deduplication is back on"
    );
    let first = &changes_after(&q, 0).await["changes"][0];
    assert_eq!(first["cursor"], 1, "cursors are numbered from 1 again");
    assert_eq!(first["workflow_id"], "wf-after-reset");
}
