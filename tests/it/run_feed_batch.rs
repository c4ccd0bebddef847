//! A batch of Q's run feed is projected in one statement (`PgTaskStore::apply_feed_batch`),
//! and every task ends as if its changes had been applied one after another: a terminal task
//! keeps its state (so a task's first terminal change wins), a change that alters nothing
//! writes nothing, Q's run is recorded and the dispatch settled. Checked against that
//! one-after-another model on random batches, interleaved over several tasks. The outputs of
//! the tasks a batch completed are committed a batch at a time too (`commit_artifacts`).

use a2a::TaskState;
use q_a2a_gateway::config::DatabaseConfig;
use q_a2a_gateway::store::{migrate, state_name, PgTaskStore, RunChange, StoredArtifact, TaskRow};
use q_a2a_gateway::upstream::contract::RunOutput;

use crate::support::db::{admit_task, is_terminal, TestDb};
use crate::support::rng::{seed, Rng};

/// Tasks per database, changes per batch, batches per task set.
const TASKS: usize = 4;
const CHANGES: usize = 12;
const BATCHES: usize = 3;
/// Task sets, each on fresh tasks.
const ROUNDS: usize = 8;

const STATES: [TaskState; 7] = [
    TaskState::Submitted,
    TaskState::Working,
    TaskState::InputRequired,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Canceled,
    TaskState::Rejected,
];
const MESSAGES: [Option<&str>; 3] = [None, Some("approve?"), Some("agent failed")];

/// A task as the model and the store see it.
#[derive(Debug, Clone, PartialEq)]
struct Projected {
    state: String,
    status_message: Option<String>,
    run_id: Option<String>,
    dispatch: String,
}

/// One change applied to one task, as the feed's contract has it.
fn apply(task: &mut Projected, state: &TaskState, message: Option<&str>, run_id: &str) {
    let state = state_name(state);
    let alters =
        task.state != state || task.status_message.as_deref() != message || task.run_id.is_none();
    if is_terminal(&task.state) || !alters {
        return;
    }
    task.state = state;
    task.status_message = message.map(str::to_owned);
    task.run_id.get_or_insert_with(|| run_id.to_owned());
    if task.dispatch == "pending" || task.dispatch == "unknown" {
        task.dispatch = "dispatched".into();
    }
}

async fn stored(db: &TestDb, row: &TaskRow) -> Projected {
    let client = db.client().await;
    let r = client
        .query_one(
            "SELECT state, status_message, run_id, dispatch FROM a2a_tasks WHERE task_id = $1",
            &[&row.task_id],
        )
        .await
        .unwrap();
    Projected {
        state: r.get(0),
        status_message: r.get(1),
        run_id: r.get(2),
        dispatch: r.get(3),
    }
}

