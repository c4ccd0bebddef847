//! `q-a2a-gateway contract-check`: the Q contract kit. A black-box check, run against a real Q
//! by Q's team, of every promise of the contract (`docs/upstream-api.md`) the gateway's own
//! guarantees rest on: idempotent creates, an authoritative lookup by workflow id, ordered and
//! complete change feeds with an honest head, epoch and floor, grants the access APIs reflect
//! in the feed's order, and each error code under its status (docs/contract-kit.md).
//!
//! It talks only to the contract routes with the service token, as the gateway does. Where a
//! promise needs Q to change a grant, which the contract has no route for, it asks an operator
//! hook Q's team supplies ([`hook`]); without one those promises are "not checked", never kept.
//! Every run it creates carries a workflow id with the operator's prefix, is named in the
//! report, and is canceled at the end.
//!
//! The checks of runs and errors run at once, then those of access (which revoke the
//! principal's grants), while one follower per feed reads it ([`follower`]); the feeds are
//! judged from those reads afterwards ([`feed_rules`]).

mod access;
mod client;
mod errors;
mod feed_rules;
mod follower;
pub mod hook;
mod ledger;
pub mod report;
mod runs;

use std::time::{Duration, Instant};

use crate::upstream::contract::{
    AccessChange, AgentAccess, CreateRunRequest, Health, RunChange, RunInput, WorkspaceAccess,
    CONTRACT_VERSION,
};

use client::{encode, Q};
use feed_rules::Mark;
use follower::{Change, Follower, Read};
use ledger::Ledger;
use report::{Findings, Promise, Report};

pub use hook::Hook;

/// Longest the kit waits for one answer of Q.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Execution deadline of the kit's runs (they are canceled long before).
const RUN_TIMEOUT_SECONDS: u64 = 3600;

/// What the kit runs against and with.
#[derive(Debug, Clone)]
pub struct Options {
    /// Base URL of Q's internal API (the routes are under `/internal/v1`).
    pub upstream: String,
    pub service_token: String,
    /// A tenant, an agent of it, and a principal with `granted` access to the agent's
    /// workspace: the kit creates runs of that agent for that principal and, through the
    /// hook, revokes and restores that principal's grants.
    pub tenant_id: String,
    pub principal_id: String,
    pub agent_id: String,
    pub hook: Option<Hook>,
    /// Every workflow id the kit uses starts with it.
    pub workflow_prefix: String,
    /// Longest wait for a change to reach a feed.
    pub wait: Duration,
}

/// Why the kit could not run at all (nothing was created).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unrunnable(String);

impl Options {
    /// A workflow-id prefix for one run of the kit: `contract-check-` and 8 random hex digits.
    pub fn default_prefix() -> String {
        let random = uuid::Uuid::new_v4().simple().to_string();
        format!("contract-check-{}", &random[..8])
    }

    fn validate(&self) -> Result<(), Unrunnable> {
        let bad = |why: String| Err(Unrunnable(why));
        let url = url::Url::parse(&self.upstream);
        if !url.is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
            return bad(format!(
                "--upstream {:?} is not an http(s) URL",
                self.upstream
            ));
        }
        if self.service_token.is_empty() {
            return bad("--service-token is empty".to_owned());
        }
        for (flag, value) in [
            ("--tenant", &self.tenant_id),
            ("--principal", &self.principal_id),
            ("--agent", &self.agent_id),
        ] {
            if value.trim().is_empty() {
                return bad(format!("{flag} is empty"));
            }
        }
        let prefix = &self.workflow_prefix;
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(allowed) {
            return bad(format!(
                "--workflow-prefix {prefix:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
            ));
        }
        if self.wait.is_zero() {
            return bad("--wait-ms must be above 0".to_owned());
        }
        Ok(())
    }
}

/// What the checks share: Q, the inputs, the runs made, the findings and the feed followers.
struct Kit {
    q: Q,
    options: Options,
    /// The agent's workspace, as Q's access API names it.
    workspace_id: String,
    ledger: Ledger,
    findings: Findings,
    run_feed: Follower<RunChange>,
    access_feed: Follower<AccessChange>,
}

