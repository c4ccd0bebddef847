//! The execution deadline: a run Q times out, and a dispatch Q never confirms, both end FAILED.

use std::time::Duration;

use serde_json::json;

use crate::support::{wait_until, Gateway};

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

/// A run the gateway learnt of only from Q's run feed — its create committed and answered 500,
/// the feed's change recorded the run on the task, and the feed carries no deadline — whose end
/// the feed then lost (a failover to a copy without it) still ends its task by the task's
/// deadline: the reconciler reads a run with no recorded deadline once its task's has passed
/// (found by `scripts/simulate --seed 142`: such a task stayed WORKING until another send of
/// its message read the run, 600 ms past its deadline and tolerance).
#[tokio::test]
async fn a_run_known_only_from_the_feed_ends_by_its_task_deadline() {
    let gw = Gateway::start_with_env(&[("Q_A2A_EXECUTION_TIMEOUT_SECONDS", "2")]).await;
    gw.upstream
        .faults(json!({"create_fail_500_after_commit": 1}))
        .await;
    // ag-slow needs about 4 s: Q ends the run at its 2 s deadline.
    let id = gw
        .caller("tok-alice")
        .agent("ag-slow")
        .new_task("answered 500")
        .await;
    let workflow = format!("a2a-task-{id}");
    wait_until(
        "the run recorded from the feed",
        Duration::from_secs(5),
        async || {
            gw.db
                .task_field::<Option<String>>(&id, "run_id")
                .await
                .is_some()
        },
    )
    .await;
    // The feed carries no deadline: the one recorded is the task's own, from its admission.
    let recorded: Option<chrono::DateTime<chrono::Utc>> =
        gw.db.task_field(&id, "deadline_at").await;
    let admitted: chrono::DateTime<chrono::Utc> = gw.db.task_field(&id, "created_at").await;
    assert_eq!(recorded, Some(admitted + chrono::Duration::seconds(2)));
    // A task admitted before migration 20261206_171800 has none: this one stands for it, so
    // the fallback to admission plus timeout is what ends it.
    gw.db
        .client()
        .await
        .execute(
            "UPDATE a2a_tasks SET deadline_at = NULL WHERE task_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap();
    // The run's end is held back, then lost in a failover of the feed.
    gw.upstream
        .faults(json!({"run_feed_lag_ms": 600_000}))
        .await;
    wait_until("Q to end the run", Duration::from_secs(5), async || {
        let runs = gw.upstream.runs(Some(&workflow)).await;
        runs[0]["status"] == "timed_out"
    })
    .await;
    gw.upstream
        .post("/admin/feeds/runs/failover", json!({"lost": 3}))
        .await;
    gw.upstream.faults(json!({"run_feed_lag_ms": 0})).await;

    // Due by the task's deadline, a reconciler pass (200 ms) and the simulation's tolerance.
    wait_until(
        &format!("task {id} to end by its deadline"),
        Duration::from_secs(4),
        async || gw.db.task_state(&id).await == "TASK_STATE_FAILED",
    )
    .await;
    let ended: chrono::DateTime<chrono::Utc> = gw.db.task_field(&id, "status_timestamp").await;
    let due = admitted + chrono::Duration::milliseconds(2_000 + 200 + 800);
    assert!(
        ended <= due,
        "task {id} admitted {admitted} ended {ended}, due by {due}"
    );
}
