//! The task service: what the A2A methods do with tasks, behind the RPC route's stages.
//!
//! | file | concern |
//! |---|---|
//! | [`send`] | SendMessage: admission under the durable message identity, then dispatch |
//! | [`get`] | GetTask |
//! | [`finished`] | finished tasks kept in process for GetTask (immutable; bounded in time and bytes) |
//! | [`list`] | ListTasks pages within the result bound ([`params`]: its parameters) |
//! | [`cancel`] | CancelTask |
//! | [`snapshot`] | the task as a read returns it: projection, evidence grant, the artifact committed once |
//! | [`follow`] | a blocking SendMessage's wait on the run changes this replica follows |
//! | [`vigil`] | what an observation keeps checking while it lasts (token, feature, access) |
//!
//! Visibility rules, in one place:
//! - a task belongs to (tenant, principal, agent); anyone else gets -32001, like an unknown id;
//! - without current access to the agent's workspace, GetTask and SubscribeToTask are -32001,
//!   ListTasks lists nothing (totalSize 0) and SendMessage is refused: the caller can no longer
//!   use the agent at all;
//! - content (history, Q's text, artifacts) goes out only with a clearance taken under the
//!   freshness rule (`crate::access`): Q confirmed the caller's workspace access and evidence
//!   grant within the bound;
//! - a revoked evidence grant on the run hides the content, never the caller's own task: every
//!   read (GetTask, ListTasks, SubscribeToTask, SendMessage's repeat, CancelTask) returns it as
//!   a control receipt (id, contextId and status state/timestamp only; no history, artifacts or
//!   Q text), and ListTasks counts it in totalSize like any other entry;
//! - a caller can always cancel its own task, whatever happened to its grants.

mod cancel;
pub(crate) mod finished;
pub mod follow;
mod get;
mod list;
pub mod params;
pub(crate) mod send;
pub(crate) mod snapshot;
pub(crate) mod vigil;

use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use uuid::Uuid;

use std::sync::Arc;

pub use self::finished::FinishedSettings;
use self::finished::FinishedTasks;
use crate::a2a::caller::Caller;
use crate::a2a::cursor::CursorCodec;
use crate::access::AccessCache;
use crate::auth::Authenticator;
use crate::changes::Followers;
use crate::config::LimitsConfig;
use crate::dispatch::Dispatcher;
use crate::error::{Fault, RpcError};
use crate::lease::{ObserverLease, ObserverLeases};
use crate::store::{PgTaskStore, StoredArtifact, TaskRow};
use crate::upstream::contract::WorkspaceAccess;
use crate::upstream::UpstreamRunApi;

/// What a non-streaming method answers: the JSON-RPC `result`, or how it failed.
pub type MethodResult = Result<Value, Fault>;

/// A JSON-RPC `result` as the RPC route frames it.
#[derive(Debug)]
pub enum Answer {
    /// A value, serialised by the route.
    Value(Value),
    /// Already serialised, exactly as the route would have serialised its value (a kept
    /// finished task's answer, [`finished`]).
    Serialized(bytes::Bytes),
}

/// Settings of the task methods, typed once at start-up.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// Message validation limits and the result bound.
    pub limits: LimitsConfig,
    /// Longest an observation (blocking send, stream) lasts.
    pub observation_window: Duration,
    /// Idle time after which a stream sends a keep-alive comment.
    pub keepalive: Duration,
    /// How often an observation checks its caller's token again (half the token bound).
    pub token_recheck: Duration,
    /// Finished tasks kept for GetTask.
    pub finished: FinishedSettings,
}

/// The task methods and the ports they use.
pub struct TaskService {
    pub(crate) store: PgTaskStore,
    pub(crate) upstream: UpstreamRunApi,
    pub(crate) leases: ObserverLeases,
    pub(crate) cursors: CursorCodec,
    pub(crate) dispatcher: Dispatcher,
    pub(crate) settings: TaskSettings,
    /// Finished tasks this replica read lately, for GetTask.
    pub(crate) finished: FinishedTasks,
    /// Q's change feeds as this replica follows them: run changes for observations, the
    /// access cache for grants.
    pub(crate) followers: Arc<Followers>,
    /// Turns true when the gateway drains for shutdown: observations end.
    pub(crate) drain: watch::Receiver<bool>,
    /// Observations check their caller's token again through it.
    pub(crate) authenticator: Arc<Authenticator>,
}

