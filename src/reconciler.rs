//! The reconciler: one leader across replicas keeps the store in step with Q.
//!
//! Leadership is a PostgreSQL session advisory lock held on a dedicated connection: when the
//! leader's process dies, its connection closes and another replica takes over on its next try.
//! Once per `reconciler.interval_ms` the leader makes a pass (1, 2 and 4 below); in between it
//! follows Q's run change feed (3) as its changes come, so a steady flow of changes does not
//! repeat the pass for each of them:
//!
//! 1. resolves tasks whose dispatch is `pending` or `unknown` (older than the grace period) by
//!    asking Q under the saved workflow identity; only when Q has no run is the create repeated,
//!    under that same identity. A task Q never confirmed within its execution deadline ends
//!    FAILED; a cancelled one ends CANCELED without a run;
//! 2. pushes persisted cancellations to Q until the run is terminal, and reads runs past their
//!    execution deadline (the one Q gave the run, else the task's own: a run learnt only from
//!    the feed has none recorded, and the feed may lose its end);
//! 3. follows Q's run change feed, so a task whose run changed while nobody was watching lists
//!    under its new state, and commits the verified artifact of each task it sees complete
//!    (so even the first read of a completed task asks Q nothing about it). Each answer of the
//!    feed is projected in one statement, and its completed outputs committed 32 to one. The
//!    feed position is stored, so a new leader resumes where the last one stopped;
//! 4. deletes terminal tasks, delegations and discovered cards past their retention
//!    (`retention`), a few small batches per pass, so a backlog never holds long locks.

mod retention;

use std::sync::Arc;
use std::time::Duration;

use a2a::TaskState;
use chrono::Utc;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::a2a::task_view::verified_artifact;
use crate::dispatch::Dispatcher;
use crate::store::{self, task_state, ConnectError, Due, PgTaskStore, StoreError, TaskRow};
use crate::upstream::contract::{
    ErrorCode, FeedContinuity, FeedPosition, RunChange, RunOutput, RunStatus,
};
use crate::upstream::UpstreamRunApi;

pub use retention::{RetentionSettings, BATCHES_PER_PASS};

/// Advisory lock key of the reconciler leader: "q-a2a-rec" folded into an i64.
const LEADER_LOCK: i64 = 0x71_61_32_61_72_65_63;

/// Most feed entries read per pass.
const FEED_BATCH: usize = 500;

/// After an answer of Q's run feed that held changes but not a whole batch, the follower waits
/// this long before asking again, so the next answer gathers what came meanwhile: each answer
/// with changes costs a statement (and the outputs it completed two more), and under a steady
/// flow of sends an answer a change apart cost one per change. Projection lags Q by at most
/// this much more; reads of a task that is not terminal ask Q themselves.
pub const FEED_LINGER: Duration = Duration::from_millis(50);

/// Settings of the reconciler, typed once at start-up.
#[derive(Debug, Clone)]
pub struct ReconcilerSettings {
    /// Time between passes; the feed is followed continuously in between (its long poll
    /// waits at most until the next pass).
    pub interval: Duration,
    /// How old an unresolved dispatch or a pending cancellation must be before it is touched,
    /// so the request that made it can finish first.
    pub grace: Duration,
    /// Most rows handled per pass.
    pub batch_size: i64,
    /// The execution deadline of every run: a task never confirmed within it fails.
    pub execution_timeout: chrono::Duration,
    /// How long terminal tasks, delegations and discovered cards are kept.
    pub retention: RetentionSettings,
    /// The result bound: an artifact over it is committed without its text.
    pub max_result_bytes: usize,
}

/// The reconciler and the ports it uses.
pub struct Reconciler {
    store: PgTaskStore,
    upstream: UpstreamRunApi,
    dispatcher: Dispatcher,
    settings: ReconcilerSettings,
    /// The epoch of Q's run feed this leader follows (learnt from its first answer).
    feed_epoch: std::sync::Mutex<Option<String>>,
}

