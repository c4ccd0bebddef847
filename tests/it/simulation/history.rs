//! What one simulated run recorded: every client call with its answer, every fault with its
//! moment, and what Q and the gateway hold at the end. Times are milliseconds since the run
//! started, on the test's clock; a call's `started` is taken before its request is sent and
//! `ended` after its answer was read, so the true moment of anything the gateway did for it
//! lies between the two.

use std::collections::BTreeSet;
use std::fmt;

use super::check::Violation;

/// A message's identity as the profile defines it: (principal, agent, messageId); the tenant
/// follows from the principal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    pub principal: String,
    pub agent: String,
    pub message_id: String,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.principal, self.agent, self.message_id)
    }
}

/// A task as one answer showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub task_id: String,
    pub state: String,
    /// The answer carried content (history, artifacts or a status message), not only a
    /// control receipt (id, context, state, timestamp).
    pub content: bool,
}

/// One frame of a stream, when it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub at: u64,
    pub seen: Seen,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A JSON answer naming tasks (one for a send, GetTask or CancelTask; a page for ListTasks).
    Tasks(Vec<Seen>),
    /// A stream was opened (its headers arrived at `opened`); its frames; how it ended.
    Stream {
        opened: u64,
        frames: Vec<Frame>,
        end: String,
    },
    /// A JSON-RPC error or an HTTP refusal the client is told about (code or status).
    Refused(String),
    /// No usable answer: transport failure, 5xx, or a JSON-RPC internal error.
    Failed(String),
    /// Something Q-side the schedule did for the client (an approval), or a step skipped
    /// because what it names does not exist yet.
    Done(String),
}

#[derive(Debug, Clone)]
pub struct Call {
    pub seq: usize,
    pub replica: usize,
    pub token: String,
    pub principal: String,
    pub agent: String,
    pub what: String,
    /// The identity of a send.
    pub identity: Option<Identity>,
    pub started: u64,
    pub ended: u64,
    pub outcome: Outcome,
}

impl Call {
    /// Every task this call's answer named, with the moment the client had it.
    pub fn seen(&self) -> Vec<(u64, &Seen)> {
        match &self.outcome {
            Outcome::Tasks(tasks) => tasks.iter().map(|t| (self.ended, t)).collect(),
            Outcome::Stream { frames, .. } => frames.iter().map(|f| (f.at, &f.seen)).collect(),
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {}..{} ms replica {} {} {} {}",
            self.seq, self.started, self.ended, self.replica, self.token, self.agent, self.what
        )?;
        match &self.outcome {
            Outcome::Tasks(tasks) => {
                for t in tasks {
                    write!(f, " -> {} {} content={}", t.task_id, t.state, t.content)?;
                }
                Ok(())
            }
            Outcome::Stream {
                opened,
                frames,
                end,
            } => {
                write!(f, " -> stream opened at {opened} ms")?;
                for fr in frames {
                    write!(
                        f,
                        " [{} ms {} {} content={}]",
                        fr.at, fr.seen.task_id, fr.seen.state, fr.seen.content
                    )?;
                }
                write!(f, " end: {end}")
            }
            Outcome::Refused(why) => write!(f, " -> refused {why}"),
            Outcome::Failed(why) => write!(f, " -> failed {why}"),
            Outcome::Done(what) => write!(f, " -> {what}"),
        }
    }
}

