//! Q's access answers (agent access, evidence grants), cached under the freshness rule
//! ([`clearance`]: content only with Q's confirmation within the bound), kept current by Q's
//! access change feed, failing closed when neither can vouch for them.
//!
//! - A cached answer serves while the access feed is *trusted* (this replica's follower read
//!   it up to its head in a poll sent at most `feed_trust` ago, at most 1 s) or, without the
//!   feed, while it was fetched from Q at most `direct_ttl` ago (at most 5 s); never past
//!   `max_age` (at most 60 s); never once a change on the feed named it ([`stamped`]).
//! - Every change the feed reports sets one mark (by principal, by tenant + agent, by run +
//!   principal); a change missing an id its kind names, or of a kind this revision does not
//!   know, forgets everything, as does a follower that lost its place in the feed.
//! - An answer with a value this contract revision does not define is never cached (it counts
//!   as no access, and Q is asked again).
//! - Outage: only while Q is down for this replica and was heard from within `outage_grace`
//!   (0 by default), a [`Purpose::Read`] lookup (GetTask, ListTasks) may use the last valid
//!   answer for the *agent access* that decides whether the caller sees its tasks at all;
//!   content is never cleared then, so such reads are content-free receipts.

mod clearance;
mod stamped;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use clearance::Clearance;
pub use stamped::Stamp;
use stamped::{Freshness, Invalidations, Key, Mark, Stamped};

use crate::upstream::contract::{
    AccessChange, AccessChangeKind, Agent, AgentAccess, ErrorCode, EvidenceGrant, Run,
    WorkspaceAccess,
};
use crate::upstream::{Reachability, UpstreamError, UpstreamRunApi};

/// Most run ids asked in one evidence query (the contract's limit).
const GRANT_QUERY_MAX: usize = 1000;

/// Marks kept per cached entry of capacity: a change rate that would overflow them (four times
/// the cache's entries within its hard time-to-live) forgets everything instead.
const MARKS_PER_ENTRY: u64 = 4;

/// What a lookup is for: whether a last known answer may stand in for Q during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// GetTask, ListTasks: within the outage grace, content-free receipts for a caller known
    /// from before the outage.
    Read,
    /// Everything else (the card, sends, streams, cancellation): Q must confirm now.
    Current,
}

/// Settings of the access caches, typed once at start-up.
#[derive(Debug, Clone, Copy)]
pub struct AccessSettings {
    /// How long after a caught-up poll of the access feed was sent cached answers serve (≤ 1 s).
    pub feed_trust: Duration,
    /// How long an answer fetched from Q serves while the feed does not vouch for it (≤ 5 s).
    pub direct_ttl: Duration,
    /// Hard time-to-live of every cached answer (≤ 60 s).
    pub max_age: Duration,
    /// While Q is down, how long after it last answered its last agent access answers still
    /// serve content-free reads; zero never.
    pub outage_grace: Duration,
    /// Most entries of typical size per cache.
    pub capacity: u64,
}

/// Whose access to which agent.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub tenant_id: &'a str,
    pub agent_id: &'a str,
    pub principal_id: &'a str,
    /// The caller is known only from before Q went down: it is never cleared for content.
    pub last_known: bool,
}

/// Q's answer for one principal and agent, as cached and handed out: the agent shared by
/// every request that reads it, not copied (a copy was six allocations per read).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentAnswer {
    pub agent: Arc<Agent>,
    pub workspace_access: WorkspaceAccess,
}

impl From<AgentAccess> for AgentAnswer {
    fn from(access: AgentAccess) -> Self {
        AgentAnswer {
            agent: Arc::new(access.agent),
            workspace_access: access.workspace_access,
        }
    }
}

/// (tenant, agent, principal).
type AgentKey = Key;
/// (run, principal).
type GrantKey = Key;

/// The caches, the marks of changes and the feed's clock.
pub struct AccessCache {
    upstream: UpstreamRunApi,
    reachability: Arc<Reachability>,
    /// (tenant, agent, principal) → Q's answer (`None`: no such agent in the tenant).
    agents: Stamped<AgentKey, Option<AgentAnswer>>,
    /// (run, principal) → evidence granted.
    grants: Stamped<GrantKey, bool>,
    invalidations: Invalidations,
    epoch: Instant,
    /// Milliseconds after `epoch` (plus one) at which the newest caught-up poll of the feed
    /// was sent; 0: never.
    confirmed: AtomicU64,
    settings: AccessSettings,
    hits: crate::metrics::AccessHits,
}

