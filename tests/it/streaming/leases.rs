//! Observer leases in the shared Redis: the principal and tenant bounds (across replicas, under
//! concurrent observers), release on disconnect, expiry after a SIGKILL, and a blocking send
//! that cannot observe refused before anything is created.

use std::time::Duration;

use crate::support::gateway::Replica;
use serde_json::json;

use crate::support::metrics::metric;
use crate::support::redis::lease_counts;
use crate::support::{kill9, new_id, wait_until, Gateway, GatewayOptions};

use super::{approver, waiting_task};

/// A gateway and a replica of it, both with `env`.
async fn with_replica(env: &[(&str, &str)]) -> (Gateway, Replica) {
    let options = GatewayOptions::with_env(env);
    let gw = Gateway::start_with(options.clone()).await;
    let replica = gw.start_replica(&options).await;
    (gw, replica)
}

#[tokio::test]
async fn principal_bound_holds_and_disconnect_releases() {
    let gw = Gateway::start_with_env(&[("Q_A2A_OBSERVERS_PER_PRINCIPAL", "2")]).await;
    let alice = gw.caller("tok-alice");
    let watch = approver(&gw, "tok-alice");
    let a = waiting_task(&gw, "tok-alice").await;
    let b = waiting_task(&gw, "tok-alice").await;
    let mut s1 = watch.subscribe(&a).await;
    let mut s2 = watch.subscribe(&b).await;
    assert!(s1.is_sse() && s2.is_sse());
    s1.next_result().await.unwrap();
    s2.next_result().await.unwrap();
    assert_eq!(lease_counts(&gw, "t-acme", "p-alice").await, [2, 2, 2]);
    assert_eq!(
        metric(&gw.metrics().await, "a2a_observer_leases_held", &[]),
        Some(2.0)
    );
    let third = watch.subscribe(&a).await;
    assert_eq!(third.status, 429);
    assert_eq!(third.json()["error"], "observer_limit");
    assert_eq!(third.json()["scope"], "principal");
    assert!(third.headers.get("retry-after").is_some());
    // A streaming send over the bound is refused before anything is written.
    let tasks_before = gw.db.task_count().await;
    let refused = alice
        .agent("ag-writer")
        .stream_text(&new_id(), "no room")
        .await;
    assert_eq!(refused.status, 429);
    assert_eq!(gw.db.task_count().await, tasks_before);
    // So is a blocking send: it observes too.
    let slow = alice.agent("ag-slow");
    let blocking = slow.send_text(&new_id(), "no room either").await;
    assert_eq!(blocking.status, 429, "{}", blocking.body);
    assert_eq!(gw.db.task_count().await, tasks_before);
    // Cancel needs no lease.
    let running = slow
        .send_text_immediately(&new_id(), "cancel me")
        .await
        .task();
    let canceled = slow.cancel(running["id"].as_str().unwrap()).await;
    assert_eq!(canceled.result()["status"]["state"], "TASK_STATE_CANCELED");
    // Another principal of the tenant is not affected by Alice's bound.
    let bobs = waiting_task(&gw, "tok-bob").await;
    let bob_stream = approver(&gw, "tok-bob").subscribe(&bobs).await;
    assert!(bob_stream.is_sse());
    drop(bob_stream);
    // Disconnect releases promptly.
    drop(s1);
    let mut released = false;
    for _ in 0..30 {
        if lease_counts(&gw, "t-acme", "p-alice").await[2] == 1 {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(released, "a dropped stream gives its lease back");
    let again = watch.subscribe(&a).await;
    assert!(again.is_sse());
    drop(s2);
}

#[tokio::test]
async fn bounds_hold_across_replicas_under_concurrent_observers() {
    let (gw, replica) = with_replica(&[
        ("Q_A2A_OBSERVERS_PER_TENANT", "3"),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "3"),
    ])
    .await;
    let alice = waiting_task(&gw, "tok-alice").await;
    let bob = waiting_task(&gw, "tok-bob").await;
    let mut attempts = Vec::new();
    for i in 0..16 {
        let (token, id) = if i % 3 == 0 {
            ("tok-bob", bob.clone())
        } else {
            ("tok-alice", alice.clone())
        };
        let caller = if i % 2 == 0 {
            gw.caller(token)
        } else {
            replica.caller(token)
        };
        let watch = caller.agent("ag-approver");
        attempts.push(tokio::spawn(async move {
            let mut s = watch.subscribe(&id).await;
            if s.is_sse() {
                s.next_result().await;
            }
            s
        }));
    }
    let mut open = Vec::new();
    let mut refused = 0;
    for attempt in attempts {
        let s = attempt.await.unwrap();
        if s.is_sse() {
            open.push(s);
        } else {
            assert_eq!(s.status, 429);
            refused += 1;
        }
    }
    assert_eq!(
        open.len(),
        3,
        "exactly the tenant bound, across two replicas"
    );
    assert_eq!(refused, 13);
    let counts = lease_counts(&gw, "t-acme", "p-alice").await;
    assert_eq!(counts[1], 3, "tenant scope never above its bound");
}

#[tokio::test]
async fn leases_of_a_sigkilled_replica_expire() {
    let (gw, mut doomed) = with_replica(&[
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "1"),
        ("Q_A2A_LEASE_TTL_MS", "1500"),
    ])
    .await;
    let id = waiting_task(&gw, "tok-alice").await;
    let mut held = doomed
        .caller("tok-alice")
        .agent("ag-approver")
        .subscribe(&id)
        .await;
    held.next_result().await.unwrap();
    kill9(&mut doomed.child).await;
    // Counted until its TTL passes, then gone without anyone releasing it.
    let watch = approver(&gw, "tok-alice");
    let blocked = watch.subscribe(&id).await;
    assert_eq!(blocked.status, 429);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let after = watch.subscribe(&id).await;
    assert!(after.is_sse(), "the dead replica's lease expired");
}

