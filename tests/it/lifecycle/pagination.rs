//! ListTasks pages: every task exactly once in (timestamp desc, id desc) order whatever the page
//! size, signed cursors bound to their listing and key, and pages (and what they read from Q)
//! kept under 1 MiB.

use std::collections::HashSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use q_a2a_gateway::config::UpstreamConfig;
use q_a2a_gateway::upstream::UpstreamRunApi;

use crate::support::{new_id, wait_until, Agent, Gateway, GatewayOptions, Reply, SERVICE_TOKEN};

/// Every task of a listing, following nextPageToken; panics on a repeated id.
async fn list_all(agent: &Agent, mut params: Value) -> Vec<Value> {
    let mut seen = HashSet::new();
    let mut all = Vec::new();
    loop {
        let reply = agent.list_tasks(params.clone()).await;
        let result = reply.result().clone();
        for task in result["tasks"].as_array().unwrap() {
            assert!(
                seen.insert(task["id"].as_str().unwrap().to_string()),
                "task repeated across pages"
            );
            all.push(task.clone());
        }
        let next = result["nextPageToken"].as_str().unwrap();
        if next.is_empty() {
            return all;
        }
        params["pageToken"] = json!(next);
    }
}

fn is_desc_ordered(tasks: &[Value]) -> bool {
    tasks.windows(2).all(|w| {
        let a = (
            w[0]["status"]["timestamp"].as_str().unwrap(),
            w[0]["id"].as_str().unwrap(),
        );
        let b = (
            w[1]["status"]["timestamp"].as_str().unwrap(),
            w[1]["id"].as_str().unwrap(),
        );
        let ta = chrono::DateTime::parse_from_rfc3339(a.0).unwrap();
        let tb = chrono::DateTime::parse_from_rfc3339(b.0).unwrap();
        ta > tb || (ta == tb && a.1 > b.1)
    })
}

/// ListTasks with `params` is refused as invalid params (-32602); the refusal.
async fn refused(agent: &Agent, params: Value) -> Reply {
    let reply = agent.list_tasks(params).await;
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.body);
    reply
}

#[tokio::test]
async fn pagination_covers_every_task_once_even_with_equal_timestamps() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let mut ids = HashSet::new();
    for i in 0..45 {
        let reply = writer
            .send_text_immediately(&new_id(), &format!("task {i}"))
            .await;
        ids.insert(reply.task_id());
    }
    gw.db.wait_all_completed(Duration::from_secs(30)).await;
    // Force ties: 30 tasks share one status timestamp (the trigger is bypassed on purpose).
    let client = gw.db.client().await;
    client
        .batch_execute(
            "ALTER TABLE a2a_tasks DISABLE TRIGGER a2a_tasks_stamp_status;
             UPDATE a2a_tasks SET status_timestamp = '2026-11-30T10:00:00.123456Z'
              WHERE task_id IN (SELECT task_id FROM a2a_tasks ORDER BY task_id LIMIT 30);
             ALTER TABLE a2a_tasks ENABLE TRIGGER a2a_tasks_stamp_status;",
        )
        .await
        .unwrap();
    for page_size in [1, 7, 30, 100] {
        let all = list_all(&writer, json!({"pageSize": page_size})).await;
        let got: HashSet<String> = all
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, ids, "page size {page_size}: no task missed");
        assert!(
            is_desc_ordered(&all),
            "page size {page_size}: (timestamp desc, id desc)"
        );
        assert!(
            all.iter().all(|t| t.get("artifacts").is_none()),
            "artifacts omitted by default"
        );
    }
    let first = writer.list_tasks(json!({})).await;
    assert_eq!(first.result()["pageSize"], 50);
    assert_eq!(first.result()["totalSize"], 45);
    assert_eq!(first.result()["nextPageToken"], "");
    let paged = writer.list_tasks(json!({"pageSize": 20})).await;
    assert_eq!(paged.result()["tasks"].as_array().unwrap().len(), 20);
    assert_eq!(paged.result()["totalSize"], 45);
    assert_ne!(paged.result()["nextPageToken"], "");
    // Scoped to principal and agent.
    let bob = gw.caller("tok-bob").agent("ag-writer");
    assert_eq!(bob.list_tasks(json!({})).await.result()["totalSize"], 0);
    let alice_slow = gw.caller("tok-alice").agent("ag-slow");
    assert_eq!(
        alice_slow.list_tasks(json!({})).await.result()["totalSize"],
        0
    );
}

