//! One seed's run: three gateway processes on a private PostgreSQL primary and its synchronous
//! standby (a multi-host URL, the order drawn by the seed), a private Redis primary and its
//! replica behind one address (a forwarder), and the reference upstream with its workflow-id
//! deduplication off, driven through a drawn [`Schedule`] while everything is recorded; then
//! the final state is read back for the checker.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use super::history::seen;
use super::history::{
    Bounds, Call, Fault, FaultKind, FinalTask, Floors, Frame, History, Identity, Outcome, QCall,
    QRun, Seen,
};
use super::schedule::{Message, Mode, Schedule, Step, PRINCIPALS};
use super::stand_in::StandIn;
use crate::support::gateway::Replica;
use crate::support::pg_pair::{Node, PgPair};
use crate::support::proxy::TcpProxy;
use crate::support::redis::PrivateRedis;
use crate::support::rng::Rng;
use crate::support::{Gateway, GatewayOptions, TestDb, Upstream};

mod faults;

/// The run's configuration: short deadlines and intervals so that every promise comes due
/// within the run; observer bounds at their defaults (256/16/4).
pub const DEADLINE_S: u64 = 8;
pub const RECONCILE_INTERVAL_MS: u64 = 200;
const LEASE_TTL_MS: u64 = 3_000;

/// Makes the Redis on `port` a replica of the one on `of`, or a primary (`None`).
pub(super) async fn replicate(port: u16, of: Option<u16>) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("the Redis to reconfigure");
    let mut cmd = redis::cmd("REPLICAOF");
    match of {
        Some(primary) => cmd.arg("127.0.0.1").arg(primary),
        None => cmd.arg("NO").arg("ONE"),
    };
    cmd.query_async::<()>(&mut conn).await.expect("REPLICAOF");
}

/// The gateways' options. `Q_A2A_SIM_GATEWAY_BIN` (with `Q_A2A_SIM_GATEWAY_CONFIG`, that
/// build's configuration file) runs another build of the gateway, e.g. to replay a seed
/// against the build before a fix.
fn options(redis_url: &str) -> GatewayOptions {
    let deadline = DEADLINE_S.to_string();
    let interval = RECONCILE_INTERVAL_MS.to_string();
    let ttl = LEASE_TTL_MS.to_string();
    let mut options = GatewayOptions::with_env(&[
        ("Q_A2A_REDIS_URL", redis_url),
        // Creates held longer than this are in doubt (dispatch = unknown).
        ("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", "1000"),
        ("Q_A2A_RECONCILER_GRACE_MS", "500"),
        ("Q_A2A_RECONCILER_INTERVAL_MS", &interval),
        ("Q_A2A_OBSERVATION_WINDOW_SECONDS", "4"),
        ("Q_A2A_EXECUTION_TIMEOUT_SECONDS", &deadline),
        ("Q_A2A_LEASE_TTL_MS", &ttl),
    ]);
    options.bin = std::env::var_os("Q_A2A_SIM_GATEWAY_BIN").map(Into::into);
    if let Ok(config) = std::env::var("Q_A2A_SIM_GATEWAY_CONFIG") {
        options.env.push(("Q_A2A_CONFIG".into(), config));
    }
    options
}

/// The bounds the checker holds this configuration to.
pub fn bounds() -> Bounds {
    Bounds {
        token_ms: 5_000,
        access_ms: 1_000,
        revocation_tolerance_ms: 50,
        tolerance_ms: DEADLINE_S * 1_000 / 10,
        deadline_ms: DEADLINE_S * 1_000,
        reconcile_interval_ms: RECONCILE_INTERVAL_MS,
        per_principal: 4,
        uncounted_after_redis_restart_ms: LEASE_TTL_MS / 3,
        lease_margin_ms: 250,
        floors: Floors {
            answered: 12,
            completed: 5,
            runs: 8,
            lease_refusals: 1,
            revocations_read: true,
        },
    }
}

/// The Redis primary and its replica, on ports that stay theirs.
struct RedisPair {
    servers: [Option<PrivateRedis>; 2],
    ports: [u16; 2],
    primary: usize,
}

/// A gateway slot's process: the first gateway's (only its pid: the harness owns it), a
/// replica started by the run, or none while it is down.
enum Process {
    First(u32),
    Replica(Box<Replica>),
    Down,
}

