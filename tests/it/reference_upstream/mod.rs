//! The reference upstream's own `/admin` behaviour, its per-route request counts and its
//! change feeds, driven over HTTP (no gateway, no database).

mod access_feed;

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
                    "extra_fields": true, "create_omit_evidence": true,
                    "corrupt_output": "checksum", "corrupt_output_count": 3,
                    "status": {"route": "create_run", "status": 429, "count": 2}}),
    )
    .await;
    let refused = q
        .internal(Method::POST, "/runs", Some(create_body("wf-refused")))
        .await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        q.admin(Method::GET, "/admin/faults", None).await["fired"]["status:create_run"],
        1,
        "a fault that took effect is counted"
    );
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
            "cancel_async_ms": 0, "extra_fields": false, "create_omit_evidence": false,
            "unknown_enum_values": false,
            "corrupt_output": null, "corrupt_output_count": 0,
            "access_feed_lag_ms": 0, "run_feed_lag_ms": 0, "hold": {}, "pad_answers": {},
            "fired": {},
        })
    );
    assert_eq!(
        q.admin(Method::GET, "/admin/stats", None).await,
        json!({"create_requests": 0, "runs_created": 0, "introspect_requests": 0,
               "requests": {}})
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
    let (fresh, _) = access_feed::without_epoch(&changes_after(&q, 0).await);
    assert_eq!(
        fresh,
        json!({"changes": [], "cursor": 0, "head": 0, "floor": 0})
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

/// The per-route request counts of `/admin/stats`.
async fn requests(q: &Upstream) -> Value {
    q.stats().await["requests"].clone()
}

#[tokio::test]
async fn every_contract_request_counts_once_under_its_route() {
    let q = Upstream::start().await;
    let run = create_run(&q, "wf-counted").await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    wait_for_status(&q, "wf-counted", "succeeded").await;
    assert_eq!(requests(&q).await, json!({"create_run": 1}));

    let calls: Vec<(&str, Method, String, Option<Value>)> = vec![
        ("health", Method::GET, "/health".into(), None),
        (
            "introspect",
            Method::POST,
            "/identity/introspect".into(),
            Some(json!({"token": "tok-alice"})),
        ),
        (
            "agent_access",
            Method::GET,
            "/tenants/t-acme/agents/ag-writer/access?principal_id=p-alice".into(),
            None,
        ),
        (
            "create_run",
            Method::POST,
            "/runs".into(),
            Some(create_body("wf-counted")),
        ),
        ("get_run", Method::GET, format!("/runs/{run_id}"), None),
        (
            "run_by_workflow",
            Method::GET,
            "/runs/by-workflow/wf-counted".into(),
            None,
        ),
        (
            "run_events",
            Method::GET,
            format!("/runs/{run_id}/events"),
            None,
        ),
        (
            "run_output",
            Method::GET,
            format!("/runs/{run_id}/output"),
            None,
        ),
        (
            "approvals",
            Method::GET,
            format!("/runs/{run_id}/approvals"),
            None,
        ),
        (
            "run_grant",
            Method::GET,
            format!("/runs/{run_id}/grants/p-alice"),
            None,
        ),
        (
            "evidence_grants",
            Method::POST,
            "/evidence-grants/query".into(),
            Some(json!({"principal_id": "p-alice", "run_ids": [run_id]})),
        ),
        ("run_changes", Method::GET, "/changes/runs".into(), None),
        (
            "access_changes",
            Method::GET,
            "/changes/access".into(),
            None,
        ),
        (
            "cancel_run",
            Method::POST,
            format!("/runs/{run_id}/cancel"),
            Some(json!({"principal_id": "p-alice"})),
        ),
    ];
    for (route, method, path, body) in calls {
        let before = requests(&q).await;
        let answered = q.internal(method, &path, body).await.status();
        let mut expected = before.clone();
        expected[route] = json!(before[route].as_u64().unwrap_or(0) + 1);
        assert_eq!(requests(&q).await, expected, "{route} ({answered})");
    }

    // A request the service token does not admit is not counted; one a fault answers is.
    let before = requests(&q).await;
    let rejected = reqwest::Client::new()
        .get(format!("{}/internal/v1/runs/{run_id}", q.url))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(rejected.status(), 401);
    assert_eq!(requests(&q).await, before);
    q.faults(json!({"status": {"route": "get_run", "status": 502}}))
        .await;
    let faulted = q
        .internal(Method::GET, &format!("/runs/{run_id}"), None)
        .await;
    assert_eq!(faulted.status(), 502);
    assert_eq!(
        requests(&q).await["get_run"].as_u64(),
        Some(before["get_run"].as_u64().unwrap() + 1)
    );

    q.post("/admin/reset", json!({})).await;
    assert_eq!(requests(&q).await, json!({}));
}

#[tokio::test]
async fn a_create_answers_the_grant_of_its_principal_as_the_grant_route_does() {
    let q = Upstream::start().await;
    let run = create_run(&q, "wf-evidence").await;
    assert_eq!(run["principal_evidence"], "granted", "{run}");
    let run_id = run["id"].as_str().unwrap();
    // Neither a read of the run nor the run feed carries it: it is the create's answer alone.
    assert!(q
        .internal_get(&format!("/runs/{run_id}"))
        .await
        .get("principal_evidence")
        .is_none());
    q.grant_evidence(run_id, "p-alice", false).await;
    let replay = q
        .internal(Method::POST, "/runs", Some(create_body("wf-evidence")))
        .await;
    assert_eq!(replay.status(), 200);
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["principal_evidence"], "revoked", "{replay}");
    let grant = q
        .internal_get(&format!("/runs/{run_id}/grants/p-alice"))
        .await;
    assert_eq!(grant["evidence"], "revoked");
    q.faults(json!({"create_omit_evidence": true})).await;
    let plain: Value = q
        .internal(Method::POST, "/runs", Some(create_body("wf-evidence")))
        .await
        .json()
        .await
        .unwrap();
    assert!(plain.get("principal_evidence").is_none(), "{plain}");
}
