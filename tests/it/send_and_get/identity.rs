//! Durable message identity: a repeated messageId recovers its task, changed content is
//! refused, the identity is per tenant, principal and agent, and concurrent duplicates make one
//! task and one run.

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

/// The identity is scoped to tenant, principal and agent (the profile): the same messageId,
/// even with other content, is a task of its own for the same principal at another agent and
/// for a principal of another tenant; each is then recovered by its own repeat.
#[tokio::test]
async fn the_same_message_id_at_another_agent_or_tenant_is_its_own_task() {
    let gw = Gateway::start().await;
    let message_id = new_id();
    let senders = [
        ("tok-alice", "ag-writer", "one"),
        ("tok-alice", "ag-approver", "two"),
        ("tok-carol", "ag-globex", "three"),
    ];
    let mut tasks = Vec::new();
    for (token, agent, words) in senders {
        let task = gw
            .caller(token)
            .agent(agent)
            .send_text_immediately(&message_id, words)
            .await
            .task();
        tasks.push(task["id"].as_str().unwrap().to_string());
    }
    let distinct: std::collections::HashSet<&String> = tasks.iter().collect();
    assert_eq!(distinct.len(), 3, "{tasks:?}");
    assert_eq!(gw.db.task_count().await, 3);
    gw.db
        .wait_count(
            "a run for each",
            "SELECT count(*) FROM a2a_tasks WHERE run_id IS NOT NULL",
            3,
            std::time::Duration::from_secs(10),
        )
        .await;
    assert_eq!(gw.upstream.runs(None).await.len(), 3, "one run in Q each");
    for (i, (token, agent, words)) in senders.into_iter().enumerate() {
        let again = gw
            .caller(token)
            .agent(agent)
            .send_text_immediately(&message_id, words)
            .await
            .task();
        assert_eq!(again["id"], tasks[i].as_str(), "{token} at {agent}");
    }
    assert_eq!(gw.db.task_count().await, 3);
    assert_eq!(gw.upstream.runs(None).await.len(), 3);
}

/// The store keys a message by tenant as well: the same principal and agent ids in two tenants
/// (ids Q's tenants may share) admit two tasks, with workflow identities of their own.
#[tokio::test]
async fn the_store_scopes_the_identity_by_tenant() {
    use q_a2a_gateway::config::DatabaseConfig;
    use q_a2a_gateway::store::{migrate, Admission, PgTaskStore};

    use crate::support::db::{new_task, TestDb};

    let db = TestDb::create().await;
    migrate::run(&mut db.client().await)
        .await
        .expect("migrations");
    let store = PgTaskStore::connect(&DatabaseConfig {
        url: db.url.clone().into(),
        ..DatabaseConfig::default()
    })
    .unwrap();
    let here = new_task("m-shared");
    let mut elsewhere = new_task("m-shared");
    elsewhere.owner.tenant_id = "t2".into();
    let Admission::Created(first) = store.admit(&here).await.unwrap() else {
        panic!("a fresh identity creates its task");
    };
    let Admission::Created(other) = store.admit(&elsewhere).await.unwrap() else {
        panic!("the same principal, agent and messageId in another tenant is a new identity");
    };
    assert_ne!(first.task_id, other.task_id);
    assert_ne!(first.workflow_id, other.workflow_id);
    let Admission::Existing(again) = store.admit(&elsewhere).await.unwrap() else {
        panic!("a repeat in the other tenant finds its task");
    };
    assert_eq!(again.task_id, other.task_id);
    assert_eq!(db.count("SELECT count(*) FROM a2a_tasks").await, 2);
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
