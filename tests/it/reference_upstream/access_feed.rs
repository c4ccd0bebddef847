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

/// A feed answer without its epoch, and the epoch (a non-empty string in every answer).
pub fn without_epoch(answer: &Value) -> (Value, String) {
    let epoch = answer["epoch"]
        .as_str()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| panic!("no epoch in {answer}"))
        .to_owned();
    let mut answer = answer.clone();
    answer.as_object_mut().unwrap().remove("epoch");
    (answer, epoch)
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
    let (empty, epoch) = without_epoch(&access_after(&q, 0).await);
    assert_eq!(
        empty,
        json!({"changes": [], "cursor": 0, "head": 0, "floor": 0})
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
        without_epoch(&access_after(&q, 4).await),
        (
            json!({"changes": [], "cursor": 4, "head": 4, "floor": 0}),
            epoch.clone()
        )
    );
    // Run changes carry the run's own event seq.
    let runs = changes_after(&q, 0).await;
    assert_eq!(runs["changes"][0]["seq"], 1);

    q.post("/admin/reset", json!({})).await;
    // A follower at 4 sees another epoch, and `head` below its position: the feed was reset.
    let (after_reset, new_epoch) = without_epoch(&access_after(&q, 4).await);
    assert_eq!(
        after_reset,
        json!({"changes": [], "cursor": 4, "head": 0, "floor": 0})
    );
    assert_ne!(new_epoch, epoch, "a reset starts another epoch");
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

/// What a follower needs to tell a lost place: compaction raises the floor, a failover starts
/// another epoch above every position, lag withholds entries while `head` still names them.
#[tokio::test]
async fn compaction_failover_and_lag_say_where_the_feed_stands() {
    let q = Upstream::start().await;
    for granted in [false, true, false] {
        q.grant_workspace("ws-acme-main", "p-bob", granted).await;
    }
    let (_, epoch) = without_epoch(&access_after(&q, 0).await);
    let compacted = q
        .post("/admin/feeds/access/compact", json!({"through": 2}))
        .await;
    assert_eq!(compacted, json!({"floor": 2, "head": 3}));
    // A reader at 1 is below the floor: the answer says so at once, and holds only cursor 3.
    let below = access_after(&q, 1).await;
    assert_eq!(
        (below["floor"].as_u64(), below["head"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(entries(&below).len(), 1);
    assert_eq!(below["changes"][0]["cursor"], 3);

    let failed_over = q
        .post(
            "/admin/feeds/access/failover",
            json!({"lost": 1, "ahead": 2}),
        )
        .await;
    assert_eq!(failed_over["head"], 5, "{failed_over}");
    let (after, new_epoch) = without_epoch(&access_after(&q, 3).await);
    assert_ne!(new_epoch, epoch);
    assert_eq!(after["head"], 5);
    // Cursor 3 is now filler: the revocation it was is gone from this history.
    let history = q.internal_get("/changes/access?after=2").await;
    assert!(entries(&history)
        .iter()
        .all(|c| c["kind"] == "agent" && c["agent_id"] == "ag-failover-filler"));

    q.faults(json!({"access_feed_lag_ms": 60000})).await;
    q.grant_workspace("ws-acme-main", "p-bob", true).await;
    let lagging = access_after(&q, 5).await;
    assert_eq!(
        entries(&lagging).len(),
        0,
        "a lagging feed withholds the new entry"
    );
    assert_eq!(lagging["head"], 6, "but its head names it");
}

/// The `hold` fault: the answer is computed, then held at the barrier until released.
#[tokio::test]
async fn a_held_answer_is_computed_before_and_sent_after_the_barrier() {
    let q = Upstream::start().await;
    q.faults(json!({"hold": {"agent_access": 1}})).await;
    let path = "/tenants/t-acme/agents/ag-writer/access?principal_id=p-bob";
    let held = {
        let q_url = q.url.clone();
        tokio::spawn(async move {
            reqwest::Client::new()
                .get(format!("{q_url}/internal/v1{path}"))
                .bearer_auth(crate::support::SERVICE_TOKEN)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    crate::support::wait_until(
        "the answer is held",
        std::time::Duration::from_secs(5),
        async || q.admin(reqwest::Method::GET, "/admin/barrier", None).await["held"] == 1,
    )
    .await;
    q.grant_workspace("ws-acme-main", "p-bob", false).await;
    q.post("/admin/barrier/release", json!({})).await;
    // Q's state as of the moment it read the answer, not as of the release.
    assert_eq!(held.await.unwrap()["workspace_access"], "granted");
    assert_eq!(q.internal_get(path).await["workspace_access"], "revoked");
}
