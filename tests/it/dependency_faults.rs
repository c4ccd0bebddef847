//! Dependency faults under load: PostgreSQL going away and coming back, or falling silent with
//! its connections open (through a TCP proxy the test controls; the machine's server keeps
//! running), and Q resetting connections or never answering. Requests get clear errors in
//! bounded time, `/readyz` says what is wrong, the gateway recovers without a restart, every
//! task that was acknowledged survives and completes, and a burst of failing calls leaves no
//! threads or memory behind. Every PostgreSQL connection carries the statement timeout and
//! keep-alive.
//!
//! Redis outages are covered by `streaming::redis_outage` and `readiness`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use q_a2a_gateway::config::DatabaseConfig;
use q_a2a_gateway::store::{PgTaskStore, ANSWER_SLACK};

use crate::support::db::{postgres_addr, via_port};
use crate::support::gateway::migrate;
use crate::support::proxy::TcpProxy;
use crate::support::report::report;
use crate::support::{new_id, Caller, Gateway, GatewayOptions, TestDb, Upstream};

const AGENT: &str = "ag-writer";

/// Waits (20 s at most) for `/readyz` to answer `status`, with `check` failing or passing
/// accordingly.
async fn wait_ready(gw: &Gateway, status: u16, check: &str) -> serde_json::Value {
    let body = gw.wait_readyz(status, Duration::from_secs(20)).await;
    assert_eq!(body["checks"][check]["ok"], status == 200, "{body}");
    body
}

