//! The mutable state of the reference upstream and its locking.
//!
//! All mutable state lives behind one `tokio::sync::Mutex` so that every check-and-update (in
//! particular "does a run exist for this workflow id? if not, create it") is atomic. Each run
//! has one progression task that walks it through its statuses; readers also enforce the
//! execution deadline so a run can never be observed past its deadline without `timed_out`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{watch, Mutex, MutexGuard};

use crate::breaks::{Break, Breaks, CREATE_RACE, LAGGING_COPY};
use crate::contract::{
    AccessChange, AccessChangeKind, CreateRunRequest, Run, RunChange, WorkspaceAccess,
};
use crate::error::ApiError;
use crate::faults::Faults;
use crate::feed::{AccessFeed, ChangeFeed, Slice};
use crate::fixtures::{AgentFixture, Fixtures};
use crate::progression::progress;
use crate::runs::{decide_create, CreateDecision, RunEntry};
use crate::stats::{SeenTraceparent, Stats};

/// Everything that changes at run time; `reset` returns it to `Inner::default()`.
#[derive(Default)]
pub struct Inner {
    pub runs: HashMap<String, RunEntry>,
    pub by_workflow: HashMap<String, String>,
    /// Runtime workspace grants: `(workspace, principal) -> granted`.
    pub workspace_grants: HashMap<(String, String), bool>,
    /// Principals granted at runtime (so a later revoke reads `revoked`, not `none`).
    pub ever_granted: HashSet<(String, String)>,
    /// Runtime evidence grants: `(run, principal) -> granted`.
    pub evidence_grants: HashMap<(String, String), bool>,
    pub revoked_tokens: HashSet<String>,
    /// Runtime `requires_approval` per agent.
    pub approval_required: HashMap<String, bool>,
    pub faults: Faults,
    pub stats: Stats,
    /// The most recent `traceparent` headers seen on contract routes, newest last.
    pub traceparents: std::collections::VecDeque<SeenTraceparent>,
    /// Q's run change feed; every run entry numbers its events in it.
    pub feed: Arc<ChangeFeed>,
    /// Q's access change feed: one entry per grant, revocation or agent availability change.
    pub access_feed: AccessFeed,
    /// Agents made unavailable at run time (`/admin/agents/{id}/available`): Q answers
    /// `agent_not_found` for them as for an unknown agent.
    pub unavailable_agents: HashSet<String>,
    /// Agents whose name, description or version changed at run time
    /// (`/admin/agents/{id}/describe`): Q answers the record with these.
    pub described_agents: HashMap<String, AgentDescription>,
    /// Every run by its deadline, so a feed read times out the runs past theirs without
    /// looking at all runs; a run leaves the set once its deadline was enforced.
    deadlines: BTreeSet<(DateTime<Utc>, String)>,
    /// Arrival number of the last recorded request.
    pub last_seq: u64,
    /// Workflow-id deduplication turned off (`/admin/workflow-dedup`): every create makes a
    /// new run, so a test sees each create the gateway sends.
    pub dedup_off: bool,
    /// The promises this process was started to break (`--break`); kept through a reset.
    pub breaks: Breaks,
}

/// What an access change names; the feed adds its cursor and time.
#[derive(Debug, Default)]
pub struct Named {
    pub tenant_id: Option<String>,
    pub workspace_id: Option<String>,
    pub principal_id: Option<String>,
    pub agent_id: Option<String>,
    pub run_id: Option<String>,
}

impl Inner {
    /// Appends an entry to the access change feed; returns its cursor (the head, when
    /// `--break access-feed-complete` leaves a grant change out).
    pub fn access_changed(&self, kind: AccessChangeKind, named: Named) -> u64 {
        let grant = matches!(
            kind,
            AccessChangeKind::WorkspaceMembership | AccessChangeKind::EvidenceGrant
        );
        if grant && self.breaks.has(Break::AccessFeedComplete) {
            return self.access_feed.head();
        }
        let Named {
            tenant_id,
            workspace_id,
            principal_id,
            agent_id,
            run_id,
        } = named;
        self.access_feed.append(|cursor| AccessChange {
            cursor,
            kind,
            tenant_id,
            workspace_id,
            principal_id,
            agent_id,
            run_id,
            at: Utc::now(),
        })
    }

