//! Fixtures, in-memory state and run progression of the reference upstream.
//!
//! All mutable state lives behind one `tokio::sync::Mutex` so that every check-and-update (in
//! particular "does a run exist for this workflow id? if not, create it") is atomic. Each run
//! has one progression task that walks it through its statuses; readers also enforce the
//! execution deadline so a run can never be observed past its deadline without `timed_out`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Mutex, MutexGuard, Notify};

use crate::contract::{
    input_sha256, text_sha256, Agent, Approval, ApprovalKind, ApprovalStatus, CreateRunRequest,
    Run, RunChange, RunEvent, RunInput, RunOutput, RunStatus, WorkspaceAccess,
};
use crate::routes::ApiError;

/// Latency of an agent whose fixture does not say.
const DEFAULT_LATENCY_MS: u64 = 300;

/// The tool an approval-requiring agent asks permission for.
const APPROVAL_TOOL: &str = "web.search";

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// `config/q-fixtures.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixtures {
    /// Required as `Authorization: Bearer <service_token>` on every `/internal/v1/*` route
    /// except health.
    pub service_token: String,
    #[serde(default)]
    pub tenants: Vec<TenantFixture>,
    #[serde(default)]
    pub principals: Vec<PrincipalFixture>,
    #[serde(default)]
    pub tokens: Vec<TokenFixture>,
    #[serde(default)]
    pub workspaces: Vec<WorkspaceFixture>,
    #[serde(default)]
    pub agents: Vec<AgentFixture>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantFixture {
    pub id: String,
    #[serde(default)]
    pub features: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalFixture {
    pub id: String,
    pub tenant: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFixture {
    pub token: String,
    pub principal: String,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub expired: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceFixture {
    pub id: String,
    pub tenant: String,
    #[serde(default)]
    pub members: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFixture {
    pub id: String,
    pub tenant: String,
    pub workspace: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_version")]
    pub version: String,
    #[serde(default = "default_latency")]
    pub latency_ms: u64,
    #[serde(default)]
    pub requires_approval: bool,
}

fn default_version() -> String {
    "1.0.0".to_owned()
}

fn default_latency() -> u64 {
    DEFAULT_LATENCY_MS
}

impl AgentFixture {
    pub fn to_agent(&self) -> Agent {
        Agent {
            id: self.id.clone(),
            tenant_id: self.tenant.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            version: self.version.clone(),
            workspace_id: self.workspace.clone(),
        }
    }
}

impl Fixtures {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let raw = std::fs::read_to_string(path)
            .with_context(|| format!("reading fixtures {}", path.display()))?;
        let fixtures: Fixtures = serde_json::from_str(&raw)
            .with_context(|| format!("parsing fixtures {}", path.display()))?;
        fixtures.validate()?;
        Ok(fixtures)
    }

    /// Referential integrity: every tenant, principal and workspace named exists.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.service_token.is_empty() {
            bail!("fixtures: service_token is empty");
        }
        let tenants: HashSet<&str> = self.tenants.iter().map(|t| t.id.as_str()).collect();
        for p in &self.principals {
            if !tenants.contains(p.tenant.as_str()) {
                bail!(
                    "fixtures: principal {} has unknown tenant {}",
                    p.id,
                    p.tenant
                );
            }
        }
        for t in &self.tokens {
            if self.principal(&t.principal).is_none() {
                bail!("fixtures: a token names unknown principal {}", t.principal);
            }
        }
        for w in &self.workspaces {
            if !tenants.contains(w.tenant.as_str()) {
                bail!(
                    "fixtures: workspace {} has unknown tenant {}",
                    w.id,
                    w.tenant
                );
            }
            for m in &w.members {
                match self.principal(m) {
                    Some(p) if p.tenant == w.tenant => {}
                    Some(_) => bail!("fixtures: member {m} of {} is of another tenant", w.id),
                    None => bail!("fixtures: workspace {} names unknown principal {m}", w.id),
                }
            }
        }
        for a in &self.agents {
            if !tenants.contains(a.tenant.as_str()) {
                bail!("fixtures: agent {} has unknown tenant {}", a.id, a.tenant);
            }
            match self.workspace(&a.workspace) {
                Some(w) if w.tenant == a.tenant => {}
                Some(_) => bail!("fixtures: agent {} is in another tenant's workspace", a.id),
                None => bail!(
                    "fixtures: agent {} has unknown workspace {}",
                    a.id,
                    a.workspace
                ),
            }
        }
        Ok(())
    }

    pub fn tenant(&self, id: &str) -> Option<&TenantFixture> {
        self.tenants.iter().find(|t| t.id == id)
    }

    pub fn principal(&self, id: &str) -> Option<&PrincipalFixture> {
        self.principals.iter().find(|p| p.id == id)
    }

    pub fn token(&self, token: &str) -> Option<&TokenFixture> {
        self.tokens.iter().find(|t| t.token == token)
    }

    pub fn workspace(&self, id: &str) -> Option<&WorkspaceFixture> {
        self.workspaces.iter().find(|w| w.id == id)
    }

    pub fn agent(&self, id: &str) -> Option<&AgentFixture> {
        self.agents.iter().find(|a| a.id == id)
    }

    /// The agent if it exists *in this tenant*; another tenant's agent is indistinguishable
    /// from an unknown one.
    pub fn tenant_agent(&self, tenant_id: &str, agent_id: &str) -> Option<&AgentFixture> {
        self.agent(agent_id).filter(|a| a.tenant == tenant_id)
    }

    fn is_member(&self, workspace_id: &str, principal_id: &str) -> bool {
        self.workspace(workspace_id)
            .is_some_and(|w| w.members.iter().any(|m| m == principal_id))
    }
}

// ---------------------------------------------------------------------------------------------
// Fault injection and counters (driven through /admin)
// ---------------------------------------------------------------------------------------------

/// Remaining injected faults; each counter is consumed by one matching request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Faults {
    /// `POST /runs` commits the run, then the connection is closed without any response.
    pub create_drop_after_commit: u32,
    /// `POST /runs` answers 500 without creating anything.
    pub create_fail_500_before_commit: u32,
    /// `POST /runs` commits the run, then answers 500.
    pub create_fail_500_after_commit: u32,
    /// Sleep applied before handling `POST /runs` (the run is created after the sleep).
    pub create_delay_ms: u64,
    /// How many `POST /runs` requests get `create_delay_ms`.
    pub create_delay_count: u32,
    /// `GET /internal/v1/runs/**` answers 500.
    pub read_fail_500: u32,
    /// `POST /internal/v1/identity/introspect` answers 500.
    pub introspect_fail_500: u32,
    /// `POST /runs` answers a definite 403 `workspace_access_denied` without creating anything
    /// (as when the grant is revoked between the gateway's check and the create).
    pub create_refuse_403: u32,
}

