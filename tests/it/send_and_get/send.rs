//! Blocking and returnImmediately sends, GetTask's view of the task, historyLength, approvals
//! shown as INPUT_REQUIRED, and the status timestamp.

use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::workflow_of;
use crate::support::{artifact_text, new_id, rpc::text_message, Gateway};

#[tokio::test]
async fn blocking_send_returns_completed_task_with_verified_markdown() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let message_id = new_id();
    let reply = writer.send_text(&message_id, "hello gateway").await;
    let task = reply.task();
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
    let got = writer.get_task(task_id).await;
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
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let task = slow
        .send_text_immediately(&new_id(), "take your time")
        .await
        .task();
    let state = task["status"]["state"].as_str().unwrap();
    assert!(
        state == "TASK_STATE_SUBMITTED" || state == "TASK_STATE_WORKING",
        "{state}"
    );
    assert!(task.get("artifacts").is_none());
    let id = task["id"].as_str().unwrap();
    let done = slow
        .wait_for_state(id, "TASK_STATE_COMPLETED", Duration::from_secs(20))
        .await;
    assert!(artifact_text(&done).contains("take your time"));
}

#[tokio::test]
async fn history_length() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "h").await.task_id();
    let one = writer
        .rpc("GetTask", json!({"id": id, "historyLength": 1}))
        .await;
    assert_eq!(one.result()["history"].as_array().unwrap().len(), 1);
    let none = writer
        .rpc("GetTask", json!({"id": id, "historyLength": 0}))
        .await;
    assert!(none.result().get("history").is_none());
    let neg = writer
        .rpc("GetTask", json!({"id": id, "historyLength": -1}))
        .await;
    assert_eq!(neg.error_code(), Some(-32602));
    let sent = writer
        .send(json!({"message": text_message(&new_id(), "x"),
                     "configuration": {"historyLength": 0}}))
        .await;
    assert!(sent.result()["task"].get("history").is_none());
}

#[tokio::test]
async fn approval_shows_as_input_required_with_q_status_message() {
    let gw = Gateway::start().await;
    let task = gw
        .caller("tok-alice")
        .agent("ag-approver")
        .send_text(&new_id(), "use a tool")
        .await
        .task();
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
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let id = slow.new_task("watch the clock").await;
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
    let done = slow
        .wait_for_state(&id, "TASK_STATE_COMPLETED", Duration::from_secs(20))
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
async fn return_immediately_answers_with_the_run_its_create_returned() {
    // The run Q answered the create with is the task's current run, and the answer carries
    // the caller's evidence grant on it: the answer needs no second read of the run at all.
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let task = slow
        .send_text_immediately(&new_id(), "one read is enough")
        .await
        .task();
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{task}");
    let runs = gw.upstream.runs(Some(&workflow_of(&task))).await;
    assert_eq!(runs.len(), 1);
    let run_path = format!("/internal/v1/runs/{}", runs[0]["id"].as_str().unwrap());
    let calls = gw.upstream.recent_calls().await;
    let paths: Vec<&str> = calls
        .iter()
        .filter_map(|c| c["path"].as_str())
        .filter(|p| p.starts_with(&run_path))
        .collect();
    assert!(paths.is_empty(), "{calls:?}");
    // The stored row is the one the dispatch recorded.
    let (run_id, dispatch): (Option<String>, String) = {
        let client = gw.db.client().await;
        let row = client
            .query_one("SELECT run_id, dispatch FROM a2a_tasks", &[])
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(run_id.as_deref(), runs[0]["id"].as_str());
    assert_eq!(dispatch, "dispatched");
}