    /// Run feed entries after `after`, at most `limit`, once every run past its deadline was
    /// timed out (so the feed never shows a run non-terminal past its deadline). Costs the
    /// runs whose deadline passed since the last read, and the slice returned.
    pub fn run_changes_after(&mut self, after: u64, limit: usize) -> Slice<RunChange> {
        let now = Utc::now();
        while self.deadlines.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, run_id)) = self.deadlines.pop_first() else {
                break;
            };
            if let Some(entry) = self.runs.get_mut(&run_id) {
                entry.enforce_deadline(now);
            }
        }
        let lagging_copy = self.breaks.has(Break::RunFeedHead);
        let lag = feed_lag(self.faults.run_feed_lag_ms, lagging_copy);
        lagging_head(self.feed.after(after, limit, lag), lagging_copy)
    }

    /// Access feed entries after `after`, at most `limit`.
    pub fn access_changes_after(&self, after: u64, limit: usize) -> Slice<AccessChange> {
        let lagging_copy = self.breaks.has(Break::AccessFeedHead);
        let lag = feed_lag(self.faults.access_feed_lag_ms, lagging_copy);
        lagging_head(self.access_feed.after(after, limit, lag), lagging_copy)
    }

    /// Whether Q currently answers `agent_not_found` for this (existing) agent.
    /// The agent record Q answers now: the fixture's, with any change made at run time.
    pub fn agent_record(&self, fixture: &crate::fixtures::AgentFixture) -> crate::contract::Agent {
        let mut agent = fixture.to_agent();
        if let Some(d) = self.described_agents.get(&fixture.id) {
            agent.name = d.name.clone();
            agent.description = d.description.clone();
            agent.version = d.version.clone();
        }
        agent
    }

    pub fn agent_unavailable(&self, agent_id: &str) -> bool {
        self.unavailable_agents.contains(agent_id)
    }

    /// The principal's evidence grant on a run: the run's own principal unless revoked, or
    /// whoever an override names.
    pub fn evidence_granted(&self, run_id: &str, principal_id: &str) -> Option<bool> {
        let owner = &self.runs.get(run_id)?.run.principal_id;
        let changed = self
            .evidence_grants
            .get(&(run_id.to_owned(), principal_id.to_owned()))
            .filter(|_| !self.breaks.has(Break::AccessReflects));
        Some(changed.copied().unwrap_or(owner == principal_id))
    }

    /// The run, with its deadline enforced as of now.
    pub fn run_mut(&mut self, run_id: &str) -> Result<&mut RunEntry, ApiError> {
        let entry = self
            .runs
            .get_mut(run_id)
            .ok_or_else(ApiError::run_not_found)?;
        entry.enforce_deadline(Utc::now());
        Ok(entry)
    }

    pub fn run_id_by_workflow(&self, workflow_id: &str) -> Result<String, ApiError> {
        self.by_workflow
            .get(workflow_id)
            .cloned()
            .ok_or_else(ApiError::run_not_found)
    }

    pub fn workspace_access(
        &self,
        fixtures: &Fixtures,
        workspace_id: &str,
        principal_id: &str,
    ) -> WorkspaceAccess {
        let key = (workspace_id.to_owned(), principal_id.to_owned());
        let member = fixtures.is_member(workspace_id, principal_id);
        let changed = self
            .workspace_grants
            .get(&key)
            .filter(|_| !self.breaks.has(Break::AccessReflects));
        match changed {
            Some(true) => WorkspaceAccess::Granted,
            Some(false) if member || self.ever_granted.contains(&key) => WorkspaceAccess::Revoked,
            Some(false) => WorkspaceAccess::None,
            None if member => WorkspaceAccess::Granted,
            None => WorkspaceAccess::None,
        }
    }

    pub fn requires_approval(&self, agent: &AgentFixture) -> bool {
        self.approval_required
            .get(&agent.id)
            .copied()
            .unwrap_or(agent.requires_approval)
    }

    /// Back to the fixture state: no runs, faults, counters, runtime grant or availability
    /// changes or recorded traceparents, and new change feeds (cursors start over; waiting
    /// long polls wake).
    pub fn reset(&mut self) {
        for entry in self.runs.values() {
            entry.wake();
        }
        let breaks = self.breaks;
        *self = Inner::default();
        self.breaks = breaks;
    }
}

/// The lag a feed read withholds entries younger than: the fault's, or the lagging copy's.
fn feed_lag(fault_ms: u64, lagging_copy: bool) -> Duration {
    let fault = Duration::from_millis(fault_ms);
    if lagging_copy {
        fault.max(LAGGING_COPY)
    } else {
        fault
    }
}

