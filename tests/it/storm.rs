//! Exactly one run per messageId under a storm: many concurrent duplicates of many messageIds
//! (blocking, returnImmediately and streaming, from two principals, through three gateway
//! processes) while Q drops or fails create answers after committing, holds creates past the
//! gateway's upstream timeout, and two of the replicas are SIGKILLed and restarted at random
//! moments. Loopback only; the schedule comes from a seeded RNG (the seed is printed; replay
//! with `Q_A2A_TEST_SEED`).
//!
//! Afterwards every messageId maps to exactly one task row and exactly one run in Q, every
//! answer for a messageId named the same task, and no task is left undispatched once the
//! reconciler's grace has passed.
//!
//! The default run takes well under a minute; `Q_A2A_LONG_TESTS=1` runs a bigger, longer storm.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::report::{long_tests, report};
use crate::support::rng::{seed, Rng};
use crate::support::{kill9, Gateway, GatewayOptions};

const AGENT: &str = "ag-writer";
const PRINCIPALS: [&str; 2] = ["tok-alice", "tok-bob"];

#[derive(Clone, Copy, Debug)]
enum Mode {
    Blocking,
    Immediate,
    Streaming,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Blocking => "blocking",
            Mode::Immediate => "returnImmediately",
            Mode::Streaming => "streaming",
        }
    }
}

/// What one attempt got back.
enum Outcome {
    Task(String),
    /// Transport failure, 5xx/503/429 or a JSON-RPC internal error: the client may repeat.
    Retryable(String),
    /// Anything else is a finding (e.g. the same messageId refused as different content).
    Wrong(String),
}

fn options() -> GatewayOptions {
    GatewayOptions::with_env(&[
        // Creates held longer than this become ambiguous (dispatch = unknown).
        ("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", "1000"),
        ("Q_A2A_RECONCILER_GRACE_MS", "500"),
        ("Q_A2A_RECONCILER_INTERVAL_MS", "200"),
        // Blocking sends answer within a few seconds even when their run is in doubt.
        ("Q_A2A_OBSERVATION_WINDOW_SECONDS", "4"),
        // Room for every observer, and a dead replica's leases go quickly.
        ("Q_A2A_OBSERVERS_GLOBAL", "1024"),
        ("Q_A2A_OBSERVERS_PER_TENANT", "1024"),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "512"),
        ("Q_A2A_LEASE_TTL_MS", "3000"),
    ])
}

fn params(message_id: &str, text: &str, mode: Mode) -> Value {
    let mut params = json!({
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    });
    if matches!(mode, Mode::Immediate) {
        params["configuration"] = json!({"returnImmediately": true});
    }
    params
}

fn task_id_of(result: &Value) -> Option<String> {
    result["task"]["id"]
        .as_str()
        .or_else(|| result["id"].as_str())
        .map(str::to_string)
}

fn classify_json(status: u16, body: &Value) -> Outcome {
    if status == 200 {
        if let Some(id) = task_id_of(&body["result"]) {
            return Outcome::Task(id);
        }
        match body["error"]["code"].as_i64() {
            Some(-32603) => return Outcome::Retryable(format!("internal: {body}")),
            _ => return Outcome::Wrong(format!("{status} {body}")),
        }
    }
    if status == 429 || status >= 500 {
        return Outcome::Retryable(format!("HTTP {status}"));
    }
    Outcome::Wrong(format!("HTTP {status} {body}"))
}

