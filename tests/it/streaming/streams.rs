//! What a stream carries: SendStreamingMessage's ordered events, errors before the first event
//! as plain JSON, SubscribeToTask with windows, keep-alives and fresh snapshots on reconnect.

use std::time::Duration;

use serde_json::json;

use crate::support::redis::lease_counts;
use crate::support::{new_id, wait_until, Gateway, SseFrame};

#[tokio::test]
async fn streaming_send_orders_snapshot_status_and_artifact() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let message_id = new_id();
    let mut stream = writer.stream_text(&message_id, "stream it").await;
    assert_eq!(stream.status, 200);
    assert!(stream.is_sse());
    assert_eq!(stream.headers["cache-control"], "no-cache, no-store");
    assert_eq!(stream.headers["x-accel-buffering"], "no");
    let first = stream.next_result().await.unwrap();
    let task = &first["task"];
    let task_id = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["history"][0]["messageId"], message_id.as_str());
    let rest = stream.rest().await;
    assert!(!rest.is_empty());
    // Status updates then the artifact right before the completed status; nothing after it.
    let last = rest.last().unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let artifact = &rest[rest.len() - 2]["artifactUpdate"];
    assert_eq!(artifact["taskId"], task_id.as_str());
    assert_eq!(artifact["lastChunk"], true);
    let text = artifact["artifact"]["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("stream it"));
    assert_eq!(artifact["artifact"]["metadata"]["byteCount"], text.len());
    for update in &rest[..rest.len() - 2] {
        let state = update["statusUpdate"]["status"]["state"].as_str().unwrap();
        assert!(
            state == "TASK_STATE_SUBMITTED" || state == "TASK_STATE_WORKING",
            "{update}"
        );
        assert_eq!(update["statusUpdate"]["taskId"], task_id.as_str());
    }
    // The stored projection followed, and the lease is back.
    let state: String = gw.db.one("SELECT state FROM a2a_tasks").await;
    assert_eq!(state, "TASK_STATE_COMPLETED");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lease_counts(&gw, "t-acme", "p-alice").await, [0, 0, 0]);

    // The same messageId again streams the existing task; no second run.
    let mut again = writer.stream_text(&message_id, "stream it").await;
    let snapshot = again.next_result().await.unwrap();
    assert_eq!(snapshot["task"]["id"], task_id.as_str());
    assert_eq!(snapshot["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(
        again.rest().await.is_empty(),
        "a terminal snapshot ends the stream"
    );
    assert_eq!(gw.upstream.runs(None).await.len(), 1);
}

#[tokio::test]
async fn stream_errors_before_the_first_event_are_plain_json() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let bad = writer
        .stream(
            "SendStreamingMessage",
            json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"url": "https://x/y"}]}}),
        )
        .await;
    assert!(!bad.is_sse());
    assert_eq!(bad.json()["error"]["code"], -32005);
    let unknown = writer.subscribe(&new_id()).await;
    assert_eq!(unknown.json()["error"]["code"], -32001);
    let done_id = writer.send_text(&new_id(), "finish").await.task_id();
    let terminal = writer.subscribe(&done_id).await;
    assert!(!terminal.is_sse());
    assert_eq!(terminal.headers["content-type"], "application/json");
    let body = terminal.json();
    assert_eq!(body["error"]["code"], -32004);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("TASK_STATE_COMPLETED"));
    let foreign = gw
        .caller("tok-bob")
        .agent("ag-writer")
        .subscribe(&done_id)
        .await;
    assert_eq!(foreign.json()["error"]["code"], -32001);
    assert_eq!(
        gw.db.task_count().await,
        1,
        "the refused streaming send wrote nothing"
    );
}

