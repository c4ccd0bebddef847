//! Dispatch ambiguity: a lost create answer, a server error before commit, a create slower
//! than the client timeout and a definite refusal from Q, each with at most one run.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::workflow_of;
use crate::support::{new_id, Agent, Gateway, NO_RECONCILER};

/// Well under the observation window (110 s), for an answer that must not wait for it.
const NOT_THE_WINDOW: Duration = Duration::from_secs(10);

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
    // reconciler doing it alone). The create got no answer, so its claim holds for 2 x 1 s +
    // 5 s: Q may still be committing it, and nobody looks it up before that.
    let mut env = NO_RECONCILER.to_vec();
    env.push(("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", "1000"));
    let (gw, writer) = writer_with_faults(&env, json!({"create_drop_after_commit": 1})).await;
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

    // The client repeats the same messageId: same task; its wait finds the run by workflow
    // identity once the claim has expired.
    let started = tokio::time::Instant::now();
    let again = writer.send_text(&message_id, "lost answer").await.task();
    assert_eq!(again["id"], task["id"]);
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
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
    // Q's deduplication off: every create the gateway sends shows as a run.
    gw.upstream.workflow_dedup(false).await;
    let message_id = new_id();
    let task = submitted(&writer, &message_id, "slow create").await;
    // Repeat while Q may still be committing, and again after: the create that timed out
    // keeps its claim, so neither the repeat nor the reconciler sends another meanwhile.
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
        "one create, found by workflow identity once its claim expired"
    );
}

/// A replica killed while its create is in flight: the other replica neither repeats the
/// create for a repeat of the messageId nor takes the task over before the dead one's claim
/// expires, then finds (or makes) exactly one run.
#[tokio::test]
async fn a_replica_killed_mid_create_is_taken_over_only_after_its_claim_expires() {
    // A claim of 2 x 1 s + 5 s.
    let env = [("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", "1000")];
    let mut gw = Gateway::start_with_env(&env).await;
    let survivor = gw
        .start_replica(&crate::support::GatewayOptions::with_env(&env))
        .await;
    gw.upstream.workflow_dedup(false).await;
    gw.upstream
        .faults(json!({"create_delay_ms": 800, "create_delay_count": 1}))
        .await;
    let message_id = new_id();
    let doomed = gw.caller("tok-alice").agent("ag-writer");
    let sending = tokio::spawn(async move {
        doomed
            .send_text_immediately(&message_id, "mid create")
            .await
    });
    // The create is at Q (held 800 ms); the replica that sent it dies.
    let workflow = loop {
        let row: Vec<(String, i64)> = gw
            .db
            .client()
            .await
            .query("SELECT workflow_id, 1::bigint FROM a2a_tasks", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        if let Some((workflow, _)) = row.into_iter().next() {
            break workflow;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    crate::support::kill9(&mut gw.child).await;
    let _ = sending.await;
    let task_id = gw
        .db
        .one::<uuid::Uuid>("SELECT task_id FROM a2a_tasks")
        .await
        .to_string();
    let message_id: String = gw.db.task_field(&task_id, "message_id").await;

    // The survivor: a repeat answers the task as it stands, and no create goes out while the
    // claim holds (its reconciler passes every 200 ms, past their 1 s grace).
    let survivor_writer = survivor.caller("tok-alice").agent("ag-writer");
    let repeat = survivor_writer
        .send_text_immediately(&message_id, "mid create")
        .await
        .task();
    assert_eq!(repeat["id"], task_id.as_str());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        gw.upstream.stats().await["create_requests"],
        1,
        "a create was sent while the dead replica's claim held"
    );
    // After the claim, the survivor's reconciler resolves it to one run.
    let done = survivor_writer
        .wait_for_state(&task_id, "TASK_STATE_COMPLETED", Duration::from_secs(20))
        .await;
    assert_eq!(done["id"], task_id.as_str());
    assert_eq!(gw.upstream.runs(Some(&workflow)).await.len(), 1, "one run");
}

#[tokio::test]
async fn a_definite_refusal_from_q_rejects_the_task_and_is_never_retried() {
    let (gw, writer) = writer_with_faults(&[], json!({"create_refuse_403": 1})).await;
    let message_id = new_id();
    // A blocking send: the rejection is its answer at once, not after the observation window
    // (110 s) spent waiting for a run that will never come.
    let sent = Instant::now();
    let task = writer.send_text(&message_id, "refused by Q").await.task();
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");
    assert!(sent.elapsed() < NOT_THE_WINDOW, "{:?}", sent.elapsed());
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
    let repeated = Instant::now();
    let blocking = writer.send_text(&message_id, "refused by Q").await.task();
    assert_eq!(blocking["status"]["state"], "TASK_STATE_REJECTED");
    assert!(
        repeated.elapsed() < NOT_THE_WINDOW,
        "{:?}",
        repeated.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(gw.upstream.runs(None).await.is_empty());
    let stats = gw.upstream.stats().await;
    assert_eq!(stats["create_requests"], 1, "{stats}");
}