/// How a lookup was answered, for the hit-ratio metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Hit,
    Miss,
    Stale,
}

/// The clearances of a ListTasks page: the caller's workspace access once, its grants per run.
#[derive(Debug)]
pub struct Clearances {
    workspace: bool,
    granted: HashMap<String, bool>,
}

impl Clearances {
    /// The clearance of a task with this run (`None`: no run yet, only the caller's own
    /// message is content).
    pub fn of(&self, run_id: Option<&str>) -> Option<Clearance> {
        let granted = match run_id {
            None => true,
            Some(run) => self.granted.get(run).copied().unwrap_or(false),
        };
        (self.workspace && granted).then(Clearance::confirmed)
    }
}

fn agent_bytes(key: &AgentKey, value: &Option<AgentAnswer>) -> usize {
    let agent = value.as_ref().map_or(0, |a| {
        a.agent.id.len()
            + a.agent.tenant_id.len()
            + a.agent.name.len()
            + a.agent.description.len()
            + a.agent.version.len()
            + a.agent.workspace_id.len()
    });
    64 + key.len() + agent
}

fn grant_bytes(key: &GrantKey, _: &bool) -> usize {
    48 + key.len()
}

impl AccessCache {
    /// Counts how a lookup was answered (the hit-ratio metric).
    fn record(&self, cache: &'static str, outcome: Outcome) {
        let outcome = match outcome {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Stale => "stale",
        };
        self.hits.record(cache, outcome);
    }

    pub fn new(upstream: UpstreamRunApi, settings: AccessSettings) -> Arc<Self> {
        let capacity = settings.capacity.max(1);
        Arc::new(AccessCache {
            reachability: upstream.reachability().clone(),
            upstream,
            agents: Stamped::new(capacity, settings.max_age, agent_bytes),
            grants: Stamped::new(capacity, settings.max_age, grant_bytes),
            invalidations: Invalidations::new(
                settings.max_age,
                capacity.saturating_mul(MARKS_PER_ENTRY),
            ),
            epoch: Instant::now(),
            confirmed: AtomicU64::new(0),
            settings,
            hits: Default::default(),
        })
    }

    fn ms_since_epoch(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }

    /// Time since the newest caught-up poll of the feed was sent; `None` if none was.
    pub fn since_confirmed(&self) -> Option<Duration> {
        match self.confirmed.load(Ordering::Acquire) {
            0 => None,
            at => Some(Duration::from_millis(
                self.ms_since_epoch(Instant::now()).saturating_sub(at),
            )),
        }
    }

    /// Whether the feed vouches for cached answers now.
    pub fn trusted(&self) -> bool {
        self.since_confirmed()
            .is_some_and(|age| age <= self.settings.feed_trust)
    }

    /// How long the feed's trust lasts after a caught-up poll.
    pub fn feed_trust(&self) -> Duration {
        self.settings.feed_trust
    }

    /// How long a direct answer of Q serves without the feed.
    pub fn direct_ttl(&self) -> Duration {
        self.settings.direct_ttl
    }

    /// The follower read the whole feed (up to its head) in a poll sent at `sent`, and applied
    /// it: cached answers are current as of then.
    pub fn confirm(&self, sent: Instant) {
        self.confirmed
            .fetch_max(self.ms_since_epoch(sent), Ordering::AcqRel);
    }

    /// Forgets every cached answer (the follower lost its place, or a change of unknown kind).
    pub fn forget_all(&self) {
        self.invalidations.forget_all();
        self.agents.clear();
        self.grants.clear();
    }

    /// Invalidates every cached answer `change` may affect; a change without the ids its kind
    /// names forgets everything (docs/upstream-api.md).
    pub fn apply(&self, change: &AccessChange) {
        let principal = change.principal_id.as_deref();
        let mark = match change.kind {
            AccessChangeKind::EvidenceGrant => change
                .run_id
                .as_deref()
                .zip(principal)
                .map(|(run, principal)| Mark::Grant(run, principal)),
            AccessChangeKind::WorkspaceMembership => change
                .workspace_id
                .as_ref()
                .and(principal)
                .map(Mark::Principal),
            AccessChangeKind::Agent => change
                .tenant_id
                .as_deref()
                .zip(change.agent_id.as_deref())
                .map(|(tenant, agent)| Mark::Agent(tenant, agent)),
            AccessChangeKind::Unknown => None,
        };
        match mark {
            Some(mark) => self.invalidations.mark(mark),
            None => self.forget_all(),
        }
    }