#[tokio::test]
async fn subscribe_follows_a_running_task_and_reconnect_gives_a_fresh_snapshot() {
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_OBSERVATION_WINDOW_SECONDS", "1"),
        ("Q_A2A_SSE_KEEPALIVE_MS", "300"),
    ])
    .await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let task = slow
        .send_text_immediately(&new_id(), "long one")
        .await
        .task();
    let id = task["id"].clone();
    let id_text = id.as_str().unwrap();
    // A 1 s window on a ~4 s run: the stream ends cleanly before the run does.
    let mut first = slow.subscribe(id_text).await;
    let snapshot = first.next_result().await.unwrap();
    assert_eq!(snapshot["task"]["id"], id);
    let mut comments = 0;
    let mut results = Vec::new();
    while let Some(frame) = first.next().await {
        match frame {
            SseFrame::Comment(_) => comments += 1,
            SseFrame::Event { data, .. } => results.push(data["result"].clone()),
        }
    }
    assert!(comments >= 1, "keep-alives flow while nothing happens");
    assert!(results
        .iter()
        .all(|r| r["statusUpdate"]["status"]["state"] != "TASK_STATE_COMPLETED"));
    // The run goes on; reconnecting (repeatedly) gives fresh snapshots until it completes.
    let mut completed = false;
    for _ in 0..10 {
        let mut again = slow.subscribe(id_text).await;
        if !again.is_sse() {
            // Completed meanwhile: now a terminal task.
            assert_eq!(again.json()["error"]["code"], -32004);
            completed = true;
            break;
        }
        assert_eq!(again.next_result().await.unwrap()["task"]["id"], id);
        if again
            .rest()
            .await
            .iter()
            .any(|r| r["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
        {
            completed = true;
            break;
        }
    }
    assert!(completed);
    assert_eq!(gw.upstream.runs(None).await.len(), 1);
}

#[tokio::test]
async fn card_advertises_streaming() {
    let gw = Gateway::start().await;
    let card = gw.caller("tok-alice").agent("ag-writer").card().await;
    assert_eq!(card.body["capabilities"]["streaming"], true);
}

/// Every SSE frame keeps to the 1 MiB result bound, like GetTask: an artifact over it is an
/// `event: error` frame (-32006) that ends the stream, and a snapshot over it (a repeated
/// messageId of that task) is refused before the stream starts, as plain JSON.
#[tokio::test]
async fn events_over_the_result_bound_are_refused_not_streamed() {
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let message_id = new_id();
    // The run's output, once there, is over 1 MiB.
    gw.upstream.corrupt_next_outputs("oversize", 1).await;
    let mut stream = slow.stream_text(&message_id, "a big answer").await;
    let first = stream.next_result().await.unwrap();
    assert!(first["task"]["id"].is_string(), "{first}");
    let mut events = Vec::new();
    while let Some(frame) = stream.next().await {
        if let SseFrame::Event { event, data } = frame {
            events.push((event, data));
        }
    }
    let biggest = events
        .iter()
        .map(|(_, data)| data.to_string().len())
        .max()
        .unwrap_or(0);
    assert!(biggest < 1024 * 1024, "a frame of {biggest} bytes was sent");
    assert!(
        events
            .iter()
            .all(|(_, data)| data["result"].get("artifactUpdate").is_none()),
        "no artifact frame"
    );
    let (event, data) = events.last().expect("an error frame ends the stream");
    assert_eq!(event, "error");
    assert_eq!(data["id"], "s-1");
    assert_eq!(data["error"]["code"], -32006, "{data}");
    assert!(data["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1048576"));

    // The task itself completed (recorded before its artifact was read); its snapshot now
    // carries the oversize artifact.
    let state: String = gw.db.one("SELECT state FROM a2a_tasks").await;
    assert_eq!(state, "TASK_STATE_COMPLETED");
    let again = slow.stream_text(&message_id, "a big answer").await;
    assert!(!again.is_sse(), "refused before the stream starts");
    assert_eq!(again.json()["error"]["code"], -32006);
    wait_until(
        "the refused stream's lease to go back",
        Duration::from_secs(3),
        async || lease_counts(&gw, "t-acme", "p-alice").await == [0, 0, 0],
    )
    .await;
}

/// Keep-alives come on time whatever else wakes the stream: here the token is checked again
/// every 250 ms, more often than the 1 s keep-alive, and no gap between frames may exceed the
/// keep-alive interval (so a client's read timeout above it never fires while a run is quiet).
#[tokio::test]
async fn keep_alives_keep_their_interval_while_the_stream_checks_its_caller() {
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_SSE_KEEPALIVE_MS", "1000"),
        ("Q_A2A_AUTH_CACHE_TTL_MS", "500"),
    ])
    .await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let mut stream = slow.stream_text(&new_id(), "quiet for a while").await;
    let mut last = tokio::time::Instant::now();
    let mut longest = Duration::ZERO;
    let mut comments = 0;
    while let Some(frame) = stream.next().await {
        longest = longest.max(last.elapsed());
        last = tokio::time::Instant::now();
        if matches!(frame, SseFrame::Comment(_)) {
            comments += 1;
        }
    }
    assert!(comments >= 2, "{comments} keep-alives during a ~4 s run");
    assert!(
        longest <= Duration::from_millis(1300),
        "{longest:?} between two frames (keep-alive 1 s, 300 ms tolerance)"
    );
}