/// A blocking SendMessage at the principal's observer bound is refused like a stream, before
/// anything is written or sent to Q; one whose run creation is still unresolved waits for the
/// reconciler to record the run instead of answering a task that is not the result.
#[tokio::test]
async fn a_blocking_send_that_cannot_observe_is_refused_before_anything_is_created() {
    let gw = Gateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_OBSERVERS_PER_PRINCIPAL",
        "1",
    )]))
    .await;
    let alice = gw.caller("tok-alice");
    let writer = alice.agent("ag-writer");
    let id = waiting_task(&gw, "tok-alice").await;
    let mut held = approver(&gw, "tok-alice").subscribe(&id).await;
    held.next_result().await.unwrap();

    let tasks = gw.db.task_count().await;
    let creates = gw.upstream.stats().await["create_requests"].clone();
    let refused = writer.send_text(&new_id(), "no lease").await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["error"], "observer_limit");
    assert_eq!(refused.body["scope"], "principal");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(gw.db.task_count().await, tasks, "a task was written");
    assert_eq!(
        gw.upstream.stats().await["create_requests"],
        creates,
        "Q received a create"
    );
    // returnImmediately needs no lease.
    let immediate = writer
        .send_text_immediately(&new_id(), "did not ask to wait")
        .await
        .task();
    assert!(immediate.get("metadata").is_none(), "{immediate}");
    drop(held);
    wait_until(
        "the subscription's lease to go back",
        Duration::from_secs(3),
        async || lease_counts(&gw, "t-acme", "p-alice").await[2] == 0,
    )
    .await;

    // Q's answer to the create is lost: the wait follows the task until the reconciler has
    // found its run, then the run itself, and answers its result. Q's deduplication off, so
    // a second create would show as a second run.
    gw.upstream.workflow_dedup(false).await;
    gw.upstream
        .faults(json!({"create_drop_after_commit": 1}))
        .await;
    let message_id = new_id();
    let task = writer.send_text(&message_id, "lost answer").await.task();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert!(task.get("metadata").is_none(), "{task}");
    assert!(task["artifacts"].is_array(), "{task}");
    let workflow: String = gw
        .db
        .task_field(task["id"].as_str().unwrap(), "workflow_id")
        .await;
    assert_eq!(gw.upstream.runs(Some(&workflow)).await.len(), 1, "one run");
}