struct World {
    gw: Gateway,
    options: GatewayOptions,
    procs: tokio::sync::Mutex<Vec<Process>>,
    /// Each slot's replica URL, kept up to date as replicas restart.
    urls: Arc<Mutex<Vec<String>>>,
    /// Stand-ins the clients call instead of the replicas behind them (a test's), if any.
    fronts: Option<Vec<String>>,
    /// The PostgreSQL pair and which of the two is the primary now: held for the whole of a
    /// PostgreSQL fault, so that one ends (the old primary back as a standby) before another
    /// begins.
    pg: PgPair,
    pg_primary: tokio::sync::Mutex<Node>,
    /// The two Redis servers (either may be down a while), which is the primary, and the
    /// address the gateways reach it at.
    redis: tokio::sync::Mutex<RedisPair>,
    redis_address: TcpProxy,
    messages: Vec<Message>,
    started: Instant,
    /// `started` on the wall clock, in ms since the epoch: the database's timestamps on the
    /// run's clock.
    started_epoch_ms: i64,
    seq: AtomicUsize,
    calls: Mutex<Vec<Call>>,
    faults: Mutex<Vec<Fault>>,
    /// The task each message was first answered with.
    answers: Mutex<BTreeMap<usize, String>>,
    http: reqwest::Client,
}

fn principal_of(token: &str) -> &'static str {
    PRINCIPALS
        .iter()
        .find(|(_, tokens)| tokens.contains(&token))
        .map(|(p, _)| *p)
        .expect("a fixture token")
}

/// The owner's token that no schedule revokes.
fn reading_token(principal: &str) -> &'static str {
    PRINCIPALS.iter().find(|(p, _)| *p == principal).unwrap().1[0]
}

fn classify(status: u16, body: &Value, tasks: impl Fn(&Value) -> Vec<Seen>) -> Outcome {
    let short = |v: &Value| v.to_string().chars().take(200).collect::<String>();
    match status {
        0 => Outcome::Failed(format!("transport: {}", short(body))),
        200 if !body["result"].is_null() => Outcome::Tasks(tasks(&body["result"])),
        200 => match body["error"]["code"].as_i64() {
            Some(-32603) => Outcome::Failed(format!("internal: {}", short(&body["error"]))),
            Some(code) => Outcome::Refused(format!("{code} {}", body["error"]["message"])),
            None => Outcome::Failed(format!("no result: {}", short(body))),
        },
        429 | 500.. => Outcome::Failed(format!("HTTP {status}")),
        _ => Outcome::Refused(format!("HTTP {status} {}", short(body))),
    }
}

/// What one stream frame's `result` says about its task.
fn frame_seen(result: &Value) -> Option<Seen> {
    if !result["task"].is_null() {
        return seen(&result["task"]);
    }
    if let Some(update) = result.get("statusUpdate") {
        return Some(Seen {
            task_id: update["taskId"].as_str()?.to_string(),
            state: update["status"]["state"].as_str().unwrap_or("").to_string(),
            content: !update["status"]["message"].is_null(),
        });
    }
    let update = result.get("artifactUpdate")?;
    Some(Seen {
        task_id: update["taskId"].as_str()?.to_string(),
        state: String::new(),
        content: true,
    })
}

impl World {
    /// A connection to the primary, for the world's own reads; `None` while there is none.
    async fn db(&self) -> Option<tokio_postgres::Client> {
        let connect = tokio_postgres::connect(&self.gw.db.url, tokio_postgres::NoTls);
        match tokio::time::timeout(Duration::from_secs(3), connect).await {
            Ok(Ok((client, connection))) => {
                tokio::spawn(connection);
                Some(client)
            }
            _ => None,
        }
    }