/// One acknowledged or refused SendMessage.
struct Sent {
    message_id: String,
    task_id: Option<String>,
    status: u16,
    code: Option<i64>,
    elapsed: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_under_load_gives_clear_errors_and_loses_nothing() {
    let mut proxy = TcpProxy::start(&postgres_addr()).await;
    let db = TestDb::create().await;
    assert!(migrate(&db, "http://127.0.0.1:9").await.status.success());
    let gw = Arc::new(
        Gateway::start_with_env(&[
            ("Q_A2A_DATABASE_URL", &via_port(&db.url, proxy.port)),
            ("Q_A2A_RECONCILER_GRACE_MS", "500"),
        ])
        .await,
    );
    wait_ready(&gw, 200, "database").await;
    // Q's deduplication off: "one run per task" below counts the gateway's creates.
    gw.upstream.workflow_dedup(false).await;

    // Four clients sending (returnImmediately) and reading back, without pause.
    let sent = Arc::new(Mutex::new(Vec::<Sent>::new()));
    let stop = Arc::new(AtomicU8::new(0));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let writer = gw.caller("tok-alice").agent(AGENT);
        let (sent, stop) = (sent.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            while stop.load(Ordering::Relaxed) == 0 {
                let message_id = new_id();
                let started = Instant::now();
                let reply = writer.send_text_immediately(&message_id, "outage").await;
                let task_id = reply.body["result"]["task"]["id"]
                    .as_str()
                    .map(str::to_string);
                sent.lock().unwrap().push(Sent {
                    message_id,
                    task_id,
                    status: reply.status,
                    code: reply.error_code(),
                    elapsed: started.elapsed(),
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let outage_started = sent.lock().unwrap().len();
    proxy.stop();
    let body = wait_ready(&gw, 503, "database").await;
    assert_eq!(body["checks"]["upstream"]["ok"], true, "{body}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.restart().await;
    wait_ready(&gw, 200, "database").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(1, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }

    let sent = std::mem::take(&mut *sent.lock().unwrap());
    let acknowledged: Vec<&Sent> = sent.iter().filter(|s| s.task_id.is_some()).collect();
    let refused: Vec<&Sent> = sent.iter().filter(|s| s.task_id.is_none()).collect();
    assert!(!refused.is_empty(), "the outage refused nothing");
    for s in &refused {
        // The identity check needs no database; the store's failure is a JSON-RPC internal
        // error (HTTP 200, -32603) or an HTTP 503, never a hang.
        assert!(
            (s.status == 200 && s.code == Some(-32603)) || s.status == 503,
            "{} {:?}",
            s.status,
            s.code
        );
    }
    for s in &sent {
        assert!(
            s.elapsed < Duration::from_secs(10),
            "a send took {:?}",
            s.elapsed
        );
    }
    let after_outage = &sent[outage_started..];
    assert!(
        after_outage
            .iter()
            .rev()
            .take(4)
            .all(|s| s.task_id.is_some()),
        "the gateway did not recover by itself"
    );

    // Every acknowledged task is in the database and completes.
    let client = db.client().await;
    for s in &acknowledged {
        let rows = client
            .query(
                "SELECT task_id::text FROM a2a_tasks WHERE message_id = $1",
                &[&s.message_id],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "acknowledged task {} lost", s.message_id);
        assert_eq!(rows[0].get::<_, String>(0), *s.task_id.as_ref().unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open: i64 = client
            .query_one(
                "SELECT count(*) FROM a2a_tasks WHERE state <> 'TASK_STATE_COMPLETED'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} tasks never completed");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let rows: i64 = client
        .query_one("SELECT count(*) FROM a2a_tasks", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        gw.upstream.runs(None).await.len() as i64,
        rows,
        "one run per task"
    );
    report(
        "dependency_faults",
        &format!(
            "postgres outage: sends={} acknowledged={} refused={} slowest={:?} tasks={rows}",
            sent.len(),
            acknowledged.len(),
            refused.len(),
            sent.iter().map(|s| s.elapsed).max().unwrap_or_default()
        ),
    );
}

/// What one call of the black-hole test saw: `None` when it got no answer at all.
struct Answer {
    method: &'static str,
    status: u16,
    code: Option<i64>,
    ok: bool,
    elapsed: Duration,
}

/// PostgreSQL stops answering with every connection left open, mid-flight, under load: a
/// wedged server or a proxy in front of it that still accepts and acknowledges. Keep-alive
/// cannot see that; the answer deadline must. Every request is answered within the acquire
/// timeout plus the statement timeout plus the answer slack (and a little for the rest of the
/// request), none hangs, the reconciler's leader connection is given up and taken again, and
/// everything recovers once PostgreSQL answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_black_hole_under_load_gives_bounded_answers() {
    const ACQUIRE: Duration = Duration::from_millis(2_000); // database.acquire_timeout_ms
    const STATEMENT: Duration = Duration::from_millis(1_000);
    let bound = ACQUIRE + STATEMENT + ANSWER_SLACK + Duration::from_millis(1_500);
    let proxy = TcpProxy::start(&postgres_addr()).await;
    let db = TestDb::create().await;
    assert!(migrate(&db, "http://127.0.0.1:9").await.status.success());
    let gw = Arc::new(
        Gateway::start_with(GatewayOptions::with_env(&[
            ("Q_A2A_DATABASE_URL", via_port(&db.url, proxy.port).as_str()),
            (
                "Q_A2A_DATABASE_STATEMENT_TIMEOUT_MS",
                STATEMENT.as_millis().to_string().as_str(),
            ),
            ("Q_A2A_RECONCILER_GRACE_MS", "500"),
            // Not ready half a second after the last write taken (5 s by default), so that
            // the check 3 s into the silence sees it.
            ("Q_A2A_DATABASE_UNWRITABLE_GRACE_MS", "500"),
        ]))
        .await,
    );
    wait_ready(&gw, 200, "database").await;
    let writer = gw.caller("tok-alice").agent(AGENT);
    let known = writer
        .send_text_immediately(&new_id(), "known")
        .await
        .task_id();

    // Six clients: sends, reads of a known task, listings; each call given 30 s to answer.
    let answers = Arc::new(Mutex::new(Vec::<Option<Answer>>::new()));
    let stop = Arc::new(AtomicU8::new(0));
    let mut clients = Vec::new();
    for n in 0..6 {
        let writer = gw.caller("tok-alice").agent(AGENT);
        let (answers, stop, known) = (answers.clone(), stop.clone(), known.clone());
        clients.push(tokio::spawn(async move {
            let mut i = n;
            while stop.load(Ordering::Relaxed) == 0 {
                let started = Instant::now();
                let call = async {
                    match i % 3 {
                        0 => writer.send_text_immediately(&new_id(), "black hole").await,
                        1 => writer.get_task(&known).await,
                        _ => writer.list_tasks(json!({})).await,
                    }
                };
                let answer = tokio::time::timeout(Duration::from_secs(30), call)
                    .await
                    .ok()
                    .map(|reply| Answer {
                        method: ["SendMessage", "GetTask", "ListTasks"][i % 3],
                        status: reply.status,
                        code: reply.error_code(),
                        ok: reply.is_result(),
                        elapsed: started.elapsed(),
                    });
                answers.lock().unwrap().push(answer);
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let silent_from = answers.lock().unwrap().len();
    proxy.black_hole();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, body) = gw.readyz().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["checks"]["database"]["ok"], false, "{body}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let silent_to = answers.lock().unwrap().len();
    proxy.forward();
    wait_ready(&gw, 200, "database").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(1, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }

    let answers = std::mem::take(&mut *answers.lock().unwrap());
    let hung = answers.iter().filter(|a| a.is_none()).count();
    assert_eq!(hung, 0, "{hung} calls got no answer within 30 s");
    let answers: Vec<Answer> = answers.into_iter().flatten().collect();
    let slowest = answers.iter().map(|a| a.elapsed).max().unwrap();
    for a in &answers {
        assert!(
            a.ok || (a.status == 200 && a.code == Some(-32603)) || a.status == 503,
            "{} {:?}",
            a.status,
            a.code
        );
        assert!(
            a.elapsed < bound,
            "an answer of {} took {:?} (bound {bound:?}): {} {:?}",
            a.method,
            a.elapsed,
            a.status,
            a.code
        );
    }
    // Calls answered while PostgreSQL was silent: refusals, not waits for its return.
    let during = &answers[silent_from..silent_to.min(answers.len())];
    let refused: Vec<&Answer> = during.iter().filter(|a| !a.ok).collect();
    assert!(
        refused.len() >= 6,
        "the black hole refused only {} calls",
        refused.len()
    );
    assert!(
        answers.iter().rev().take(6).all(|a| a.ok),
        "the gateway did not recover by itself"
    );
    // The leader's connection fell silent too: it was given up, and leadership taken again.
    let logs = gw.log_text();
    assert!(
        logs.contains("reconciler: leader connection lost"),
        "the reconciler kept waiting on its silent connection"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while gw
        .log_text()
        .matches("reconciler: this replica is the leader")
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "leadership was never taken again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every task the gateway acknowledged completes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = db
            .count("SELECT count(*) FROM a2a_tasks WHERE state <> 'TASK_STATE_COMPLETED'")
            .await;
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} tasks never completed");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    report(
        "dependency_faults",
        &format!(
            "postgres black hole: calls={} refused_while_silent={} slowest={slowest:?} bound={bound:?} hung=0",
            answers.len(),
            refused.len()
        ),
    );
}

/// `(timer, remaining ticks)` of this process's TCP socket from local port `local` to `remote`,
/// from /proc/net/tcp: timer 2 is the keep-alive timer, ticks are USER_HZ (1/100 s).
fn tcp_timer(local: u16, remote: u16) -> (u8, u64) {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap(), 16).unwrap();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if port(f[1]) == local && port(f[2]) == remote {
            let (timer, when) = f[5].split_once(':').unwrap();
            return (
                u8::from_str_radix(timer, 16).unwrap(),
                u64::from_str_radix(when, 16).unwrap(),
            );
        }
    }
    panic!("no TCP socket {local} -> {remote} in /proc/net/tcp");
}

/// The pool's connections and the one the reconciler leader holds are made the same way: the
/// server ends a statement past `statement_timeout_ms`, and the socket's keep-alive fires after
/// the configured idle time, not the kernel's two hours.
#[tokio::test]
async fn every_postgres_connection_has_the_statement_timeout_and_keepalive() {
    let db = TestDb::create().await;
    let config = DatabaseConfig {
        url: db.url.clone().into(),
        statement_timeout_ms: 400,
        keepalive_idle_seconds: 17,
        ..DatabaseConfig::default()
    };
    let store = PgTaskStore::connect(&config).unwrap();
    let pooled = store.pool().get().await.unwrap();
    let (leader, _connection) = store.connector().connect().await.unwrap();
    let server_port: u16 = postgres_addr().rsplit(':').next().unwrap().parse().unwrap();
    let pooled_client: &tokio_postgres::Client = &pooled;
    for (which, client) in [("pooled", pooled_client), ("leader", &leader)] {
        let setting: String = client
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(setting, "400ms", "{which}");
        let started = Instant::now();
        let err = client
            .query_one("SELECT pg_sleep(5)", &[])
            .await
            .expect_err("the server cancels the statement");
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::QUERY_CANCELED),
            "{which}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(2), "{which}");
        let port: i32 = client
            .query_one("SELECT inet_client_port()", &[])
            .await
            .unwrap()
            .get(0);
        let (timer, ticks) = tcp_timer(port as u16, server_port);
        assert_eq!(timer, 2, "{which}: no keep-alive timer on the socket");
        assert!(
            ticks <= 17 * 100,
            "{which}: keep-alive fires in {} s, not within 17 s",
            ticks / 100
        );
    }
}

/// How the stand-in for Q treats each connection.
const FORWARD: u8 = 0;
const RESET: u8 = 1;
const BLACKHOLE: u8 = 2;

/// A listener in front of the reference upstream that forwards, resets every connection once
/// the request starts arriving, or accepts and never answers.
struct FaultyQ {
    port: u16,
    mode: Arc<AtomicU8>,
    forwarded: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl FaultyQ {
    /// Switches mode; pooled connections forwarded so far are cut, so the gateway's next call
    /// meets the new mode.
    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::Relaxed);
        for connection in self.forwarded.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

async fn faulty_q(target: String) -> FaultyQ {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mode = Arc::new(AtomicU8::new(FORWARD));
    let forwarded = Arc::new(Mutex::new(Vec::new()));
    let faulty = FaultyQ {
        port,
        mode: mode.clone(),
        forwarded: forwarded.clone(),
    };
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            match mode.load(Ordering::Relaxed) {
                FORWARD => {
                    let target = target.clone();
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(&target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    forwarded.lock().unwrap().push(task.abort_handle());
                }
                RESET => {
                    tokio::spawn(async move {
                        let mut buf = [0u8; 64];
                        let _ = inbound.read(&mut buf).await;
                        #[allow(deprecated)] // SO_LINGER 0: close with a RST, at once
                        let _ = inbound.set_linger(Some(Duration::ZERO));
                        drop(inbound);
                    });
                }
                _ => held.push(inbound),
            }
        }
    });
    faulty
}

/// `(VmRSS in KiB, Threads)` of a process, from /proc/PID/status.
fn process_status(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("Threads:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_resetting_or_silent_gives_bounded_errors_and_no_growth() {
    let upstream = Upstream::start().await;
    let q = faulty_q(upstream.url.trim_start_matches("http://").to_string()).await;
    let gw = Gateway::start_with_env(&[
        (
            "Q_A2A_UPSTREAM_URL",
            &format!("http://127.0.0.1:{}", q.port),
        ),
        ("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", "1000"),
        // Each call below must reach Q, not the introspection cache.
        ("Q_A2A_AUTH_CACHE_TTL_MS", "1"),
        // Every request must depend on Q here: no read may outlive it on a last known answer
        // (that is tests/it/projection.rs).
        ("Q_A2A_AUTH_OUTAGE_READ_GRACE_SECONDS", "0"),
    ])
    .await;
    let pid = gw.child.id().unwrap();
    let writer = gw.caller("tok-alice").agent(AGENT);
    // Warm up: pools, caches and lazily started tasks exist before the first sample.
    for _ in 0..20 {
        let reply = writer.send_text_immediately(&new_id(), "warm").await;
        reply.result();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = process_status(pid);

    let mut tried = 0usize;
    let mut slowest = Duration::ZERO;
    for (fault, calls, bound) in [
        (RESET, 300usize, Duration::from_secs(5)),
        (BLACKHOLE, 60, Duration::from_secs(8)),
    ] {
        q.set(fault);
        let mut batch = Vec::new();
        for n in 0..calls {
            // A client per call: no pooled connection stays open in the gateway between the
            // samples of its threads and memory.
            let writer = Caller::at(&gw.url, "tok-alice").agent(AGENT);
            batch.push(tokio::spawn(async move {
                let started = Instant::now();
                let reply = match n % 3 {
                    0 => writer.send_text_immediately(&new_id(), "x").await,
                    1 => writer.get_task(&new_id()).await,
                    _ => writer.list_tasks(json!({})).await,
                };
                (reply.status, reply.body, started.elapsed())
            }));
            if n % 20 == 19 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        for call in batch {
            let (status, body, elapsed) = call.await.unwrap();
            assert_eq!(status, 503, "fault {fault}: {body}");
            assert!(
                matches!(
                    body["error"].as_str(),
                    Some("identity_unavailable" | "upstream_unavailable")
                ),
                "{body}"
            );
            assert!(elapsed < bound, "fault {fault}: answered after {elapsed:?}");
            slowest = slowest.max(elapsed);
            tried += 1;
        }
        let (status, body) = gw.readyz().await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["checks"]["upstream"]["ok"], false, "{body}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = process_status(pid);

    // Recovery, without a restart.
    q.set(FORWARD);
    let reply = writer.send_text(&new_id(), "after").await;
    assert_eq!(
        reply.result()["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    let rss_growth_kib = after.0.saturating_sub(before.0);
    let thread_growth = after.1.saturating_sub(before.1);
    report(
        "dependency_faults",
        &format!(
            "Q resetting/silent: failing_calls={tried} slowest={slowest:?} rss_kib {}->{} threads {}->{}",
            before.0, after.0, before.1, after.1
        ),
    );
    assert!(thread_growth <= 4, "threads grew {before:?} -> {after:?}");
    assert!(
        rss_growth_kib < 64 * 1024,
        "RSS grew {before:?} -> {after:?}"
    );
    // The gateway's own /readyz recovers too.
    wait_ready(&gw, 200, "upstream").await;
}
