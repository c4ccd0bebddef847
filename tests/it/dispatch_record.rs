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
        .apply_feed_batch(
            &[RunChange {
                workflow_id: &row.workflow_id,
                run_id: "run-2",
                state: &TaskState::Working,
                status_message: None,
            }],
            &[],
            None,
        )
        .await
        .unwrap()
        .changed;
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

/// `a2a_tasks`' updates and HOT updates so far, as PostgreSQL counts them, once the store's one
/// connection has reported its counters.
async fn task_updates(db: &TestDb, store: &PgTaskStore, at_least: i64) -> (i64, i64) {
    // The store's backend reports its counters when idle, at most once a second unless told.
    store
        .pool()
        .get()
        .await
        .unwrap()
        .execute("SELECT pg_stat_force_next_flush()", &[])
        .await
        .unwrap();
    let client = db.client().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let row = client
            .query_one(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
                  WHERE relname = 'a2a_tasks'",
                &[],
            )
            .await
            .unwrap();
        let counts: (i64, i64) = (row.get(0), row.get(1));
        if counts.0 >= at_least || std::time::Instant::now() > deadline {
            return counts;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The dispatch record of a run Q still has queued changes no indexed column (the state stays
/// SUBMITTED, the task's own deadline, written at admission, stays the earlier one), so
/// PostgreSQL writes it as a HOT update: a new row version on the same page and no index entry
/// (migration 20261206_171800). A state change is not: it moves the task in the listing index
/// (ordered by status timestamp), as ListTasks needs.
#[tokio::test]
async fn the_dispatch_record_of_a_queued_run_is_a_hot_update() {
    let db = TestDb::create().await;
    let (store, row) = one_connection_store(&db).await;
    let admitted_deadline: chrono::DateTime<chrono::Utc> = db
        .client()
        .await
        .query_one(
            "SELECT deadline_at FROM a2a_tasks WHERE task_id = $1",
            &[&row.task_id],
        )
        .await
        .unwrap()
        .get(0);
    // Q's deadline: the rest of the task's, counted in whole seconds from Q's clock.
    let q_deadline = admitted_deadline + chrono::Duration::milliseconds(700);
    let recorded = store
        .record_dispatched(
            row.task_id,
            "run-1",
            Some(&TaskState::Submitted),
            None,
            q_deadline,
        )
        .await
        .unwrap()
        .expect("the task");
    assert_eq!(recorded.run_id.as_deref(), Some("run-1"));
    assert_eq!(
        recorded.deadline_at,
        Some(admitted_deadline),
        "the earlier deadline stands"
    );
    assert_eq!(
        task_updates(&db, &store, 1).await,
        (1, 1),
        "the dispatch record is one HOT update"
    );

    store
        .record_state(row.task_id, Some(&TaskState::Working), None)
        .await
        .unwrap();
    assert_eq!(
        task_updates(&db, &store, 2).await,
        (2, 1),
        "a state change moves the listing index: not HOT"
    );
}