#[tokio::test]
async fn tampered_and_foreign_cursors_are_refused() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    for _ in 0..3 {
        writer.send_text_immediately(&new_id(), "x").await;
    }
    let page = writer.list_tasks(json!({"pageSize": 1})).await;
    let token = page.result()["nextPageToken"].as_str().unwrap().to_string();
    assert!(!token.is_empty());
    // Valid for its own listing.
    assert!(writer
        .list_tasks(json!({"pageSize": 1, "pageToken": token}))
        .await
        .is_result());
    // Altered: flip one character of the payload.
    let mut altered = token.clone().into_bytes();
    altered[5] = if altered[5] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    refused(&writer, json!({"pageToken": altered})).await;
    // Another principal, another agent, other filters.
    let bob = gw.caller("tok-bob").agent("ag-writer");
    let foreign = refused(&bob, json!({"pageToken": token})).await;
    assert_eq!(
        foreign.body["error"]["data"][0]["metadata"]["pageToken"],
        "issued for another listing"
    );
    let alice_slow = gw.caller("tok-alice").agent("ag-slow");
    refused(&alice_slow, json!({"pageToken": token})).await;
    let filtered = json!({"pageToken": token, "status": "TASK_STATE_COMPLETED"});
    refused(&writer, filtered).await;
    // Another replica with the same key accepts it; a replica with another key does not.
    let replica = gw.start_replica(&GatewayOptions::default()).await;
    let other = replica
        .caller("tok-alice")
        .agent("ag-writer")
        .list_tasks(json!({"pageSize": 1, "pageToken": token}))
        .await;
    assert!(other.is_result(), "{}", other.body);
    let rekeyed = gw
        .start_replica(&GatewayOptions::with_env(&[(
            "Q_A2A_CURSOR_KEY",
            "another-key-entirely",
        )]))
        .await;
    let elsewhere = rekeyed.caller("tok-alice").agent("ag-writer");
    refused(&elsewhere, json!({"pageToken": token})).await;
}

#[tokio::test]
async fn artifact_heavy_pages_stay_under_one_mib_and_continue_exactly() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let mut ids = HashSet::new();
    // Corrupted before the runs exist, so no read (a read commits what it read) sees them whole.
    gw.upstream.corrupt_next_outputs("large", 5).await;
    for i in 0..5 {
        let id = writer
            .send_text_immediately(&new_id(), &format!("large {i}"))
            .await
            .task_id();
        ids.insert(id);
    }
    gw.db.wait_all_completed(Duration::from_secs(20)).await;
    let mut seen = HashSet::new();
    let mut params = json!({"includeArtifacts": true, "pageSize": 10});
    let mut pages = 0;
    loop {
        let reply = writer.list_tasks(params.clone()).await;
        let bytes = serde_json::to_vec(&reply.body).unwrap().len();
        assert!(bytes <= 1024 * 1024, "page of {bytes} bytes");
        let result = reply.result();
        let tasks = result["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 2, "two 400 KiB artifacts fit, three do not");
        for t in tasks {
            assert!(t["artifacts"][0]["metadata"]["byteCount"].as_u64().unwrap() > 400 * 1024);
            assert!(seen.insert(t["id"].as_str().unwrap().to_string()));
        }
        assert_eq!(result["totalSize"], 5);
        pages += 1;
        let next = result["nextPageToken"].as_str().unwrap();
        if next.is_empty() {
            break;
        }
        params["pageToken"] = json!(next);
    }
    assert_eq!(seen, ids);
    assert_eq!(pages, 3);
    // Without artifacts, all five fit in one page.
    let light = writer.list_tasks(json!({})).await;
    assert_eq!(light.result()["tasks"].as_array().unwrap().len(), 5);
}

