//! Q's access answers (agent access, evidence grants), cached and kept fresh by Q's access
//! change feed, failing closed when the feed cannot vouch for them.
//!
//! Rules, in one place:
//! - A cached answer is used only while the access feed is *trusted*: its follower on this
//!   replica (`crate::changes`) applied an answer of the feed at most `feed_trust` ago (at most
//!   5 s, the token-cache bound). Every change the feed reports removes the answers it may
//!   affect before the follower confirms the feed again, so through the feed a revocation is
//!   seen as soon as the follower reads it (well within 1 s).
//! - While the feed is not trusted (Q's feed fails, stalls, or this Q has no feed), every
//!   lookup asks Q and nothing is cached.
//! - An answer read from Q is cached only if no access change was applied while it was being
//!   read (a generation counter), so a revocation racing a lookup never leaves the older
//!   answer behind; an answer with a value this contract revision does not define is never
//!   cached (it counts as no access, and Q is asked again).
//! - Outage: when Q cannot be asked at all (no definite answer), a *read* ([`Purpose::Read`]:
//!   GetTask, ListTasks, the card) may use the last cached answer while Q was last confirmed
//!   reachable at most `outage_grace` ago. Writes never do. `outage_grace` 0 turns this off.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::upstream::contract::{
    AccessChange, AccessChangeKind, AgentAccess, ErrorCode, EvidenceGrant, WorkspaceAccess,
};
use crate::upstream::{UpstreamError, UpstreamRunApi};

/// Most run ids asked in one evidence query (the contract's limit).
const GRANT_QUERY_MAX: usize = 1000;

/// What a lookup is for: whether a last known answer may stand in for Q during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// GetTask, ListTasks, the card: may use the last known answer within the outage grace.
    Read,
    /// Anything that makes Q do work or hands out a stream: Q must answer.
    Write,
}

/// Settings of the access caches, typed once at start-up.
#[derive(Debug, Clone, Copy)]
pub struct AccessSettings {
    /// How long after the feed's last applied answer cached answers are trusted (≤ 5 s).
    pub feed_trust: Duration,
    /// How long after Q was last confirmed reachable its last answers still serve reads while
    /// Q cannot be asked; zero never serves them.
    pub outage_grace: Duration,
    /// Most entries per cache.
    pub capacity: u64,
}

type AgentKey = (String, String, String);
type GrantKey = (String, String);

/// The caches and the feed's clock.
pub struct AccessCache {
    upstream: UpstreamRunApi,
    /// (tenant, agent, principal) → Q's answer (`None`: no such agent in the tenant).
    agents: Cache<AgentKey, Option<AgentAccess>>,
    /// (run, principal) → evidence granted.
    grants: Cache<GrantKey, bool>,
    /// Bumped by every applied change: a lookup caches its answer only if it is unchanged.
    generation: AtomicU64,
    epoch: Instant,
    /// Milliseconds after `epoch` (plus one) of the feed's last applied answer; 0: never.
    confirmed: AtomicU64,
    settings: AccessSettings,
}

/// How a lookup was answered, for the hit-ratio metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Hit,
    Miss,
    Stale,
}

