//! The per-principal rate limit: a token bucket per replica, HTTP 429 with Retry-After.

use std::time::Duration;

use crate::support::{new_id, Gateway};

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