/// Body of `POST /admin/faults`: present fields overwrite the current counters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsPatch {
    pub create_drop_after_commit: Option<u32>,
    pub create_fail_500_before_commit: Option<u32>,
    pub create_fail_500_after_commit: Option<u32>,
    pub create_delay_ms: Option<u64>,
    pub create_delay_count: Option<u32>,
    pub read_fail_500: Option<u32>,
    pub introspect_fail_500: Option<u32>,
    pub create_refuse_403: Option<u32>,
}

impl Faults {
    pub fn apply(&mut self, patch: FaultsPatch) {
        let FaultsPatch {
            create_drop_after_commit,
            create_fail_500_before_commit,
            create_fail_500_after_commit,
            create_delay_ms,
            create_delay_count,
            read_fail_500,
            introspect_fail_500,
            create_refuse_403,
        } = patch;
        set(&mut self.create_drop_after_commit, create_drop_after_commit);
        set(
            &mut self.create_fail_500_before_commit,
            create_fail_500_before_commit,
        );
        set(
            &mut self.create_fail_500_after_commit,
            create_fail_500_after_commit,
        );
        set(&mut self.read_fail_500, read_fail_500);
        set(&mut self.introspect_fail_500, introspect_fail_500);
        set(&mut self.create_refuse_403, create_refuse_403);
        set(&mut self.create_delay_ms, create_delay_ms);
        set(&mut self.create_delay_count, create_delay_count);
        // A delay given without a count applies to the next create only.
        if create_delay_ms.is_some_and(|ms| ms > 0) && create_delay_count.is_none() {
            self.create_delay_count = self.create_delay_count.max(1);
        }
    }

