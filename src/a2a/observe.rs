//! Streaming observation: SendStreamingMessage and SubscribeToTask over SSE.
//!
//! Both are observations of committed state. Each holds an observer lease (see
//! `crate::lease`), acquired before anything is written or streamed: over a bound the request is
//! refused with HTTP 429 and `Retry-After`, with the lease store down with HTTP 503. Everything
//! that can fail before the first event (validation, unknown or foreign task, terminal task,
//! version, a snapshot over the 1 MiB result bound) is a plain JSON-RPC answer, never SSE.
//!
//! The stream starts with a Task snapshot, then one `statusUpdate` per state change Q reports
//! and, when the run completes, the verified artifact as an `artifactUpdate` (`lastChunk`)
//! *before* the completed status. Every event keeps to the result bound like a non-streaming
//! answer: an artifact over it is never streamed; an `event: error` frame (-32006) ends the
//! stream instead. The stream ends at a terminal state (SendStreamingMessage also at an
//! interrupted one), when the observation window ends (110 s by default), when the client
//! disconnects, when the lease is lost, or when the gateway drains for shutdown; the run goes
//! on under its own deadline. Reconnecting (SubscribeToTask) gives a fresh snapshot. Keep-alive
//! comments flow every `observers.keepalive_ms` while nothing happens.
//!
//! One producer task per stream owns the lease: when the client goes away the channel closes,
//! the producer stops and the lease is released at once. A client that stays connected but
//! stops reading fills the stream's buffer; every frame is handed over by the window's
//! deadline or not at all, so the producer ends, and the lease is released, when the window
//! does, whoever reads.
//!
//! While it lasts, a stream keeps checking its caller ([`crate::a2a::tasks::vigil`]): a token
//! that is no longer active (or lost the tenant feature) ends it within the token bound, a lost
//! workspace ends it at the access change (or, with the access feed not trusted, at the next
//! access timer). Every frame with content (Q's status text, the artifact) takes its own
//! clearance under the freshness rule (`crate::access`) when it is built: after a revocation is
//! known, no content frame leaves, and a grant revoked while the workspace stays makes the
//! stream go on without content. While the run feed is not caught up, the stream reads its
//! run's events from Q once per `RUN_FALLBACK_POLL` instead of waiting silently.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use a2a::{
    JsonRpcId, StreamResponse, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use uuid::Uuid;

use crate::a2a::caller::Caller;
use crate::a2a::sse;
use crate::a2a::task_view::is_settled;
use crate::a2a::tasks::follow::RUN_FALLBACK_POLL;
use crate::a2a::tasks::send::Admitted;
use crate::a2a::tasks::snapshot::{Known, Observed};
use crate::a2a::tasks::vigil::{Lapse, Vigil};
use crate::a2a::tasks::{params, TaskService};
use crate::a2a::validate::{self, validate_send};
use crate::access::{Clearance, Purpose};
use crate::changes::hub::{RunSignal, RunSubscription};
use crate::error::{log_rpc_error, Fault, HttpError, RpcError};
use crate::lease::ObserverLease;
use crate::store::{task_state, TaskRow};
use crate::upstream::contract::{RunEvent, WorkspaceAccess};

/// Frames buffered per stream before the producer waits for the client.
const STREAM_BUFFER: usize = 16;

/// A frame on its way to the response body, boxed: tokio's mpsc allocates its slots 32 at a
/// time whatever the bound, and every open stream holds that block while it waits: 32 slots of
/// 8 bytes boxed instead of 32 bytes for `Bytes`. One small allocation per frame sent is the
/// price, and frames are rare beside the time a stream is held.
type Frame = Box<Bytes>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// SendStreamingMessage: ends at a terminal or interrupted state.
    Send,
    /// SubscribeToTask: ends at a terminal state; an interrupted task is watched until it moves.
    Subscribe,
}

impl Mode {
    fn ends_at(self, state: &TaskState) -> bool {
        match self {
            Mode::Send => is_settled(state),
            Mode::Subscribe => state.is_terminal(),
        }
    }
}

