//! The writes that project Q's state (the dispatch record, an observed state, a run feed
//! change) are committed without waiting for their WAL flush, for their own transaction only
//! (`store::tasks::UNFLUSHED`); the saved feed position, which makes them durable, waits.

use a2a::TaskState;
use q_a2a_gateway::config::DatabaseConfig;
use q_a2a_gateway::store::{migrate, PgTaskStore, RunChange, TaskRow};

use crate::support::db::{admit_task, TestDb};

/// A store of one pooled connection (the statement after a write runs on the connection the
/// write used) on a fresh database, and a task admitted through it.
async fn one_connection_store(db: &TestDb) -> (PgTaskStore, TaskRow) {
    let mut admin = db.client().await;
    migrate::run(&mut admin).await.expect("migrations");
    let config = DatabaseConfig {
        url: db.url.clone().into(),
        pool_size: 1,
        ..DatabaseConfig::default()
    };
    let store = PgTaskStore::connect(&config).unwrap();
    let row = admit_task(&store, "m-1").await;
    (store, row)
}

/// The connection's `synchronous_commit` as its next statement sees it.
async fn synchronous_commit(store: &PgTaskStore) -> String {
    store
        .pool()
        .get()
        .await
        .unwrap()
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0)
}

/// The record is committed and visible to every other session, and the setting ends with its
/// statement: the one pooled connection it used commits the next statement waiting for the
/// flush, like every other write. (Set for the session instead, every later write through that
/// connection, the admission of the next task included, would commit without waiting.)
#[tokio::test]
async fn the_dispatch_record_leaves_its_connection_committing_as_before() {
    let db = TestDb::create().await;
    let (store, row) = one_connection_store(&db).await;
    assert_eq!(
        synchronous_commit(&store).await,
        "on",
        "the server's default"
    );

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
    assert_eq!(
        synchronous_commit(&store).await,
        "on",
        "the statement's setting outlived its transaction"
    );
    // Committed: another session reads it.
    let dispatch: String = db
        .one(&format!(
            "SELECT dispatch || ':' || run_id FROM a2a_tasks WHERE task_id = '{}'",
            row.task_id
        ))
        .await;
    assert_eq!(dispatch, "dispatched:run-1");
}

/// An observed state and a run feed change are committed, visible to every other session,
/// and leave their (only) pooled connection committing as before; so does the feed position.
#[tokio::test]
async fn projections_commit_and_leave_their_connection_committing_as_before() {
    let db = TestDb::create().await;
    let (store, row) = one_connection_store(&db).await;
    let state_of = |task_id| {
        let db = &db;
        async move {
            db.one::<String>(&format!(
                "SELECT state || ':' || coalesce(status_message, '') FROM a2a_tasks
                  WHERE task_id = '{task_id}'"
            ))
            .await
        }
    };

    let (stored, _) = store
        .record_state(
            row.task_id,
            Some(&TaskState::InputRequired),
            Some("approve?"),
        )
        .await
        .unwrap();
    assert_eq!(stored, TaskState::InputRequired);
    assert_eq!(
        synchronous_commit(&store).await,
        "on",
        "the observed state's setting outlived its transaction"
    );
    assert_eq!(
        state_of(row.task_id).await,
        "TASK_STATE_INPUT_REQUIRED:approve?"
    );

    let changed = store
        .apply_run_changes(&[RunChange {
            workflow_id: &row.workflow_id,
            run_id: "run-2",
            state: &TaskState::Working,
            status_message: None,
        }])
        .await
        .unwrap();
    assert_eq!(changed, 1, "the feed change moves the task");
    assert_eq!(
        synchronous_commit(&store).await,
        "on",
        "the feed change's setting outlived its transaction"
    );
    assert_eq!(state_of(row.task_id).await, "TASK_STATE_WORKING:");

    store.save_feed_position(7).await.unwrap();
    assert_eq!(store.feed_position().await.unwrap(), 7);
    assert_eq!(synchronous_commit(&store).await, "on");
}