    /// The delay for this create, consuming one delay count.
    pub fn take_create_delay(&mut self) -> Option<Duration> {
        if self.create_delay_ms > 0 && take(&mut self.create_delay_count) {
            Some(Duration::from_millis(self.create_delay_ms))
        } else {
            None
        }
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

/// Consumes one unit of a fault counter; true if the fault applies to this request.
pub fn take(counter: &mut u32) -> bool {
    if *counter > 0 {
        *counter -= 1;
        true
    } else {
        false
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Stats {
    /// `POST /internal/v1/runs` requests that passed authentication.
    pub create_requests: u64,
    /// Runs actually created (idempotent replays excluded).
    pub runs_created: u64,
}

/// How `GET /runs/{id}/output` changes once `POST /admin/runs/{id}/corrupt-output` was called.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CorruptMode {
    /// The checksum no longer matches the text.
    Checksum,
    /// The byte count no longer matches the text.
    ByteCount,
    /// A consistent (checksum and byte count correct) output larger than 1 MiB.
    Oversize,
    /// A consistent output of about 400 KiB (three fit in no 1 MiB result).
    Large,
}

// ---------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------

/// Q's global run change feed: every event of every run gets the next cursor.
pub struct ChangeFeed {
    cursor: std::sync::atomic::AtomicU64,
    tx: watch::Sender<u64>,
}

impl ChangeFeed {
    fn next(&self) -> u64 {
        let cursor = self
            .cursor
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        self.tx.send_replace(cursor);
        cursor
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// The newest cursor issued.
    pub fn head(&self) -> u64 {
        self.cursor.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub static FEED: std::sync::LazyLock<ChangeFeed> = std::sync::LazyLock::new(|| ChangeFeed {
    cursor: std::sync::atomic::AtomicU64::new(0),
    tx: watch::channel(0).0,
});

pub struct RunEntry {
    pub run: Run,
    pub input: RunInput,
    pub events: Vec<RunEvent>,
    /// Feed cursor of each event, parallel to `events`.
    pub feed_cursors: Vec<u64>,
    pub approvals: Vec<Approval>,
    /// Ready once the run succeeded.
    pub output: Option<RunOutput>,
    pub corrupt: Option<CorruptMode>,
    /// Last event seq; long-polls subscribe to it.
    seq_tx: watch::Sender<u64>,
    /// Wakes the progression task while it waits on an approval (approve, cancel, reset).
    wake: Arc<Notify>,
}

impl RunEntry {
    /// A fresh `queued` run with its first event (seq 1).
    pub fn new(
        id: String,
        req: &CreateRunRequest,
        now: DateTime<Utc>,
        deadline_at: DateTime<Utc>,
    ) -> Self {
        let run = Run {
            id,
            workflow_id: req.workflow_id.clone(),
            tenant_id: req.tenant_id.clone(),
            principal_id: req.principal_id.clone(),
            agent_id: req.agent_id.clone(),
            status: RunStatus::Queued,
            status_message: None,
            created_at: now,
            updated_at: now,
            deadline_at,
            input_sha256: input_sha256(&req.input),
        };
        let (seq_tx, _) = watch::channel(0);
        let mut entry = RunEntry {
            run,
            input: req.input.clone(),
            events: Vec::new(),
            feed_cursors: Vec::new(),
            approvals: Vec::new(),
            output: None,
            corrupt: None,
            seq_tx,
            wake: Arc::new(Notify::new()),
        };
        entry.push_event(now);
        entry
    }

    fn push_event(&mut self, at: DateTime<Utc>) {
        let seq = self.last_seq() + 1;
        self.events.push(RunEvent {
            seq,
            status: self.run.status,
            status_message: self.run.status_message.clone(),
            at,
        });
        self.feed_cursors.push(FEED.next());
        self.seq_tx.send_replace(seq);
    }

    /// Sets the status and appends the matching event; every status change is an event.
    pub fn transition(&mut self, status: RunStatus, message: Option<String>, now: DateTime<Utc>) {
        self.run.status = status;
        self.run.status_message = message;
        self.run.updated_at = now;
        if status == RunStatus::Succeeded {
            self.output = Some(synthesize_output(&self.run.id, &self.input));
        }
        self.push_event(now);
    }

    pub fn last_seq(&self) -> u64 {
        self.events.last().map_or(0, |e| e.seq)
    }

    pub fn events_after(&self, after_seq: u64) -> Vec<RunEvent> {
        self.events
            .iter()
            .filter(|e| e.seq > after_seq)
            .cloned()
            .collect()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.seq_tx.subscribe()
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A non-terminal run past its deadline becomes `timed_out`. True if it is now terminal.
    pub fn enforce_deadline(&mut self, now: DateTime<Utc>) -> bool {
        if !self.run.status.is_terminal() && now >= self.run.deadline_at {
            self.time_out(now);
        }
        self.run.status.is_terminal()
    }

    fn time_out(&mut self, now: DateTime<Utc>) {
        self.transition(
            RunStatus::TimedOut,
            Some("execution deadline exceeded".to_owned()),
            now,
        );
        self.wake();
    }

    /// The output as served, including any injected corruption.
    pub fn served_output(&self) -> Option<RunOutput> {
        let mut out = self.output.clone()?;
        match self.corrupt {
            Some(CorruptMode::Checksum) => out.sha256 = text_sha256(&format!("{}#", out.text)),
            Some(CorruptMode::ByteCount) => out.byte_count += 1,
            Some(CorruptMode::Oversize) => {
                out.text = format!("{}\n{}\n", out.text, "x".repeat(1024 * 1024 + 1));
                out.sha256 = text_sha256(&out.text);
                out.byte_count = out.text.len() as u64;
            }
            Some(CorruptMode::Large) => {
                out.text = format!("{}\n{}\n", out.text, "y".repeat(400 * 1024));
                out.sha256 = text_sha256(&out.text);
                out.byte_count = out.text.len() as u64;
            }
            None => {}
        }
        Some(out)
    }
}

/// The deterministic Markdown answer of a run.
pub fn synthesize_output(run_id: &str, input: &RunInput) -> RunOutput {
    let joined = input.parts.join(" ");
    let asked: String = joined.chars().take(200).collect();
    let text = format!("# Answer\n\nYou asked: **{asked}**\n\n- point one\n- point two\n");
    RunOutput {
        artifact_id: format!("answer-{run_id}"),
        name: "answer.md".to_owned(),
        media_type: "text/markdown".to_owned(),
        sha256: text_sha256(&text),
        byte_count: text.len() as u64,
        text,
    }
}

/// What a create does given the run already stored under its workflow id.
#[derive(Debug, PartialEq, Eq)]
pub enum CreateDecision {
    /// No run yet: create one.
    Create,
    /// Same request replayed: return the existing run (200).
    Existing,
    /// The workflow id is taken by a different request: 409 `workflow_id_conflict`.
    Conflict,
}

/// Idempotency on `workflow_id`: a replay must match the stored run's input hash and also its
/// tenant, principal and agent (a workflow id never leaks another caller's run).
pub fn decide_create(existing: Option<&Run>, req: &CreateRunRequest) -> CreateDecision {
    match existing {
        None => CreateDecision::Create,
        Some(run)
            if run.input_sha256 == input_sha256(&req.input)
                && run.tenant_id == req.tenant_id
                && run.principal_id == req.principal_id
                && run.agent_id == req.agent_id =>
        {
            CreateDecision::Existing
        }
        Some(_) => CreateDecision::Conflict,
    }
}

// ---------------------------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------------------------

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
}

/// A `traceparent` header (or its absence) on one contract request.
#[derive(Debug, Clone, Serialize)]
pub struct SeenTraceparent {
    pub method: String,
    pub path: String,
    pub traceparent: Option<String>,
}

/// How many recent `traceparent`s are kept.
pub const TRACEPARENTS_KEPT: usize = 256;

impl Inner {
    /// Feed entries after `after`, oldest first, at most `limit`.
    pub fn changes_after(&mut self, after: u64, limit: usize) -> Vec<RunChange> {
        let now = Utc::now();
        let mut changes = Vec::new();
        for entry in self.runs.values_mut() {
            entry.enforce_deadline(now);
            for (event, cursor) in entry.events.iter().zip(&entry.feed_cursors) {
                if *cursor > after {
                    changes.push(RunChange {
                        cursor: *cursor,
                        run_id: entry.run.id.clone(),
                        workflow_id: entry.run.workflow_id.clone(),
                        status: event.status,
                        status_message: event.status_message.clone(),
                        at: event.at,
                    });
                }
            }
        }
        changes.sort_by_key(|c| c.cursor);
        changes.truncate(limit);
        changes
    }

    /// The principal's evidence grant on a run: the run's own principal unless revoked, or
    /// whoever an override names.
    pub fn evidence_granted(&self, run_id: &str, principal_id: &str) -> Option<bool> {
        let owner = &self.runs.get(run_id)?.run.principal_id;
        Some(
            self.evidence_grants
                .get(&(run_id.to_owned(), principal_id.to_owned()))
                .copied()
                .unwrap_or(owner == principal_id),
        )
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
        match self.workspace_grants.get(&key) {
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

    /// Back to the fixture state: no runs, faults, counters or runtime grant changes.
    pub fn reset(&mut self) {
        for entry in self.runs.values() {
            entry.wake();
        }
        *self = Inner::default();
    }
}

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub fixtures: Fixtures,
    pub latency_scale: f64,
    inner: Mutex<Inner>,
    /// Flips to true at shutdown so long polls answer at once instead of holding it up.
    shutdown: watch::Sender<bool>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(fixtures: Fixtures, latency_scale: f64) -> Self {
        AppState(Arc::new(Shared {
            fixtures,
            latency_scale,
            inner: Mutex::new(Inner::default()),
            shutdown: watch::channel(false).0,
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
        match decide_create(existing.as_ref(), &req) {
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
                let entry = RunEntry::new(id.clone(), &req, now, deadline_at);
                let run = entry.run.clone();
                inner
                    .by_workflow
                    .insert(req.workflow_id.clone(), id.clone());
                inner.runs.insert(id.clone(), entry);
                inner.stats.runs_created += 1;
                drop(inner);
                tracing::info!(run_id = %id, workflow_id = %req.workflow_id, agent_id = %req.agent_id, "run created");
                tokio::spawn(progress(self.clone(), id));
                Ok((true, run))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Progression
// ---------------------------------------------------------------------------------------------

/// Sleeps `dur`, or less if the deadline comes first. True if the deadline was reached.
async fn pause(dur: Duration, deadline: DateTime<Utc>) -> bool {
    let left = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    if left <= dur {
        tokio::time::sleep(left).await;
        true
    } else {
        tokio::time::sleep(dur).await;
        false
    }
}

/// After a pause: the run (if it still exists and is still in `expected`), with the deadline
/// applied; `None` means the task has nothing more to do.
fn resume<'a>(
    inner: &'a mut Inner,
    run_id: &str,
    expected: RunStatus,
    deadline_hit: bool,
) -> Option<&'a mut RunEntry> {
    let entry = inner.runs.get_mut(run_id)?;
    let now = Utc::now();
    if entry.run.status != expected {
        // Canceled, failed or timed out meanwhile.
        entry.enforce_deadline(now);
        return None;
    }
    if deadline_hit {
        entry.time_out(now);
        return None;
    }
    if entry.enforce_deadline(now) {
        return None;
    }
    Some(entry)
}

/// The progression task of one run:
/// `queued` → (latency/4) → `running` → (latency) → `succeeded`, or, if the agent requires
/// approval, `awaiting_approval` → (approve sets `running`) → (latency) → `succeeded`.
/// Cancel, reset and the deadline stop it.
async fn progress(state: AppState, run_id: String) {
    let (latency, deadline, wake, agent) = {
        let inner = state.lock().await;
        let Some(entry) = inner.runs.get(&run_id) else {
            return;
        };
        let Some(agent) = state.fixtures.agent(&entry.run.agent_id) else {
            return;
        };
        (
            state.latency(agent),
            entry.run.deadline_at,
            entry.wake.clone(),
            agent.clone(),
        )
    };

    let hit = pause(latency / 4, deadline).await;
    {
        let mut inner = state.lock().await;
        let Some(entry) = resume(&mut inner, &run_id, RunStatus::Queued, hit) else {
            return;
        };
        entry.transition(RunStatus::Running, None, Utc::now());
    }

    let hit = pause(latency, deadline).await;
    {
        let mut inner = state.lock().await;
        let needs_approval = inner.requires_approval(&agent);
        let Some(entry) = resume(&mut inner, &run_id, RunStatus::Running, hit) else {
            return;
        };
        if !needs_approval {
            entry.transition(RunStatus::Succeeded, None, Utc::now());
            return;
        }
        let prompt = format!("Approve tool '{APPROVAL_TOOL}' to continue");
        entry.approvals.push(Approval {
            id: format!("apr-{}", uuid::Uuid::new_v4().simple()),
            kind: ApprovalKind::ToolApproval,
            prompt: prompt.clone(),
            status: ApprovalStatus::Pending,
        });
        entry.transition(RunStatus::AwaitingApproval, Some(prompt), Utc::now());
    }

    // Wait for approve (which sets `running`), cancel, reset or the deadline.
    let until_deadline = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    let hit = tokio::time::timeout(until_deadline, wake.notified())
        .await
        .is_err();
    if hit {
        let mut inner = state.lock().await;
        if let Some(entry) = inner.runs.get_mut(&run_id) {
            if !entry.run.status.is_terminal() {
                entry.time_out(Utc::now());
            }
        }
        return;
    }

    let hit = pause(latency, deadline).await;
    let mut inner = state.lock().await;
    if let Some(entry) = resume(&mut inner, &run_id, RunStatus::Running, hit) {
        entry.transition(RunStatus::Succeeded, None, Utc::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> Fixtures {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/q-fixtures.json");
        Fixtures::load(&path).expect("fixtures load")
    }

    fn req(workflow_id: &str, agent_id: &str, parts: &[&str]) -> CreateRunRequest {
        CreateRunRequest {
            workflow_id: workflow_id.to_owned(),
            tenant_id: "t-acme".to_owned(),
            principal_id: "p-alice".to_owned(),
            agent_id: agent_id.to_owned(),
            input: RunInput {
                parts: parts.iter().map(|p| (*p).to_owned()).collect(),
            },
            execution_timeout_seconds: 3600,
        }
    }

    async fn wait_for(state: &AppState, run_id: &str, status: RunStatus) -> Run {
        for _ in 0..200 {
            {
                let mut inner = state.lock().await;
                let run = inner.run_mut(run_id).unwrap().run.clone();
                if run.status == status {
                    return run;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {run_id} never reached {status:?}");
    }

    #[test]
    fn decide_create_is_idempotent_on_input_hash() {
        let a = req("wf-1", "ag-writer", &["hello", "world"]);
        let now = Utc::now();
        let run = RunEntry::new("run-1".into(), &a, now, now).run;
        assert_eq!(decide_create(None, &a), CreateDecision::Create);
        assert_eq!(decide_create(Some(&run), &a), CreateDecision::Existing);
        let different_input = req("wf-1", "ag-writer", &["hello world"]);
        assert_eq!(
            decide_create(Some(&run), &different_input),
            CreateDecision::Conflict
        );
        let mut other_principal = a.clone();
        other_principal.principal_id = "p-bob".into();
        assert_eq!(
            decide_create(Some(&run), &other_principal),
            CreateDecision::Conflict
        );
        // The timeout is not part of the identity of the request.
        let mut other_timeout = a.clone();
        other_timeout.execution_timeout_seconds = 10;
        assert_eq!(
            decide_create(Some(&run), &other_timeout),
            CreateDecision::Existing
        );
    }

    #[test]
    fn transitions_append_events_and_output() {
        let now = Utc::now();
        let mut e = RunEntry::new(
            "run-x".into(),
            &req("wf", "ag-writer", &["q"]),
            now,
            now + TimeDelta::hours(1),
        );
        assert_eq!(e.last_seq(), 1);
        assert_eq!(e.events[0].status, RunStatus::Queued);
        e.transition(RunStatus::Running, None, now);
        assert!(e.output.is_none());
        e.transition(RunStatus::Succeeded, None, now);
        assert_eq!(e.last_seq(), 3);
        assert_eq!(e.events_after(1).len(), 2);
        let out = e.served_output().unwrap();
        assert_eq!(out.artifact_id, "answer-run-x");
        assert_eq!(out.sha256, text_sha256(&out.text));
        assert_eq!(out.byte_count, out.text.len() as u64);
        assert!(out.text.contains("You asked: **q**"));
        e.corrupt = Some(CorruptMode::ByteCount);
        assert_eq!(e.served_output().unwrap().byte_count, out.byte_count + 1);
        e.corrupt = Some(CorruptMode::Checksum);
        assert_ne!(e.served_output().unwrap().sha256, out.sha256);
    }

    #[test]
    fn deadline_times_out_non_terminal_runs_only() {
        let now = Utc::now();
        let mut e = RunEntry::new("r".into(), &req("wf", "ag-writer", &["q"]), now, now);
        assert!(e.enforce_deadline(now));
        assert_eq!(e.run.status, RunStatus::TimedOut);
        assert_eq!(e.last_seq(), 2);
        // Idempotent: no further event.
        assert!(e.enforce_deadline(now));
        assert_eq!(e.last_seq(), 2);
    }

    #[test]
    fn output_quotes_at_most_200_chars() {
        let long = "é".repeat(500);
        let out = synthesize_output("r", &RunInput { parts: vec![long] });
        assert!(out.text.contains(&format!("**{}**", "é".repeat(200))));
        assert_eq!(out.byte_count, out.text.len() as u64);
    }

    #[test]
    fn workspace_access_granted_revoked_none() {
        let f = fixtures();
        let mut inner = Inner::default();
        assert_eq!(
            inner.workspace_access(&f, "ws-acme-main", "p-bob"),
            WorkspaceAccess::Granted
        );
        assert_eq!(
            inner.workspace_access(&f, "ws-acme-private", "p-bob"),
            WorkspaceAccess::None
        );
        inner
            .workspace_grants
            .insert(("ws-acme-main".into(), "p-bob".into()), false);
        assert_eq!(
            inner.workspace_access(&f, "ws-acme-main", "p-bob"),
            WorkspaceAccess::Revoked
        );
    }

    #[test]
    fn delay_without_count_applies_once() {
        let mut faults = Faults::default();
        faults.apply(FaultsPatch {
            create_delay_ms: Some(50),
            ..Default::default()
        });
        assert_eq!(faults.take_create_delay(), Some(Duration::from_millis(50)));
        assert_eq!(faults.take_create_delay(), None);
    }

    #[tokio::test]
    async fn concurrent_creates_make_one_run() {
        let state = AppState::new(fixtures(), 0.01);
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let state = state.clone();
            tasks.push(tokio::spawn(async move {
                state
                    .create_run(req("wf-race", "ag-writer", &["hi"]))
                    .await
                    .unwrap()
            }));
        }
        let mut created = 0;
        let mut ids = HashSet::new();
        for t in tasks {
            let (c, run) = t.await.unwrap();
            created += usize::from(c);
            ids.insert(run.id);
        }
        assert_eq!(created, 1);
        assert_eq!(ids.len(), 1);
        assert_eq!(state.lock().await.stats.runs_created, 1);
    }

    #[tokio::test]
    async fn run_succeeds_and_approval_flow_resumes() {
        let state = AppState::new(fixtures(), 0.01);
        let (_, run) = state
            .create_run(req("wf-a", "ag-writer", &["hi"]))
            .await
            .unwrap();
        wait_for(&state, &run.id, RunStatus::Succeeded).await;

        let (_, run) = state
            .create_run(req("wf-b", "ag-approver", &["hi"]))
            .await
            .unwrap();
        let waiting = wait_for(&state, &run.id, RunStatus::AwaitingApproval).await;
        assert_eq!(
            waiting.status_message.as_deref(),
            Some("Approve tool 'web.search' to continue")
        );
        {
            let mut inner = state.lock().await;
            let e = inner.run_mut(&run.id).unwrap();
            e.approvals[0].status = ApprovalStatus::Approved;
            e.transition(RunStatus::Running, None, Utc::now());
            e.wake();
        }
        wait_for(&state, &run.id, RunStatus::Succeeded).await;
        let inner = state.lock().await;
        let statuses: Vec<RunStatus> = inner.runs[&run.id]
            .events
            .iter()
            .map(|e| e.status)
            .collect();
        assert_eq!(
            statuses,
            [
                RunStatus::Queued,
                RunStatus::Running,
                RunStatus::AwaitingApproval,
                RunStatus::Running,
                RunStatus::Succeeded
            ]
        );
    }
}