pub async fn send_streaming(
    tasks: &Arc<TaskService>,
    caller: &Caller,
    id: &JsonRpcId,
    params: &Map<String, Value>,
) -> Result<Response, Fault> {
    let send = validate_send(params, &tasks.settings.limits)?;
    if caller.workspace != WorkspaceAccess::Granted {
        return Err(HttpError::WorkspaceAccessDenied.into());
    }
    // Refused observers change nothing: the lease comes before the task.
    let lease = tasks.observer_lease(caller).await?;
    let row = match tasks.admit_and_dispatch(caller, &send).await? {
        Admitted::Task(row, _) => row,
        // A task retention removed: its receipt is the whole stream (it is terminal).
        Admitted::Retained(receipt) => {
            lease.release().await;
            let frame = sse::bounded_result_frame(
                id,
                &StreamResponse::Task(receipt),
                tasks.settings.limits.max_result_bytes,
            )?;
            let once = futures_util::stream::once(async move { Ok::<_, Infallible>(frame) });
            return Ok(sse::response(once));
        }
    };
    let now = observe_now(tasks, &row).await?;
    start(
        tasks,
        caller,
        row,
        now,
        id,
        lease,
        Mode::Send,
        send.history_length,
    )
    .await
}

pub async fn subscribe(
    tasks: &Arc<TaskService>,
    caller: &Caller,
    id: &JsonRpcId,
    params: &Map<String, Value>,
) -> Result<Response, Fault> {
    validate::refuse_tenant(params)?;
    let task_id = params::task_id(params)?;
    let row = tasks.readable(caller, task_id).await?;
    // Without a clearance the stream carries control snapshots only (no Q text).
    let now = observe_now(tasks, &row).await?;
    let current = match &now.run {
        Some(run) if !row.state.is_terminal() => {
            task_state(run.status).unwrap_or_else(|| row.state.clone())
        }
        _ => row.state.clone(),
    };
    if current.is_terminal() {
        return Err(RpcError::unsupported(format!(
            "Task {} is in terminal state: {}; use GetTask",
            row.task_id,
            crate::store::state_name(&current)
        ))
        .into());
    }
    let lease = tasks.observer_lease(caller).await?;
    start(tasks, caller, row, now, id, lease, Mode::Subscribe, None).await
}

/// What a stream starts from: the subscription to the run's changes on this replica, then
/// the run's events, read once (a change after the subscription is streamed, not lost; one
/// already in the events is not streamed twice).
struct Now {
    subscription: Option<RunSubscription>,
    after_seq: u64,
    run: Option<Observed>,
}

async fn observe_now(tasks: &TaskService, row: &TaskRow) -> Result<Now, Fault> {
    let Some(run_id) = &row.run_id else {
        return Ok(Now {
            subscription: None,
            after_seq: 0,
            run: None,
        });
    };
    let subscription = tasks.followers.runs.subscribe(run_id);
    let events = tasks.upstream.run_events(run_id, 0, Duration::ZERO).await?;
    let run = match events.events.last() {
        Some(event) => Observed {
            run_id: run_id.clone(),
            status: event.status,
            status_message: event.status_message.clone(),
        },
        None => Observed::from(&tasks.upstream.get_run(run_id).await?),
    };
    Ok(Now {
        subscription: Some(subscription),
        after_seq: events.last_seq,
        run: Some(run),
    })
}

