//! SendMessage and GetTask end to end: validation (with nothing written), durable message
//! identity, dispatch ambiguity, concurrent duplicates, artifact verification and ownership.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn workflow_of(task: &Value) -> String {
    format!("a2a-task-{}", task["id"].as_str().unwrap())
}

#[tokio::test]
async fn blocking_send_returns_completed_task_with_verified_markdown() {
    let gw = Gateway::start().await;
    let message_id = new_id();
    let reply = gw
        .send(
            "tok-alice",
            "ag-writer",
            &message_id,
            "hello gateway",
            false,
        )
        .await;
    let task = reply.result()["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let task_id = task["id"].as_str().unwrap();
    uuid::Uuid::parse_str(task_id).expect("server-assigned uuid task id");
    uuid::Uuid::parse_str(task["contextId"].as_str().unwrap()).expect("server-assigned context id");
    assert!(task["status"]["timestamp"].as_str().unwrap().ends_with('Z'));

    let artifacts = task["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1);
    let artifact = &artifacts[0];
    let text = artifact["parts"][0]["text"].as_str().unwrap();
    assert_eq!(artifact["parts"][0]["mediaType"], "text/markdown");
    assert!(text.contains("hello gateway"));
    assert_eq!(artifact["metadata"]["byteCount"], text.len());
    assert_eq!(
        artifact["metadata"]["sha256"],
        hex::encode(Sha256::digest(text.as_bytes()))
    );

    let history = task["history"].as_array().unwrap();
    assert_eq!(history[0]["messageId"], message_id.as_str());
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert_eq!(history[0]["taskId"], task_id);
    assert_eq!(history[0]["parts"][0]["text"], "hello gateway");

    // GetTask agrees, and the artifact id is stable across reads.
    let got = gw.get_task("tok-alice", "ag-writer", task_id).await;
    assert_eq!(
        got.result()["artifacts"][0]["artifactId"],
        artifact["artifactId"]
    );
    assert_eq!(got.result()["status"]["state"], "TASK_STATE_COMPLETED");

    // The row and exactly one run.
    assert_eq!(gw.db.task_count().await, 1);
    let state: String = gw.db.one("SELECT state FROM a2a_tasks").await;
    assert_eq!(state, "TASK_STATE_COMPLETED");
    assert_eq!(gw.upstream.runs(Some(&workflow_of(&task))).await.len(), 1);
}

#[tokio::test]
async fn return_immediately_then_get_task_until_completed() {
    let gw = Gateway::start().await;
    let reply = gw
        .send("tok-alice", "ag-slow", &new_id(), "take your time", true)
        .await;
    let task = reply.result()["task"].clone();
    let state = task["status"]["state"].as_str().unwrap();
    assert!(
        state == "TASK_STATE_SUBMITTED" || state == "TASK_STATE_WORKING",
        "{state}"
    );
    assert!(task.get("artifacts").is_none());
    let id = task["id"].as_str().unwrap();
    let done = gw
        .wait_for_state(
            "tok-alice",
            "ag-slow",
            id,
            "TASK_STATE_COMPLETED",
            Duration::from_secs(20),
        )
        .await;
    assert!(done["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("take your time"));
}

#[tokio::test]
async fn history_length() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-writer", &new_id(), "h", false)
        .await
        .result()["task"]
        .clone();
    let id = task["id"].as_str().unwrap();
    let one = gw
        .rpc(
            "tok-alice",
            "ag-writer",
            "GetTask",
            json!({"id": id, "historyLength": 1}),
        )
        .await;
    assert_eq!(one.result()["history"].as_array().unwrap().len(), 1);
    let none = gw
        .rpc(
            "tok-alice",
            "ag-writer",
            "GetTask",
            json!({"id": id, "historyLength": 0}),
        )
        .await;
    assert!(none.result().get("history").is_none());
    let neg = gw
        .rpc(
            "tok-alice",
            "ag-writer",
            "GetTask",
            json!({"id": id, "historyLength": -1}),
        )
        .await;
    assert_eq!(neg.error_code(), Some(-32602));
    let sent = gw
        .rpc(
            "tok-alice",
            "ag-writer",
            "SendMessage",
            json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "x"}]},
                   "configuration": {"historyLength": 0}}),
        )
        .await;
    assert!(sent.result()["task"].get("history").is_none());
}