/// A read as a lagging copy that reports its own head answers it (`--break ...-feed-head`).
fn lagging_head<T>(mut slice: Slice<T>, lagging_copy: bool) -> Slice<T> {
    if lagging_copy {
        slice.head = slice.visible_head;
    }
    slice
}

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub fixtures: Fixtures,
    pub latency_scale: f64,
    /// The promises this process breaks (`--break`), readable without the lock.
    pub breaks: Breaks,
    inner: Mutex<Inner>,
    /// Flips to true at shutdown so long polls answer at once instead of holding it up.
    shutdown: watch::Sender<bool>,
    /// Answers held by the `hold` fault wait for this to move (`/admin/barrier/release`); the
    /// value counts releases, and `held` the answers waiting.
    pub barrier: watch::Sender<u64>,
    pub held: std::sync::atomic::AtomicUsize,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// A reference that keeps every promise (the unit tests' own).
    #[cfg(test)]
    pub fn new(fixtures: Fixtures, latency_scale: f64) -> Self {
        Self::with_breaks(fixtures, latency_scale, Breaks::default())
    }

    /// A reference that breaks the given promises (`--break`).
    pub fn with_breaks(fixtures: Fixtures, latency_scale: f64, breaks: Breaks) -> Self {
        AppState(Arc::new(Shared {
            fixtures,
            latency_scale,
            breaks,
            inner: Mutex::new(Inner {
                breaks,
                ..Inner::default()
            }),
            shutdown: watch::channel(false).0,
            barrier: watch::channel(0).0,
            held: Default::default(),
        }))
    }

    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn shutdown_rx(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub async fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().await
    }

    /// An agent's latency scaled by `--latency-scale`.
    pub fn latency(&self, agent: &AgentFixture) -> Duration {
        let ms = agent.latency_ms as f64 * self.latency_scale;
        Duration::from_secs_f64((ms / 1000.0).max(0.0))
    }

    /// `POST /internal/v1/runs` after faults: validation, authorization and the atomic
    /// check-and-insert on `workflow_id`. Returns whether a run was created, and the run.
    pub async fn create_run(&self, req: CreateRunRequest) -> Result<(bool, Run), ApiError> {
        if req.workflow_id.trim().is_empty() {
            return Err(ApiError::invalid("workflow_id must not be empty"));
        }
        if req.input.parts.is_empty() {
            return Err(ApiError::invalid("input.parts must not be empty"));
        }
        if req.execution_timeout_seconds == 0 {
            return Err(ApiError::invalid(
                "execution_timeout_seconds must be positive",
            ));
        }
        let agent = self
            .fixtures
            .tenant_agent(&req.tenant_id, &req.agent_id)
            .ok_or_else(ApiError::agent_not_found)?;
        let now = Utc::now();
        let deadline_at = i64::try_from(req.execution_timeout_seconds)
            .ok()
            .and_then(TimeDelta::try_seconds)
            .and_then(|d| now.checked_add_signed(d))
            .ok_or_else(|| ApiError::invalid("execution_timeout_seconds is out of range"))?;

        let mut inner = self.lock().await;
        if inner.agent_unavailable(&agent.id) {
            return Err(ApiError::agent_not_found());
        }
        let access = inner.workspace_access(&self.fixtures, &agent.workspace, &req.principal_id);
        if access != WorkspaceAccess::Granted {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "workspace_access_denied",
                Some(format!(
                    "principal {} has no access to workspace {}",
                    req.principal_id, agent.workspace
                )),
            ));
        }
        let existing_id = inner.by_workflow.get(&req.workflow_id).cloned();
        let existing = match &existing_id {
            Some(id) => Some(inner.run_mut(id)?.run.clone()),
            None => None,
        };
        let decision = match decide_create(existing.as_ref(), &req) {
            _ if inner.dedup_off => CreateDecision::Create,
            CreateDecision::Conflict if self.breaks.has(Break::CreateConflict) => {
                CreateDecision::Existing
            }
            decision => decision,
        };
        if decision == CreateDecision::Create && self.breaks.has(Break::CreateOnce) {
            // The check does not hold until the insert: whatever arrives meanwhile creates too.
            drop(inner);
            tokio::time::sleep(CREATE_RACE).await;
            inner = self.lock().await;
        }
        match decision {
            CreateDecision::Existing => Ok((false, existing.expect("existing run"))),
            CreateDecision::Conflict => Err(ApiError::new(
                StatusCode::CONFLICT,
                "workflow_id_conflict",
                Some(format!(
                    "workflow_id {} already names a run with a different request",
                    req.workflow_id
                )),
            )),
            CreateDecision::Create => {
                let id = format!("run-{}", uuid::Uuid::new_v4().simple());
                let mut entry =
                    RunEntry::new(id.clone(), &req, now, deadline_at, inner.feed.clone());
                entry.corrupt = inner.faults.take_corrupt_output();
                let run = entry.run.clone();
                // Without deduplication the lookup keeps naming the first run.
                inner
                    .by_workflow
                    .entry(req.workflow_id.clone())
                    .or_insert_with(|| id.clone());
                inner.runs.insert(id.clone(), entry);
                inner.deadlines.insert((deadline_at, id.clone()));
                inner.stats.runs_created += 1;
                drop(inner);
                tracing::info!(run_id = %id, workflow_id = %req.workflow_id, agent_id = %req.agent_id, "run created");
                tokio::spawn(progress(self.clone(), id));
                Ok((true, run))
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// What `/admin/agents/{id}/describe` sets on an agent's record.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDescription {
    pub name: String,
    pub description: String,
    pub version: String,
}