/// Sends the snapshot and hands the rest of the observation to a producer task.
#[allow(clippy::too_many_arguments)]
async fn start(
    tasks: &Arc<TaskService>,
    caller: &Caller,
    row: TaskRow,
    now: Now,
    id: &JsonRpcId,
    lease: ObserverLease,
    mode: Mode,
    history_length: Option<usize>,
) -> Result<Response, Fault> {
    let vigil = match tasks.vigil_checked(caller).await {
        Ok(vigil) => vigil,
        Err(Lapse::Refused(refusal)) => return Err(refusal.into()),
        Err(Lapse::AccessLost) => return Err(HttpError::WorkspaceAccessDenied.into()),
    };
    let snapshot = tasks
        .snapshot(
            caller,
            &row,
            Known {
                observed: now.run,
                committed: None,
            },
            history_length,
            Purpose::Current,
        )
        .await?;
    let last = (
        snapshot.status.state.clone(),
        snapshot
            .status
            .message
            .as_ref()
            .and_then(|m| m.text().map(str::to_owned)),
    );
    let done = mode.ends_at(&snapshot.status.state);
    // Over the result bound (a completed task's oversize artifact): refused like GetTask,
    // before the stream starts.
    let first = sse::bounded_result_frame(
        id,
        &StreamResponse::Task(snapshot),
        tasks.settings.limits.max_result_bytes,
    )?;

    let (tx, mut rx) = mpsc::channel::<Frame>(STREAM_BUFFER);
    tx.try_send(Box::new(first))
        .expect("fresh channel has room");
    let follower = Follower {
        deadline: Instant::now() + tasks.settings.observation_window,
        subscription: now.subscription,
        vigil,
        runs_healthy: tasks.followers.runs_healthy(),
        tasks: tasks.clone(),
        task_id: row.task_id,
        context_id: row.context_id,
        run_id: row.run_id,
        id: id.clone(),
        tx,
        mode,
        after_seq: now.after_seq,
        last,
        keepalive_at: Instant::now() + tasks.settings.keepalive,
    };
    tokio::spawn(follower.observe(lease, done));
    let frames = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|frame| frame.map(|frame| Ok::<_, Infallible>(*frame)))
    });
    Ok(sse::response(frames))
}

struct Follower {
    /// End of the observation window: nothing is streamed, or waited on, past it.
    deadline: Instant,
    /// The run's changes on this replica (`None` until the task has a run).
    subscription: Option<RunSubscription>,
    /// The caller's token, feature and access, checked again while the stream lasts.
    vigil: Vigil,
    /// Whether the run feed is caught up; while not, the run is read from Q.
    runs_healthy: watch::Receiver<bool>,
    tasks: Arc<TaskService>,
    task_id: Uuid,
    context_id: Uuid,
    /// The task's run (`None` until the dispatch is resolved).
    run_id: Option<String>,
    id: JsonRpcId,
    tx: mpsc::Sender<Frame>,
    mode: Mode,
    after_seq: u64,
    /// Last state and Q text sent, so a repeated report is not streamed twice.
    last: (TaskState, Option<String>),
    /// When the next keep-alive is due: `observers.keepalive_ms` after the last frame sent,
    /// whatever else woke the stream meanwhile.
    keepalive_at: Instant,
}

/// A failure after the first event as the JSON-RPC error its `event: error` frame carries.
fn fault_to_rpc(fault: Fault) -> RpcError {
    match fault {
        Fault::Rpc(e) => e,
        Fault::Http(e) => RpcError::internal().caused_by(format!("{e:?}")),
    }
}

/// Why a stream stopped.
enum Stop {
    /// Normal ends: terminal/interrupted state, window over, client gone, lease lost, draining.
    Done,
    /// Failure after the first event: sent as an `event: error` frame.
    Error(RpcError),
}

impl Follower {
    /// The producer task: follows the run until the stream ends, then releases the lease.
    ///
    /// Every open stream holds this task's allocation for as long as it lasts, sized for the
    /// largest state of the future: the follower is kept once (`run` borrows it), it keeps
    /// what it streams from rather than the task row, and every rare step (reading Q or the
    /// store, checking the caller again, releasing the lease) is boxed, so the task is the
    /// size of its wait.
    ///
    /// Not an `async fn`: one of those keeps its arguments both as arguments and as locals
    /// of its body (the follower twice), and every open stream holds this future.
    #[allow(clippy::manual_async_fn)]
    fn observe(
        mut self,
        mut lease: ObserverLease,
        done: bool,
    ) -> impl std::future::Future<Output = ()> + Send {
        async move {
            if !done {
                self.run(&mut lease).await;
            }
            // The stream ends here (its sender goes), not after the lease is back in a Redis
            // that may be slow to answer or gone.
            drop(self);
            Box::pin(lease.release()).await;
        }
    }

