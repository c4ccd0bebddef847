//! Q's access change feed (`/changes/access`) as the reference upstream serves it: each admin
//! change of access appends the right entry, long polls wake on it, a reset starts it over, and
//! an agent made unavailable is not found.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::{changes_after, create_body, create_run};
use crate::support::*;

async fn access_after(q: &Upstream, after: u64) -> Value {
    q.internal_get(&format!("/changes/access?after={after}"))
        .await
}

/// The entries of the access feed without their times.
fn entries(answer: &Value) -> Vec<Value> {
    answer["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert!(c["at"].is_string(), "every entry has its time: {c}");
            let mut c = c.clone();
            c.as_object_mut().unwrap().remove("at");
            c
        })
        .collect()
}

async fn agent_access(q: &Upstream, agent_id: &str) -> reqwest::Response {
    q.internal(
        Method::GET,
        &format!("/tenants/t-acme/agents/{agent_id}/access?principal_id=p-alice"),
        None,
    )
    .await
}

async fn set_available(q: &Upstream, agent_id: &str, available: bool) {
    let answer = q
        .post(
            &format!("/admin/agents/{agent_id}/available"),
            json!({"available": available}),
        )
        .await;
    assert_eq!(
        answer,
        json!({"agent_id": agent_id, "available": available})
    );
}

#[tokio::test]
async fn the_access_feed_long_poll_wakes_on_a_grant_change() {
    let q = Upstream::start().await;
    let url = format!("{}/internal/v1/changes/access?after=0&wait_ms=20000", q.url);
    let poll = tokio::spawn(async move {
        reqwest::Client::new()
            .get(url)
            .bearer_auth(SERVICE_TOKEN)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "nothing changed yet: the poll waits");
    q.grant_workspace("ws-acme-main", "p-bob", false).await;
    // Had the grant not woken it, the poll would answer no change after its 20 s.
    let answer = poll.await.unwrap();
    assert_eq!(
        entries(&answer),
        [
            json!({"cursor": 1, "kind": "workspace_membership", "tenant_id": "t-acme",
                "workspace_id": "ws-acme-main", "principal_id": "p-bob"})
        ]
    );
    assert_eq!(
        (answer["cursor"].as_u64(), answer["head"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn each_access_change_names_its_kind_and_ids_and_reset_starts_the_feed_over() {
    let q = Upstream::start().await;
    assert_eq!(
        access_after(&q, 0).await,
        json!({"changes": [], "cursor": 0, "head": 0})
    );
    let run = create_run(&q, "wf-access").await;
    let run_id = run["id"].as_str().unwrap();
    q.grant_workspace("ws-acme-private", "p-alice", true).await;
    q.grant_evidence(run_id, "p-bob", true).await;
    set_available(&q, "ag-writer", false).await;
    set_available(&q, "ag-writer", true).await;

    let all = access_after(&q, 0).await;
    let agent = json!({"kind": "agent", "tenant_id": "t-acme", "agent_id": "ag-writer"});
    let with_cursor = |cursor: u64, entry: &Value| {
        let mut entry = entry.clone();
        entry["cursor"] = json!(cursor);
        entry
    };
    assert_eq!(
        entries(&all),
        [
            json!({"cursor": 1, "kind": "workspace_membership", "tenant_id": "t-acme",
                   "workspace_id": "ws-acme-private", "principal_id": "p-alice"}),
            json!({"cursor": 2, "kind": "evidence_grant", "tenant_id": "t-acme",
                   "run_id": run_id, "principal_id": "p-bob"}),
            with_cursor(3, &agent),
            with_cursor(4, &agent),
        ]
    );
    assert_eq!(
        (all["cursor"].as_u64(), all["head"].as_u64()),
        (Some(4), Some(4))
    );
    // Paged as the run feed is: `limit` entries from `after`, then where to continue.
    let page = q.internal_get("/changes/access?after=1&limit=2").await;
    assert_eq!(entries(&page).len(), 2);
    assert_eq!(
        (page["cursor"].as_u64(), page["head"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(
        access_after(&q, 4).await,
        json!({"changes": [], "cursor": 4, "head": 4})
    );
    // Run changes carry the run's own event seq.
    let runs = changes_after(&q, 0).await;
    assert_eq!(runs["changes"][0]["seq"], 1);

    q.post("/admin/reset", json!({})).await;
    // A follower at 4 sees `head` below its position: the feed was reset.
    assert_eq!(
        access_after(&q, 4).await,
        json!({"changes": [], "cursor": 4, "head": 0})
    );
    set_available(&q, "ag-approver", false).await;
    let restarted = access_after(&q, 0).await;
    assert_eq!(
        entries(&restarted),
        [json!({"cursor": 1, "kind": "agent", "tenant_id": "t-acme",
                "agent_id": "ag-approver"})]
    );
}

#[tokio::test]
async fn an_unavailable_agent_is_not_found_until_available_again() {
    let q = Upstream::start().await;
    assert_eq!(agent_access(&q, "ag-writer").await.status(), 200);
    set_available(&q, "ag-writer", false).await;

    let refused = agent_access(&q, "ag-writer").await;
    assert_eq!(refused.status(), 404);
    assert_eq!(
        refused.json::<Value>().await.unwrap()["error"],
        "agent_not_found"
    );
    let create = q
        .internal(Method::POST, "/runs", Some(create_body("wf-unavailable")))
        .await;
    assert_eq!(create.status(), 404, "refused as an unknown agent's create");
    assert_eq!(
        create.json::<Value>().await.unwrap()["error"],
        "agent_not_found"
    );
    assert!(q.runs(None).await.is_empty());
    assert_eq!(
        entries(&access_after(&q, 0).await),
        [json!({"cursor": 1, "kind": "agent", "tenant_id": "t-acme", "agent_id": "ag-writer"})]
    );

    set_available(&q, "ag-writer", true).await;
    assert_eq!(agent_access(&q, "ag-writer").await.status(), 200);
    set_available(&q, "ag-writer", false).await;
    q.post("/admin/reset", json!({})).await;
    assert_eq!(
        agent_access(&q, "ag-writer").await.status(),
        200,
        "the reset makes it available again"
    );
    // An agent Q does not know cannot be toggled.
    let unknown = reqwest::Client::new()
        .post(format!("{}/admin/agents/ag-nobody/available", q.url))
        .json(&json!({"available": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn the_feeds_fail_only_by_their_own_route_faults() {
    let q = Upstream::start().await;
    // `read_fail_500` is for reads of runs: a follower's long-poll must not take it from the
    // request a test aims it at.
    q.faults(json!({"read_fail_500": 1})).await;
    for feed in ["/changes/access", "/changes/runs"] {
        let answered = q.internal(Method::GET, feed, None).await;
        assert_eq!(answered.status(), 200, "{feed}");
    }
    assert_eq!(q.faults_left().await["read_fail_500"], 1);
    q.faults(json!({"status": {"route": "access_changes", "status": 503}}))
        .await;
    let faulted = q.internal(Method::GET, "/changes/access", None).await;
    assert_eq!(faulted.status(), 503);
    let unauthenticated = reqwest::Client::new()
        .get(format!("{}/internal/v1/changes/access", q.url))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(access_after(&q, 0).await["head"], 0);
}