async fn attempt(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    message_id: &str,
    text: &str,
    mode: Mode,
) -> Outcome {
    let method = match mode {
        Mode::Streaming => "SendStreamingMessage",
        _ => "SendMessage",
    };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method,
                      "params": params(message_id, text, mode)});
    let mut request = http
        .post(format!("{base}/v1/a2a/agents/{AGENT}/rpc"))
        .bearer_auth(token)
        .header("a2a-version", "1.0")
        .json(&body);
    if matches!(mode, Mode::Streaming) {
        request = request.header("accept", "text/event-stream");
    }
    let mut response = match request.send().await {
        Ok(r) => r,
        Err(e) => return Outcome::Retryable(format!("transport: {e}")),
    };
    let status = response.status().as_u16();
    let is_sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_sse {
        return match response.bytes().await {
            Ok(bytes) => classify_json(
                status,
                &serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            ),
            Err(e) => Outcome::Retryable(format!("transport reading body: {e}")),
        };
    }
    // The first data frame is the task snapshot; the client then goes away.
    let mut buffer = String::new();
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let data: String = frame
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                continue;
            }
            let event: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            return classify_json(200, &event);
        }
        match response.chunk().await {
            Ok(Some(chunk)) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(None) => return Outcome::Retryable("stream closed before a snapshot".into()),
            Err(e) => return Outcome::Retryable(format!("stream broke: {e}")),
        }
    }
}

#[derive(Default)]
struct Tally {
    sent: u64,
    retryable: u64,
    retry_reasons: BTreeMap<String, u64>,
    by_mode: BTreeMap<&'static str, u64>,
    /// (principal token, messageId) → every task id answered for it.
    answers: BTreeMap<(String, String), BTreeSet<String>>,
    wrong: Vec<String>,
}

