//! Task lifecycle: ListTasks (filters, pagination, the 1 MiB bound, cursors), CancelTask,
//! approvals as INPUT_REQUIRED, revocation on every method, the status index kept current by
//! Q's change feed, and dispatch recovery by the reconciler across replicas and SIGKILLs.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

async fn list(gw: &Gateway, token: &str, agent: &str, params: Value) -> RpcReply {
    gw.rpc(token, agent, "ListTasks", params).await
}

/// Every task id of a listing, following nextPageToken; panics on a repeated id.
async fn list_all(gw: &Gateway, token: &str, agent: &str, mut params: Value) -> Vec<Value> {
    let mut seen = HashSet::new();
    let mut all = Vec::new();
    loop {
        let reply = list(gw, token, agent, params.clone()).await;
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

async fn wait_until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn state_of(gw: &Gateway, task_id: &str) -> String {
    gw.db
        .client()
        .await
        .query_one(
            "SELECT state FROM a2a_tasks WHERE task_id = $1::text::uuid",
            &[&task_id],
        )
        .await
        .unwrap()
        .get(0)
}

async fn run_id_of(gw: &Gateway, task_id: &str) -> String {
    gw.db
        .client()
        .await
        .query_one(
            "SELECT run_id FROM a2a_tasks WHERE task_id = $1::text::uuid",
            &[&task_id],
        )
        .await
        .unwrap()
        .get(0)
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

#[tokio::test]
async fn pagination_covers_every_task_once_even_with_equal_timestamps() {
    let gw = Gateway::start().await;
    let mut ids = HashSet::new();
    for i in 0..45 {
        let reply = gw
            .send(
                "tok-alice",
                "ag-writer",
                &new_id(),
                &format!("task {i}"),
                true,
            )
            .await;
        ids.insert(reply.result()["task"]["id"].as_str().unwrap().to_string());
    }
    wait_until("all completed", Duration::from_secs(30), || async {
        gw.db
            .count("SELECT count(*) FROM a2a_tasks WHERE state <> 'TASK_STATE_COMPLETED'")
            .await
            == 0
    })
    .await;
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
        let all = list_all(
            &gw,
            "tok-alice",
            "ag-writer",
            json!({"pageSize": page_size}),
        )
        .await;
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
    let first = list(&gw, "tok-alice", "ag-writer", json!({})).await;
    assert_eq!(first.result()["pageSize"], 50);
    assert_eq!(first.result()["totalSize"], 45);
    assert_eq!(first.result()["nextPageToken"], "");
    let paged = list(&gw, "tok-alice", "ag-writer", json!({"pageSize": 20})).await;
    assert_eq!(paged.result()["tasks"].as_array().unwrap().len(), 20);
    assert_eq!(paged.result()["totalSize"], 45);
    assert_ne!(paged.result()["nextPageToken"], "");
    // Scoped to principal and agent.
    assert_eq!(
        list(&gw, "tok-bob", "ag-writer", json!({})).await.result()["totalSize"],
        0
    );
    assert_eq!(
        list(&gw, "tok-alice", "ag-slow", json!({})).await.result()["totalSize"],
        0
    );
}

#[tokio::test]
async fn filters_and_parameter_validation() {
    let gw = Gateway::start().await;
    let done = gw
        .send("tok-alice", "ag-writer", &new_id(), "first", false)
        .await
        .result()["task"]
        .clone();
    let marker = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waiting = gw
        .send(
            "tok-alice",
            "ag-approver",
            &new_id(),
            "needs approval",
            false,
        )
        .await
        .result()["task"]
        .clone();
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let later = gw
        .send("tok-alice", "ag-writer", &new_id(), "second", false)
        .await
        .result()["task"]
        .clone();

    let by_context = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"contextId": done["contextId"]}),
    )
    .await;
    let tasks = by_context.result()["tasks"].as_array().unwrap().clone();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["id"], done["id"]);
    let garbage_context = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"contextId": "not-a-context"}),
    )
    .await;
    assert_eq!(garbage_context.result()["totalSize"], 0);

    let completed = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"status": "TASK_STATE_COMPLETED"}),
    )
    .await;
    assert_eq!(completed.result()["totalSize"], 2);
    let input = list(
        &gw,
        "tok-alice",
        "ag-approver",
        json!({"status": "TASK_STATE_INPUT_REQUIRED"}),
    )
    .await;
    assert_eq!(input.result()["tasks"][0]["id"], waiting["id"]);
    assert!(input.result()["tasks"][0]["status"]["message"]["parts"][0]["text"].is_string());
    let none = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"status": "TASK_STATE_CANCELED"}),
    )
    .await;
    assert_eq!(none.result()["totalSize"], 0);

    let after = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"statusTimestampAfter": marker.to_rfc3339()}),
    )
    .await;
    let after_ids: Vec<&Value> = after.result()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert_eq!(after_ids, vec![&later["id"]]);

    let with_artifacts = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"includeArtifacts": true, "historyLength": 0}),
    )
    .await;
    for task in with_artifacts.result()["tasks"].as_array().unwrap() {
        assert_eq!(
            task["artifacts"][0]["parts"][0]["mediaType"],
            "text/markdown"
        );
        assert!(task.get("history").is_none());
    }

    let bad: Vec<Value> = vec![
        json!({"pageSize": 0}),
        json!({"pageSize": 101}),
        json!({"pageSize": "ten"}),
        json!({"status": "TASK_STATE_RUNNING"}),
        json!({"statusTimestampAfter": "yesterday"}),
        json!({"includeArtifacts": "yes"}),
        json!({"historyLength": -1}),
        json!({"pageToken": "not-a-token"}),
    ];
    for params in bad {
        let reply = list(&gw, "tok-alice", "ag-writer", params.clone()).await;
        assert_eq!(reply.error_code(), Some(-32602), "{params}: {}", reply.body);
    }
    assert_eq!(
        list(&gw, "tok-alice", "ag-writer", json!({"tenant": "t-globex"}))
            .await
            .error_code(),
        Some(-32004)
    );
}