    /// How fresh a cached answer must be to serve now.
    fn freshness(&self) -> Freshness {
        if self.trusted() {
            Freshness::Vouched
        } else {
            Freshness::FetchedWithin(self.settings.direct_ttl)
        }
    }

    /// Whether, Q being down, a read may be answered content-free from last known answers.
    pub fn outage_receipts(&self, purpose: Purpose) -> bool {
        purpose == Purpose::Read
            && self
                .reachability
                .within_outage_grace(self.settings.outage_grace)
    }

    /// The agent and the principal's workspace access; `Ok(None)` for an agent Q does not
    /// know in this tenant.
    pub async fn agent_access(
        &self,
        who: Who<'_>,
        purpose: Purpose,
    ) -> Result<Option<AgentAnswer>, UpstreamError> {
        Ok(self.agent_access_dated(who, purpose).await?.0)
    }

    /// [`AccessCache::agent_access`], with when the answer's fetch from Q was sent: while the
    /// access feed is not trusted the answer serves until `ttl` after that, and no longer.
    pub async fn agent_access_dated(
        &self,
        who: Who<'_>,
        purpose: Purpose,
    ) -> Result<(Option<AgentAnswer>, Instant), UpstreamError> {
        let names = [who.tenant_id, who.agent_id, who.principal_id];
        let marks = [
            Mark::Principal(who.principal_id),
            Mark::Agent(who.tenant_id, who.agent_id),
        ];
        let inv = &self.invalidations;
        let freshness = self.freshness();
        if let Some(dated) = Key::lookup(&names, |key| {
            self.agents.get_dated(key, &marks, inv, freshness)
        }) {
            self.record("agent", Outcome::Hit);
            return Ok(dated);
        }
        let stamp = inv.begin();
        let sent = stamp.at();
        match self
            .upstream
            .agent_access(who.tenant_id, who.agent_id, who.principal_id)
            .await
        {
            Ok(access) => {
                self.record("agent", Outcome::Miss);
                let access = access.map(AgentAnswer::from);
                let known = access
                    .as_ref()
                    .is_none_or(|a| a.workspace_access != WorkspaceAccess::Unknown);
                if known {
                    self.agents.insert(Key::new(&names), access.clone(), stamp);
                }
                Ok((access, sent))
            }
            Err(e) if self.outage_receipts(purpose) => {
                // The last answer no change has invalidated, however old (within max_age).
                let last = Key::lookup(&names, |key| {
                    self.agents.get_dated(key, &marks, inv, Freshness::Vouched)
                });
                match last {
                    Some(dated) => {
                        self.record("agent", Outcome::Stale);
                        Ok(dated)
                    }
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The principal's evidence grant on a run, under the freshness rule.
    async fn evidence(&self, run_id: &str, principal_id: &str) -> Result<bool, UpstreamError> {
        let names = [run_id, principal_id];
        let marks = [Mark::Grant(run_id, principal_id)];
        let inv = &self.invalidations;
        let freshness = self.freshness();
        if let Some(granted) =
            Key::lookup(&names, |key| self.grants.get(key, &marks, inv, freshness))
        {
            self.record("grant", Outcome::Hit);
            return Ok(granted);
        }
        let stamp = inv.begin();
        let answer = match self.upstream.run_grant(run_id, principal_id).await {
            // A run Q does not know grants nothing (as its batch query answers).
            Err(e) if e.is(ErrorCode::RunNotFound) => Ok(EvidenceGrant::Revoked),
            other => other.map(|grant| grant.evidence),
        }?;
        self.record("grant", Outcome::Miss);
        let granted = answer == EvidenceGrant::Granted;
        // A value this contract revision does not define is asked again next time.
        if answer != EvidenceGrant::Unknown {
            self.grants.insert(Key::new(&names), granted, stamp);
        }
        Ok(granted)
    }

    /// The stamp of a call to Q whose answer may carry an access answer (a create's
    /// `principal_evidence`), taken before the call: a change the feed reports while the
    /// answer is on its way invalidates what it carries, as for the cache's own fetches.
    pub fn stamp(&self) -> Stamp {
        self.invalidations.begin()
    }

    /// Keeps the evidence grant of a run's own principal that Q's create answered with
    /// (the call stamped at `stamp`), so the clearance that follows the create does not ask
    /// Q for it again. Absent or a value this contract revision does not define: nothing is
    /// kept, and the grant is asked when needed.
    pub fn created_run(&self, run: &Run, stamp: Stamp) {
        let granted = match run.principal_evidence {
            Some(EvidenceGrant::Granted) => true,
            Some(EvidenceGrant::Revoked) => false,
            Some(EvidenceGrant::Unknown) | None => return,
        };
        self.grants
            .insert(Key::new(&[&run.id, &run.principal_id]), granted, stamp);
    }

    /// The principal's evidence grants on many runs: cached ones from the cache, the rest in
    /// one query per thousand.
    async fn evidence_many(
        &self,
        principal_id: &str,
        run_ids: &[String],
    ) -> Result<HashMap<String, bool>, UpstreamError> {
        let freshness = self.freshness();
        let inv = &self.invalidations;
        let mut answers = HashMap::with_capacity(run_ids.len());
        let mut missing = Vec::new();
        for run in run_ids {
            let marks = [Mark::Grant(run, principal_id)];
            match Key::lookup(&[run, principal_id], |key| {
                self.grants.get(key, &marks, inv, freshness)
            }) {
                Some(granted) => {
                    self.record("grant", Outcome::Hit);
                    answers.insert(run.clone(), granted);
                }
                None => missing.push(run.clone()),
            }
        }
        for chunk in missing.chunks(GRANT_QUERY_MAX) {
            let stamp = inv.begin();
            let grants = self
                .upstream
                .evidence_grants(principal_id, chunk.to_vec())
                .await?;
            for grant in grants.grants {
                // Only the runs asked about: an answer naming another is not taken.
                if !chunk.contains(&grant.run_id) {
                    continue;
                }
                self.record("grant", Outcome::Miss);
                let granted = grant.evidence == EvidenceGrant::Granted;
                if grant.evidence != EvidenceGrant::Unknown {
                    self.grants
                        .insert(Key::new(&[&grant.run_id, principal_id]), granted, stamp);
                }
                answers.insert(grant.run_id, granted);
            }
        }
        Ok(answers)
    }

    /// Whether the caller's workspace access is granted, under the freshness rule.
    async fn workspace_granted(&self, who: Who<'_>) -> Result<bool, UpstreamError> {
        Ok(self
            .agent_access(who, Purpose::Current)
            .await?
            .is_some_and(|a| a.workspace_access == WorkspaceAccess::Granted))
    }

    /// The freshness rule for one task: `Some` if Q confirmed within the bound the caller's
    /// workspace access and, for a task with a run, its evidence grant on it; `None` if either
    /// is not granted, or if Q cannot confirm while a read is answered content-free within the
    /// outage grace. An error when Q cannot confirm otherwise: the answer fails closed.
    pub async fn clearance(
        &self,
        who: Who<'_>,
        run_id: Option<&str>,
        purpose: Purpose,
    ) -> Result<Option<Clearance>, UpstreamError> {
        if who.last_known {
            return Ok(None);
        }
        let confirmed = async {
            if !self.workspace_granted(who).await? {
                return Ok(false);
            }
            match run_id {
                None => Ok(true),
                Some(run) => self.evidence(run, who.principal_id).await,
            }
        };
        match confirmed.await {
            Ok(granted) => Ok(granted.then(Clearance::confirmed)),
            Err(_) if self.outage_receipts(purpose) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`AccessCache::clearance`] for a page of tasks: the workspace once, the grants of
    /// every run in one query (per thousand) for those not cached.
    pub async fn clearances(
        &self,
        who: Who<'_>,
        run_ids: &[String],
        purpose: Purpose,
    ) -> Result<Clearances, UpstreamError> {
        if who.last_known {
            return Ok(Clearances {
                workspace: false,
                granted: HashMap::new(),
            });
        }
        let confirmed = async {
            if !self.workspace_granted(who).await? {
                return Ok((false, HashMap::new()));
            }
            let granted = if run_ids.is_empty() {
                HashMap::new()
            } else {
                self.evidence_many(who.principal_id, run_ids).await?
            };
            Ok((true, granted))
        };
        match confirmed.await {
            Ok((workspace, granted)) => Ok(Clearances { workspace, granted }),
            Err(_) if self.outage_receipts(purpose) => Ok(Clearances {
                workspace: false,
                granted: HashMap::new(),
            }),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