/// Output reads Q served since `marker` (a path this test requested from Q itself), per Q's own
/// record of its recent calls.
async fn output_reads_since(gw: &Gateway, marker: &str) -> usize {
    let calls = gw.upstream.recent_calls().await;
    let start = calls
        .iter()
        .rposition(|c| c["path"] == marker)
        .expect("the marker is among Q's recent calls");
    calls[start..]
        .iter()
        .filter(|c| c["path"].as_str().is_some_and(|p| p.ends_with("/output")))
        .count()
}

/// A page with artifacts reads from Q only what it can still hold: once two 400 KiB outputs
/// have spent the page's budget, the third is not read and no more are requested, so at most
/// the two read, the third and the seven requested ahead of it reach Q, instead of all twenty.
/// Q fails the feed follower's one read of each output, so none is committed before the page.
#[tokio::test]
async fn an_artifact_page_reads_from_q_only_what_can_fit() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    gw.upstream.corrupt_next_outputs("large", 20).await;
    gw.upstream
        .faults(json!({"status": {"route": "run_output", "status": 500, "count": 20}}))
        .await;
    for i in 0..20 {
        writer
            .send_text_immediately(&new_id(), &format!("large {i}"))
            .await
            .task_id();
    }
    gw.db.wait_all_completed(Duration::from_secs(20)).await;
    wait_until(
        "the feed follower's twenty output reads",
        Duration::from_secs(20),
        async || {
            gw.upstream.faults_left().await["status"]
                .get("run_output")
                .is_none()
        },
    )
    .await;
    let committed: i64 = gw.db.one("SELECT count(*) FROM a2a_task_artifacts").await;
    assert_eq!(committed, 0, "outputs committed before the page read them");
    let marker = format!("/internal/v1/runs/marker-{}", new_id());
    gw.upstream
        .internal(Method::GET, marker.trim_start_matches("/internal/v1"), None)
        .await;
    let reply = writer
        .list_tasks(json!({"includeArtifacts": true, "pageSize": 20}))
        .await;
    let result = reply.result();
    assert_eq!(result["tasks"].as_array().unwrap().len(), 2);
    assert_ne!(result["nextPageToken"], "");
    let reads = output_reads_since(&gw, &marker).await;
    assert!(
        reads <= 2 + 8,
        "{reads} outputs requested from Q for a page that holds two"
    );

    // The newest task's output is over 1 MiB: by its declared size, it is not read, and the
    // page that would start with it is refused like GetTask's answer.
    gw.upstream.corrupt_next_outputs("oversize", 1).await;
    let big = writer
        .send_text_immediately(&new_id(), "oversize")
        .await
        .task_id();
    let run_id = gw.db.run_id(&big).await;
    gw.db.wait_all_completed(Duration::from_secs(20)).await;
    let api = UpstreamRunApi::new(&UpstreamConfig {
        url: gw.upstream.url.clone(),
        service_token: SERVICE_TOKEN.into(),
        ..UpstreamConfig::default()
    })
    .unwrap();
    let answer = api.run_output_answer(&run_id).await.unwrap();
    assert!(answer.declared_len().unwrap() > 1024 * 1024);
    assert!(answer.read_within(1024 * 1024).await.unwrap().is_none());
    let refused = writer
        .list_tasks(json!({"includeArtifacts": true, "pageSize": 20}))
        .await;
    assert_eq!(refused.error_code(), Some(-32006), "{}", refused.body);
    assert_eq!(refused.body["error"]["data"][0]["metadata"]["taskId"], big);
}