impl Kit {
    fn workflow(&self, what: &str) -> String {
        format!("{}-{what}", self.options.workflow_prefix)
    }

    /// A create of the kit's agent for its principal.
    fn request(&self, workflow_id: &str, text: &str) -> CreateRunRequest {
        CreateRunRequest {
            workflow_id: workflow_id.to_owned(),
            tenant_id: self.options.tenant_id.clone(),
            principal_id: self.options.principal_id.clone(),
            agent_id: self.options.agent_id.clone(),
            input: RunInput {
                parts: vec![text.to_owned()],
            },
            execution_timeout_seconds: RUN_TIMEOUT_SECONDS,
        }
    }

    /// When a wait for a feed that starts now gives up.
    fn deadline(&self) -> Instant {
        Instant::now() + self.options.wait
    }

    /// `GET /access` of the kit's principal on its agent: the access it answered, or why not.
    async fn workspace_access(&self) -> Result<WorkspaceAccess, String> {
        let o = &self.options;
        let path = access_path(&o.tenant_id, &o.agent_id, &o.principal_id);
        let answer = self.q.get(&path).await?;
        if answer.status != 200 {
            return Err(format!("GET /access answered {}", answer.describe()));
        }
        Ok(answer.json::<AgentAccess>()?.workspace_access)
    }
}

fn access_path(tenant_id: &str, agent_id: &str, principal_id: &str) -> String {
    format!(
        "/tenants/{}/agents/{}/access?principal_id={}",
        encode(tenant_id),
        encode(agent_id),
        encode(principal_id)
    )
}

/// Runs every check and cleans up; the report says what was kept, broken or not checked.
pub async fn run(options: Options) -> Result<Report, Unrunnable> {
    options.validate()?;
    let q = Q::new(&options.upstream, &options.service_token, REQUEST_TIMEOUT)
        .map_err(|e| Unrunnable(format!("building the HTTP client: {e}")))?;
    check_health(&q).await?;
    let workspace_id = check_principal(&q, &options).await?;
    let started = |feed: &str, e: String| Unrunnable(format!("reading the {feed} feed: {e}"));
    let run_feed = Follower::start(&q).await.map_err(|e| started("run", e))?;
    let access_feed = Follower::start(&q)
        .await
        .map_err(|e| started("access", e))?;
    let kit = Kit {
        q,
        options,
        workspace_id,
        ledger: Ledger::default(),
        findings: Findings::default(),
        run_feed,
        access_feed,
    };
    tracing::info!(prefix = %kit.options.workflow_prefix, "contract check started");
    tokio::join!(
        runs::create_once(&kit),
        runs::create_conflict(&kit),
        runs::lookups(&kit),
        errors::check(&kit),
    );
    // Alone: while it has the principal's membership revoked, every create would be refused.
    let access_marks = access::check(&kit).await;
    runs::lookup_every_run(&kit).await;
    // Paused, so the cancels' changes reach the follower together.
    kit.run_feed.pause().await;
    let created = kit.ledger.clean_up(&kit.q, &kit.options.principal_id).await;
    kit.run_feed.resume();
    runs::events_and_completeness(&kit).await;
    let header = header(&kit);
    let run_marks = kit.ledger.marks().into_iter().map(run_mark).collect();
    let Kit {
        q,
        findings,
        run_feed,
        access_feed,
        ..
    } = kit;
    let feeds = [
        (
            Promise::RunFeedOrder,
            Promise::RunFeedHead,
            Promise::RunFeedEpoch,
            Promise::RunFeedFloor,
        ),
        (
            Promise::AccessFeedOrder,
            Promise::AccessFeedHead,
            Promise::AccessFeedEpoch,
            Promise::AccessFeedFloor,
        ),
    ];
    judge_feed(&q, &findings, run_feed, run_marks, feeds[0]).await;
    judge_feed(&q, &findings, access_feed, access_marks, feeds[1]).await;
    Ok(Report::new(header, findings, created))
}

