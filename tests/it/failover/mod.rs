//! Failover as managed PostgreSQL and Redis do it, with real servers: a private primary and
//! its synchronous standby (`support::pg_pair`: `initdb`, `pg_basebackup -R`, `pg_ctl stop -m
//! immediate`, `pg_ctl promote`), a forwarder standing in for a DNS name or Service whose
//! target moves (`support::proxy`), and a Redis primary demoted under its replica behind one
//! address. Q's workflow-id deduplication is off, so a second create for one message would be a
//! second run in Q's record.
//!
//! Each test drives sends under load through one gateway while the fault happens ([`Load`]),
//! polls `/readyz`, and then checks ([`Load::check`]):
//!
//! - every acknowledged task is readable afterwards (GetTask) and its row is in the store;
//! - one run per messageId, counted from Q's record: no workflow id with two runs, no run
//!   without its task row, and every acknowledged task with exactly one run once settled;
//! - no request took longer than [`SLOWEST`];
//! - writes recovered within [`RECOVERY`] of a writable primary being reachable: every send
//!   begun after that is acknowledged;
//! - `/readyz` answered 503 throughout the time no writable primary was reachable, past the
//!   grace (1 s here) and the report's reuse, and 200 again once one was.

mod postgres;
mod redis;
mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::support::{new_id, Agent, Gateway};

/// The longest any request may take through these failovers (measured: 0.1 to 0.45 s). In
/// them a server that is gone refuses connections and one that is read-only says so: every
/// store call fails or succeeds fast. (A server that stops answering without refusing is
/// bounded by `acquire_timeout_ms` and `statement_timeout_ms + 1 s` per store call instead:
/// `tests/it/dependency_faults.rs`.)
pub const SLOWEST: Duration = Duration::from_secs(3);
/// How soon after a writable primary is reachable every send succeeds again (measured: the
/// first acknowledgement 10 to 400 ms after it).
pub const RECOVERY: Duration = Duration::from_secs(2);
/// `/readyz`: the grace the tests configure, plus the report's reuse (1 s), plus the 1 s check
/// bound and a poll's interval.
pub const READY_GRACE_MS: u64 = 1_000;
const NOT_READY_WITHIN: Duration = Duration::from_millis(READY_GRACE_MS + 2_500);

/// Another build of the gateway to run these tests against (`Q_A2A_TEST_GATEWAY_BIN`, with
/// its own configuration file in `Q_A2A_TEST_GATEWAY_CONFIG`), to see what they catch in it;
/// this build's by default.
pub fn gateway_bin() -> Option<std::path::PathBuf> {
    std::env::var_os("Q_A2A_TEST_GATEWAY_BIN").map(Into::into)
}

/// The environment of a gateway under failover: readiness with a 1 s grace, so a 5 s outage
/// shows.
pub fn failover_env() -> Vec<(String, String)> {
    [
        (
            "Q_A2A_DATABASE_UNWRITABLE_GRACE_MS",
            READY_GRACE_MS.to_string(),
        ),
        (
            "Q_A2A_REDIS_UNWRITABLE_GRACE_MS",
            READY_GRACE_MS.to_string(),
        ),
    ]
    .into_iter()
    .chain(
        std::env::var("Q_A2A_TEST_GATEWAY_CONFIG")
            .ok()
            .map(|file| ("Q_A2A_CONFIG", file)),
    )
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// How one send ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Answered with its task.
    Acked(String),
    /// Refused or failed: the HTTP status and the answer.
    Refused(u16, String),
}

/// One send of one messageId.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub message_id: String,
    pub blocking: bool,
    /// When it was sent, from the start of the load.
    pub at: Duration,
    pub took: Duration,
    pub outcome: Outcome,
}

/// What a load saw.
pub struct History {
    /// The outage the test marked, if it did.
    pub outage: Option<Outage>,
    pub attempts: Vec<Attempt>,
    /// `/readyz` answers: when each came, and the status.
    pub readyz: Vec<(Duration, u16)>,
}

