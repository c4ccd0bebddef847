//! Retired routes answer 410 with their replacement, with the profile on or off, before any
//! authentication; the live outbound routes (`/v1/a2a/agents`, `POST /v1/a2a/tasks`) are not
//! retired. And the rollout gates: profile off → 404, tenant without `agent_api` → 403,
//! readiness reflecting the status migration.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use crate::support::{new_id, Gateway, GatewayOptions};

/// Every retired route with a concrete path and the guide anchor it must name.
const RETIRED: &[(&str, &str, &str)] = &[
    ("POST", "/v1/a2a/message/send", "#sendmessage"),
    ("POST", "/v1/a2a/tasks/send", "#sendmessage"),
    ("POST", "/v1/a2a/tasks/get", "#gettask"),
    ("GET", "/v1/a2a/tasks/0b3e7f3c-old-process-task", "#gettask"),
    (
        "DELETE",
        "/v1/a2a/tasks/0b3e7f3c-old-process-task",
        "#gettask",
    ),
    ("GET", "/v1/a2a/tasks", "#listtasks"),
    ("POST", "/v1/a2a/tasks/list", "#listtasks"),
    ("POST", "/v1/a2a/tasks/cancel", "#canceltask"),
    ("POST", "/v1/a2a/tasks/task-17/cancel", "#canceltask"),
    ("GET", "/v1/a2a/cards", "#agent-cards"),
    ("GET", "/v1/a2a/.well-known/agents", "#agent-cards"),
    ("GET", "/v1/a2a/.well-known/agent.json", "#agent-cards"),
    ("POST", "/v1/a2a/local/q.answer", "#local-q-tasks"),
];

async fn assert_all_gone(gw: &Gateway) {
    for (method, path, anchor) in RETIRED {
        let response = gw
            .request(Method::from_bytes(method.as_bytes()).unwrap(), path)
            .await;
        assert_eq!(response.status(), 410, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "gone", "{method} {path}: {body}");
        let guide = body["migrationGuide"].as_str().unwrap();
        assert_eq!(
            guide,
            format!("docs/migration.md{anchor}"),
            "{method} {path}"
        );
        let replacement = body["replacement"].as_str().unwrap();
        assert!(
            replacement.contains("/v1/a2a/agents/{agent_id}/"),
            "{method} {path}: {replacement}"
        );
        assert!(body["message"].as_str().unwrap().contains(replacement));
    }
}

#[tokio::test]
async fn retired_routes_answer_410_with_profile_enabled() {
    let gw = Gateway::start().await;
    assert_all_gone(&gw).await;
    // With a bearer token and JSON-RPC body it is still 410: nothing behind it runs.
    let response = reqwest::Client::new()
        .post(format!("{}/v1/a2a/message/send", gw.url))
        .bearer_auth("tok-alice")
        .header("a2a-version", "1.0")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 410);
    assert_eq!(gw.db.task_count().await, 0);
}

#[tokio::test]
async fn retired_routes_answer_410_with_profile_disabled() {
    let gw = Gateway::start_with(GatewayOptions::profile_off().unmigrated()).await;
    assert_all_gone(&gw).await;
}

#[tokio::test]
async fn live_outbound_paths_are_not_retired() {
    let gw = Gateway::start().await;
    // The delegation wrapper and the registration API are live routes: without a credential
    // they ask for one (401), they are neither retired (410) nor missing a method (405).
    for (method, path) in [
        (Method::POST, "/v1/a2a/tasks"),
        (Method::GET, "/v1/a2a/agents"),
        (Method::POST, "/v1/a2a/agents"),
    ] {
        let response = gw.request(method.clone(), path).await;
        assert_eq!(response.status(), 401, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "unauthorized", "{method} {path}");
    }
}

#[tokio::test]
async fn profile_disabled_hides_profile_routes_but_not_health() {
    let gw = Gateway::start_with(GatewayOptions::profile_off().unmigrated()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    assert_eq!(writer.card().await.status, 404);
    let reply = writer.send_text_immediately(&new_id(), "hi").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.body["error"], "not_found");
    assert_eq!(gw.request(Method::GET, "/healthz").await.status(), 200);
    // Readiness does not require the status migration while the profile is off.
    let (status, body) = gw.readyz().await;
    assert_eq!(status, 200);
    assert_eq!(body["checks"]["status_migration"]["ok"], true, "{body}");
}

#[tokio::test]
async fn tenant_without_agent_api_is_refused() {
    let gw = Gateway::start().await;
    let reply = gw
        .caller("tok-dave")
        .agent("ag-legacy")
        .send_text_immediately(&new_id(), "hi")
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["error"], "tenant_feature_disabled");
    assert_eq!(reply.body["feature"], "agent_api");
    assert_eq!(gw.db.task_count().await, 0);
}

#[tokio::test]
async fn readiness_fails_when_the_status_migration_disappears_under_an_enabled_profile() {
    let gw = Gateway::start().await;
    let (status, body) = gw.readyz().await;
    assert_eq!(status, 200);
    assert_eq!(body["ready"], true);
    assert_eq!(body["checks"]["status_migration"]["ok"], true);
    // An operator restores an older backup: the bookkeeping no longer lists the migration.
    gw.db
        .client()
        .await
        .execute(
            "DELETE FROM a2a_schema_migrations WHERE version = '20261009_030000_a2a_status'",
            &[],
        )
        .await
        .unwrap();
    let body = gw.wait_readyz(503, Duration::from_secs(10)).await;
    assert_eq!(body["checks"]["status_migration"]["ok"], false, "{body}");
    assert!(body["checks"]["status_migration"]["detail"]
        .as_str()
        .unwrap()
        .contains("20261009_030000_a2a_status"));
    assert_eq!(body["checks"]["database"]["ok"], true);
}
