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