/// A fault the schedule injected, from `at` until `until` (the moment it was undone, for the
/// faults that are undone).
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: FaultKind,
    pub at: u64,
    pub until: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// A contract fault set through Q's `/admin/faults` (its JSON, as sent).
    Q(String),
    /// A feed failed over to another history, or compacted to its head.
    FeedFailover(&'static str),
    FeedCompacted(&'static str),
    /// Q revoked this bearer token (for good).
    TokenRevoked(String),
    /// Q revoked the principal's access to a workspace (restored at `until`).
    WorkspaceRevoked {
        principal: String,
        workspace: String,
    },
    /// Q made an agent unavailable (available again at `until`).
    AgentUnavailable(String),
    /// A replica was SIGKILLed (restarted at `until`).
    ReplicaKilled(usize),
    /// The Redis server was stopped (started again, empty, at `until`).
    RedisRestarted,
    /// Every PostgreSQL connection of the gateways was terminated by the server.
    PostgresConnectionsKilled,
    /// The PostgreSQL primary crashed (`pg_ctl stop -m immediate`; started again at `until`).
    PostgresRestarted,
    /// The PostgreSQL primary crashed and its synchronous standby was promoted (at `until`;
    /// the old primary then rejoins as the new one's standby).
    PostgresFailedOver,
    /// The Redis primary was demoted under its replica, which was promoted; the address the
    /// gateways use moved to it at `until`.
    RedisDemoted,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fault at {} ms", self.at)?;
        if let Some(until) = self.until {
            write!(f, " until {until} ms")?;
        }
        write!(f, ": {:?}", self.kind)
    }
}

/// A task as the gateway holds it at the end (its row) and as its owner's GetTask answered it.
#[derive(Debug, Clone)]
pub struct FinalTask {
    pub identity: Identity,
    pub task_id: String,
    pub workflow_id: String,
    pub run_id: Option<String>,
    /// The row's state and timestamps, on the run's clock (ms since it started; the database's
    /// clock is this machine's): when it was created, and when its state last changed.
    pub stored_state: String,
    /// The row's dispatch: `pending` or `unknown` until Q's run is recorded.
    pub dispatch: String,
    pub created_at: u64,
    pub status_at: u64,
    /// GetTask by the owner after the run, and when it was answered; `None`: not found.
    pub read: Option<Seen>,
    pub read_at: u64,
}

/// A run as Q's own record has it at the end.
#[derive(Debug, Clone)]
pub struct QRun {
    pub run_id: String,
    pub workflow_id: String,
    pub principal: String,
    pub agent: String,
    pub status: String,
}

/// A request Q received that names a workflow (a create, a lookup by workflow id), as Q
/// recorded it, in arrival order: the Q side of the history.
#[derive(Debug, Clone)]
pub struct QCall {
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub workflow_id: String,
    /// The status Q answered with (`None`: no answer was written, e.g. a dropped connection).
    pub status: Option<u64>,
    pub error: Option<String>,
}

impl fmt::Display for QCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Q #{} {} {} workflow {} -> {:?} {}",
            self.seq,
            self.method,
            self.path,
            self.workflow_id,
            self.status,
            self.error.as_deref().unwrap_or("")
        )
    }
}

/// The bounds the checker holds the run to (the gateway's configuration in the run), and the
/// tolerance each is checked with.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// A revoked token's content stops within this (the introspection cache's TTL).
    pub token_ms: u64,
    /// A revoked workspace grant's content stops within this (the freshness rule).
    pub access_ms: u64,
    /// Added to the revocation bounds. A call counts from the moment its request left the
    /// client, before the gateway saw it, and a revocation from the end of Q's admin call,
    /// after Q committed it: both err towards the gateway, so this only covers the clock's
    /// granularity.
    pub revocation_tolerance_ms: u64,
    /// Added to the deadline bound: the deadline passes in Q, whose run feed tells the
    /// replicas (a long poll) and whose answer the reconciler projects (a pass): a tenth of the
    /// 8 s deadline.
    pub tolerance_ms: u64,
    /// Execution deadline of every run, and the reconciler's interval.
    pub deadline_ms: u64,
    pub reconcile_interval_ms: u64,
    /// Observer leases per principal, and how long an observation may run uncounted after
    /// Redis came back empty (a third of the lease TTL: the renewal that finds its lease gone
    /// ends it).
    pub per_principal: usize,
    pub uncounted_after_redis_restart_ms: u64,
    /// A stream whose headers came this long after Redis stopped taking writes took its lease
    /// after that: the time a lease acquisition that began before takes to answer.
    pub lease_margin_ms: u64,
    /// What a run must at least have done to count as a run at all.
    pub floors: Floors,
}