    /// [`World::db`], waiting (30 s at most) for a primary.
    async fn db_when_up(&self) -> tokio_postgres::Client {
        for _ in 0..60 {
            if let Some(client) = self.db().await {
                return client;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("no PostgreSQL primary within 30 s");
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn url(&self, slot: usize) -> String {
        match &self.fronts {
            Some(fronts) => fronts[slot].clone(),
            None => self.urls.lock().unwrap()[slot].clone(),
        }
    }

    fn record(&self, mut call: Call) {
        call.seq = self.seq.fetch_add(1, Ordering::SeqCst);
        if let Some(identity) = &call.identity {
            let index = self
                .messages
                .iter()
                .position(|m| {
                    (m.principal, m.agent, m.message_id.as_str())
                        == (
                            identity.principal.as_str(),
                            identity.agent.as_str(),
                            identity.message_id.as_str(),
                        )
                })
                .unwrap();
            if let Some((_, first)) = call.seen().first() {
                self.answers
                    .lock()
                    .unwrap()
                    .entry(index)
                    .or_insert_with(|| first.task_id.clone());
            }
        }
        self.calls.lock().unwrap().push(call);
    }

    fn fault(&self, kind: FaultKind, at: u64, until: Option<u64>) {
        self.faults.lock().unwrap().push(Fault { kind, at, until });
    }

    async fn rpc(
        &self,
        slot: usize,
        token: &str,
        agent: &str,
        method: &str,
        params: Value,
    ) -> (u16, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let sent = self
            .http
            .post(format!("{}/v1/a2a/agents/{agent}/rpc", self.url(slot)))
            .bearer_auth(token)
            .header("a2a-version", "1.0")
            .json(&body)
            .send()
            .await;
        match sent {
            Err(e) => (0, Value::String(e.to_string())),
            Ok(response) => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(bytes) => (
                        status,
                        serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                            Value::String(String::from_utf8_lossy(&bytes).into_owned())
                        }),
                    ),
                    Err(e) => (0, Value::String(format!("reading the body: {e}"))),
                }
            }
        }
    }

    /// A streaming call, read until the server ends it or, with `hold_ms`, until the client
    /// lets go (at most 20 s).
    async fn stream(
        &self,
        slot: usize,
        token: &str,
        agent: &str,
        method: &str,
        params: Value,
        hold_ms: Option<u64>,
    ) -> Outcome {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let sent = self
            .http
            .post(format!("{}/v1/a2a/agents/{agent}/rpc", self.url(slot)))
            .bearer_auth(token)
            .header("a2a-version", "1.0")
            .header("accept", "text/event-stream")
            .timeout(Duration::from_secs(30))
            .json(&body)
            .send()
            .await;
        let mut response = match sent {
            Err(e) => return Outcome::Failed(format!("transport: {e}")),
            Ok(r) => r,
        };
        let status = response.status().as_u16();
        let is_sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            let body = response.json().await.unwrap_or(Value::Null);
            return classify(status, &body, |_| Vec::new());
        }
        let opened = self.now();
        let until = tokio::time::Instant::now() + Duration::from_millis(hold_ms.unwrap_or(20_000));
        let (mut frames, mut buffer) = (Vec::new(), String::new());
        let end = loop {
            if let Some(at) = buffer.find("\n\n") {
                let raw: String = buffer.drain(..at + 2).collect();
                let data: String = raw
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                let Ok(event) = serde_json::from_str::<Value>(&data) else {
                    break format!("a frame that is not JSON: {data}");
                };
                if !event["error"].is_null() {
                    break format!("error frame {}", event["error"]);
                }
                if let Some(seen) = frame_seen(&event["result"]) {
                    frames.push(Frame {
                        at: self.now(),
                        seen,
                    });
                }
                continue;
            }
            match tokio::time::timeout_at(until, response.chunk()).await {
                Err(_) => break "client closed".to_string(),
                Ok(Ok(Some(chunk))) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Ok(None)) => break "server closed".to_string(),
                Ok(Err(e)) => break format!("broken: {e}"),
            }
        };
        Outcome::Stream {
            opened,
            frames,
            end,
        }
    }

    async fn send(&self, slot: usize, token: &'static str, message: usize, mode: Mode) {
        let m = &self.messages[message];
        let mut params = json!({"message": {"messageId": m.message_id, "role": "ROLE_USER",
                                            "parts": [{"text": m.text}]}});
        if mode == Mode::Immediate {
            params["configuration"] = json!({"returnImmediately": true});
        }
        let started = self.now();
        let outcome = if mode == Mode::Streaming {
            self.stream(slot, token, m.agent, "SendStreamingMessage", params, None)
                .await
        } else {
            let (status, body) = self.rpc(slot, token, m.agent, "SendMessage", params).await;
            classify(status, &body, |r| seen(&r["task"]).into_iter().collect())
        };
        self.record(Call {
            seq: 0,
            replica: slot,
            token: token.to_string(),
            principal: m.principal.to_string(),
            agent: m.agent.to_string(),
            what: format!("send {mode:?} {}", m.message_id),
            identity: Some(Identity {
                principal: m.principal.to_string(),
                agent: m.agent.to_string(),
                message_id: m.message_id.clone(),
            }),
            started,
            ended: self.now(),
            outcome,
        });
    }

    /// GetTask, CancelTask, SubscribeToTask or ListTasks by `token`.
    async fn read(&self, slot: usize, token: &'static str, step: &Step) {
        let (what, message) = match step {
            Step::Get { message, .. } => ("GetTask", Some(*message)),
            Step::Cancel { message, .. } => ("CancelTask", Some(*message)),
            Step::Subscribe { message, .. } => ("SubscribeToTask", Some(*message)),
            _ => ("ListTasks", None),
        };
        let agent = match message {
            Some(m) => self.messages[m].agent,
            None if principal_of(token) == "p-carol" => "ag-globex",
            None => "ag-writer",
        };
        let task = message.and_then(|m| self.answers.lock().unwrap().get(&m).cloned());
        let started = self.now();
        let outcome = match (step, &task) {
            (Step::List { .. }, _) => {
                let (status, body) = self
                    .rpc(slot, token, agent, what, json!({"pageSize": 20}))
                    .await;
                classify(status, &body, |r| {
                    r["tasks"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(seen)
                        .collect()
                })
            }
            (_, None) => Outcome::Done("skipped: the message has no task yet".into()),
            (Step::Subscribe { hold_ms, .. }, Some(id)) => {
                self.stream(slot, token, agent, what, json!({"id": id}), Some(*hold_ms))
                    .await
            }
            (_, Some(id)) => {
                let (status, body) = self.rpc(slot, token, agent, what, json!({"id": id})).await;
                classify(status, &body, |r| seen(r).into_iter().collect())
            }
        };
        self.record(Call {
            seq: 0,
            replica: slot,
            token: token.to_string(),
            principal: principal_of(token).to_string(),
            agent: agent.to_string(),
            what: format!("{what} {}", task.unwrap_or_default()),
            identity: None,
            started,
            ended: self.now(),
            outcome,
        });
    }

    /// Q approves the pending approval of the message's run, as its owner would in Q.
    async fn approve(&self, message: usize) {
        let m = &self.messages[message];
        let started = self.now();
        let task = self.answers.lock().unwrap().get(&message).cloned();
        let outcome = match task {
            None => Outcome::Done("skipped: the message has no task yet".into()),
            Some(task) => {
                let run: Option<String> = match self.db().await {
                    Some(db) => db
                        .query_one(
                            "SELECT run_id FROM a2a_tasks WHERE task_id = $1::text::uuid",
                            &[&task],
                        )
                        .await
                        .ok()
                        .and_then(|row| row.get(0)),
                    None => None,
                };
                match run {
                    None => Outcome::Done(format!("skipped: task {task} has no run yet")),
                    Some(run) => self.approve_run(&run, m.principal).await,
                }
            }
        };
        self.record(Call {
            seq: 0,
            replica: 0,
            token: String::new(),
            principal: m.principal.to_string(),
            agent: m.agent.to_string(),
            what: format!("approve in Q {}", m.message_id),
            identity: None,
            started,
            ended: self.now(),
            outcome,
        });
    }

    async fn approve_run(&self, run: &str, principal: &str) -> Outcome {
        let q = &self.gw.upstream;
        let listed = q
            .internal(Method::GET, &format!("/runs/{run}/approvals"), None)
            .await;
        let approvals: Value = listed.json().await.unwrap_or(Value::Null);
        let pending = approvals["approvals"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["status"] == "pending");
        let Some(id) = pending.and_then(|a| a["id"].as_str()) else {
            return Outcome::Done(format!("nothing pending on run {run}"));
        };
        let approved = q
            .internal(
                Method::POST,
                &format!("/runs/{run}/approvals/{id}/approve"),
                Some(json!({"principal_id": principal})),
            )
            .await;
        Outcome::Done(format!(
            "approve {id} on run {run}: HTTP {}",
            approved.status()
        ))
    }

    async fn play(self: Arc<Self>, seed: u64, at: u64, step: Step) {
        tokio::time::sleep_until(tokio::time::Instant::from_std(
            self.started + Duration::from_millis(at),
        ))
        .await;
        let mut rng = Rng::new(seed ^ at.rotate_left(17));
        let mut slot = || rng.range(0, 3) as usize;
        match &step {
            Step::Send {
                token,
                message,
                mode,
                copies,
            } => {
                let sends = (0..*copies).map(|_| self.send(slot(), token, *message, *mode));
                futures_util::future::join_all(sends).await;
            }
            Step::Get { token, .. }
            | Step::Cancel { token, .. }
            | Step::Subscribe { token, .. }
            | Step::List { token } => {
                self.read(slot(), token, &step).await;
            }
            Step::Approve { message } => self.approve(*message).await,
            Step::Burst { token, messages } => {
                let through = slot();
                let sends = messages
                    .iter()
                    .map(|m| self.send(through, token, *m, Mode::Blocking));
                futures_util::future::join_all(sends).await;
            }
            Step::Fault(fault) => self.inject(fault).await,
        }
    }

    /// After the schedule: Q's faults cleared, every slot up, then, once every task's deadline
    /// and a reconciler interval (and the tolerance) have passed, each task read by its owner.
    async fn settle(&self) -> (Vec<FinalTask>, Vec<QRun>, Vec<QCall>, BTreeMap<String, u64>) {
        let q = &self.gw.upstream;
        let cleared = q.admin(Method::DELETE, "/admin/faults", None).await;
        let fired: BTreeMap<String, u64> =
            serde_json::from_value(cleared["fired"].clone()).unwrap_or_default();
        // A PostgreSQL fault still in progress ends first (its old primary back as a standby).
        drop(self.pg_primary.lock().await);
        for slot in 0..3 {
            self.revive(slot).await;
        }
        let b = bounds();
        let last_answer = self
            .calls
            .lock()
            .unwrap()
            .iter()
            .flat_map(|c| c.seen().into_iter().map(|(at, _)| at).collect::<Vec<_>>())
            .max()
            .unwrap_or(0);
        let due = last_answer + b.deadline_ms + b.reconcile_interval_ms + b.tolerance_ms + 500;
        let now = self.now();
        if due > now {
            tokio::time::sleep(Duration::from_millis(due - now)).await;
        }
        let rows = self
            .db_when_up()
            .await
            .query(
                "SELECT principal_id, agent_id, message_id, task_id::text, workflow_id, run_id, \
                        state, (extract(epoch FROM created_at) * 1000)::bigint, \
                        (extract(epoch FROM status_timestamp) * 1000)::bigint, dispatch \
                 FROM a2a_tasks ORDER BY created_at",
                &[],
            )
            .await
            .expect("read the task rows");
        let since_start = |epoch_ms: i64| (epoch_ms - self.started_epoch_ms).max(0) as u64;
        let mut tasks = Vec::new();
        for row in rows {
            let (principal, agent, task_id): (String, String, String) =
                (row.get(0), row.get(1), row.get(3));
            let (status, body) = self
                .rpc(
                    0,
                    reading_token(&principal),
                    &agent,
                    "GetTask",
                    json!({"id": task_id}),
                )
                .await;
            let read = (status == 200).then(|| seen(&body["result"])).flatten();
            tasks.push(FinalTask {
                identity: Identity {
                    principal,
                    agent,
                    message_id: row.get(2),
                },
                task_id,
                workflow_id: row.get(4),
                run_id: row.get(5),
                stored_state: row.get(6),
                dispatch: row.get(9),
                created_at: since_start(row.get(7)),
                status_at: since_start(row.get(8)),
                read,
                read_at: self.now(),
            });
        }
        let runs = q
            .runs(None)
            .await
            .iter()
            .map(|r| QRun {
                run_id: r["id"].as_str().unwrap_or_default().to_string(),
                workflow_id: r["workflow_id"].as_str().unwrap_or_default().to_string(),
                principal: r["principal_id"].as_str().unwrap_or_default().to_string(),
                agent: r["agent_id"].as_str().unwrap_or_default().to_string(),
                status: r["status"].as_str().unwrap_or_default().to_string(),
            })
            .collect();
        (tasks, runs, self.q_calls().await, fired)
    }

    /// Q's record of the requests that named a workflow (the last 4,096 requests it kept).
    async fn q_calls(&self) -> Vec<QCall> {
        let calls = self
            .gw
            .upstream
            .admin(Method::GET, "/admin/calls", None)
            .await;
        calls["calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some(QCall {
                    seq: c["seq"].as_u64()?,
                    method: c["method"].as_str()?.to_string(),
                    path: c["path"].as_str()?.to_string(),
                    workflow_id: c["workflow_id"].as_str()?.to_string(),
                    status: c["status"].as_u64(),
                    error: c["error"].as_str().map(str::to_string),
                })
            })
            .collect()
    }

    /// With `Q_A2A_SIM_HISTORY_DIR` set, writes each slot's gateway log so far (a replica
    /// killed and started again: its current process's) beside the seed's history, as
    /// `seed-N-gateway-SLOT.log`.
    async fn keep_logs(&self, seed: u64) {
        let Ok(dir) = std::env::var("Q_A2A_SIM_HISTORY_DIR") else {
            return;
        };
        std::fs::create_dir_all(&dir).expect("the history directory");
        let procs = self.procs.lock().await;
        for (slot, process) in procs.iter().enumerate() {
            let text = match process {
                Process::First(_) => self.gw.log_text(),
                Process::Replica(replica) => replica.log_text(),
                Process::Down => continue,
            };
            let path = std::path::Path::new(&dir).join(format!("seed-{seed}-gateway-{slot}.log"));
            std::fs::write(&path, text).expect("write a gateway's log");
        }
    }

    async fn stop(&self) {
        for slot in 0..3 {
            self.kill(slot).await;
        }
    }
}

