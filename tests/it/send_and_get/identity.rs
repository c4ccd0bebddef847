//! Durable message identity: a repeated messageId recovers its task, changed content is
//! refused, the identity is per principal, and concurrent duplicates make one task and one run.

use serde_json::{json, Value};

use crate::support::{new_id, Gateway};

#[tokio::test]
async fn repeat_recovers_the_same_task_and_changed_content_changes_nothing() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let message_id = new_id();
    let first = writer.send_text(&message_id, "same words").await.task();
    let again = writer
        .send_text_immediately(&message_id, "same words")
        .await
        .task();
    assert_eq!(first["id"], again["id"]);
    assert_eq!(first["contextId"], again["contextId"]);
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED");

    let changed = writer.send_text(&message_id, "other words").await;
    assert_eq!(changed.error_code(), Some(-32602), "{}", changed.body);
    assert_eq!(
        changed.body["error"]["data"][1]["fieldViolations"][0]["field"],
        "message.messageId"
    );

    assert_eq!(gw.db.task_count().await, 1);
    let stored: Value = gw.db.one("SELECT message FROM a2a_tasks").await;
    assert_eq!(stored["parts"][0]["text"], "same words");
    assert_eq!(
        gw.upstream.runs(None).await.len(),
        1,
        "exactly one run in Q"
    );

    // The identity is scoped to the principal: Bob's same messageId is his own task.
    let bobs = gw
        .caller("tok-bob")
        .agent("ag-writer")
        .send_text_immediately(&message_id, "same words")
        .await
        .task();
    assert_ne!(bobs["id"], first["id"]);
    assert_eq!(gw.upstream.runs(None).await.len(), 2);
}

#[tokio::test]
async fn concurrent_duplicates_make_one_task_and_one_run() {
    // Twelve blocking sends observe at once: room for each of them under the principal bound.
    let gw = Gateway::start_with_env(&[("Q_A2A_OBSERVERS_PER_PRINCIPAL", "16")]).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let message_id = new_id();
    let mut calls = Vec::new();
    for i in 0..24 {
        let writer = writer.clone();
        let message_id = message_id.clone();
        calls.push(async move {
            if i % 2 == 0 {
                writer.send_text(&message_id, "race").await
            } else {
                writer.send_text_immediately(&message_id, "race").await
            }
        });
    }
    let replies = futures_util::future::join_all(calls).await;
    let ids: std::collections::HashSet<String> = replies.iter().map(|r| r.task_id()).collect();
    assert_eq!(ids.len(), 1, "every duplicate got the same task");
    assert_eq!(gw.db.task_count().await, 1);
    assert_eq!(gw.upstream.runs(None).await.len(), 1, "one run in Q");
}

/// The gateway itself sends one create per messageId, whatever Q does about duplicates: with
/// Q's workflow-id deduplication off and every create slow, ten messageIds sent eight times
/// each, concurrently (blocking and immediate mixed), make exactly ten runs and ten creates.
#[tokio::test]
async fn concurrent_repeats_make_one_create_each_without_qs_deduplication() {
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_OBSERVERS_PER_TENANT", "100"),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "100"),
    ])
    .await;
    gw.upstream.workflow_dedup(false).await;
    gw.upstream
        .faults(json!({"create_delay_ms": 700, "create_delay_count": 1000}))
        .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let message_ids: Vec<String> = (0..10).map(|_| new_id()).collect();
    let mut calls = Vec::new();
    for message_id in &message_ids {
        for i in 0..8 {
            let writer = writer.clone();
            let message_id = message_id.clone();
            calls.push(async move {
                let reply = if i % 2 == 0 {
                    writer.send_text(&message_id, "once only").await
                } else {
                    writer.send_text_immediately(&message_id, "once only").await
                };
                (message_id, reply)
            });
        }
    }
    let replies = futures_util::future::join_all(calls).await;
    let mut tasks: std::collections::HashMap<String, std::collections::HashSet<String>> =
        Default::default();
    for (message_id, reply) in &replies {
        tasks
            .entry(message_id.clone())
            .or_default()
            .insert(reply.task_id());
    }
    assert!(tasks.values().all(|ids| ids.len() == 1), "{tasks:?}");
    assert_eq!(gw.db.task_count().await, 10);
    let stats = gw.upstream.stats().await;
    assert_eq!(
        (
            stats["create_requests"].as_u64(),
            stats["runs_created"].as_u64()
        ),
        (Some(10), Some(10)),
        "one create per messageId: {stats}"
    );
}
