//! Streaming and observation: SendStreamingMessage, SubscribeToTask, windows and keep-alives,
//! observer leases in real Redis across replicas (bounds, SIGKILL expiry, disconnect release,
//! cancel under full bounds, Redis outage and return), and the per-principal rate limit.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn streaming_params(message_id: &str, text: &str) -> Value {
    json!({"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
           "configuration": {"acceptedOutputModes": ["text/markdown"]}})
}

fn options(env: &[(&str, &str)]) -> GatewayOptions {
    GatewayOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// Counts of one principal's leases, straight from Redis: [global, tenant, principal].
async fn lease_counts(gw: &Gateway, tenant: &str, principal: &str) -> [i64; 3] {
    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = format!("q-a2a-test:{}", gw.db.name);
    let keys = [
        format!("{prefix}:leases:global"),
        format!("{prefix}:leases:tenant:{}:{tenant}", tenant.len()),
        format!(
            "{prefix}:leases:principal:{}:{tenant}:{}:{principal}",
            tenant.len(),
            principal.len()
        ),
    ];
    let now_ms: i64 = {
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        s * 1000 + us / 1000
    };
    let mut out = [0; 3];
    for (i, key) in keys.iter().enumerate() {
        out[i] = redis::cmd("ZCOUNT")
            .arg(key)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    out
}

/// Opens a subscription to a task of `ag-approver` (tasks waiting for approval stay open).
async fn subscribe(base: &str, token: &str, id: &str) -> SseStream {
    SseStream::open(
        base,
        token,
        "ag-approver",
        "SubscribeToTask",
        json!({"id": id}),
    )
    .await
}

/// A task that waits in INPUT_REQUIRED until approved: subscriptions to it stay open.
async fn waiting_task(gw: &Gateway, token: &str) -> String {
    let task = gw
        .send(token, "ag-approver", &new_id(), "wait for me", false)
        .await
        .result()["task"]
        .clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    task["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn streaming_send_orders_snapshot_status_and_artifact() {
    let gw = Gateway::start().await;
    let message_id = new_id();
    let mut stream = SseStream::open(
        &gw.url,
        "tok-alice",
        "ag-writer",
        "SendStreamingMessage",
        streaming_params(&message_id, "stream it"),
    )
    .await;
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
    let state: String = gw
        .db
        .client()
        .await
        .query_one("SELECT state FROM a2a_tasks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "TASK_STATE_COMPLETED");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lease_counts(&gw, "t-acme", "p-alice").await, [0, 0, 0]);

    // The same messageId again streams the existing task; no second run.
    let mut again = SseStream::open(
        &gw.url,
        "tok-alice",
        "ag-writer",
        "SendStreamingMessage",
        streaming_params(&message_id, "stream it"),
    )
    .await;
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
    let bad = SseStream::open(&gw.url, "tok-alice", "ag-writer", "SendStreamingMessage",
        json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"url": "https://x/y"}]}})).await;
    assert!(!bad.is_sse());
    assert_eq!(bad.body_if_json.as_ref().unwrap()["error"]["code"], -32005);
    let unknown = SseStream::open(
        &gw.url,
        "tok-alice",
        "ag-writer",
        "SubscribeToTask",
        json!({"id": new_id()}),
    )
    .await;
    assert_eq!(
        unknown.body_if_json.as_ref().unwrap()["error"]["code"],
        -32001
    );
    let done = gw
        .send("tok-alice", "ag-writer", &new_id(), "finish", false)
        .await
        .result()["task"]
        .clone();
    let terminal = SseStream::open(
        &gw.url,
        "tok-alice",
        "ag-writer",
        "SubscribeToTask",
        json!({"id": done["id"]}),
    )
    .await;
    assert!(!terminal.is_sse());
    assert_eq!(terminal.headers["content-type"], "application/json");
    let body = terminal.body_if_json.unwrap();
    assert_eq!(body["error"]["code"], -32004);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("TASK_STATE_COMPLETED"));
    let foreign = SseStream::open(
        &gw.url,
        "tok-bob",
        "ag-writer",
        "SubscribeToTask",
        json!({"id": done["id"]}),
    )
    .await;
    assert_eq!(
        foreign.body_if_json.as_ref().unwrap()["error"]["code"],
        -32001
    );
    assert_eq!(
        gw.db.task_count().await,
        1,
        "the refused streaming send wrote nothing"
    );
}

