//! The per-principal rate limit: a token bucket per replica, HTTP 429 with Retry-After.

use std::time::Duration;

use crate::support::{new_id, Gateway, GatewayOptions};

#[tokio::test]
async fn per_principal_rate_limit() {
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_RATE_LIMIT_ENABLED", "true"),
        ("Q_A2A_RATE_LIMIT_PER_SECOND", "1"),
        ("Q_A2A_RATE_LIMIT_BURST", "3"),
    ])
    .await;
    let alice = gw.caller("tok-alice").agent("ag-writer");
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(alice.get_task(&new_id()).await);
    }
    assert!(statuses[..3].iter().all(|r| r.status == 200));
    let limited = &statuses[3];
    assert_eq!(limited.status, 429);
    assert_eq!(limited.body["error"], "rate_limited");
    assert!(limited.header("retry-after").parse::<u64>().unwrap() >= 1);
    // Bob has his own bucket.
    assert_eq!(
        gw.caller("tok-bob")
            .agent("ag-writer")
            .get_task(&new_id())
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(alice.get_task(&new_id()).await.status, 200);
}

/// CancelTask has a bucket of its own: a principal that spent its general bucket on streams and
/// subscriptions, most of them refused at the observer bound, can still cancel its task.
#[tokio::test]
async fn observation_attempts_never_spend_cancellation_admission() {
    let gw = Gateway::start_with(GatewayOptions::with_env(&[
        ("Q_A2A_RATE_LIMIT_ENABLED", "true"),
        ("Q_A2A_RATE_LIMIT_PER_SECOND", "1"),
        ("Q_A2A_RATE_LIMIT_BURST", "5"),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "1"),
    ]))
    .await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let id = slow
        .send_text_immediately(&new_id(), "cancel me")
        .await
        .task_id();
    let mut held = slow.subscribe(&id).await;
    assert!(held.is_sse());
    held.next_result().await.unwrap();
    // Observation attempts until the general bucket is empty: refused by the observer bound
    // first (each still spends a token), then by the rate limit.
    let mut refusals = Vec::new();
    for i in 0..20 {
        let attempt = if i % 2 == 0 {
            slow.subscribe(&id).await
        } else {
            slow.stream_text(&new_id(), "no room").await
        };
        assert!(!attempt.is_sse(), "the only lease is held");
        let error = attempt.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        refusals.push((attempt.status, error.clone()));
        if error == "rate_limited" {
            break;
        }
    }
    assert!(
        refusals.contains(&(429, "observer_limit".into())),
        "{refusals:?}"
    );
    assert_eq!(
        refusals.last(),
        Some(&(429, "rate_limited".into())),
        "{refusals:?}"
    );
    // Right away, with the general bucket empty: the cancellation is admitted.
    let canceled = slow.cancel(&id).await;
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    assert_eq!(canceled.result()["status"]["state"], "TASK_STATE_CANCELED");
    drop(held);
}
