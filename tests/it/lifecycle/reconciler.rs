//! Dispatch recovery by the leader-elected reconciler: after a SIGKILL mid-dispatch, and with
//! two replicas (one leader, identified by its log line and its lock, and takeover when exactly
//! that one dies), every task gets exactly one run, counted from Q's record with its
//! workflow-id deduplication off (so Q cannot hide a second create).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;

use crate::support::process::LogLines;
use crate::support::{kill9, new_id, wait_until, Gateway, GatewayOptions};

/// The gateway is SIGKILLed while Q is committing its create; the row committed before
/// dispatch is recovered by the replacement, with exactly one run.
#[tokio::test]
async fn sigkill_mid_dispatch_then_recovery_makes_exactly_one_run() {
    let mut gw = Gateway::start().await;
    // Q's deduplication off: a second create for one task would be a second run in its record.
    gw.upstream.workflow_dedup(false).await;
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

/// The log line a replica writes when it takes the reconciler leadership.
const LEADER_LINE: &str = "reconciler: this replica is the leader";

/// Advisory lock key of the reconciler leader (`LEADER_LOCK` in src/reconciler.rs): PostgreSQL
/// shows a bigint key as its high (`classid`) and low (`objid`) 32 bits.
const LEADER_LOCK: i64 = 0x71_61_32_61_72_65_63;

fn became_leader(logs: &LogLines) -> usize {
    logs.lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(LEADER_LINE))
        .count()
}

/// Sessions holding the leader lock in the test's database (other tests' gateways hold
/// theirs in their own), as PostgreSQL reports them.
async fn leader_lock_holders(gw: &Gateway) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND classid = {} AND objid = {} AND objsubid = 1",
        LEADER_LOCK >> 32,
        LEADER_LOCK & 0xffff_ffff
    );
    gw.db.count(&sql).await
}

/// What the takeover may take beyond the reconciler interval: the killed process's connection
/// closing in PostgreSQL, and the new leader's log line reaching the test.
const TAKEOVER_TOLERANCE: Duration = Duration::from_secs(1);

#[tokio::test]
async fn two_replicas_one_leader_and_takeover_after_sigkill() {
    let mut gw = Gateway::start().await;
    // Q's deduplication off: two reconcilers resubmitting one task would make two runs.
    gw.upstream.workflow_dedup(false).await;
    let mut replica = gw.start_replica(&GatewayOptions::default()).await;
    let via_first = gw.caller("tok-alice").agent("ag-writer");
    let via_second = replica.caller("tok-alice").agent("ag-writer");
    // Exactly one of the two leads: it says so, and PostgreSQL shows one holder of the lock.
    wait_until("a leader", Duration::from_secs(10), async || {
        became_leader(&gw.logs) + became_leader(&replica.logs) == 1
            && leader_lock_holders(&gw).await == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        became_leader(&gw.logs) + became_leader(&replica.logs),
        1,
        "one leader, not two"
    );
    let first_leads = became_leader(&gw.logs) == 1;

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

    // Kill exactly the leader, then leave more work through the survivor, which must take over.
    let (survivor, survivor_logs) = if first_leads {
        kill9(&mut gw.child).await;
        (via_second, replica.logs.clone())
    } else {
        kill9(&mut replica.child).await;
        (via_first, gw.logs.clone())
    };
    let killed = tokio::time::Instant::now();
    assert_eq!(became_leader(&survivor_logs), 0);
    // The survivor takes the lead within one reconciler interval (200 ms here) of the leader's
    // death, with 1 s for the kill to close its connection and the log line to arrive.
    wait_until(
        "the survivor takes the lead within the interval",
        Duration::from_millis(200) + TAKEOVER_TOLERANCE,
        async || became_leader(&survivor_logs) == 1,
    )
    .await;
    eprintln!("takeover {:?} after the kill", killed.elapsed());
    gw.upstream
        .faults(json!({"create_drop_after_commit": 2}))
        .await;
    for _ in 0..2 {
        survivor
            .send_text_immediately(&new_id(), "after the kill")
            .await;
    }
    // The creates' answers were lost: each keeps its claim (2 x 5 s + 5 s) before the new
    // leader looks its run up.
    wait_until(
        "the new leader resolves the rest once their claims expire",
        Duration::from_secs(25),
        async || {
            gw.db
                .count("SELECT count(*) FROM a2a_tasks WHERE dispatch = 'dispatched'")
                .await
                == 6
        },
    )
    .await;
    assert_eq!(leader_lock_holders(&gw).await, 1);
    let runs = gw.upstream.runs(None).await;
    assert_eq!(
        runs.len(),
        6,
        "one run per task, none doubled by two reconcilers"
    );
    if first_leads {
        kill9(&mut replica.child).await;
    } else {
        kill9(&mut gw.child).await;
    }
}