#[tokio::test]
async fn tampered_and_foreign_cursors_are_refused() {
    let gw = Gateway::start().await;
    for _ in 0..3 {
        gw.send("tok-alice", "ag-writer", &new_id(), "x", true)
            .await;
    }
    let page = list(&gw, "tok-alice", "ag-writer", json!({"pageSize": 1})).await;
    let token = page.result()["nextPageToken"].as_str().unwrap().to_string();
    assert!(!token.is_empty());
    // Valid for its own listing.
    assert!(list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"pageSize": 1, "pageToken": token})
    )
    .await
    .body
    .get("result")
    .is_some());
    // Altered: flip one character of the payload.
    let mut altered = token.clone().into_bytes();
    altered[5] = if altered[5] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let reply = list(&gw, "tok-alice", "ag-writer", json!({"pageToken": altered})).await;
    assert_eq!(reply.error_code(), Some(-32602));
    // Another principal, another agent, other filters.
    let foreign = list(&gw, "tok-bob", "ag-writer", json!({"pageToken": token})).await;
    assert_eq!(foreign.error_code(), Some(-32602));
    assert_eq!(
        foreign.body["error"]["data"][0]["metadata"]["pageToken"],
        "issued for another listing"
    );
    assert_eq!(
        list(&gw, "tok-alice", "ag-slow", json!({"pageToken": token}))
            .await
            .error_code(),
        Some(-32602)
    );
    assert_eq!(
        list(
            &gw,
            "tok-alice",
            "ag-writer",
            json!({"pageToken": token, "status": "TASK_STATE_COMPLETED"})
        )
        .await
        .error_code(),
        Some(-32602)
    );
    // Another replica with the same key accepts it; a replica with another key does not.
    let replica = gw.start_replica(&GatewayOptions::default()).await;
    let other = Gateway::rpc_at(
        &replica.url,
        "tok-alice",
        "ag-writer",
        "ListTasks",
        json!({"pageSize": 1, "pageToken": token}),
    )
    .await;
    assert!(other.body.get("result").is_some(), "{}", other.body);
    let rekeyed = gw
        .start_replica(&GatewayOptions {
            env: vec![("Q_A2A_CURSOR_KEY".into(), "another-key-entirely".into())],
            ..Default::default()
        })
        .await;
    let refused = Gateway::rpc_at(
        &rekeyed.url,
        "tok-alice",
        "ag-writer",
        "ListTasks",
        json!({"pageToken": token}),
    )
    .await;
    assert_eq!(refused.error_code(), Some(-32602));
}