impl AccessCache {
    pub fn new(upstream: UpstreamRunApi, settings: AccessSettings) -> Arc<Self> {
        let capacity = settings.capacity.max(1);
        Arc::new(AccessCache {
            upstream,
            agents: Cache::builder().max_capacity(capacity).build(),
            grants: Cache::builder().max_capacity(capacity).build(),
            generation: AtomicU64::new(0),
            epoch: Instant::now(),
            confirmed: AtomicU64::new(0),
            settings,
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Time since the feed's last applied answer; `None` if it never answered.
    pub fn since_confirmed(&self) -> Option<Duration> {
        match self.confirmed.load(Ordering::Acquire) {
            0 => None,
            at => Some(Duration::from_millis(self.now_ms().saturating_sub(at))),
        }
    }

    /// Whether cached answers may be used now.
    pub fn trusted(&self) -> bool {
        self.since_confirmed()
            .is_some_and(|age| age <= self.settings.feed_trust)
    }

    /// Whether, Q being unreachable, a read may use a last known answer.
    fn within_outage_grace(&self) -> bool {
        !self.settings.outage_grace.is_zero()
            && self
                .since_confirmed()
                .is_some_and(|age| age <= self.settings.outage_grace)
    }

    /// The follower applied an answer of the feed: cached answers are current as of now.
    pub fn confirm(&self) {
        self.confirmed.store(self.now_ms(), Ordering::Release);
    }

    /// Forgets every cached answer (the feed was reset, or a change of unknown kind).
    pub fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.agents.invalidate_all();
        self.grants.invalidate_all();
    }

    /// Removes every cached answer `change` may affect.
    pub fn apply(&self, change: &AccessChange) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let principal = change.principal_id.as_deref();
        match change.kind {
            AccessChangeKind::EvidenceGrant => match (&change.run_id, principal) {
                (Some(run), Some(principal)) => {
                    self.grants.invalidate(&(run.clone(), principal.to_owned()))
                }
                (Some(run), None) => self.forget_grants(|(r, _)| r == run),
                _ => self.grants.invalidate_all(),
            },
            AccessChangeKind::WorkspaceMembership => {
                let workspace = change.workspace_id.as_deref();
                self.forget_agents(|(_, _, p), access| {
                    principal.is_none_or(|principal| principal == p)
                        && match (workspace, access) {
                            (Some(ws), Some(access)) => access.agent.workspace_id == ws,
                            _ => true,
                        }
                });
            }
            AccessChangeKind::Agent => {
                let tenant = change.tenant_id.as_deref();
                let agent = change.agent_id.as_deref();
                self.forget_agents(|(t, a, _), _| {
                    tenant.is_none_or(|tenant| tenant == t) && agent.is_none_or(|agent| agent == a)
                });
            }
            AccessChangeKind::Unknown => self.forget_all(),
        }
    }

    fn forget_agents(&self, affected: impl Fn(&AgentKey, &Option<AgentAccess>) -> bool) {
        let keys: Vec<Arc<AgentKey>> = self
            .agents
            .iter()
            .filter(|(key, value)| affected(key, value))
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            self.agents.invalidate(&*key);
        }
    }