/// Live gateway URLs: the first never dies, the others are the replicas being killed.
type Urls = Arc<Mutex<Vec<String>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_id_makes_exactly_one_run_through_faults_and_kills() {
    let long = long_tests();
    let seed = seed();
    let (ids_per_principal, duplicates, storm_window_ms, kill_every_ms) = if long {
        (100u64, 6u64, 60_000u64, (1_000u64, 4_000u64))
    } else {
        (20, 6, 12_000, (1_500, 3_500))
    };
    eprintln!(
        "[storm] seed {seed} (replay with Q_A2A_TEST_SEED={seed}); {} messageIds x {duplicates} duplicates over {} ms",
        ids_per_principal * PRINCIPALS.len() as u64,
        storm_window_ms
    );
    let mut rng = Rng::new(seed);

    let gw = Arc::new(Gateway::start_with(options()).await);
    let mut replicas = vec![
        gw.start_replica(&options()).await,
        gw.start_replica(&options()).await,
    ];
    let urls: Urls = Arc::new(Mutex::new(vec![
        gw.url.clone(),
        replicas[0].url.clone(),
        replicas[1].url.clone(),
    ]));

    // Q's workflow-id deduplication is off: every create the gateway sends makes a run, so
    // "one run per messageId" below is the gateway's own doing (one create in flight per
    // identity, a late create found by its identity before any other is sent).
    gw.upstream.workflow_dedup(false).await;
    // Q's faults: creates that commit but lose their answer, that commit and fail, and that are
    // held past the gateway's 1 s upstream timeout.
    let scale = if long { 5 } else { 1 };
    let faults = json!({
        "create_drop_after_commit": 8 * scale,
        "create_fail_500_after_commit": 4 * scale,
        "create_fail_500_before_commit": 3 * scale,
        "create_delay_ms": 1800,
        "create_delay_count": 6 * scale,
    });
    gw.upstream.faults(faults.clone()).await;
    let faults_set: u64 = [
        "create_drop_after_commit",
        "create_fail_500_after_commit",
        "create_fail_500_before_commit",
        "create_delay_count",
    ]
    .iter()
    .map(|k| faults[*k].as_u64().unwrap())
    .sum();

    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let storm_ends = started + Duration::from_millis(storm_window_ms);

    // The killer: SIGKILL a random replica, leave it dead a moment, start it again.
    let killer = {
        let gw = gw.clone();
        let urls = urls.clone();
        let mut rng = Rng::new(rng.next_u64());
        tokio::spawn(async move {
            let mut kills = 0u64;
            loop {
                tokio::time::sleep(Duration::from_millis(
                    rng.range(kill_every_ms.0, kill_every_ms.1),
                ))
                .await;
                if Instant::now() >= storm_ends {
                    break;
                }
                let which = rng.range(0, 2) as usize;
                kill9(&mut replicas[which].child).await;
                kills += 1;
                tokio::time::sleep(Duration::from_millis(rng.range(100, 1_000))).await;
                replicas[which] = gw.start_replica(&options()).await;
                urls.lock().unwrap()[which + 1] = replicas[which].url.clone();
            }
            (kills, replicas)
        })
    };

    // The clients: each messageId's duplicates start together at a random moment of the storm,
    // each through a random gateway, each repeating (same messageId) after a retryable failure.
    let mut clients = Vec::new();
    let modes = [Mode::Blocking, Mode::Immediate, Mode::Streaming];
    for n in 0..ids_per_principal {
        let message_id = format!("storm-{seed}-{n}");
        for token in PRINCIPALS {
            let text = format!("storm message {n}");
            let start_at = rng.range(0, storm_window_ms.saturating_sub(2_000).max(1));
            for _ in 0..duplicates {
                let mut rng = Rng::new(rng.next_u64());
                let urls = urls.clone();
                let tally = tally.clone();
                let message_id = message_id.clone();
                let text = text.clone();
                let mode = *rng.pick(&modes);
                clients.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(start_at + rng.range(0, 50))).await;
                    let http = reqwest::Client::builder()
                        .timeout(Duration::from_secs(20))
                        .build()
                        .unwrap();
                    for _try in 0..15 {
                        let base = rng.pick(&urls.lock().unwrap()).clone();
                        let outcome = attempt(&http, &base, token, &message_id, &text, mode).await;
                        {
                            let mut t = tally.lock().unwrap();
                            t.sent += 1;
                            *t.by_mode.entry(mode.name()).or_default() += 1;
                            match outcome {
                                Outcome::Task(id) => {
                                    t.answers
                                        .entry((token.to_string(), message_id.clone()))
                                        .or_default()
                                        .insert(id);
                                    return;
                                }
                                Outcome::Retryable(why) => {
                                    t.retryable += 1;
                                    let kind = why.split(':').next().unwrap_or_default();
                                    *t.retry_reasons.entry(kind.to_string()).or_default() += 1;
                                }
                                Outcome::Wrong(what) => {
                                    t.wrong.push(format!("{token} {message_id}: {what}"));
                                    return;
                                }
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(rng.range(100, 600))).await;
                    }
                }));
            }
        }
    }
    for client in clients {
        client.await.unwrap();
    }
    let (kills, mut replicas) = killer.await.unwrap();

    let remaining = gw
        .upstream
        .admin(reqwest::Method::GET, "/admin/faults", None)
        .await;
    // A create Q refused before committing made no run and is sent again; so is one Q held
    // past the gateway's timeout, if Q dropped it with the connection before committing.
    let consumed = |key: &str| faults[key].as_u64().unwrap() - remaining[key].as_u64().unwrap_or(0);
    let creates_without_a_run =
        consumed("create_fail_500_before_commit") + consumed("create_delay_count");
    let faults_left: u64 = [
        "create_drop_after_commit",
        "create_fail_500_after_commit",
        "create_fail_500_before_commit",
        "create_delay_count",
    ]
    .iter()
    .map(|k| remaining[*k].as_u64().unwrap_or(0))
    .sum();
    gw.upstream
        .admin(reqwest::Method::DELETE, "/admin/faults", None)
        .await;

    // A client that never got an answer repeats once more after the storm; every messageId is
    // accepted by the end, and a repeat names the task every earlier answer named.
    let keys: Vec<(String, String, String)> = (0..ids_per_principal)
        .flat_map(|n| {
            PRINCIPALS.iter().map(move |t| {
                (
                    t.to_string(),
                    format!("storm-{seed}-{n}"),
                    format!("storm message {n}"),
                )
            })
        })
        .collect();
    let mut final_answers = BTreeMap::new();
    for (token, message_id, text) in &keys {
        let reply = gw
            .caller(token)
            .agent(AGENT)
            .send_text_immediately(message_id, text)
            .await;
        let id = task_id_of(reply.result()).expect("task id");
        final_answers.insert((token.clone(), message_id.clone()), id);
    }

    let t = std::mem::take(&mut *tally.lock().unwrap());
    assert!(t.wrong.is_empty(), "unexpected answers: {:#?}", t.wrong);
    for (key, ids) in &t.answers {
        assert_eq!(
            ids.len(),
            1,
            "{key:?} was answered with several tasks: {ids:?}"
        );
        assert_eq!(
            ids.iter().next(),
            final_answers.get(key),
            "{key:?}: a repeat named another task"
        );
    }

    // Nothing stays undispatched once the reconciler's grace has passed.
    gw.db
        .wait_count(
            "every task dispatched",
            "SELECT count(*) FROM a2a_tasks WHERE dispatch IN ('pending', 'unknown') OR run_id IS NULL",
            0,
            Duration::from_secs(30),
        )
        .await;

    // Exactly one task row per (principal, messageId), and exactly one run per task in Q.
    let rows = gw
        .db
        .client()
        .await
        .query(
            "SELECT principal_id, message_id, task_id::text, workflow_id, run_id FROM a2a_tasks",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        keys.len(),
        "one task per (principal, messageId)"
    );
    let runs = gw.upstream.runs(None).await;
    let mut runs_by_workflow: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for run in &runs {
        runs_by_workflow
            .entry(run["workflow_id"].as_str().unwrap().to_string())
            .or_default()
            .push(run["id"].as_str().unwrap().to_string());
    }
    for row in &rows {
        let workflow: String = row.get(3);
        let run_id: Option<String> = row.get(4);
        let found = runs_by_workflow.get(&workflow).cloned().unwrap_or_default();
        assert_eq!(
            found.len(),
            1,
            "task {} has runs {found:?}",
            row.get::<_, String>(2)
        );
        assert_eq!(Some(&found[0]), run_id.as_ref());
    }
    assert_eq!(runs.len(), rows.len(), "no run outside the tasks");
    for row in &rows {
        let principal: String = row.get(0);
        let message_id: String = row.get(1);
        let task_id: String = row.get(2);
        let token = if principal == "p-alice" {
            "tok-alice"
        } else {
            "tok-bob"
        };
        assert_eq!(
            final_answers.get(&(token.to_string(), message_id.clone())),
            Some(&task_id)
        );
    }

    // And every run reaches its end (ag-writer answers in 0.3 s).
    gw.db.wait_all_completed(Duration::from_secs(30)).await;

    let stats = gw
        .upstream
        .admin(reqwest::Method::GET, "/admin/stats", None)
        .await;
    report(
        "storm",
        &format!(
            "seed={seed} message_ids={} duplicates_sent={} (by mode {:?}) retryable_failures={} {:?} answered_ids={} runs_created={} create_requests={} faults_injected={} kills={kills} elapsed={:.1}s",
            keys.len(),
            t.sent,
            t.by_mode,
            t.retryable,
            t.retry_reasons,
            t.answers.len(),
            stats["runs_created"],
            stats["create_requests"],
            faults_set - faults_left,
            started.elapsed().as_secs_f64(),
        ),
    );
    assert_eq!(stats["runs_created"].as_u64(), Some(keys.len() as u64));
    // No create was sent twice for a run: beyond one per messageId, only creates that made
    // no run were sent again.
    let creates = stats["create_requests"].as_u64().unwrap();
    assert!(
        creates <= keys.len() as u64 + creates_without_a_run,
        "{creates} creates for {} messageIds and {creates_without_a_run} creates that made no run",
        keys.len()
    );
    for r in &mut replicas {
        kill9(&mut r.child).await;
    }
}
