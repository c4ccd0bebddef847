//! The execution deadline: a run Q times out, and a dispatch Q never confirms, both end FAILED.

use serde_json::json;

use crate::support::Gateway;

#[tokio::test]
async fn execution_deadline_ends_the_task() {
    let gw = Gateway::start_with_env(&[("Q_A2A_EXECUTION_TIMEOUT_SECONDS", "2")]).await;
    let alice = gw.caller("tok-alice");
    let slow = alice.agent("ag-slow");
    // ag-slow needs about 4 s: Q times the run out at 2 s.
    let id = slow.new_task("too slow").await;
    gw.db.wait_task_state(&id, "TASK_STATE_FAILED").await;
    let got = slow.get_task(&id).await;
    assert_eq!(got.result()["status"]["state"], "TASK_STATE_FAILED");

    // A dispatch Q never confirms also ends within the deadline, and never makes a run.
    gw.upstream
        .faults(json!({"create_fail_500_before_commit": 1000}))
        .await;
    let lost_id = alice.agent("ag-writer").new_task("never confirmed").await;
    gw.db.wait_task_state(&lost_id, "TASK_STATE_FAILED").await;
    assert!(gw
        .upstream
        .runs(Some(&format!("a2a-task-{lost_id}")))
        .await
        .is_empty());
}

/// A task's execution deadline is fixed when it is admitted. A run created late — the first
/// create held past the upstream timeout and dropped before Q committed it, the create sent
/// again once the dispatch claim expired — gets what is left of it, not a whole new one
/// (found by `scripts/simulate --seed 52`: a task waiting for approval outlived its deadline).
#[tokio::test]
async fn a_run_created_late_keeps_the_deadline_of_its_task() {
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", "1000"),
        ("Q_A2A_RECONCILER_GRACE_MS", "500"),
        ("Q_A2A_EXECUTION_TIMEOUT_SECONDS", "60"),
    ])
    .await;
    gw.upstream
        .faults(json!({"create_delay_ms": 1500, "create_delay_count": 1}))
        .await;
    let id = gw
        .caller("tok-alice")
        .agent("ag-writer")
        .new_task("created late")
        .await;
    gw.db.wait_task_state(&id, "TASK_STATE_COMPLETED").await;
    let admitted: chrono::DateTime<chrono::Utc> = gw.db.task_field(&id, "created_at").await;
    let runs = gw.upstream.runs(Some(&format!("a2a-task-{id}"))).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let created: chrono::DateTime<chrono::Utc> =
        runs[0]["created_at"].as_str().unwrap().parse().unwrap();
    let deadline: chrono::DateTime<chrono::Utc> =
        runs[0]["deadline_at"].as_str().unwrap().parse().unwrap();
    assert!(
        created - admitted > chrono::Duration::seconds(2),
        "the run was created {} after the task: not late, nothing shown",
        created - admitted
    );
    // Q counts whole seconds: the remainder is rounded up.
    let due = admitted + chrono::Duration::seconds(60);
    assert!(
        deadline <= due + chrono::Duration::seconds(1),
        "the run's deadline {deadline} is past its task's {due} (admitted {admitted}, run created {created})"
    );
}
