//! The dispatch record (Q's run for a task) is committed without waiting for its WAL flush,
//! for its own transaction only (`store::tasks::RECORD_DISPATCHED`).

use std::time::Duration;

use a2a::TaskState;
use q_a2a_gateway::config::DatabaseConfig;
use q_a2a_gateway::store::{migrate, Admission, NewTask, Owner, PgTaskStore};
use serde_json::json;

use crate::support::db::TestDb;

/// The record is committed and visible to every other session, and the setting ends with its
/// statement: the one pooled connection it used commits the next statement waiting for the
/// flush, like every other write. (Set for the session instead, every later write through that
/// connection, a terminal state included, would commit without waiting.)
#[tokio::test]
async fn the_dispatch_record_leaves_its_connection_committing_as_before() {
    let db = TestDb::create().await;
    let mut admin = db.client().await;
    migrate::run(&mut admin).await.expect("migrations");
    let config = DatabaseConfig {
        url: db.url.clone().into(),
        // One connection: the statement after the record runs on the connection it used.
        pool_size: 1,
        ..DatabaseConfig::default()
    };
    let store = PgTaskStore::connect(&config).unwrap();
    let admitted = store
        .admit(&NewTask {
            owner: Owner {
                tenant_id: "t1".into(),
                principal_id: "p-alice".into(),
                agent_id: "ag-writer".into(),
            },
            message_id: "m-1".into(),
            content_sha256: "0".repeat(64),
            message: json!({"role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": "m-1"}),
            dispatch_claim: Duration::from_secs(30),
        })
        .await
        .unwrap();
    let Admission::Created(row) = admitted else {
        panic!("a fresh identity creates its task: {admitted:?}");
    };
    let before: String = store
        .pool()
        .get()
        .await
        .unwrap()
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(before, "on", "the server's default");

    let recorded = store
        .record_dispatched(
            row.task_id,
            "run-1",
            Some(&TaskState::Working),
            None,
            chrono::Utc::now() + chrono::Duration::hours(1),
        )
        .await
        .unwrap()
        .expect("the task's row");
    assert_eq!(recorded.run_id.as_deref(), Some("run-1"));
    assert_eq!(recorded.state, TaskState::Working);

    let client = store.pool().get().await.unwrap();
    let after: String = client
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        after, "on",
        "the statement's setting outlived its transaction"
    );
    drop(client);
    // Committed: another session reads it.
    let dispatch: String = db
        .one(&format!(
            "SELECT dispatch || ':' || run_id FROM a2a_tasks WHERE task_id = '{}'",
            row.task_id
        ))
        .await;
    assert_eq!(dispatch, "dispatched:run-1");
}