/// The ports the task methods use, built once at start-up.
pub struct TaskPorts {
    pub store: PgTaskStore,
    pub upstream: UpstreamRunApi,
    pub leases: ObserverLeases,
    pub dispatcher: Dispatcher,
    /// Q's change feeds as this replica follows them.
    pub followers: Arc<Followers>,
    /// Q's identity, for observations that check their caller's token again.
    pub authenticator: Arc<Authenticator>,
}

impl TaskService {
    pub fn new(
        ports: TaskPorts,
        cursors: CursorCodec,
        settings: TaskSettings,
        drain: watch::Receiver<bool>,
    ) -> Self {
        let TaskPorts {
            store,
            upstream,
            leases,
            dispatcher,
            followers,
            authenticator,
        } = ports;
        TaskService {
            finished: FinishedTasks::new(settings.finished),
            store,
            upstream,
            leases,
            cursors,
            dispatcher,
            settings,
            followers,
            drain,
            authenticator,
        }
    }

    /// An observer lease for `caller`, before anything is written or streamed: HTTP 429 with
    /// `Retry-After` at a bound, 503 with the lease store down.
    pub(crate) async fn observer_lease(&self, caller: &Caller) -> Result<ObserverLease, Fault> {
        self.leases
            .acquire(&caller.principal.tenant_id, &caller.principal.principal_id)
            .await
            .map_err(|e| {
                tracing::info!(reason = %e, "observation refused");
                Fault::Http(e.into())
            })
    }

    /// Agent access and evidence grants, kept fresh by the access feed.
    pub(crate) fn access(&self) -> &AccessCache {
        &self.followers.access
    }

    /// The caller's own task; anything else is the same -32001 as an unknown id.
    pub(crate) async fn find(&self, caller: &Caller, task_id: Uuid) -> Result<TaskRow, Fault> {
        self.store
            .find_owned(task_id, &caller.owner())
            .await?
            .ok_or_else(|| RpcError::task_not_found().into())
    }

    /// [`TaskService::find`] for an id as the client sent it: one that is no task id at all is
    /// -32001 too.
    pub(crate) async fn owned(&self, caller: &Caller, id: &str) -> Result<TaskRow, Fault> {
        let task_id = Uuid::parse_str(id).map_err(|_| RpcError::task_not_found())?;
        self.find(caller, task_id).await
    }

    /// The caller's task for GetTask and SubscribeToTask: -32001 without access to the agent's
    /// workspace; a task whose run is not yet recorded has its dispatch resolved first. Only
    /// such a task can change here: a recorded run is what the row just read says (re-reading
    /// it would cost a database round trip per read).
    pub(crate) async fn readable(&self, caller: &Caller, id: &str) -> Result<TaskRow, Fault> {
        self.readable_with_artifact(caller, id)
            .await
            .map(|(row, _)| row)
    }

    /// [`TaskService::readable`] with the task's committed artifact, read in the same query,
    /// within the caller's share of the store pool (`crate::store::share`).
    pub(crate) async fn readable_with_artifact(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<(TaskRow, Option<StoredArtifact>), Fault> {
        if caller.workspace != WorkspaceAccess::Granted {
            return Err(RpcError::task_not_found().into());
        }
        let task_id = Uuid::parse_str(id).map_err(|_| RpcError::task_not_found())?;
        let owner = caller.owner();
        let share = self.store.read_share(&owner).await?;
        let found = self.store.find_owned_with_artifact(task_id, &owner).await;
        drop(share);
        let (row, artifact) = found?.ok_or_else(RpcError::task_not_found)?;
        if row.run_id.is_some() {
            return Ok((row, artifact));
        }
        self.dispatcher.resolve(&row).await?;
        Ok((self.find(caller, row.task_id).await?, None))
    }
}