#[tokio::test]
async fn artifact_heavy_pages_stay_under_one_mib_and_continue_exactly() {
    let gw = Gateway::start().await;
    let mut ids = HashSet::new();
    for i in 0..5 {
        let task = gw
            .send(
                "tok-alice",
                "ag-writer",
                &new_id(),
                &format!("large {i}"),
                false,
            )
            .await
            .result()["task"]
            .clone();
        let id = task["id"].as_str().unwrap().to_string();
        let run_id = run_id_of(&gw, &id).await;
        gw.upstream
            .post(
                &format!("/admin/runs/{run_id}/corrupt-output"),
                json!({"mode": "large"}),
            )
            .await;
        ids.insert(id);
    }
    let mut seen = HashSet::new();
    let mut params = json!({"includeArtifacts": true, "pageSize": 10});
    let mut pages = 0;
    loop {
        let reply = list(&gw, "tok-alice", "ag-writer", params.clone()).await;
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
    let light = list(&gw, "tok-alice", "ag-writer", json!({})).await;
    assert_eq!(light.result()["tasks"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn cancel_running_terminal_foreign_and_unknown() {
    let gw = Gateway::start().await;
    let running = gw
        .send("tok-alice", "ag-slow", &new_id(), "cancel me", true)
        .await
        .result()["task"]
        .clone();
    let id = running["id"].as_str().unwrap();
    let canceled = gw
        .rpc("tok-alice", "ag-slow", "CancelTask", json!({"id": id}))
        .await;
    assert_eq!(
        canceled.result()["status"]["state"],
        "TASK_STATE_CANCELED",
        "{}",
        canceled.body
    );
    assert_eq!(canceled.result()["id"], id);
    let run_id = run_id_of(&gw, id).await;
    let runs = gw.upstream.runs(None).await;
    let run = runs.iter().find(|r| r["id"] == run_id.as_str()).unwrap();
    assert_eq!(run["status"], "canceled", "Q's run was notified");
    assert_eq!(state_of(&gw, id).await, "TASK_STATE_CANCELED");
    let cancel_requested: bool = gw
        .db
        .client()
        .await
        .query_one(
            "SELECT cancel_requested_at IS NOT NULL FROM a2a_tasks WHERE task_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(cancel_requested, "cancellation persisted");

    // Again: terminal → -32002, state recoverable with GetTask.
    let again = gw
        .rpc("tok-alice", "ag-slow", "CancelTask", json!({"id": id}))
        .await;
    assert_eq!(again.error_code(), Some(-32002));
    assert_eq!(
        again.body["error"]["data"][0]["reason"],
        "TASK_NOT_CANCELABLE"
    );
    assert_eq!(
        gw.get_task("tok-alice", "ag-slow", id).await.result()["status"]["state"],
        "TASK_STATE_CANCELED"
    );

    // Completed → -32002, and it stays COMPLETED.
    let done = gw
        .send("tok-alice", "ag-writer", &new_id(), "done", false)
        .await
        .result()["task"]
        .clone();
    let done_id = done["id"].as_str().unwrap();
    assert_eq!(
        gw.rpc(
            "tok-alice",
            "ag-writer",
            "CancelTask",
            json!({"id": done_id})
        )
        .await
        .error_code(),
        Some(-32002)
    );
    assert_eq!(
        gw.get_task("tok-alice", "ag-writer", done_id)
            .await
            .result()["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // Foreign and unknown: the same -32001, nothing changes.
    let other = gw
        .send("tok-alice", "ag-slow", &new_id(), "not bob's", true)
        .await
        .result()["task"]
        .clone();
    let other_id = other["id"].as_str().unwrap();
    let foreign = gw
        .rpc("tok-bob", "ag-slow", "CancelTask", json!({"id": other_id}))
        .await;
    let unknown = gw
        .rpc(
            "tok-alice",
            "ag-slow",
            "CancelTask",
            json!({"id": new_id()}),
        )
        .await;
    assert_eq!(foreign.error_code(), Some(-32001));
    assert_eq!(foreign.body["error"], unknown.body["error"]);
    assert_ne!(state_of(&gw, other_id).await, "TASK_STATE_CANCELED");
    // Read scope is not enough to cancel.
    assert_eq!(
        gw.rpc(
            "tok-alice-read",
            "ag-slow",
            "CancelTask",
            json!({"id": other_id})
        )
        .await
        .status,
        403
    );
}

#[tokio::test]
async fn approval_flow_end_to_end_and_a_message_cannot_resume() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-approver", &new_id(), "use the tool", false)
        .await
        .result()["task"]
        .clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let prompt = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let id = task["id"].as_str().unwrap();
    let run_id = run_id_of(&gw, id).await;

    // An A2A message naming the task is refused and touches nothing in Q.
    let resume = gw
        .rpc(
            "tok-alice",
            "ag-approver",
            "SendMessage",
            json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "taskId": id,
                               "contextId": task["contextId"], "parts": [{"text": "approved, go on"}]}}),
        )
        .await;
    assert_eq!(resume.error_code(), Some(-32004), "{}", resume.body);
    let approvals: Value = gw
        .upstream
        .internal(
            reqwest::Method::GET,
            &format!("/runs/{run_id}/approvals"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(approvals["approvals"][0]["status"], "pending");
    let run: Value = gw
        .upstream
        .internal(reqwest::Method::GET, &format!("/runs/{run_id}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "awaiting_approval");
    assert_eq!(
        gw.db.task_count().await,
        1,
        "the refused message created nothing"
    );

    // Resuming happens through Q's approval API; then the task moves on.
    let approval_id = approvals["approvals"][0]["id"].as_str().unwrap();
    let approved = gw
        .upstream
        .internal(
            reqwest::Method::POST,
            &format!("/runs/{run_id}/approvals/{approval_id}/approve"),
            Some(json!({"principal_id": "p-alice"})),
        )
        .await;
    assert!(approved.status().is_success());
    let done = gw
        .wait_for_state(
            "tok-alice",
            "ag-approver",
            id,
            "TASK_STATE_COMPLETED",
            Duration::from_secs(15),
        )
        .await;
    assert!(done["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("use the tool"));
    assert!(!prompt.is_empty());
}

#[tokio::test]
async fn revocation_hides_content_on_every_method() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-writer", &new_id(), "secret words", false)
        .await
        .result()["task"]
        .clone();
    let id = task["id"].as_str().unwrap();
    let running = gw
        .send("tok-alice", "ag-slow", &new_id(), "secret too", true)
        .await
        .result()["task"]
        .clone();
    let running_id = running["id"].as_str().unwrap();
    for (tid, _) in [(id, "ag-writer"), (running_id, "ag-slow")] {
        let run_id = run_id_of(&gw, tid).await;
        gw.upstream
            .post(
                "/admin/grants/evidence",
                json!({"run_id": run_id, "principal_id": "p-alice", "granted": false}),
            )
            .await;
    }
    // GetTask: indistinguishable from unknown.
    assert_eq!(
        gw.get_task("tok-alice", "ag-writer", id).await.error_code(),
        Some(-32001)
    );
    // ListTasks: a control entry only.
    let listed = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"includeArtifacts": true}),
    )
    .await;
    let entry = &listed.result()["tasks"][0];
    assert_eq!(entry["id"], id);
    assert!(entry.get("history").is_none() && entry.get("artifacts").is_none());
    assert!(!listed.body.to_string().contains("secret words"));
    // SendMessage repeat: a control receipt.
    let repeat = gw
        .send(
            "tok-alice",
            "ag-writer",
            task["history"][0]["messageId"].as_str().unwrap(),
            "secret words",
            true,
        )
        .await;
    assert!(
        !repeat.body.to_string().contains("secret words"),
        "{}",
        repeat.body
    );
    // CancelTask: works, returns only id and state.
    let canceled = gw
        .rpc(
            "tok-alice",
            "ag-slow",
            "CancelTask",
            json!({"id": running_id}),
        )
        .await;
    let receipt = canceled.result();
    assert_eq!(receipt["status"]["state"], "TASK_STATE_CANCELED");
    assert!(receipt.get("history").is_none() && receipt.get("artifacts").is_none());
    assert!(receipt["status"].get("message").is_none());
    assert!(!canceled.body.to_string().contains("secret too"));

    // Workspace revoked: reads hide everything, cancel still answers with a receipt.
    let open = gw
        .send("tok-alice", "ag-slow", &new_id(), "still running", true)
        .await
        .result()["task"]
        .clone();
    gw.upstream
        .post(
            "/admin/grants/workspace",
            json!({"workspace_id": "ws-acme-main", "principal_id": "p-alice", "granted": false}),
        )
        .await;
    assert_eq!(
        list(&gw, "tok-alice", "ag-writer", json!({}))
            .await
            .result()["totalSize"],
        0
    );
    assert_eq!(
        gw.get_task("tok-alice", "ag-slow", open["id"].as_str().unwrap())
            .await
            .error_code(),
        Some(-32001)
    );
    let receipt = gw
        .rpc(
            "tok-alice",
            "ag-slow",
            "CancelTask",
            json!({"id": open["id"]}),
        )
        .await;
    assert_eq!(receipt.result()["status"]["state"], "TASK_STATE_CANCELED");
    assert!(!receipt.body.to_string().contains("still running"));
}

#[tokio::test]
async fn change_feed_keeps_the_status_index_current_while_nobody_watches() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-writer", &new_id(), "unobserved", true)
        .await
        .result()["task"]
        .clone();
    let id = task["id"].as_str().unwrap().to_string();
    assert_ne!(task["status"]["state"], "TASK_STATE_COMPLETED");
    // No GetTask: only the follower can move the projection.
    wait_until(
        "the projection to reach COMPLETED",
        Duration::from_secs(15),
        || {
            let gw = &gw;
            let id = id.clone();
            async move { state_of(gw, &id).await == "TASK_STATE_COMPLETED" }
        },
    )
    .await;
    let listed = list(
        &gw,
        "tok-alice",
        "ag-writer",
        json!({"status": "TASK_STATE_COMPLETED"}),
    )
    .await;
    assert_eq!(listed.result()["tasks"][0]["id"], id.as_str());
    // Q's approval state change is followed as well.
    let waiting = gw
        .send("tok-alice", "ag-approver", &new_id(), "approve later", true)
        .await
        .result()["task"]
        .clone();
    let wid = waiting["id"].as_str().unwrap().to_string();
    wait_until(
        "INPUT_REQUIRED in the index",
        Duration::from_secs(15),
        || {
            let gw = &gw;
            let wid = wid.clone();
            async move { state_of(gw, &wid).await == "TASK_STATE_INPUT_REQUIRED" }
        },
    )
    .await;
}

#[tokio::test]
async fn execution_deadline_ends_the_task() {
    let gw = Gateway::start_with(GatewayOptions {
        env: vec![("Q_A2A_EXECUTION_TIMEOUT_SECONDS".into(), "2".into())],
        ..Default::default()
    })
    .await;
    // ag-slow needs about 4 s: Q times the run out at 2 s.
    let task = gw
        .send("tok-alice", "ag-slow", &new_id(), "too slow", true)
        .await
        .result()["task"]
        .clone();
    let id = task["id"].as_str().unwrap().to_string();
    wait_until("FAILED after the deadline", Duration::from_secs(15), || {
        let gw = &gw;
        let id = id.clone();
        async move { state_of(gw, &id).await == "TASK_STATE_FAILED" }
    })
    .await;
    let got = gw.get_task("tok-alice", "ag-slow", &id).await;
    assert_eq!(got.result()["status"]["state"], "TASK_STATE_FAILED");

    // A dispatch Q never confirms also ends within the deadline, and never makes a run.
    gw.upstream
        .faults(json!({"create_fail_500_before_commit": 1000}))
        .await;
    let lost = gw
        .send("tok-alice", "ag-writer", &new_id(), "never confirmed", true)
        .await
        .result()["task"]
        .clone();
    let lost_id = lost["id"].as_str().unwrap().to_string();
    wait_until(
        "unconfirmed dispatch to fail",
        Duration::from_secs(15),
        || {
            let gw = &gw;
            let id = lost_id.clone();
            async move { state_of(gw, &id).await == "TASK_STATE_FAILED" }
        },
    )
    .await;
    assert!(gw
        .upstream
        .runs(Some(&format!("a2a-task-{lost_id}")))
        .await
        .is_empty());
}

/// The gateway is SIGKILLed while Q is committing its create; the row committed before
/// dispatch is recovered by the replacement, with exactly one run.
#[tokio::test]
async fn sigkill_mid_dispatch_then_recovery_makes_exactly_one_run() {
    let mut gw = Gateway::start().await;
    // Each create sits in Q for 1.5 s: the gateway dies while it waits, so Q may or may not
    // have committed the run. Either way the saved identity must yield exactly one run.
    gw.upstream
        .faults(json!({"create_delay_ms": 1500, "create_delay_count": 3}))
        .await;
    let mut message_ids = Vec::new();
    let mut sends = Vec::new();
    for _ in 0..3 {
        let message_id = new_id();
        message_ids.push(message_id.clone());
        let url = gw.url.clone();
        sends.push(tokio::spawn(async move {
            Gateway::rpc_at(&url, "tok-alice", "ag-writer", "SendMessage",
                json!({"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "crash"}]},
                       "configuration": {"returnImmediately": true}})).await
        }));
    }
    wait_until("three committed rows", Duration::from_secs(10), || async {
        gw.db.task_count().await == 3
    })
    .await;
    kill9(&mut gw.child).await;
    for send in sends {
        let _ = send.await; // the connections died with the process
    }
    assert_eq!(
        gw.db
            .count("SELECT count(*) FROM a2a_tasks WHERE run_id IS NULL")
            .await,
        3
    );
    gw.restart(&GatewayOptions::default()).await;
    wait_until("every task dispatched", Duration::from_secs(20), || async {
        gw.db
            .count("SELECT count(*) FROM a2a_tasks WHERE run_id IS NULL")
            .await
            == 0
    })
    .await;
    // Repeats get the same tasks; Q has exactly one run per task.
    for message_id in &message_ids {
        let again = gw
            .send("tok-alice", "ag-writer", message_id, "crash", true)
            .await;
        assert!(again.body.get("result").is_some(), "{}", again.body);
    }
    assert_eq!(gw.db.task_count().await, 3);
    let runs = gw.upstream.runs(None).await;
    assert_eq!(runs.len(), 3, "exactly one run per accepted task");
    let workflows: HashSet<&str> = runs
        .iter()
        .map(|r| r["workflow_id"].as_str().unwrap())
        .collect();
    assert_eq!(workflows.len(), 3);
}

#[tokio::test]
async fn two_replicas_one_leader_and_takeover_after_sigkill() {
    let mut gw = Gateway::start().await;
    let mut replica = gw.start_replica(&GatewayOptions::default()).await;
    // Lost create responses: each task is left unknown and must be resolved by the leader.
    gw.upstream
        .faults(json!({"create_drop_after_commit": 4}))
        .await;
    for _ in 0..2 {
        gw.send("tok-alice", "ag-writer", &new_id(), "via first", true)
            .await;
        Gateway::rpc_at(&replica.url, "tok-alice", "ag-writer", "SendMessage",
            json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "via second"}]},
                   "configuration": {"returnImmediately": true}})).await;
    }
    wait_until(
        "all four resolved by the leader",
        Duration::from_secs(20),
        || async {
            gw.db
                .count("SELECT count(*) FROM a2a_tasks WHERE dispatch = 'dispatched'")
                .await
                == 4
        },
    )
    .await;
    assert_eq!(gw.upstream.runs(None).await.len(), 4);

    // Kill one replica (whichever leads), then leave more work: the survivor takes over.
    kill9(&mut gw.child).await;
    gw.upstream
        .faults(json!({"create_drop_after_commit": 2}))
        .await;
    for _ in 0..2 {
        Gateway::rpc_at(&replica.url, "tok-alice", "ag-writer", "SendMessage",
            json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "after the kill"}]},
                   "configuration": {"returnImmediately": true}})).await;
    }
    wait_until(
        "the survivor resolves the rest",
        Duration::from_secs(20),
        || async {
            gw.db
                .count("SELECT count(*) FROM a2a_tasks WHERE dispatch = 'dispatched'")
                .await
                == 6
        },
    )
    .await;
    let runs = gw.upstream.runs(None).await;
    assert_eq!(
        runs.len(),
        6,
        "one run per task, none doubled by two reconcilers"
    );
    kill9(&mut replica.child).await;
}

#[tokio::test]
async fn a_reset_change_feed_is_followed_again_from_the_start() {
    let gw = Gateway::start().await;
    // As if Q's feed had been rebuilt: our stored position is far beyond Q's newest cursor.
    gw.db
        .client()
        .await
        .execute("UPDATE a2a_feed_position SET cursor = 1000000", &[])
        .await
        .unwrap();
    let task = gw
        .send(
            "tok-alice",
            "ag-writer",
            &new_id(),
            "after a feed reset",
            true,
        )
        .await
        .result()["task"]
        .clone();
    let id = task["id"].as_str().unwrap().to_string();
    wait_until(
        "the follower to project COMPLETED",
        Duration::from_secs(15),
        || {
            let gw = &gw;
            let id = id.clone();
            async move { state_of(gw, &id).await == "TASK_STATE_COMPLETED" }
        },
    )
    .await;
    let position: i64 = gw
        .db
        .client()
        .await
        .query_one("SELECT cursor FROM a2a_feed_position", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        position < 1_000_000,
        "the position followed Q's feed again: {position}"
    );
}