#[tokio::test]
async fn subscribe_follows_a_running_task_and_reconnect_gives_a_fresh_snapshot() {
    let gw = Gateway::start_with(options(&[
        ("Q_A2A_OBSERVATION_WINDOW_SECONDS", "1"),
        ("Q_A2A_SSE_KEEPALIVE_MS", "300"),
    ]))
    .await;
    let task = gw
        .send("tok-alice", "ag-slow", &new_id(), "long one", true)
        .await
        .result()["task"]
        .clone();
    let id = task["id"].clone();
    // A 1 s window on a ~4 s run: the stream ends cleanly before the run does.
    let mut first = SseStream::open(
        &gw.url,
        "tok-alice",
        "ag-slow",
        "SubscribeToTask",
        json!({"id": id}),
    )
    .await;
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
        let mut again = SseStream::open(
            &gw.url,
            "tok-alice",
            "ag-slow",
            "SubscribeToTask",
            json!({"id": id}),
        )
        .await;
        if !again.is_sse() {
            // Completed meanwhile: now a terminal task.
            assert_eq!(again.body_if_json.unwrap()["error"]["code"], -32004);
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
async fn principal_bound_holds_and_disconnect_releases() {
    let gw = Gateway::start_with(options(&[("Q_A2A_OBSERVERS_PER_PRINCIPAL", "2")])).await;
    let a = waiting_task(&gw, "tok-alice").await;
    let b = waiting_task(&gw, "tok-alice").await;
    let mut s1 = subscribe(&gw.url, "tok-alice", &a).await;
    let mut s2 = subscribe(&gw.url, "tok-alice", &b).await;
    assert!(s1.is_sse() && s2.is_sse());
    s1.next_result().await.unwrap();
    s2.next_result().await.unwrap();
    assert_eq!(lease_counts(&gw, "t-acme", "p-alice").await, [2, 2, 2]);
    assert_eq!(
        metric(&gw.metrics().await, "a2a_observer_leases_held", &[]),
        Some(2.0)
    );
    let third = subscribe(&gw.url, "tok-alice", &a).await;
    assert_eq!(third.status, 429);
    assert_eq!(
        third.body_if_json.as_ref().unwrap()["error"],
        "observer_limit"
    );
    assert_eq!(third.body_if_json.as_ref().unwrap()["scope"], "principal");
    assert!(third.headers.get("retry-after").is_some());
    // A streaming send over the bound is refused before anything is written.
    let tasks_before = gw.db.task_count().await;
    let refused = SseStream::open(
        &gw.url,
        "tok-alice",
        "ag-writer",
        "SendStreamingMessage",
        streaming_params(&new_id(), "no room"),
    )
    .await;
    assert_eq!(refused.status, 429);
    assert_eq!(gw.db.task_count().await, tasks_before);
    // A blocking send still creates its run and returns the current task at once.
    let started = tokio::time::Instant::now();
    let blocking = gw
        .send("tok-alice", "ag-slow", &new_id(), "no wait", false)
        .await
        .result()["task"]
        .clone();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "did not wait for the ~4 s run"
    );
    assert_ne!(blocking["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(gw.db.task_count().await, tasks_before + 1);
    // Cancel needs no lease.
    let canceled = gw
        .rpc(
            "tok-alice",
            "ag-slow",
            "CancelTask",
            json!({"id": blocking["id"]}),
        )
        .await;
    assert_eq!(canceled.result()["status"]["state"], "TASK_STATE_CANCELED");
    // Another principal of the tenant is not affected by Alice's bound.
    let bobs = waiting_task(&gw, "tok-bob").await;
    let bob_stream = subscribe(&gw.url, "tok-bob", &bobs).await;
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
    let again = subscribe(&gw.url, "tok-alice", &a).await;
    assert!(again.is_sse());
    drop(s2);
}

#[tokio::test]
async fn bounds_hold_across_replicas_under_concurrent_observers() {
    let gw = Gateway::start_with(options(&[
        ("Q_A2A_OBSERVERS_PER_TENANT", "3"),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "3"),
    ]))
    .await;
    let replica = gw
        .start_replica(&options(&[
            ("Q_A2A_OBSERVERS_PER_TENANT", "3"),
            ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "3"),
        ]))
        .await;
    let alice = waiting_task(&gw, "tok-alice").await;
    let bob = waiting_task(&gw, "tok-bob").await;
    let mut attempts = Vec::new();
    for i in 0..16 {
        let base = if i % 2 == 0 {
            gw.url.clone()
        } else {
            replica.url.clone()
        };
        let (token, id) = if i % 3 == 0 {
            ("tok-bob", bob.clone())
        } else {
            ("tok-alice", alice.clone())
        };
        attempts.push(tokio::spawn(async move {
            let mut s = subscribe(&base, token, &id).await;
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
    let gw = Gateway::start_with(options(&[
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "1"),
        ("Q_A2A_LEASE_TTL_MS", "1500"),
    ]))
    .await;
    let mut doomed = gw
        .start_replica(&options(&[
            ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "1"),
            ("Q_A2A_LEASE_TTL_MS", "1500"),
        ]))
        .await;
    let id = waiting_task(&gw, "tok-alice").await;
    let mut held = subscribe(&doomed.url, "tok-alice", &id).await;
    held.next_result().await.unwrap();
    kill9(&mut doomed.child).await;
    // Counted until its TTL passes, then gone without anyone releasing it.
    let blocked = subscribe(&gw.url, "tok-alice", &id).await;
    assert_eq!(blocked.status, 429);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let after = subscribe(&gw.url, "tok-alice", &id).await;
    assert!(after.is_sse(), "the dead replica's lease expired");
}

#[tokio::test]
async fn redis_outage_refuses_observation_only_and_counts_recover() {
    let redis = PrivateRedis::start().await;
    let port = redis.port;
    let gw = Gateway::start_with(options(&[
        ("Q_A2A_REDIS_URL", &redis.url()),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "1"),
    ]))
    .await;
    let id = waiting_task(&gw, "tok-alice").await;
    let mut held = subscribe(&gw.url, "tok-alice", &id).await;
    held.next_result().await.unwrap();
    drop(held);
    drop(redis); // kill_on_drop: Redis is gone, with every lease it held
    tokio::time::sleep(Duration::from_millis(300)).await;

    let refused = subscribe(&gw.url, "tok-alice", &id).await;
    assert_eq!(refused.status, 503);
    assert_eq!(
        refused.body_if_json.as_ref().unwrap()["error"],
        "observation_unavailable"
    );
    let stream_send = SseStream::open(
        &gw.url,
        "tok-alice",
        "ag-writer",
        "SendStreamingMessage",
        streaming_params(&new_id(), "x"),
    )
    .await;
    assert_eq!(stream_send.status, 503);
    // Everything that does not observe keeps working.
    let quick = gw
        .send("tok-alice", "ag-writer", &new_id(), "still fine", true)
        .await
        .result()["task"]
        .clone();
    assert!(gw
        .get_task("tok-alice", "ag-writer", quick["id"].as_str().unwrap())
        .await
        .body
        .get("result")
        .is_some());
    assert!(gw
        .rpc("tok-alice", "ag-writer", "ListTasks", json!({}))
        .await
        .body
        .get("result")
        .is_some());
    let slow = gw
        .send("tok-alice", "ag-slow", &new_id(), "cancel me", true)
        .await
        .result()["task"]
        .clone();
    assert_eq!(
        gw.rpc(
            "tok-alice",
            "ag-slow",
            "CancelTask",
            json!({"id": slow["id"]})
        )
        .await
        .result()["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    let started = tokio::time::Instant::now();
    let blocking = gw
        .send(
            "tok-alice",
            "ag-slow",
            &new_id(),
            "no lease, no wait",
            false,
        )
        .await;
    assert!(blocking.body.get("result").is_some());
    assert!(started.elapsed() < Duration::from_secs(3));

    // Redis returns (empty, on the same port): observation works again, counts start right.
    let _back = PrivateRedis::start_on(port).await;
    let mut ok = None;
    for _ in 0..40 {
        let s = subscribe(&gw.url, "tok-alice", &id).await;
        if s.is_sse() {
            ok = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut ok = ok.expect("observation recovers once Redis is back");
    ok.next_result().await.unwrap();
    let second = subscribe(&gw.url, "tok-alice", &id).await;
    assert_eq!(
        second.status, 429,
        "the bound of 1 counts the live observer after the restart"
    );
}

#[tokio::test]
async fn per_principal_rate_limit() {
    let gw = Gateway::start_with(options(&[
        ("Q_A2A_RATE_LIMIT_ENABLED", "true"),
        ("Q_A2A_RATE_LIMIT_PER_SECOND", "1"),
        ("Q_A2A_RATE_LIMIT_BURST", "3"),
    ]))
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(gw.get_task("tok-alice", "ag-writer", &new_id()).await);
    }
    assert!(statuses[..3].iter().all(|r| r.status == 200));
    let limited = &statuses[3];
    assert_eq!(limited.status, 429);
    assert_eq!(limited.body["error"], "rate_limited");
    assert!(
        limited.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    // Bob has his own bucket.
    assert_eq!(
        gw.get_task("tok-bob", "ag-writer", &new_id()).await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        gw.get_task("tok-alice", "ag-writer", &new_id())
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn card_advertises_streaming() {
    let gw = Gateway::start().await;
    let card: Value = gw
        .card("ag-writer", Some("tok-alice"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(card["capabilities"]["streaming"], true);
}