/// The least a seed's run must show, so that a deployment that fails every call (or drops
/// every create) cannot pass by breaking no promise.
#[derive(Debug, Clone)]
pub struct Floors {
    /// Client calls answered with a task or a stream.
    pub answered: usize,
    /// Tasks read back completed at the end.
    pub completed: usize,
    /// Runs in Q.
    pub runs: usize,
    /// Calls refused at an observer bound (HTTP 429): the bound was exercised.
    pub lease_refusals: usize,
    /// Every revocation followed by a read of the token or principal it reaches, once its
    /// bound had passed (and before it was undone).
    pub revocations_read: bool,
}

/// Everything one seed's run recorded.
#[derive(Debug, Clone)]
pub struct History {
    pub seed: u64,
    pub calls: Vec<Call>,
    pub faults: Vec<Fault>,
    pub tasks: Vec<FinalTask>,
    pub runs: Vec<QRun>,
    pub q_calls: Vec<QCall>,
    /// Q's count of its injected faults that took effect, by counter (`create_drop_after_commit`,
    /// `status:create_run`, ...): an armed fault no request met is not counted.
    pub q_fired: std::collections::BTreeMap<String, u64>,
    pub bounds: Bounds,
}

/// The part of the history that shows a violation: its calls, every other call of the same
/// identities, the requests Q received for their workflows, and the faults injected from 5 s
/// before the first of them to the end of the last.
pub fn excerpt(h: &History, v: &Violation) -> String {
    let involved: Vec<&Call> = h
        .calls
        .iter()
        .filter(|c| v.calls.contains(&c.seq))
        .collect();
    let from = involved.iter().map(|c| c.started).min().unwrap_or(0);
    let until = involved.iter().map(|c| c.ended).max().unwrap_or(u64::MAX);
    let identities: BTreeSet<&Identity> = involved
        .iter()
        .filter_map(|c| c.identity.as_ref())
        .collect();
    let workflows: BTreeSet<&str> = h
        .tasks
        .iter()
        .filter(|t| identities.contains(&t.identity))
        .map(|t| t.workflow_id.as_str())
        .collect();
    let mut lines = vec![format!("seed {}: {} — {}", h.seed, v.invariant, v.what)];
    for fault in &h.faults {
        if fault.at + 5_000 >= from && fault.at <= until {
            lines.push(format!("  {fault}"));
        }
    }
    for call in &h.calls {
        if v.calls.contains(&call.seq)
            || call
                .identity
                .as_ref()
                .is_some_and(|i| identities.contains(i))
        {
            lines.push(format!("  {call}"));
        }
    }
    for q in &h.q_calls {
        if workflows.contains(q.workflow_id.as_str()) {
            lines.push(format!("  {q}"));
        }
    }
    lines.join("\n")
}

/// The whole history: every fault and every call, in the order they started, then the end
/// state and the requests Q received that named a workflow.
pub fn whole(h: &History) -> String {
    let mut lines = vec![format!("seed {}", h.seed)];
    lines.extend(h.faults.iter().map(|f| f.to_string()));
    lines.extend(h.calls.iter().map(|c| c.to_string()));
    for t in &h.tasks {
        lines.push(format!(
            "end: task {} {} {} dispatch {} run {:?} read at {} ms: {:?}",
            t.task_id, t.identity, t.stored_state, t.dispatch, t.run_id, t.read_at, t.read
        ));
    }
    for r in &h.runs {
        lines.push(format!(
            "end: Q run {} {} {}",
            r.run_id, r.workflow_id, r.status
        ));
    }
    lines.extend(h.q_calls.iter().map(|q| q.to_string()));
    lines.join("\n")
}

/// What an answer's task shows: content or only a control receipt.
pub fn seen(task: &serde_json::Value) -> Option<Seen> {
    let task_id = task["id"].as_str()?.to_string();
    let non_empty = |v: &serde_json::Value| v.as_array().is_some_and(|a| !a.is_empty());
    Some(Seen {
        task_id,
        state: task["status"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        content: non_empty(&task["history"])
            || non_empty(&task["artifacts"])
            || !task["status"]["message"].is_null(),
    })
}
