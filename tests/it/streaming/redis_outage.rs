//! With Redis gone only observation is refused (503), everything else keeps working, and the
//! counts are right again once Redis returns.

use std::time::Duration;

use serde_json::json;

use crate::support::redis::PrivateRedis;
use crate::support::{new_id, Gateway};

use super::{approver, waiting_task};

#[tokio::test]
async fn redis_outage_refuses_observation_only_and_counts_recover() {
    let redis = PrivateRedis::start().await;
    let port = redis.port;
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_REDIS_URL", &redis.url()),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "1"),
    ])
    .await;
    let alice = gw.caller("tok-alice");
    let writer = alice.agent("ag-writer");
    let slow = alice.agent("ag-slow");
    let watch = approver(&gw, "tok-alice");
    let id = waiting_task(&gw, "tok-alice").await;
    let mut held = watch.subscribe(&id).await;
    held.next_result().await.unwrap();
    drop(held);
    drop(redis); // kill_on_drop: Redis is gone, with every lease it held
    tokio::time::sleep(Duration::from_millis(300)).await;

    let refused = watch.subscribe(&id).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json()["error"], "observation_unavailable");
    let stream_send = writer.stream_text(&new_id(), "x").await;
    assert_eq!(stream_send.status, 503);
    // Everything that does not observe keeps working.
    let quick_id = writer
        .send_text_immediately(&new_id(), "still fine")
        .await
        .task_id();
    assert!(writer.get_task(&quick_id).await.is_result());
    assert!(writer.list_tasks(json!({})).await.is_result());
    let slow_id = slow
        .send_text_immediately(&new_id(), "cancel me")
        .await
        .task_id();
    assert_eq!(
        slow.cancel(&slow_id).await.result()["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    // A blocking send observes too: refused before anything is written, as a stream is.
    let tasks = gw.db.task_count().await;
    let blocking = slow.send_text(&new_id(), "no lease, no wait").await;
    assert_eq!(blocking.status, 503, "{}", blocking.body);
    assert_eq!(blocking.body["error"], "observation_unavailable");
    assert_eq!(gw.db.task_count().await, tasks, "a task was written");

    // Redis returns (empty, on the same port): observation works again, counts start right.
    let _back = PrivateRedis::start_on(port).await;
    let mut ok = None;
    for _ in 0..40 {
        let s = watch.subscribe(&id).await;
        if s.is_sse() {
            ok = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut ok = ok.expect("observation recovers once Redis is back");
    ok.next_result().await.unwrap();
    let second = watch.subscribe(&id).await;
    assert_eq!(
        second.status, 429,
        "the bound of 1 counts the live observer after the restart"
    );
}