/// Sends under load through one gateway, and `/readyz` polled every 200 ms; the moments of
/// the outage as the test marks them.
pub struct Load {
    start: Instant,
    lost: Option<Duration>,
    restoring: Option<Duration>,
    writable: Option<Duration>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    readyz: Arc<Mutex<Vec<(Duration, u16)>>>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Load {
    /// `immediate` workers sending with `returnImmediately`, `blocking` workers waiting for the
    /// answer; each a fresh messageId after each acknowledgement, the same one again (every
    /// 100 ms) after a refusal, as a client keeping its messageId does.
    pub fn start(gw: &Gateway, immediate: usize, blocking: usize) -> Load {
        let start = Instant::now();
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let readyz = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for i in 0..immediate + blocking {
            let agent = gw.caller("tok-alice").agent("ag-writer");
            tasks.spawn(worker(
                agent,
                i >= immediate,
                start,
                attempts.clone(),
                stopped.clone(),
            ));
        }
        let probe = gw.http(Method::GET, "/readyz");
        let polled = readyz.clone();
        let mut stopped = stopped.clone();
        tasks.spawn(async move {
            while !*stopped.borrow() {
                let status = match probe.try_clone().unwrap().send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                // When the answer came: the report it carries was made before.
                polled.lock().unwrap().push((start.elapsed(), status));
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stopped.changed() => {}
                }
            }
        });
        Load {
            start,
            lost: None,
            restoring: None,
            writable: None,
            attempts,
            readyz,
            stop,
            tasks,
        }
    }

    /// [`Load::start`], then 2 s of load before anything happens.
    pub async fn warmed(gw: &Gateway, immediate: usize, blocking: usize) -> Load {
        let load = Load::start(gw, immediate, blocking);
        tokio::time::sleep(Duration::from_secs(2)).await;
        load
    }

    /// Time since the load began.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The fault begins now: from here on no writable primary may be reachable.
    pub fn losing(&mut self) {
        self.lost = Some(self.now());
    }

    /// The step that brings a writable primary back begins now.
    pub fn restoring(&mut self) {
        self.restoring = Some(self.now());
    }

    /// That step has ended: a writable primary is reachable.
    pub fn restored(&mut self) {
        self.writable = Some(self.now());
    }

    /// Lets the load run 6 s more, stops it, and checks what every failover must keep:
    /// sends (of `blocking` kind, or all) recovered, no request over the bound, `/readyz` told
    /// the truth.
    pub async fn finish_checked(self, blocking: Option<bool>) -> History {
        tokio::time::sleep(Duration::from_secs(6)).await;
        let outage = Outage {
            lost: self.lost.expect("the test marked the loss"),
            restoring: self.restoring.expect("the test marked the restoring step"),
            writable: self.writable.expect("the test marked the restoration"),
        };
        let history = self.finish().await;
        history.recovered(outage, blocking);
        history.none_slower_than_bound();
        history.readiness_told_the_truth(outage);
        history
    }

    /// Stops the load: each worker still retrying its messageId keeps at it (for at most 20 s)
    /// until it is acknowledged.
    pub async fn finish(mut self) -> History {
        self.stop.send_replace(true);
        while self.tasks.join_next().await.is_some() {}
        let attempts = self.attempts.lock().unwrap().clone();
        let readyz = self.readyz.lock().unwrap().clone();
        let outage = match (self.lost, self.restoring, self.writable) {
            (Some(lost), Some(restoring), Some(writable)) => Some(Outage {
                lost,
                restoring,
                writable,
            }),
            _ => None,
        };
        History {
            outage,
            attempts,
            readyz,
        }
    }
}