/// Runs one seed's schedule against a fresh deployment and returns its history.
pub async fn run(seed: u64, schedule: Schedule) -> History {
    run_with(seed, schedule, None).await
}

/// [`run`], the clients calling `stand_in`s in front of the replicas instead (a test's).
pub async fn run_with(seed: u64, schedule: Schedule, stand_in: Option<StandIn>) -> History {
    let pg = PgPair::start().await;
    let order = if seed % 2 == 0 {
        [Node::A, Node::B]
    } else {
        [Node::B, Node::A]
    };
    let url = format!("{}?target_session_attrs=read-write", pg.url(&order));
    let redis = [PrivateRedis::start().await, PrivateRedis::start().await];
    let ports = [redis[0].port, redis[1].port];
    replicate(ports[1], Some(ports[0])).await;
    let redis_address = TcpProxy::start(&format!("127.0.0.1:{}", ports[0])).await;
    let options = options(&format!("redis://127.0.0.1:{}", redis_address.port));
    let upstream = Upstream::start().await;
    // Q's workflow-id deduplication is off: every create the gateway sends makes a run.
    upstream.workflow_dedup(false).await;
    let gw = Gateway::start_on(TestDb::elsewhere(url), upstream, options.clone()).await;
    let first = gw.child.id().expect("the first gateway runs");
    let replicas = [
        gw.start_replica(&options).await,
        gw.start_replica(&options).await,
    ];
    let urls = vec![
        gw.url.clone(),
        replicas[0].url.clone(),
        replicas[1].url.clone(),
    ];
    let [a, b] = replicas;
    let [redis_a, redis_b] = redis;
    let urls = Arc::new(Mutex::new(urls));
    let fronts = match stand_in {
        None => None,
        Some(mode) => {
            let mut fronts = Vec::new();
            for slot in 0..3 {
                fronts.push(super::stand_in::start(mode, urls.clone(), slot).await);
            }
            Some(fronts)
        }
    };
    let world = Arc::new(World {
        gw,
        options,
        procs: tokio::sync::Mutex::new(vec![
            Process::First(first),
            Process::Replica(Box::new(a)),
            Process::Replica(Box::new(b)),
        ]),
        urls,
        fronts,
        pg,
        pg_primary: tokio::sync::Mutex::new(Node::A),
        // The world may stop a Redis and start it again on its port.
        redis: tokio::sync::Mutex::new(RedisPair {
            servers: [Some(redis_a), Some(redis_b)],
            ports,
            primary: 0,
        }),
        redis_address,
        messages: schedule.messages,
        started: Instant::now(),
        started_epoch_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
        seq: AtomicUsize::new(0),
        calls: Mutex::new(Vec::new()),
        faults: Mutex::new(Vec::new()),
        answers: Mutex::new(BTreeMap::new()),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap(),
    });
    let players: Vec<_> = schedule
        .steps
        .into_iter()
        .map(|(at, step)| tokio::spawn(world.clone().play(seed, at, step)))
        .collect();
    for player in players {
        player.await.expect("a step of the schedule panicked");
    }
    let (tasks, runs, q_calls, q_fired) = world.settle().await;
    world.keep_logs(seed).await;
    world.stop().await;
    let faults = std::mem::take(&mut *world.faults.lock().unwrap());
    let mut calls = std::mem::take(&mut *world.calls.lock().unwrap());
    calls.sort_by_key(|c| (c.started, c.seq));
    History {
        seed,
        calls,
        faults,
        tasks,
        runs,
        q_calls,
        q_fired,
        bounds: bounds(),
    }
}
