//! Approvals: a task waits in INPUT_REQUIRED, an A2A message cannot resume it, Q's approval
//! API does.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::support::{artifact_text, new_id, rpc::text_message, Gateway};

#[tokio::test]
async fn approval_flow_end_to_end_and_a_message_cannot_resume() {
    let gw = Gateway::start().await;
    let approver = gw.caller("tok-alice").agent("ag-approver");
    let task = approver.send_text(&new_id(), "use the tool").await.task();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let prompt = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let id = task["id"].as_str().unwrap();
    let run_id = gw.db.run_id(id).await;

    // An A2A message naming the task is refused and touches nothing in Q.
    let mut resume = text_message(&new_id(), "approved, go on");
    resume["taskId"] = json!(id);
    resume["contextId"] = task["contextId"].clone();
    let resume = approver.send(json!({"message": resume})).await;
    assert_eq!(resume.error_code(), Some(-32004), "{}", resume.body);
    let approvals = gw
        .upstream
        .internal_get(&format!("/runs/{run_id}/approvals"))
        .await;
    assert_eq!(approvals["approvals"][0]["status"], "pending");
    let run = gw.upstream.internal_get(&format!("/runs/{run_id}")).await;
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
            Method::POST,
            &format!("/runs/{run_id}/approvals/{approval_id}/approve"),
            Some(json!({"principal_id": "p-alice"})),
        )
        .await;
    assert!(approved.status().is_success());
    let done = approver
        .wait_for_state(id, "TASK_STATE_COMPLETED", Duration::from_secs(15))
        .await;
    assert!(artifact_text(&done).contains("use the tool"));
    assert!(!prompt.is_empty());
}