async fn worker(
    agent: Agent,
    blocking: bool,
    start: Instant,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    stop: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        let message_id = new_id();
        let mut give_up: Option<Instant> = None;
        loop {
            let at = start.elapsed();
            let sent = Instant::now();
            let reply = if blocking {
                agent.send_text(&message_id, "failover").await
            } else {
                agent.send_text_immediately(&message_id, "failover").await
            };
            let took = sent.elapsed();
            let outcome = if reply.is_result() && reply.result()["task"]["id"].is_string() {
                Outcome::Acked(reply.task_id())
            } else {
                Outcome::Refused(reply.status, reply.body.to_string())
            };
            let acked = matches!(outcome, Outcome::Acked(_));
            attempts.lock().unwrap().push(Attempt {
                message_id: message_id.clone(),
                blocking,
                at,
                took,
                outcome,
            });
            if acked {
                break;
            }
            if *stop.borrow() {
                let until = *give_up.get_or_insert(Instant::now() + Duration::from_secs(20));
                if Instant::now() > until {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// When the writable primary was lost, when the step that brings one back began (before it,
/// none was reachable), and when it had ended (one was).
#[derive(Debug, Clone, Copy)]
pub struct Outage {
    pub lost: Duration,
    pub restoring: Duration,
    pub writable: Duration,
}

impl History {
    pub fn acked(&self) -> BTreeMap<String, String> {
        self.attempts
            .iter()
            .filter_map(|a| match &a.outcome {
                Outcome::Acked(task) => Some((a.message_id.clone(), task.clone())),
                Outcome::Refused(..) => None,
            })
            .collect()
    }

    fn summary(&self) -> String {
        let refused = self
            .attempts
            .iter()
            .filter(|a| matches!(a.outcome, Outcome::Refused(..)))
            .count();
        let slowest = self
            .attempts
            .iter()
            .map(|a| a.took)
            .max()
            .unwrap_or_default();
        if std::env::var("Q_A2A_TEST_VERBOSE").is_ok() {
            for a in self
                .attempts
                .iter()
                .filter(|a| a.took > Duration::from_millis(1500))
            {
                eprintln!("[failover] slow: {a:?}");
            }
        }
        format!(
            "{} attempts, {} acknowledged, {refused} refused, slowest {slowest:?}",
            self.attempts.len(),
            self.acked().len()
        )
    }

    /// Every attempt that began at least [`RECOVERY`] after `outage.writable` was
    /// acknowledged (of `blocking` kind, or any when `None`), and there were some.
    pub fn recovered(&self, outage: Outage, blocking: Option<bool>) {
        let after: Vec<&Attempt> = self
            .attempts
            .iter()
            .filter(|a| a.at >= outage.writable + RECOVERY)
            .filter(|a| blocking.is_none_or(|b| a.blocking == b))
            .collect();
        assert!(
            after.len() >= 5,
            "too few sends after the recovery to judge it: {}",
            self.summary()
        );
        let failed: Vec<&&Attempt> = after
            .iter()
            .filter(|a| matches!(a.outcome, Outcome::Refused(..)))
            .collect();
        assert!(
            failed.is_empty(),
            "sends begun more than {RECOVERY:?} after a writable primary was reachable (at {:?}) failed: {} of {}, first {:?}; {}",
            outage.writable,
            failed.len(),
            after.len(),
            failed.first(),
            self.summary()
        );
        let first_ack = self
            .attempts
            .iter()
            .filter(|a| a.at >= outage.writable && matches!(a.outcome, Outcome::Acked(_)))
            .map(|a| a.at + a.took)
            .min();
        eprintln!(
            "[failover] writable again at {:?}; first acknowledgement after it at {:?}; {}",
            outage.writable,
            first_ack,
            self.summary()
        );
    }

    /// No request took longer than [`SLOWEST`].
    pub fn none_slower_than_bound(&self) {
        let slowest = self.attempts.iter().max_by_key(|a| a.took).unwrap();
        assert!(
            slowest.took <= SLOWEST,
            "a request took {:?} (bound {SLOWEST:?}): {slowest:?}",
            slowest.took
        );
    }

    /// `/readyz` was 503 for the whole time no writable primary was reachable (past the grace
    /// and the report's reuse), and 200 again within [`RECOVERY`] (plus the report's reuse)
    /// of one being reachable.
    pub fn readiness_told_the_truth(&self, outage: Outage) {
        let during: Vec<&(Duration, u16)> = self
            .readyz
            .iter()
            .filter(|(at, _)| *at >= outage.lost + NOT_READY_WITHIN && *at < outage.restoring)
            .collect();
        assert!(
            !during.is_empty(),
            "no /readyz sample while no primary was writable ({outage:?})"
        );
        assert!(
            during.iter().all(|(_, status)| *status == 503),
            "/readyz answered other than 503 while no primary was writable ({outage:?}): {during:?}"
        );
        let ready_by = outage.writable + RECOVERY + Duration::from_secs(1);
        let after: Vec<&(Duration, u16)> = self
            .readyz
            .iter()
            .filter(|(at, _)| *at >= ready_by)
            .collect();
        assert!(
            !after.is_empty() && after.iter().all(|(_, status)| *status == 200),
            "/readyz not 200 from {ready_by:?} on: {after:?}"
        );
    }
}

/// Every acknowledged task is readable through the gateway and stored; one run per messageId
/// in Q's record (deduplication off), none without its task row, and exactly one for each
/// acknowledged task once the reconciler has settled every dispatch. `check_db` is a
/// connection to the primary now.
pub async fn durable_and_once(gw: &Gateway, check_db: &tokio_postgres::Client, history: &History) {
    let acked = history.acked();
    let reader = gw.caller("tok-alice").agent("ag-writer");
    for (message_id, task_id) in &acked {
        let reply = reader.get_task(task_id).await;
        assert_eq!(
            reply.body["result"]["id"], *task_id,
            "acknowledged task {task_id} (messageId {message_id}) unreadable: {}",
            reply.body
        );
    }
    // The reconciler resolves dispatches among SUBMITTED tasks only (`src/store/due.rs`): no
    // task moved on with its dispatch unresolved.
    let moved_on: i64 = check_db
        .query_one(
            "SELECT count(*) FROM a2a_tasks WHERE dispatch IN ('pending', 'unknown')
               AND state NOT IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_COMPLETED',
                                 'TASK_STATE_FAILED', 'TASK_STATE_REJECTED',
                                 'TASK_STATE_CANCELED')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        moved_on, 0,
        "tasks past SUBMITTED with their dispatch unresolved"
    );
    // Every dispatch settled: the reconciler resolved what the outage left unknown.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let unsettled: i64 = check_db
            .query_one(
                "SELECT count(*) FROM a2a_tasks WHERE dispatch IN ('pending', 'unknown')
                   AND state NOT IN ('TASK_STATE_FAILED', 'TASK_STATE_REJECTED',
                                     'TASK_STATE_CANCELED')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if unsettled == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{unsettled} dispatches still unsettled 30 s after the load"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sent: BTreeSet<&str> = history
        .attempts
        .iter()
        .map(|a| a.message_id.as_str())
        .collect();
    let rows = check_db
        .query(
            "SELECT message_id, task_id::text, workflow_id FROM a2a_tasks",
            &[],
        )
        .await
        .unwrap();
    let mut stored: BTreeMap<String, (String, String)> = BTreeMap::new();
    for row in &rows {
        let message_id: String = row.get(0);
        assert!(
            stored
                .insert(message_id.clone(), (row.get(1), row.get(2)))
                .is_none(),
            "two tasks for messageId {message_id}"
        );
    }
    for (message_id, task_id) in &acked {
        let (stored_task, _) = stored
            .get(message_id)
            .unwrap_or_else(|| panic!("acknowledged messageId {message_id} has no task row"));
        assert_eq!(stored_task, task_id, "messageId {message_id}");
    }
    let mut runs: BTreeMap<String, usize> = BTreeMap::new();
    for run in gw.upstream.runs(None).await {
        let workflow = run["workflow_id"].as_str().unwrap_or_default().to_string();
        *runs.entry(workflow).or_default() += 1;
    }
    let workflows: BTreeMap<&str, &str> = stored
        .iter()
        .map(|(m, (_, w))| (w.as_str(), m.as_str()))
        .collect();
    for (workflow, count) in &runs {
        assert_eq!(*count, 1, "{count} runs in Q for workflow {workflow}");
        let message = workflows
            .get(workflow.as_str())
            .unwrap_or_else(|| panic!("a run in Q for {workflow}, which no task row holds"));
        assert!(sent.contains(message));
    }
    for message_id in acked.keys() {
        let (_, workflow) = &stored[message_id];
        assert_eq!(
            runs.get(workflow).copied().unwrap_or(0),
            1,
            "acknowledged messageId {message_id}: runs in Q for {workflow}"
        );
    }
    eprintln!(
        "[failover] {} messageIds sent, {} acknowledged and readable, {} runs in Q, one each",
        sent.len(),
        acked.len(),
        runs.len()
    );
}

/// A connection to a server of the test's (a primary's Unix socket), for the checks.
pub async fn connect_check(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(connection);
    client
}