    fn forget_grants(&self, affected: impl Fn(&GrantKey) -> bool) {
        let keys: Vec<Arc<GrantKey>> = self
            .grants
            .iter()
            .filter(|(key, _)| affected(key))
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            self.grants.invalidate(&*key);
        }
    }

    /// The agent and the principal's workspace access; `Ok(None)` for an agent Q does not
    /// know in this tenant.
    pub async fn agent_access(
        &self,
        tenant_id: &str,
        agent_id: &str,
        principal_id: &str,
        purpose: Purpose,
    ) -> Result<Option<AgentAccess>, UpstreamError> {
        let key = (
            tenant_id.to_owned(),
            agent_id.to_owned(),
            principal_id.to_owned(),
        );
        let trusted = self.trusted();
        if trusted {
            if let Some(access) = self.agents.get(&key) {
                record("agent", Outcome::Hit);
                return Ok(access);
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        match self
            .upstream
            .agent_access(tenant_id, agent_id, principal_id)
            .await
        {
            Ok(access) => {
                record("agent", Outcome::Miss);
                let known = access
                    .as_ref()
                    .is_none_or(|a| a.workspace_access != WorkspaceAccess::Unknown);
                if known && trusted && self.unchanged_since(generation) {
                    self.agents.insert(key, access.clone());
                }
                Ok(access)
            }
            Err(e) => match self.last_known(&self.agents, &key, &e, purpose) {
                Some(access) => {
                    record("agent", Outcome::Stale);
                    Ok(access)
                }
                None => Err(e),
            },
        }
    }

    /// The principal's evidence grant on a run.
    pub async fn evidence(
        &self,
        run_id: &str,
        principal_id: &str,
        purpose: Purpose,
    ) -> Result<bool, UpstreamError> {
        let key = (run_id.to_owned(), principal_id.to_owned());
        let trusted = self.trusted();
        if trusted {
            if let Some(granted) = self.grants.get(&key) {
                record("grant", Outcome::Hit);
                return Ok(granted);
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let answer = match self.upstream.run_grant(run_id, principal_id).await {
            // A run Q does not know grants nothing (as its batch query answers).
            Err(e) if e.is(ErrorCode::RunNotFound) => Ok(EvidenceGrant::Revoked),
            other => other.map(|grant| grant.evidence),
        };
        match answer {
            Ok(evidence) => {
                record("grant", Outcome::Miss);
                let granted = evidence == EvidenceGrant::Granted;
                // A value this contract revision does not define is asked again next time.
                let known = evidence != EvidenceGrant::Unknown;
                if known && trusted && self.unchanged_since(generation) {
                    self.grants.insert(key, granted);
                }
                Ok(granted)
            }
            Err(e) => match self.last_known(&self.grants, &key, &e, purpose) {
                Some(granted) => {
                    record("grant", Outcome::Stale);
                    Ok(granted)
                }
                None => Err(e),
            },
        }
    }

    /// The principal's evidence grants on many runs: cached ones from the cache, the rest in
    /// one query per thousand.
    pub async fn evidence_many(
        &self,
        principal_id: &str,
        run_ids: &[String],
        purpose: Purpose,
    ) -> Result<HashMap<String, bool>, UpstreamError> {
        let trusted = self.trusted();
        let mut answers = HashMap::with_capacity(run_ids.len());
        let mut missing = Vec::new();
        for run in run_ids {
            let key = (run.clone(), principal_id.to_owned());
            match self.grants.get(&key).filter(|_| trusted) {
                Some(granted) => {
                    record("grant", Outcome::Hit);
                    answers.insert(run.clone(), granted);
                }
                None => missing.push(run.clone()),
            }
        }
        for chunk in missing.chunks(GRANT_QUERY_MAX) {
            let generation = self.generation.load(Ordering::Acquire);
            match self
                .upstream
                .evidence_grants(principal_id, chunk.to_vec())
                .await
            {
                Ok(grants) => {
                    let cache = trusted && self.unchanged_since(generation);
                    for grant in grants.grants {
                        record("grant", Outcome::Miss);
                        let granted = grant.evidence == EvidenceGrant::Granted;
                        let known = grant.evidence != EvidenceGrant::Unknown;
                        if cache && known && chunk.contains(&grant.run_id) {
                            self.grants
                                .insert((grant.run_id.clone(), principal_id.to_owned()), granted);
                        }
                        answers.insert(grant.run_id, granted);
                    }
                }
                Err(e) => {
                    for run in chunk {
                        let key = (run.clone(), principal_id.to_owned());
                        match self.last_known(&self.grants, &key, &e, purpose) {
                            Some(granted) => {
                                record("grant", Outcome::Stale);
                                answers.insert(run.clone(), granted);
                            }
                            None => return Err(e),
                        }
                    }
                }
            }
        }
        Ok(answers)
    }

    fn unchanged_since(&self, generation: u64) -> bool {
        self.generation.load(Ordering::Acquire) == generation && self.trusted()
    }

    /// The cached answer a read may use because Q gave none (see the module doc).
    fn last_known<K, V>(
        &self,
        cache: &Cache<K, V>,
        key: &K,
        error: &UpstreamError,
        purpose: Purpose,
    ) -> Option<V>
    where
        K: std::hash::Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let outage = matches!(error, UpstreamError::Failed { .. });
        if purpose == Purpose::Read && outage && self.within_outage_grace() {
            cache.get(key)
        } else {
            None
        }
    }
}

fn record(cache: &'static str, outcome: Outcome) {
    let outcome = match outcome {
        Outcome::Hit => "hit",
        Outcome::Miss => "miss",
        Outcome::Stale => "stale",
    };
    crate::metrics::access_lookup(cache, outcome);
}

#[cfg(test)]
mod tests;