async fn check_health(q: &Q) -> Result<(), Unrunnable> {
    let answer = q
        .get("/health")
        .await
        .map_err(|e| Unrunnable(format!("Q did not answer GET /internal/v1/health: {e}")))?;
    let health: Health = answer
        .json()
        .map_err(|e| Unrunnable(format!("GET /internal/v1/health: {e}")))?;
    if answer.status != 200 || health.contract_version != CONTRACT_VERSION {
        return Err(Unrunnable(format!(
            "GET /internal/v1/health answered {} with contract version {:?}; the kit checks \
             version {CONTRACT_VERSION}",
            answer.status, health.contract_version
        )));
    }
    Ok(())
}

/// The principal must be able to run the agent; returns the agent's workspace.
async fn check_principal(q: &Q, o: &Options) -> Result<String, Unrunnable> {
    let path = access_path(&o.tenant_id, &o.agent_id, &o.principal_id);
    let answer = q
        .get(&path)
        .await
        .map_err(|e| Unrunnable(format!("Q did not answer GET /access: {e}")))?;
    if answer.status == 401 {
        return Err(Unrunnable(
            "Q refused the service token (401 on GET /access)".to_owned(),
        ));
    }
    if answer.status != 200 {
        return Err(Unrunnable(format!(
            "GET /access of agent {:?} in tenant {:?} answered {}: the kit needs an agent Q \
             serves",
            o.agent_id,
            o.tenant_id,
            answer.describe()
        )));
    }
    let access: AgentAccess = answer.json().map_err(Unrunnable)?;
    if access.workspace_access != WorkspaceAccess::Granted {
        return Err(Unrunnable(format!(
            "principal {:?} has workspace_access {:?} on agent {:?}: the kit needs a principal \
             whose access is granted",
            o.principal_id, access.workspace_access, o.agent_id
        )));
    }
    Ok(access.agent.workspace_id)
}

fn header(kit: &Kit) -> Vec<String> {
    let o = &kit.options;
    let hook = match &o.hook {
        Some(hook) => hook.describe(),
        None => "none (the promises that need one are not checked)".to_owned(),
    };
    vec![
        format!(
            "contract-check of Q at {} (contract version {CONTRACT_VERSION})",
            o.upstream
        ),
        format!(
            "tenant {}, principal {}, agent {} (workspace {})",
            o.tenant_id, o.principal_id, o.agent_id, kit.workspace_id
        ),
        format!("operator hook: {hook}"),
        format!(
            "workflow ids: {}-*; waits up to {} ms for a change to reach a feed",
            o.workflow_prefix,
            o.wait.as_millis()
        ),
    ]
}

/// A change the kit saw Q's run API answer, as the head check looks for it in the run feed.
fn run_mark(mark: ledger::RunMark) -> Mark<RunChange> {
    let ledger::RunMark {
        run_id,
        status,
        seq,
        at,
    } = mark;
    Mark {
        what: format!("{run_id} {status:?}"),
        at,
        from: 0,
        is: Box::new(move |c: &RunChange| {
            c.run_id == run_id
                && if seq > 0 && c.seq > 0 {
                    c.seq == seq
                } else {
                    c.status == status
                }
        }),
    }
}

/// Stops a follower and judges its feed: order and head from its reads, epoch and floor from
/// a re-read of what it saw.
async fn judge_feed<C: Change>(
    q: &Q,
    findings: &Findings,
    follower: Follower<C>,
    marks: Vec<Mark<C>>,
    (order, head, epoch, floor): (Promise, Promise, Promise, Promise),
) {
    let start = follower.start.clone();
    let reads: Vec<Read<C>> = follower.stop().await;
    findings.extend(order, feed_rules::order(&reads));
    findings.extend(head, feed_rules::head(&reads, &marks));
    let through = reads
        .iter()
        .filter_map(Read::in_place)
        .flat_map(|p| p.changes.iter().map(Change::cursor))
        .max()
        .unwrap_or(start.head);
    let reread = follower::reread::<C>(q, start.head, through).await;
    let (epoch_findings, floor_findings) = feed_rules::history(&reads, &reread);
    findings.extend(epoch, epoch_findings);
    findings.extend(floor, floor_findings);
}