impl Reconciler {
    pub fn new(
        store: PgTaskStore,
        upstream: UpstreamRunApi,
        dispatcher: Dispatcher,
        settings: ReconcilerSettings,
    ) -> Self {
        Reconciler {
            store,
            upstream,
            dispatcher,
            settings,
            feed_epoch: Default::default(),
        }
    }
}

/// Runs until `shutdown` turns true.
pub async fn run(state: Arc<Reconciler>, mut shutdown: watch::Receiver<bool>) {
    let interval = state.settings.interval;
    loop {
        if *shutdown.borrow() {
            return;
        }
        match acquire_leadership(&state).await {
            Ok(Some(leader)) => {
                tracing::info!("reconciler: this replica is the leader");
                lead(&state, &leader, &mut shutdown).await;
                tracing::info!("reconciler: leadership released");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reconciler: cannot reach PostgreSQL for leadership")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// A dedicated connection, outside the pool but made like the pool's (keep-alive, statement
/// timeout, answer deadline, TLS), holding the leader lock; dropping it releases the lock.
struct Leadership {
    client: tokio_postgres::Client,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for Leadership {
    fn drop(&mut self) {
        // Closes the socket now, even with a query still waiting on it.
        self.connection.abort();
    }
}

async fn acquire_leadership(state: &Reconciler) -> Result<Option<Leadership>, ConnectError> {
    let (client, connection) = state.store.connector().connect().await?;
    let leader = Leadership { client, connection };
    let got: bool = leader
        .client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK])
        .await?
        .get(0);
    Ok(got.then_some(leader))
}

async fn lead(state: &Reconciler, leader: &Leadership, shutdown: &mut watch::Receiver<bool>) {
    let interval = state.settings.interval;
    // The passes run once per interval; between them the feed is followed as its changes
    // come. Paced by the feed instead, a steady flow of changes ran every pass (a dozen
    // statements) once per change, beside the streams committing those same changes.
    let mut next_pass = Instant::now();
    // The feed position as this leader last stored it (read once per leadership): only the
    // leader writes it, and each batch's statement returns it as stored.
    let mut position: Option<u64> = None;
    // Retention runs on the passes from this moment on, then as `retention::Pacing` says.
    let mut next_retention = Instant::now();
    let mut pacing = retention::Pacing::default();
    loop {
        if *shutdown.borrow() {
            return;
        }
        if Instant::now() >= next_pass {
            // Leading from a server that no longer takes writes (demoted, or put in read-only
            // mode) would hold the lock where no replica writes: give it up and lead again
            // from a connection made to the primary.
            match store::read_only(&leader.client).await {
                Ok(false) => {}
                Ok(true) => {
                    tracing::warn!(
                        "reconciler: the leader connection's server no longer takes writes"
                    );
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %store::fault::describe(&e), "reconciler: leader connection lost");
                    return;
                }
            }
            crate::metrics::reconciler_pass();
            if let Err(e) = resolve_dispatches(state).await {
                tracing::warn!(error = %e, "reconciler: dispatch pass failed");
            }
            if let Err(e) = push_cancellations_and_deadlines(state).await {
                tracing::warn!(error = %e, "reconciler: cancellation/deadline pass failed");
            }
            if Instant::now() >= next_retention {
                next_retention = match retention::expire(state, &mut pacing).await {
                    Ok(next) => next,
                    Err(e) => {
                        tracing::warn!(error = %e, "reconciler: retention pass failed");
                        Instant::now()
                    }
                };
            }
            next_pass = Instant::now() + interval;
        }
        // The feed's long poll waits at most until the next pass is due.
        let wait = next_pass.saturating_duration_since(Instant::now());
        let followed = tokio::select! {
            r = follow_feed(state, wait, &mut position) => r,
            _ = shutdown.changed() => return,
        };
        match followed {
            Ok(changes) if changes > 0 && changes < FEED_BATCH => {
                tokio::select! {
                    _ = tokio::time::sleep(FEED_LINGER) => {}
                    _ = shutdown.changed() => return,
                }
            }
            Ok(_) => {}
            Err(e) => {
                // Whatever the failed batch left stored, the next one starts from it.
                position = None;
                tracing::warn!(error = %e, "reconciler: change feed pass failed");
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

/// The tasks of one pass: past the grace, at most a batch.
async fn due(state: &Reconciler, due: Due) -> Result<Vec<TaskRow>, StoreError> {
    let settings = &state.settings;
    state
        .store
        .due(due, settings.grace, settings.batch_size)
        .await
}

async fn resolve_dispatches(state: &Reconciler) -> anyhow::Result<()> {
    for row in due(state, Due::Unresolved).await? {
        state.dispatcher.resolve(&row).await?;
        expire_if_never_confirmed(state, &row).await?;
    }
    Ok(())
}

/// A task Q never confirmed within its execution deadline cannot run any more: it fails.
async fn expire_if_never_confirmed(state: &Reconciler, row: &TaskRow) -> anyhow::Result<()> {
    let deadline = row.execution_deadline(state.settings.execution_timeout);
    if Utc::now() < deadline {
        return Ok(());
    }
    let Some(current) = state.store.find_by_id(row.task_id).await? else {
        return Ok(());
    };
    if current.run_id.is_none() && !current.state.is_terminal() {
        tracing::warn!(task_id = %row.task_id, "dispatch never confirmed within the execution deadline; failing the task");
        state
            .store
            .finish_unresolved(
                row.task_id,
                &TaskState::Failed,
                "Q did not confirm the run within its execution deadline",
            )
            .await?;
    }
    Ok(())
}

async fn push_cancellations_and_deadlines(state: &Reconciler) -> anyhow::Result<()> {
    let execution_timeout = state
        .settings
        .execution_timeout
        .to_std()
        .unwrap_or(Duration::ZERO);
    for row in due(state, Due::OverdueOrCancelling { execution_timeout }).await? {
        let Some(run_id) = row.run_id.as_deref() else {
            continue;
        };
        let run = if row.cancel_requested {
            match state
                .upstream
                .cancel_run(run_id, &row.owner.principal_id)
                .await
            {
                Ok(run) => Ok(run),
                Err(e) if e.is(ErrorCode::RunTerminal) => state.upstream.get_run(run_id).await,
                Err(e) => Err(e),
            }
        } else {
            state.upstream.get_run(run_id).await
        };
        // One run Q cannot answer for now must not hold up the others: it is asked again on
        // the next pass (its row stays selected until it is terminal).
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                tracing::warn!(task_id = %row.task_id, error = %e, "reconciler: run not confirmed by Q; asking again next pass");
                continue;
            }
        };
        match state.dispatcher.project_run(row.task_id, &run).await {
            // Deleted meanwhile (a tenant's data removed): nothing left to keep in step.
            Ok(_) | Err(StoreError::TaskGone) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// One long poll of Q's run feed and its batch. `stored` is the position as this leader last
/// stored it (`None`: read it first), and is left as the batch stored it.
async fn follow_feed(
    state: &Reconciler,
    wait: Duration,
    stored: &mut Option<u64>,
) -> anyhow::Result<usize> {
    let mut position = match *stored {
        Some(position) => position,
        None => state.store.feed_position().await?,
    };
    *stored = Some(position);
    let mut changes = state
        .upstream
        .run_changes(position, wait, FEED_BATCH)
        .await?;
    let known_epoch = state
        .feed_epoch
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .replace(changes.epoch.clone());
    let at = FeedPosition {
        epoch: &changes.epoch,
        floor: changes.floor,
        head: changes.head,
    };
    let continuity = at.continuity(known_epoch.as_deref().unwrap_or(&changes.epoch), position);
    if continuity != FeedContinuity::Continues {
        // Q's feed starts over (rebuilt, another history, or compacted past our position):
        // replay what it still holds rather than wait for its cursor to pass ours. Applying a
        // change twice changes nothing; changes compacted away are not replayed, and the runs
        // they concerned are read from Q when next read or reconciled.
        tracing::warn!(
            position,
            head = changes.head,
            floor = changes.floor,
            ?continuity,
            "lost our place in Q's run change feed; following it again from what it holds"
        );
        crate::metrics::feed_reset("runs", "reconciler");
        state.store.reset_feed_position().await?;
        *stored = Some(0);
        position = changes.floor;
        changes = state
            .upstream
            .run_changes(position, Duration::ZERO, FEED_BATCH)
            .await?;
    }
    // A status the contract does not define projects nothing; a later change will.
    let states: Vec<(&RunChange, TaskState)> = changes
        .changes
        .iter()
        .filter_map(|c| task_state(c.status).map(|s| (c, s)))
        .collect();
    let projected: Vec<store::RunChange> = states
        .iter()
        .map(|(c, state)| store::RunChange {
            workflow_id: &c.workflow_id,
            run_id: &c.run_id,
            state,
            status_message: c.status_message.as_deref(),
        })
        .collect();
    // A run that appeared for a task cancelled before Q confirmed it: stop it.
    let live: Vec<&str> = changes
        .changes
        .iter()
        .filter(|c| !c.status.is_terminal())
        .map(|c| c.workflow_id.as_str())
        .collect();
    // The projection, the position after it and the cancellations pending on the batch's
    // live runs: one statement. With a cancellation pending the position waits for the
    // late runs' cancels (below).
    let advance = (changes.cursor > position).then_some(changes.cursor);
    let batch = state
        .store
        .apply_feed_batch(&projected, &live, advance)
        .await?;
    if let Some(saved) = batch.position {
        *stored = Some(saved);
    }
    let save_after_cancels = !batch.cancelling.is_empty();
    if batch.changed > 0 {
        tracing::debug!(changed = batch.changed, "projected run changes");
    }
    for row in batch.cancelling {
        let Some(change) = changes
            .changes
            .iter()
            .rfind(|c| c.workflow_id == row.workflow_id)
        else {
            continue;
        };
        if let Err(e) = state
            .upstream
            .cancel_run(&change.run_id, &row.owner.principal_id)
            .await
        {
            tracing::warn!(task_id = %row.task_id, error = %e, "reconciler: cancel of a late run failed");
        }
    }
    let completed: Vec<String> = changes
        .changes
        .iter()
        .filter(|c| c.status == RunStatus::Succeeded)
        .map(|c| c.workflow_id.clone())
        .collect();
    if let (true, Some(cursor)) = (save_after_cancels, advance) {
        *stored = Some(state.store.save_feed_position(cursor).await?);
    }
    // The position is saved: an output a crash loses here is read by the task's first reader
    // (`commit_artifacts`).
    commit_artifacts(state, &completed).await?;
    Ok(changes.changes.len())
}

/// Outputs read from Q at once while committing artifacts.
const ARTIFACT_FETCHES: usize = 8;

/// Outputs committed in one statement (and so held in memory at once).
const ARTIFACT_BATCH: usize = 32;

/// Reads, verifies and commits the artifacts of the tasks of `workflow_ids` that completed
/// without one, a batch of them per statement. A read that fails or does not verify leaves
/// the task to its first reader, which reads it again (and answers -32006 if it still does
/// not verify).
async fn commit_artifacts(state: &Reconciler, workflow_ids: &[String]) -> Result<(), StoreError> {
    use futures_util::stream::{self, StreamExt};
    let pending = state.store.completed_without_artifact(workflow_ids).await?;
    for batch in pending.chunks(ARTIFACT_BATCH) {
        let outputs: Vec<(Uuid, RunOutput)> = stream::iter(batch.iter().cloned())
            .map(|(task_id, run_id)| async move {
                match state.upstream.run_output(&run_id).await {
                    Ok(output) if verified_artifact(&output).is_ok() => Some((task_id, output)),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::debug!(%task_id, error = %e, "reconciler: output not read; left to the first reader");
                        None
                    }
                }
            })
            .buffer_unordered(ARTIFACT_FETCHES)
            .filter_map(std::future::ready)
            .collect()
            .await;
        let outputs: Vec<(Uuid, &RunOutput)> = outputs.iter().map(|(id, o)| (*id, o)).collect();
        state
            .store
            .commit_artifacts(&outputs, state.settings.max_result_bytes)
            .await?;
    }
    Ok(())
}