    async fn run(&mut self, lease: &mut ObserverLease) {
        let deadline = self.deadline;
        let keepalive = self.tasks.settings.keepalive;
        let mut drain = self.tasks.drain.clone();
        // Watches for the client leaving (the receiver dropped) while a step waits on Q.
        let client = self.tx.clone();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() || *drain.borrow() {
                tracing::info!(task_id = %self.task_id, "observation window over; the run continues");
                return;
            }
            let wait = keepalive.min(remaining);
            let step = tokio::select! {
                _ = client.closed() => return,
                _ = lease.lost() => return,
                _ = drain.changed() => return,
                step = self.step(wait) => step,
            };
            match step {
                Ok(true) => {}
                Ok(false) => return,
                Err(Stop::Done) => return,
                Err(Stop::Error(e)) => {
                    log_rpc_error(&e);
                    let _ = self.send(sse::error_frame(&self.id, &e)).await;
                    return;
                }
            }
        }
    }

    /// Waits up to `wait` for the run to change and streams the changes; a keep-alive when
    /// nothing happened. `Ok(false)` when the stream has reached its end.
    async fn step(&mut self, wait: Duration) -> Result<bool, Stop> {
        let Some(run_id) = self.run_id.clone() else {
            // Dispatch still unresolved: the reconciler records the run; look again.
            tokio::time::sleep(wait).await;
            if let Ok(Some(row)) = Box::pin(self.tasks.store.find_by_id(self.task_id)).await {
                if let Some(run_id) = &row.run_id {
                    self.subscription = Some(self.tasks.followers.runs.subscribe(run_id));
                }
                self.run_id = row.run_id;
            }
            return self.send(sse::keepalive_frame()).await;
        };
        let subscription = self
            .subscription
            .get_or_insert_with(|| self.tasks.followers.runs.subscribe(&run_id));
        let healthy = *self.runs_healthy.borrow_and_update();
        let signal = tokio::select! {
            signal = subscription.next() => Some(signal),
            // The run feed is not caught up: read the run from Q at a bounded rate.
            _ = tokio::time::sleep(RUN_FALLBACK_POLL.min(wait)), if !healthy => Some(RunSignal::Resync),
            Ok(()) = self.runs_healthy.changed() => return Ok(true),
            _ = self.vigil.due() => {
                return match Box::pin(self.tasks.keep_vigil(&mut self.vigil)).await {
                    Ok(()) => Ok(true),
                    Err(lapse) => {
                        let why = match lapse {
                            Lapse::Refused(_) => "the caller's token or tenant feature lapsed",
                            Lapse::AccessLost => "access to the agent's workspace lost",
                        };
                        tracing::info!(task_id = %self.task_id, why, "ending the observation");
                        Ok(false)
                    }
                };
            }
            _ = tokio::time::sleep_until(self.keepalive_at.min(Instant::now() + wait)) => None,
        };
        let events = match signal {
            None => return self.send(sse::keepalive_frame()).await,
            Some(RunSignal::Change(change)) => vec![RunEvent {
                seq: change.seq,
                status: change.status,
                status_message: change.status_message.clone(),
                at: change.at,
            }],
            // Changes may have been missed, or the feed is behind: read them from Q once.
            Some(RunSignal::Resync) => {
                match Box::pin(self.tasks.upstream.run_events(
                    &run_id,
                    self.after_seq,
                    Duration::ZERO,
                ))
                .await
                {
                    Ok(events) => events.events,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the run's events from Q failed");
                        return if healthy {
                            self.send(sse::keepalive_frame()).await
                        } else {
                            Ok(true)
                        };
                    }
                }
            }
        };
        Box::pin(self.stream_events(&run_id, events)).await
    }

    /// Streams what `events` changed, committing each state first; `Ok(false)` when the
    /// stream has reached its end.
    async fn stream_events(&mut self, run_id: &str, events: Vec<RunEvent>) -> Result<bool, Stop> {
        for event in events {
            // Already streamed, or part of the snapshot.
            if event.seq != 0 && event.seq <= self.after_seq {
                continue;
            }
            self.after_seq = self.after_seq.max(event.seq);
            // A status the contract does not define changes nothing on the stream.
            let Some(state) = task_state(event.status) else {
                continue;
            };
            let reported = (state, event.status_message.clone());
            if reported == self.last {
                continue;
            }
            let (stored, timestamp) = self
                .tasks
                .store
                .record_state(self.task_id, Some(&reported.0), reported.1.as_deref())
                .await
                .map_err(|e| Stop::Error(e.into()))?;
            if stored == TaskState::Completed {
                self.send_artifact(run_id).await?;
            }
            // Q's text is content: only with a clearance taken now.
            let cleared = match &reported.1 {
                Some(_) if stored == reported.0 => self.clearance(run_id).await?,
                _ => None,
            };
            let message = reported.1.clone().filter(|_| cleared.is_some());
            let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: self.task_id.to_string(),
                context_id: self.context_id.to_string(),
                status: TaskStatus {
                    state: stored.clone(),
                    message: message.map(|text| a2a::Message {
                        message_id: format!("{}-status-{}", self.task_id, event.seq),
                        context_id: Some(self.context_id.to_string()),
                        task_id: Some(self.task_id.to_string()),
                        role: a2a::Role::Agent,
                        parts: vec![a2a::Part::text(text)],
                        metadata: None,
                        extensions: None,
                        reference_task_ids: None,
                    }),
                    timestamp: Some(timestamp),
                },
                metadata: None,
            });
            if !self.send(self.result_frame(&update)?).await? {
                return Ok(false);
            }
            self.last = (stored.clone(), reported.1);
            if self.mode.ends_at(&stored) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The freshness rule for this stream's content, now: `None` sends the frame without
    /// content; Q unable to confirm ends the stream with an error frame (fails closed).
    async fn clearance(&self, run_id: &str) -> Result<Option<Clearance>, Stop> {
        self.tasks
            .clearance(self.vigil.caller(), Some(run_id), Purpose::Current)
            .await
            .map_err(|fault| Stop::Error(fault_to_rpc(fault)))
    }

    /// The completed run's verified artifact, streamed before the completed status, if the
    /// caller is cleared for it now.
    async fn send_artifact(&mut self, run_id: &str) -> Result<(), Stop> {
        if self.clearance(run_id).await?.is_none() {
            return Ok(());
        }
        let artifact = self
            .tasks
            .artifact(self.task_id, run_id, None)
            .await
            .map_err(|fault| Stop::Error(fault_to_rpc(fault)))?;
        let update = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: self.task_id.to_string(),
            context_id: self.context_id.to_string(),
            artifact,
            append: None,
            last_chunk: Some(true),
            metadata: None,
        });
        if self.send(self.result_frame(&update)?).await? {
            Ok(())
        } else {
            Err(Stop::Done)
        }
    }

    /// An event as a frame, within the result bound like any answer: an event over it (an
    /// oversize artifact) ends the stream with an `event: error` frame (-32006) instead.
    fn result_frame(&self, event: &StreamResponse) -> Result<Bytes, Stop> {
        sse::bounded_result_frame(&self.id, event, self.tasks.settings.limits.max_result_bytes)
            .map_err(Stop::Error)
    }

    /// Sends one frame; `Ok(false)` when the client has gone, or has not taken the frame by
    /// the end of the window (it stopped reading: the buffer is full).
    async fn send(&mut self, frame: Bytes) -> Result<bool, Stop> {
        // `timeout_at` tries the send before the clock, so a frame with room still goes out
        // at or past the deadline.
        match tokio::time::timeout_at(self.deadline, self.tx.send(Box::new(frame))).await {
            Ok(sent) => {
                self.keepalive_at = Instant::now() + self.tasks.settings.keepalive;
                Ok(sent.is_ok())
            }
            Err(_) => {
                tracing::info!(task_id = %self.task_id, "the client stopped reading; ending the observation");
                Ok(false)
            }
        }
    }
}