/// Every rejection in the profile, each with its documented code, and not one row written.
#[tokio::test]
async fn refused_messages_write_nothing() {
    let gw = Gateway::start().await;
    let base = || json!({"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "hello"}]});
    let with = |key: &str, value: Value| {
        let mut m = base();
        m[key] = value;
        json!({"message": m})
    };
    let many: Vec<Value> = (0..17).map(|_| json!({"text": "p"})).collect();
    let cases: Vec<(&str, Value, i64)> = vec![
        ("no message", json!({}), -32602),
        ("message not object", json!({"message": "hi"}), -32602),
        (
            "no messageId",
            json!({"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}),
            -32602,
        ),
        (
            "no role",
            json!({"message": {"messageId": new_id(), "parts": [{"text": "x"}]}}),
            -32602,
        ),
        ("agent role", with("role", json!("ROLE_AGENT")), -32602),
        ("no parts", with("parts", json!([])), -32602),
        ("17 parts", with("parts", json!(many)), -32602),
        (
            "32,001 characters",
            with(
                "parts",
                json!([{"text": "a".repeat(16_000)}, {"text": "b".repeat(16_001)}]),
            ),
            -32602,
        ),
        (
            "url part",
            with("parts", json!([{"url": "https://files.example/x.pdf"}])),
            -32005,
        ),
        (
            "raw part",
            with(
                "parts",
                json!([{"raw": "aGVsbG8=", "mediaType": "application/octet-stream"}]),
            ),
            -32005,
        ),
        (
            "data part",
            with("parts", json!([{"data": {"k": 1}}])),
            -32005,
        ),
        (
            "image media type",
            with("parts", json!([{"text": "x", "mediaType": "image/png"}])),
            -32005,
        ),
        (
            "taskId",
            with("taskId", json!("6f1c0000-0000-0000-0000-000000000000")),
            -32004,
        ),
        ("contextId", with("contextId", json!("ctx-1")), -32004),
        (
            "referenceTaskIds",
            with("referenceTaskIds", json!(["t-0"])),
            -32004,
        ),
        (
            "extensions",
            with("extensions", json!(["https://ext.example/v1"])),
            -32004,
        ),
        (
            "message metadata",
            with("metadata", json!({"source": "cli"})),
            -32004,
        ),
        (
            "tenant",
            json!({"message": base(), "tenant": "t-globex"}),
            -32004,
        ),
        (
            "push config",
            json!({"message": base(), "configuration": {"taskPushNotificationConfig": {"url": "https://client.example/hook"}}}),
            -32003,
        ),
        (
            "output modes",
            json!({"message": base(), "configuration": {"acceptedOutputModes": ["image/png"]}}),
            -32005,
        ),
        (
            "returnImmediately type",
            json!({"message": base(), "configuration": {"returnImmediately": "yes"}}),
            -32602,
        ),
    ];
    for (name, params, code) in cases {
        let reply = gw
            .rpc("tok-alice", "ag-writer", "SendMessage", params)
            .await;
        assert_eq!(reply.status, 200, "{name}");
        assert_eq!(reply.error_code(), Some(code), "{name}: {}", reply.body);
        let data = &reply.body["error"]["data"];
        assert_eq!(
            data[0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{name}"
        );
        assert_eq!(data[0]["domain"], "a2a-protocol.org", "{name}");
        if code == -32602 {
            assert_eq!(
                data[1]["@type"], "type.googleapis.com/google.rpc.BadRequest",
                "{name}"
            );
        }
    }
    assert_eq!(gw.db.task_count().await, 0);
    assert!(gw.upstream.runs(None).await.is_empty(), "no run reached Q");
}

#[tokio::test]
async fn repeat_recovers_the_same_task_and_changed_content_changes_nothing() {
    let gw = Gateway::start().await;
    let message_id = new_id();
    let first = gw
        .send("tok-alice", "ag-writer", &message_id, "same words", false)
        .await
        .result()["task"]
        .clone();
    let again = gw
        .send("tok-alice", "ag-writer", &message_id, "same words", true)
        .await
        .result()["task"]
        .clone();
    assert_eq!(first["id"], again["id"]);
    assert_eq!(first["contextId"], again["contextId"]);
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED");

    let changed = gw
        .send("tok-alice", "ag-writer", &message_id, "other words", false)
        .await;
    assert_eq!(changed.error_code(), Some(-32602), "{}", changed.body);
    assert_eq!(
        changed.body["error"]["data"][1]["fieldViolations"][0]["field"],
        "message.messageId"
    );

    assert_eq!(gw.db.task_count().await, 1);
    let stored: Value = gw.db.one("SELECT message FROM a2a_tasks").await;
    assert_eq!(stored["parts"][0]["text"], "same words");
    assert_eq!(
        gw.upstream.runs(None).await.len(),
        1,
        "exactly one run in Q"
    );

    // The identity is scoped to the principal: Bob's same messageId is his own task.
    let bobs = gw
        .send("tok-bob", "ag-writer", &message_id, "same words", true)
        .await
        .result()["task"]
        .clone();
    assert_ne!(bobs["id"], first["id"]);
    assert_eq!(gw.upstream.runs(None).await.len(), 2);
}

#[tokio::test]
async fn concurrent_duplicates_make_one_task_and_one_run() {
    let gw = Gateway::start().await;
    let message_id = new_id();
    let mut calls = Vec::new();
    for i in 0..24 {
        let blocking = i % 2 == 0;
        calls.push(gw.send("tok-alice", "ag-writer", &message_id, "race", !blocking));
    }
    let replies = futures_util::future::join_all(calls).await;
    let ids: std::collections::HashSet<String> = replies
        .iter()
        .map(|r| r.result()["task"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "every duplicate got the same task");
    assert_eq!(gw.db.task_count().await, 1);
    assert_eq!(gw.upstream.runs(None).await.len(), 1, "one run in Q");
}

#[tokio::test]
async fn lost_create_response_is_unknown_then_recovered_without_a_second_run() {
    // No reconciler: the repeat itself must recover the run (tests/lifecycle.rs covers the
    // reconciler doing it alone).
    let gw = Gateway::start_with(GatewayOptions {
        env: vec![("Q_A2A_RECONCILER_ENABLED".into(), "false".into())],
        ..Default::default()
    })
    .await;
    gw.upstream
        .faults(json!({"create_drop_after_commit": 1}))
        .await;
    let message_id = new_id();
    let reply = gw
        .send("tok-alice", "ag-writer", &message_id, "lost answer", true)
        .await;
    let task = reply.result()["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    let (dispatch, run_id): (String, Option<String>) = {
        let row = gw
            .db
            .client()
            .await
            .query_one("SELECT dispatch, run_id FROM a2a_tasks", &[])
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(dispatch, "unknown");
    assert_eq!(run_id, None);
    // Q did commit the run.
    assert_eq!(gw.upstream.runs(Some(&workflow_of(&task))).await.len(), 1);

    // The client repeats the same messageId: same task, the run is found by workflow identity.
    let again = gw
        .send("tok-alice", "ag-writer", &message_id, "lost answer", false)
        .await
        .result()["task"]
        .clone();
    assert_eq!(again["id"], task["id"]);
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(gw.upstream.runs(None).await.len(), 1, "no second run");
    let dispatch: String = gw.db.one("SELECT dispatch FROM a2a_tasks").await;
    assert_eq!(dispatch, "dispatched");
}

#[tokio::test]
async fn server_error_before_commit_is_resubmitted_under_the_same_identity() {
    let gw = Gateway::start_with(GatewayOptions {
        env: vec![("Q_A2A_RECONCILER_ENABLED".into(), "false".into())],
        ..Default::default()
    })
    .await;
    gw.upstream
        .faults(json!({"create_fail_500_before_commit": 1}))
        .await;
    let message_id = new_id();
    let task = gw
        .send("tok-alice", "ag-writer", &message_id, "retry me", true)
        .await
        .result()["task"]
        .clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    assert!(
        gw.upstream.runs(None).await.is_empty(),
        "Q committed nothing"
    );
    // GetTask resolves it: lookup finds nothing, the create is repeated with the saved identity.
    let done = gw
        .wait_for_state(
            "tok-alice",
            "ag-writer",
            task["id"].as_str().unwrap(),
            "TASK_STATE_COMPLETED",
            Duration::from_secs(15),
        )
        .await;
    assert_eq!(done["id"], task["id"]);
    let runs = gw.upstream.runs(None).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["workflow_id"], workflow_of(&task).as_str());
}

#[tokio::test]
async fn slow_create_past_the_client_timeout_never_makes_two_runs() {
    let gw = Gateway::start_with(GatewayOptions {
        env: vec![("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS".into(), "500".into())],
        ..Default::default()
    })
    .await;
    gw.upstream
        .faults(json!({"create_delay_ms": 1500, "create_delay_count": 1}))
        .await;
    let message_id = new_id();
    let task = gw
        .send("tok-alice", "ag-writer", &message_id, "slow create", true)
        .await
        .result()["task"]
        .clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    // Repeat while Q may still be committing, and again after.
    let again = gw
        .send("tok-alice", "ag-writer", &message_id, "slow create", true)
        .await
        .result()["task"]
        .clone();
    assert_eq!(again["id"], task["id"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let done = gw
        .wait_for_state(
            "tok-alice",
            "ag-writer",
            task["id"].as_str().unwrap(),
            "TASK_STATE_COMPLETED",
            Duration::from_secs(15),
        )
        .await;
    assert_eq!(done["id"], task["id"]);
    assert_eq!(
        gw.upstream.runs(None).await.len(),
        1,
        "Q deduplicated on the saved identity"
    );
}

#[tokio::test]
async fn artifact_verification_failure_is_an_error_not_an_empty_success() {
    let gw = Gateway::start().await;
    for mode in ["checksum", "byte_count"] {
        let task = gw
            .send("tok-alice", "ag-writer", &new_id(), "verify me", false)
            .await
            .result()["task"]
            .clone();
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
        let run_id: String = gw
            .db
            .client()
            .await
            .query_one(
                "SELECT run_id FROM a2a_tasks WHERE task_id = $1::text::uuid",
                &[&task["id"].as_str().unwrap()],
            )
            .await
            .unwrap()
            .get(0);
        gw.upstream
            .post(
                &format!("/admin/runs/{run_id}/corrupt-output"),
                json!({"mode": mode}),
            )
            .await;
        let reply = gw
            .get_task("tok-alice", "ag-writer", task["id"].as_str().unwrap())
            .await;
        assert_eq!(reply.error_code(), Some(-32006), "{mode}: {}", reply.body);
        assert!(reply.body.get("result").is_none());
    }
}

#[tokio::test]
async fn results_over_one_mib_are_refused_not_truncated() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-writer", &new_id(), "big", false)
        .await
        .result()["task"]
        .clone();
    let run_id: String = gw.db.one("SELECT run_id FROM a2a_tasks").await;
    gw.upstream
        .post(
            &format!("/admin/runs/{run_id}/corrupt-output"),
            json!({"mode": "oversize"}),
        )
        .await;
    let reply = gw
        .get_task("tok-alice", "ag-writer", task["id"].as_str().unwrap())
        .await;
    assert_eq!(
        reply.error_code(),
        Some(-32006),
        "{}",
        reply.body.to_string().chars().take(300).collect::<String>()
    );
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1048576"));
}

#[tokio::test]
async fn foreign_and_revoked_tasks_are_indistinguishable_from_unknown_ones() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-writer", &new_id(), "mine", false)
        .await
        .result()["task"]
        .clone();
    let id = task["id"].as_str().unwrap();

    let unknown = gw.get_task("tok-alice", "ag-writer", &new_id()).await;
    let not_uuid = gw.get_task("tok-alice", "ag-writer", "not-a-uuid").await;
    let bobs = gw.get_task("tok-bob", "ag-writer", id).await;
    let other_agent = gw.get_task("tok-alice", "ag-private", id).await;
    for reply in [&unknown, &not_uuid, &bobs, &other_agent] {
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.body["error"], unknown.body["error"],
            "same error object, no hint"
        );
    }
    assert_eq!(unknown.error_code(), Some(-32001));
    // Another tenant cannot even reach the agent.
    assert_eq!(gw.get_task("tok-carol", "ag-writer", id).await.status, 404);

    // Evidence grant revoked: hidden.
    let run_id: String = gw.db.one("SELECT run_id FROM a2a_tasks").await;
    gw.upstream
        .post(
            "/admin/grants/evidence",
            json!({"run_id": run_id, "principal_id": "p-alice", "granted": false}),
        )
        .await;
    assert_eq!(
        gw.get_task("tok-alice", "ag-writer", id).await.body["error"],
        unknown.body["error"]
    );
    gw.upstream
        .post(
            "/admin/grants/evidence",
            json!({"run_id": run_id, "principal_id": "p-alice", "granted": true}),
        )
        .await;
    assert!(gw
        .get_task("tok-alice", "ag-writer", id)
        .await
        .body
        .get("result")
        .is_some());

    // Workspace grant revoked: hidden, and new sends are refused with nothing written.
    gw.upstream
        .post(
            "/admin/grants/workspace",
            json!({"workspace_id": "ws-acme-main", "principal_id": "p-alice", "granted": false}),
        )
        .await;
    assert_eq!(
        gw.get_task("tok-alice", "ag-writer", id).await.body["error"],
        unknown.body["error"]
    );
    let refused = gw
        .send("tok-alice", "ag-writer", &new_id(), "more", true)
        .await;
    assert_eq!(refused.status, 403);
    assert_eq!(gw.db.task_count().await, 1);
}

#[tokio::test]
async fn approval_shows_as_input_required_with_q_status_message() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-approver", &new_id(), "use a tool", false)
        .await
        .result()["task"]
        .clone();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    let message = &task["status"]["message"];
    assert_eq!(message["role"], "ROLE_AGENT");
    assert!(!message["parts"][0]["text"].as_str().unwrap().is_empty());
    assert!(task.get("artifacts").is_none());
}

#[tokio::test]
async fn status_timestamp_is_stamped_by_the_database() {
    let gw = Gateway::start().await;
    let task = gw
        .send("tok-alice", "ag-slow", &new_id(), "watch the clock", true)
        .await
        .result()["task"]
        .clone();
    let id = task["id"].as_str().unwrap();
    let client = gw.db.client().await;
    let before: chrono::DateTime<chrono::Utc> =
        gw.db.one("SELECT status_timestamp FROM a2a_tasks").await;
    // A write that does not change the state keeps the stamp, even if it tries to set it.
    client
        .execute("UPDATE a2a_tasks SET status_message = 'x', status_timestamp = now() - interval '1 day'", &[])
        .await
        .unwrap();
    let same: chrono::DateTime<chrono::Utc> =
        gw.db.one("SELECT status_timestamp FROM a2a_tasks").await;
    assert_eq!(same, before);
    let done = gw
        .wait_for_state(
            "tok-alice",
            "ag-slow",
            id,
            "TASK_STATE_COMPLETED",
            Duration::from_secs(20),
        )
        .await;
    let after: chrono::DateTime<chrono::Utc> =
        gw.db.one("SELECT status_timestamp FROM a2a_tasks").await;
    assert!(after > before);
    let reported =
        chrono::DateTime::parse_from_rfc3339(done["status"]["timestamp"].as_str().unwrap())
            .unwrap();
    assert_eq!(reported.timestamp_micros(), after.timestamp_micros());
}

#[tokio::test]
async fn a_definite_refusal_from_q_rejects_the_task_and_is_never_retried() {
    let gw = Gateway::start().await;
    gw.upstream.faults(json!({"create_refuse_403": 1})).await;
    let message_id = new_id();
    let task = gw
        .send("tok-alice", "ag-writer", &message_id, "refused by Q", false)
        .await
        .result()["task"]
        .clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");
    let reason = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(reason.contains("access"), "{reason}");
    let dispatch: String = gw.db.one("SELECT dispatch FROM a2a_tasks").await;
    assert_eq!(dispatch, "refused");
    // A repeat recovers the rejected task; nothing is sent to Q again, by the repeat or later
    // by the reconciler.
    let again = gw
        .send("tok-alice", "ag-writer", &message_id, "refused by Q", true)
        .await
        .result()["task"]
        .clone();
    assert_eq!(again["id"], task["id"]);
    assert_eq!(again["status"]["state"], "TASK_STATE_REJECTED");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(gw.upstream.runs(None).await.is_empty());
    let stats = gw
        .upstream
        .admin(reqwest::Method::GET, "/admin/stats", None)
        .await;
    assert_eq!(stats["create_requests"], 1, "{stats}");
}
