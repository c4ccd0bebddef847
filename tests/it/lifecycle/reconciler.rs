//! Dispatch recovery by the leader-elected reconciler: after a SIGKILL mid-dispatch, and with
//! two replicas (one leader, takeover when it dies), every task gets exactly one run.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;

use crate::support::{kill9, new_id, wait_until, Gateway, GatewayOptions};

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
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let mut message_ids = Vec::new();
    let mut sends = Vec::new();
    for _ in 0..3 {
        let message_id = new_id();
        message_ids.push(message_id.clone());
        let writer = writer.clone();
        sends.push(tokio::spawn(async move {
            writer.send_text_immediately(&message_id, "crash").await
        }));
    }
    wait_until(
        "three committed rows",
        Duration::from_secs(10),
        async || gw.db.task_count().await == 3,
    )
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
    gw.db
        .wait_count(
            "every task dispatched",
            "SELECT count(*) FROM a2a_tasks WHERE run_id IS NULL",
            0,
            Duration::from_secs(20),
        )
        .await;
    // Repeats get the same tasks; Q has exactly one run per task.
    let writer = gw.caller("tok-alice").agent("ag-writer");
    for message_id in &message_ids {
        let again = writer.send_text_immediately(message_id, "crash").await;
        assert!(again.is_result(), "{}", again.body);
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

/// Waits (20 s at most) until `n` tasks are dispatched.
async fn wait_dispatched(gw: &Gateway, what: &str, n: i64) {
    let sql = "SELECT count(*) FROM a2a_tasks WHERE dispatch = 'dispatched'";
    gw.db
        .wait_count(what, sql, n, Duration::from_secs(20))
        .await;
}

#[tokio::test]
async fn two_replicas_one_leader_and_takeover_after_sigkill() {
    let mut gw = Gateway::start().await;
    let mut replica = gw.start_replica(&GatewayOptions::default()).await;
    let via_first = gw.caller("tok-alice").agent("ag-writer");
    let via_second = replica.caller("tok-alice").agent("ag-writer");
    // Lost create responses: each task is left unknown and must be resolved by the leader.
    gw.upstream
        .faults(json!({"create_drop_after_commit": 4}))
        .await;
    for _ in 0..2 {
        via_first
            .send_text_immediately(&new_id(), "via first")
            .await;
        via_second
            .send_text_immediately(&new_id(), "via second")
            .await;
    }
    wait_dispatched(&gw, "all four resolved by the leader", 4).await;
    assert_eq!(gw.upstream.runs(None).await.len(), 4);

    // Kill one replica (whichever leads), then leave more work: the survivor takes over.
    kill9(&mut gw.child).await;
    gw.upstream
        .faults(json!({"create_drop_after_commit": 2}))
        .await;
    for _ in 0..2 {
        via_second
            .send_text_immediately(&new_id(), "after the kill")
            .await;
    }
    wait_dispatched(&gw, "the survivor resolves the rest", 6).await;
    let runs = gw.upstream.runs(None).await;
    assert_eq!(
        runs.len(),
        6,
        "one run per task, none doubled by two reconcilers"
    );
    kill9(&mut replica.child).await;
}