/// A migrated fresh database and a store on it.
async fn store_on(db: &TestDb) -> PgTaskStore {
    migrate::run(&mut db.client().await)
        .await
        .expect("migrations");
    PgTaskStore::connect(&DatabaseConfig {
        url: db.url.clone().into(),
        pool_size: 2,
        ..DatabaseConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_batch_of_run_changes_ends_each_task_as_one_change_after_another_would() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let db = TestDb::create().await;
    let store = store_on(&db).await;
    let mut terminal_first = 0;
    for round in 0..ROUNDS {
        let mut rows = Vec::new();
        let mut model = Vec::new();
        for i in 0..TASKS {
            let row = admit_task(&store, &format!("m-{round}-{i}")).await;
            model.push(stored(&db, &row).await);
            rows.push(row);
        }
        for batch in 0..BATCHES {
            let picks: Vec<(usize, &TaskState, Option<&str>)> = (0..CHANGES)
                .map(|_| {
                    (
                        rng.range(0, TASKS as u64) as usize,
                        rng.pick(&STATES),
                        *rng.pick(&MESSAGES),
                    )
                })
                .collect();
            let run_ids: Vec<String> = rows.iter().map(|r| format!("run-{}", r.task_id)).collect();
            let changes: Vec<RunChange> = picks
                .iter()
                .map(|&(i, state, status_message)| RunChange {
                    workflow_id: &rows[i].workflow_id,
                    run_id: &run_ids[i],
                    state,
                    status_message,
                })
                .collect();
            let before = model.clone();
            for &(i, state, message) in &picks {
                apply(&mut model[i], state, message, &run_ids[i]);
            }
            // A task whose batch holds a terminal change followed by another one: the case
            // where the last change is not the one that stands.
            terminal_first += (0..TASKS)
                .filter(|&i| {
                    let mine: Vec<_> = picks.iter().filter(|p| p.0 == i).collect();
                    mine.iter()
                        .position(|p| is_terminal(&state_name(p.1)))
                        .is_some_and(|at| at + 1 < mine.len())
                        && !is_terminal(&before[i].state)
                })
                .count();
            let expected_changed = (0..TASKS).filter(|&i| model[i] != before[i]).count() as u64;
            let changed = store
                .apply_feed_batch(&changes, &[], None)
                .await
                .unwrap()
                .changed;
            for (i, row) in rows.iter().enumerate() {
                assert_eq!(
                    stored(&db, row).await,
                    model[i],
                    "task {i} after batch {batch} of round {round} (Q_A2A_TEST_SEED={seed}): \
                     {picks:?}"
                );
            }
            assert_eq!(
                changed, expected_changed,
                "tasks changed by batch {batch} of round {round} (Q_A2A_TEST_SEED={seed})"
            );
        }
    }
    assert!(
        terminal_first > 0,
        "no batch had a terminal change before another one (Q_A2A_TEST_SEED={seed})"
    );
    assert_eq!(
        store
            .apply_feed_batch(&[], &[], None)
            .await
            .unwrap()
            .changed,
        0
    );
}

/// The feed position is saved by the batch's own statement and returned as stored (the
/// greater of the batch's and the one found); a batch whose live runs include a task with a
/// cancellation pending returns that task and saves nothing, so the follower cancels the late
/// run first and saves the position after.
#[tokio::test]
async fn a_batch_saves_its_position_with_it_unless_a_late_run_is_to_be_cancelled_first() {
    let db = TestDb::create().await;
    let store = store_on(&db).await;
    let position = || async { store.feed_position().await.unwrap() };
    let row = admit_task(&store, "m-position").await;
    let working = RunChange {
        workflow_id: &row.workflow_id,
        run_id: "run-1",
        state: &TaskState::Working,
        status_message: None,
    };
    let batch = store
        .apply_feed_batch(&[working], &[&row.workflow_id], Some(5))
        .await
        .unwrap();
    assert_eq!(batch.changed, 1);
    assert!(batch.cancelling.is_empty());
    assert_eq!(batch.position, Some(5));
    assert_eq!(position().await, 5);
    assert_eq!(stored(&db, &row).await.state, "TASK_STATE_WORKING");

    // A position written beside the follower (another leader before it) is never moved back,
    // and the batch says what stands.
    db.client()
        .await
        .execute("UPDATE a2a_feed_position SET cursor = 40", &[])
        .await
        .unwrap();
    let batch = store.apply_feed_batch(&[], &[], Some(9)).await.unwrap();
    assert_eq!((batch.changed, batch.position), (0, Some(40)));
    assert_eq!(position().await, 40);

    // A cancellation pending on a live run of the batch: the task comes back, the position
    // stays until the caller saves it.
    let cancelled = admit_task(&store, "m-cancelled").await;
    store.request_cancel(cancelled.task_id).await.unwrap();
    let late = RunChange {
        workflow_id: &cancelled.workflow_id,
        run_id: "run-late",
        state: &TaskState::Working,
        status_message: None,
    };
    let batch = store
        .apply_feed_batch(&[late], &[&cancelled.workflow_id], Some(50))
        .await
        .unwrap();
    assert_eq!(batch.changed, 1, "the change itself is applied");
    assert_eq!(
        batch.position, None,
        "nothing saved before the late run's cancel"
    );
    assert_eq!(position().await, 40);
    let ids: Vec<_> = batch.cancelling.iter().map(|r| r.task_id).collect();
    assert_eq!(ids, vec![cancelled.task_id]);
    assert_eq!(store.save_feed_position(50).await.unwrap(), 50);
    assert_eq!(position().await, 50);

    // Nothing to apply, ask or save: nothing changes.
    let batch = store.apply_feed_batch(&[], &[], None).await.unwrap();
    assert_eq!((batch.changed, batch.position), (0, None));
    assert!(batch.cancelling.is_empty());
}

fn output(text: &str) -> RunOutput {
    RunOutput {
        artifact_id: format!("answer-{text}"),
        name: "answer.md".into(),
        media_type: "text/markdown".into(),
        text: text.into(),
        sha256: "0".repeat(64),
        byte_count: text.len() as u64,
    }
}

#[tokio::test]
async fn a_batch_of_outputs_commits_each_once_and_an_oversized_one_without_its_text() {
    let db = TestDb::create().await;
    let store = store_on(&db).await;
    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(admit_task(&store, &format!("m-{i}")).await.task_id);
    }
    let (first, small, large) = (
        output("first"),
        output("small"),
        output("x".repeat(40).as_str()),
    );
    store.commit_artifact(tasks[0], &first, 32).await.unwrap();
    let again = output("second");
    store
        .commit_artifacts(
            &[(tasks[0], &again), (tasks[1], &small), (tasks[2], &large)],
            32,
        )
        .await
        .unwrap();
    assert_eq!(
        store.artifact(tasks[0]).await.unwrap(),
        Some(StoredArtifact::Output(first)),
        "a second commit changes nothing"
    );
    assert_eq!(
        store.artifact(tasks[1]).await.unwrap(),
        Some(StoredArtifact::Output(small))
    );
    assert_eq!(
        store.artifact(tasks[2]).await.unwrap(),
        Some(StoredArtifact::TooLarge {
            artifact_id: large.artifact_id.clone(),
            byte_count: 40
        }),
        "over the result bound: its identity and size only"
    );
    let rows = db.count("SELECT count(*) FROM a2a_task_artifacts").await;
    assert_eq!(rows, 3);
    store.commit_artifacts(&[], 32).await.unwrap();
}
