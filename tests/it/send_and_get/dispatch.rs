//! Dispatch ambiguity: a lost create answer, a server error before commit, a create slower
//! than the client timeout and a definite refusal from Q, each with at most one run.

use std::time::Duration;

use serde_json::{json, Value};

use super::workflow_of;
use crate::support::{new_id, Agent, Gateway, NO_RECONCILER};

/// A gateway with `env`, Alice's writer on it, and Q armed with `faults`.
async fn writer_with_faults(env: &[(&str, &str)], faults: Value) -> (Gateway, Agent) {
    let gw = Gateway::start_with_env(env).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    gw.upstream.faults(faults).await;
    (gw, writer)
}

/// A returnImmediately send: the new task, still SUBMITTED.
async fn submitted(writer: &Agent, message_id: &str, text: &str) -> Value {
    let task = writer.send_text_immediately(message_id, text).await.task();
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    task
}

/// Polls GetTask (15 s at most) until the task completes, as the same task.
async fn completes(writer: &Agent, task: &Value) {
    let id = task["id"].as_str().unwrap();
    let done = writer
        .wait_for_state(id, "TASK_STATE_COMPLETED", Duration::from_secs(15))
        .await;
    assert_eq!(done["id"], task["id"]);
}

#[tokio::test]
async fn lost_create_response_is_unknown_then_recovered_without_a_second_run() {
    // No reconciler: the repeat itself must recover the run (lifecycle::reconciler covers the
    // reconciler doing it alone).
    let (gw, writer) =
        writer_with_faults(NO_RECONCILER, json!({"create_drop_after_commit": 1})).await;
    let message_id = new_id();
    let task = submitted(&writer, &message_id, "lost answer").await;
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
    let again = writer.send_text(&message_id, "lost answer").await.task();
    assert_eq!(again["id"], task["id"]);
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(gw.upstream.runs(None).await.len(), 1, "no second run");
    let dispatch: String = gw.db.one("SELECT dispatch FROM a2a_tasks").await;
    assert_eq!(dispatch, "dispatched");
}

#[tokio::test]
async fn server_error_before_commit_is_resubmitted_under_the_same_identity() {
    let (gw, writer) =
        writer_with_faults(NO_RECONCILER, json!({"create_fail_500_before_commit": 1})).await;
    let task = submitted(&writer, &new_id(), "retry me").await;
    assert!(
        gw.upstream.runs(None).await.is_empty(),
        "Q committed nothing"
    );
    // GetTask resolves it: lookup finds nothing, the create is repeated with the saved identity.
    completes(&writer, &task).await;
    let runs = gw.upstream.runs(None).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["workflow_id"], workflow_of(&task).as_str());
}

#[tokio::test]
async fn slow_create_past_the_client_timeout_never_makes_two_runs() {
    let (gw, writer) = writer_with_faults(
        &[("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", "500")],
        json!({"create_delay_ms": 1500, "create_delay_count": 1}),
    )
    .await;
    let message_id = new_id();
    let task = submitted(&writer, &message_id, "slow create").await;
    // Repeat while Q may still be committing, and again after.
    let again = writer
        .send_text_immediately(&message_id, "slow create")
        .await
        .task();
    assert_eq!(again["id"], task["id"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    completes(&writer, &task).await;
    assert_eq!(
        gw.upstream.runs(None).await.len(),
        1,
        "Q deduplicated on the saved identity"
    );
}

#[tokio::test]
async fn a_definite_refusal_from_q_rejects_the_task_and_is_never_retried() {
    let (gw, writer) = writer_with_faults(&[], json!({"create_refuse_403": 1})).await;
    let message_id = new_id();
    let task = writer.send_text(&message_id, "refused by Q").await.task();
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");
    let reason = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(reason.contains("access"), "{reason}");
    let dispatch: String = gw.db.one("SELECT dispatch FROM a2a_tasks").await;
    assert_eq!(dispatch, "refused");
    // A repeat recovers the rejected task; nothing is sent to Q again, by the repeat or later
    // by the reconciler.
    let again = writer
        .send_text_immediately(&message_id, "refused by Q")
        .await
        .task();
    assert_eq!(again["id"], task["id"]);
    assert_eq!(again["status"]["state"], "TASK_STATE_REJECTED");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(gw.upstream.runs(None).await.is_empty());
    let stats = gw.upstream.stats().await;
    assert_eq!(stats["create_requests"], 1, "{stats}");
}
