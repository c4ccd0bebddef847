//! Observations stay honest when the run feed fails: they read their run from Q at a bounded
//! rate instead of waiting out their window. (A blocking SendMessage that cannot hold an
//! observer lease is refused before anything is created: `streaming::leases`.)

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::support::{new_id, Gateway, GatewayOptions};

#[tokio::test]
async fn with_the_run_feed_down_a_blocking_send_answers_the_runs_real_state() {
    let gw = Gateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_OBSERVATION_WINDOW_SECONDS",
        "20",
    )]))
    .await;
    gw.upstream
        .faults(json!({"status": {"route": "run_changes", "status": 503, "count": 100000}}))
        .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let started = Instant::now();
    let reply = writer.send_text(&new_id(), "with the feed down").await;
    let took = started.elapsed();
    assert_eq!(
        reply.task()["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        reply.body
    );
    // The run takes 0.3 s; the wait reads it from Q once a second.
    assert!(took < Duration::from_secs(4), "answered after {took:?}");
    eprintln!("blocking send with the run feed down answered in {took:?}");
}

#[tokio::test]
async fn with_the_run_feed_down_a_stream_still_sees_its_run_complete() {
    let gw = Gateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_OBSERVATION_WINDOW_SECONDS",
        "20",
    )]))
    .await;
    gw.upstream
        .faults(json!({"status": {"route": "run_changes", "status": 503, "count": 100000}}))
        .await;
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
    assert!(took < Duration::from_secs(4), "ended after {took:?}");
}
