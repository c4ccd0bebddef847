//! Observations stay honest when the run feed fails: they read their run from Q at a bounded
//! rate instead of waiting out their window. (A blocking SendMessage that cannot hold an
//! observer lease is refused before anything is created: `streaming::leases`.)

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::support::{new_id, Gateway, GatewayOptions};

/// A gateway (20 s observation window) whose run feed Q answers only with 503.
async fn feed_down() -> Gateway {
    let gw = Gateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_OBSERVATION_WINDOW_SECONDS",
        "20",
    )]))
    .await;
    gw.upstream
        .faults(json!({"status": {"route": "run_changes", "status": 503, "count": 100000}}))
        .await;
    gw
}

/// A blocking send of Alice's to `agent`, answered with its task completed; how long it took.
async fn completed_send(gw: &Gateway, agent: &str) -> Duration {
    let started = Instant::now();
    let reply = gw
        .caller("tok-alice")
        .agent(agent)
        .send_text(&new_id(), "with the feed down")
        .await;
    let took = started.elapsed();
    assert_eq!(
        reply.task()["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        reply.body
    );
    took
}

#[tokio::test]
async fn with_the_run_feed_down_a_blocking_send_answers_the_runs_real_state() {
    let gw = feed_down().await;
    let took = completed_send(&gw, "ag-writer").await;
    // The run takes 0.3 s. The feed counts as not caught up 1 s after its last caught-up poll
    // (the followers' `trust`); the wait then reads its run from Q once a second, so its first
    // read, at 2 s, finds it completed (0.4 s of tolerance for the 2-core machine).
    assert!(
        took < Duration::from_millis(2_400),
        "answered after {took:?}"
    );
    eprintln!("blocking send with the run feed down answered in {took:?}");
}

/// With the run feed down, a wait reads its run from Q once a second (`RUN_FALLBACK_POLL`), as
/// docs/methods.md says: over ag-slow's run (1 s queued, 4 s running), one read per second once
/// the feed has lapsed (1 s), and the answer at the first read after the run ended.
#[tokio::test]
async fn with_the_run_feed_down_a_wait_reads_its_run_from_q_once_a_second() {
    let gw = feed_down().await;
    let reads = async || {
        gw.upstream.stats().await["requests"]["run_events"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = reads().await;
    let took = completed_send(&gw, "ag-slow").await;
    let read = reads().await - before;
    // Reads at 2, 3, 4 and 5 s find it queued or working, the one at 6 s completed (the run
    // ends a little after 5 s): five, one either way for the machine's scheduling.
    assert!(
        (4..=6).contains(&read),
        "{read} reads of the run in {took:?}"
    );
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_millis(6_400),
        "answered after {took:?}"
    );
    eprintln!("a 5 s run with the feed down: {read} reads from Q, answered after {took:?}");
}

#[tokio::test]
async fn with_the_run_feed_down_a_stream_still_sees_its_run_complete() {
    let gw = feed_down().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let started = Instant::now();
    let mut stream = writer.stream_text(&new_id(), "with the feed down").await;
    let events = tokio::time::timeout(Duration::from_secs(10), stream.rest())
        .await
        .expect("the stream ends with its run");
    let took = started.elapsed();
    let last = events.last().expect("events");
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e.get("artifactUpdate").is_some()),
        "the artifact precedes the completed status: {events:?}"
    );
    // As for the blocking send: the feed lapses at 1 s, the first read at 2 s sees the end.
    assert!(took < Duration::from_millis(2_400), "ended after {took:?}");
}
