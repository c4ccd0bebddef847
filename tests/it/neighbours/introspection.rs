//! Made-up bearer tokens against the introspection pool and the per-address limit on unknown
//! tokens. Each token is a fresh UUID (well-formed, never issued by Q), sent from the test on
//! loopback, a trusted proxy by default, with the client address it claims in
//! `X-Forwarded-For`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::options;
use crate::support::metrics::metric;
use crate::support::{new_id, Gateway, Reply, SseFrame};

/// How long Q takes to introspect a token while the flood runs.
const INTROSPECTION: Duration = Duration::from_millis(400);
/// Made-up tokens in flight at once (each worker sends one request at a time).
const FLOOD_WORKERS: usize = 200;
/// How long the flood lasts: a dozen re-checks of the victim's stream.
const FLOOD: Duration = Duration::from_secs(6);
/// A worker refused at once waits this long before its next request, so the flood holds the
/// pool without spinning the machine's cores.
const REFUSED_PAUSE: Duration = Duration::from_millis(100);

/// A GetTask with `token`, as a client at `client` behind the (trusted, loopback) proxy.
async fn get_task_from(gw: &Gateway, token: &str, client: &str, task_id: &str) -> Reply {
    let body =
        json!({"jsonrpc": "2.0", "id": "n-1", "method": "GetTask", "params": {"id": task_id}});
    gw.post_raw(
        "ag-approver",
        &[
            ("authorization", &format!("Bearer {token}")),
            ("a2a-version", "1.0"),
            ("x-forwarded-for", client),
        ],
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

/// A random client address in 10.0.0.0/8 (not a trusted proxy).
fn random_client() -> String {
    let n = uuid::Uuid::new_v4().as_u128() as u32;
    format!("10.{}.{}.{}", (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

/// Answers by status and error code, e.g. `503 identity_unavailable`.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

impl Tally {
    fn add(&mut self, reply: &Reply) {
        let code = reply.body["error"].as_str().unwrap_or("");
        *self
            .0
            .entry(format!("{} {code}", reply.status))
            .or_default() += 1;
    }

    fn count(&self, prefix: &str) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

/// A task of Alice's that waits in INPUT_REQUIRED until approved: subscriptions stay open.
async fn waiting_task(gw: &Gateway) -> String {
    let task = gw
        .caller("tok-alice")
        .agent("ag-approver")
        .send_text(&new_id(), "wait for me")
        .await
        .task();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    task["id"].as_str().unwrap().to_string()
}

/// While Q takes 400 ms per introspection and 200 made-up tokens are in flight at all times
/// (each from an address of its own, so only the pool holds them back), Alice's open
/// SubscribeToTask stream lives through a dozen re-checks of her token (every half token
/// bound: 500 ms here), and a GetTask with another token of hers, known but no longer cached,
/// is answered. The strangers get 401 or 503 and never more than their share of the pool.
#[tokio::test]
async fn known_callers_keep_streams_and_reads_through_a_flood_of_strangers() {
    let gw = Gateway::start_with(options(&[("Q_A2A_AUTH_CACHE_TTL_MS", "1000")])).await;
    let task_id = waiting_task(&gw).await;
    // Her second token is seen active once, then left to expire from the cache.
    let wild = gw.caller("tok-alice-wild").agent("ag-approver");
    assert_eq!(wild.get_task(&task_id).await.status, 200);
    let mut stream = gw
        .caller("tok-alice")
        .agent("ag-approver")
        .subscribe(&task_id)
        .await;
    assert!(stream.is_sse(), "HTTP {}", stream.status);
    let first = stream.next_result().await.expect("the task's snapshot");
    assert_eq!(first["task"]["id"], task_id.as_str(), "{first}");

    gw.upstream
        .faults(json!({"introspect_delay_ms": INTROSPECTION.as_millis() as u64, "introspect_delay_count": 1_000_000}))
        .await;
    let started = Instant::now();
    let until = started + FLOOD;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let flood: Vec<_> = (0..FLOOD_WORKERS)
        .map(|_| {
            let (url, tally) = (gw.url.clone(), tally.clone());
            let http = reqwest::Client::new();
            tokio::spawn(async move {
                while Instant::now() < until {
                    let body = json!({"jsonrpc": "2.0", "id": "f", "method": "GetTask",
                                      "params": {"id": new_id()}});
                    let reply = Reply::send(
                        http.post(format!("{url}/v1/a2a/agents/ag-approver/rpc"))
                            .bearer_auth(new_id())
                            .header("a2a-version", "1.0")
                            .header("x-forwarded-for", random_client())
                            .json(&body),
                    )
                    .await;
                    let refused_at_once = reply.status != 401;
                    tally.lock().unwrap().add(&reply);
                    if refused_at_once {
                        tokio::time::sleep(REFUSED_PAUSE).await;
                    }
                }
            })
        })
        .collect();

    // The stream until the flood ends: keep-alives only, no end and no error.
    let watched = tokio::spawn(async move {
        loop {
            match tokio::time::timeout_at(until, stream.next()).await {
                Err(_) => return None,
                Ok(Some(SseFrame::Comment(_))) => {}
                Ok(Some(SseFrame::Event { data, .. })) => {
                    return Some(format!("an event at {:?}: {data}", started.elapsed()))
                }
                Ok(None) => {
                    return Some(format!(
                        "the stream closed at {:?} ({:?})",
                        started.elapsed(),
                        stream.broken()
                    ))
                }
            }
        }
    });

    // Mid-flood, her other token: known, its cached answer 1 s gone, so it needs a slot.
    tokio::time::sleep(FLOOD / 2).await;
    let read = wild.get_task(&task_id).await;
    let read_at = started.elapsed();

    let ended = watched.await.unwrap();
    for worker in flood {
        worker.await.unwrap();
    }
    gw.upstream
        .faults(json!({"introspect_delay_count": 0}))
        .await;
    let tally = std::mem::take(&mut *tally.lock().unwrap());
    eprintln!(
        "flood of {FLOOD_WORKERS} made-up tokens for {FLOOD:?}: {:?}; the known token's read at {read_at:?}: HTTP {}",
        tally.0, read.status
    );

    assert_eq!(
        ended, None,
        "Alice's stream did not outlive the flood (strangers: {:?})",
        tally.0
    );
    assert!(
        read.status == 200 && read.is_result(),
        "a known token's GetTask during the flood: HTTP {} {}",
        read.status,
        read.body
    );
    let other: Vec<_> = tally
        .0
        .keys()
        .filter(|k| !k.starts_with("401 ") && !k.starts_with("503 identity_unavailable"))
        .collect();
    assert!(
        other.is_empty(),
        "strangers answered otherwise: {:?}",
        tally.0
    );
    assert!(
        tally.count("503") > 0,
        "no stranger was shed: {:?}",
        tally.0
    );
    // Still open, and still Alice's, once the flood is over.
    assert_eq!(
        gw.caller("tok-alice")
            .agent("ag-approver")
            .get_task(&task_id)
            .await
            .status,
        200
    );
    let metrics = gw.metrics().await;
    let shed = |token| {
        metric(
            &metrics,
            "a2a_introspections_shed_total",
            &[("token", token)],
        )
    };
    assert!(
        shed("stranger").is_some_and(|n| n > 0.0),
        "{:?}",
        shed("stranger")
    );
    assert_eq!(shed("known"), Some(0.0), "a known token was shed");
}

/// One address sending made-up tokens is refused with 429 `too_many_unknown_tokens` and
/// `Retry-After` once past its burst (40, then 20/s), before Q is asked; another address, and a
/// known token from the refused one, are not.
#[tokio::test]
async fn one_address_over_its_unknown_token_bucket_is_refused_and_no_other() {
    let gw = Gateway::start_with(options(&[])).await;
    let task_id = waiting_task(&gw).await;
    const NOISY: &str = "203.0.113.10";
    const QUIET: &str = "198.51.100.20";
    let before = gw.upstream.stats().await["introspect_requests"]
        .as_u64()
        .unwrap();
    let started = Instant::now();
    let replies = futures_util::future::join_all((0..80).map(|_| async {
        let (token, task) = (new_id(), new_id());
        get_task_from(&gw, &token, NOISY, &task).await
    }))
    .await;
    let elapsed = started.elapsed();
    let introspected = gw.upstream.stats().await["introspect_requests"]
        .as_u64()
        .unwrap()
        - before;
    let mut tally = Tally::default();
    replies.iter().for_each(|r| tally.add(r));
    eprintln!(
        "80 made-up tokens from one address in {elapsed:?}: {:?}, {introspected} introspected",
        tally.0
    );
    let limited: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert!(
        !limited.is_empty(),
        "no 429 for 80 unknown tokens from one address: {:?}",
        tally.0
    );
    for reply in &limited {
        assert_eq!(
            reply.body["error"], "too_many_unknown_tokens",
            "{}",
            reply.body
        );
        assert!(reply.header("retry-after").parse::<u64>().unwrap() >= 1);
    }
    // The burst, and what the bucket refilled meanwhile, were admitted: answered 401 by Q, or
    // 503 past the strangers' share of the pool (80 at once).
    let admitted = tally.count("401") + tally.count("503 identity_unavailable");
    let most = 40 + (20.0 * elapsed.as_secs_f64()).ceil() as u64;
    assert!(
        (40..=most).contains(&admitted),
        "{admitted} admitted (at most {most}): {:?}",
        tally.0
    );
    assert_eq!(admitted + limited.len() as u64, 80, "{:?}", tally.0);
    assert!(
        introspected <= admitted,
        "Q was asked for refused tokens: {introspected}"
    );

    // A token already known is not limited at the refused address, and another address is
    // not limited at all.
    let known = get_task_from(&gw, "tok-alice", NOISY, &task_id).await;
    assert_eq!(
        known.status, 200,
        "a known token from the refused address: {}",
        known.body
    );
    for _ in 0..10 {
        let reply = get_task_from(&gw, &new_id(), QUIET, &new_id()).await;
        assert_eq!(reply.status, 401, "{}", reply.body);
    }

    let metrics = gw.metrics().await;
    let counted = metric(&metrics, "a2a_unknown_tokens_limited_total", &[]);
    assert!(
        counted.is_some_and(|n| n >= limited.len() as f64),
        "{counted:?} counted, {} refused",
        limited.len()
    );
}

/// One client's first requests with its own token, many at once (a pool of connections
/// opening together), spend its address's bucket once: they wait for the one introspection
/// Q makes for that token rather than each counting as another unknown token.
#[tokio::test]
async fn concurrent_first_requests_with_one_token_spend_the_bucket_once() {
    let gw = Gateway::start_with(options(&[])).await;
    let task_id = waiting_task(&gw).await;
    // A token the replica has not seen: Bob's (the waiting task is Alice's: 404 -32001 is a
    // read that was authenticated).
    const CLIENT: &str = "203.0.113.30";
    // Q takes its time over that introspection, so the requests meet it in flight.
    gw.upstream
        .faults(json!({"introspect_delay_ms": 300, "introspect_delay_count": 1}))
        .await;
    let replies = futures_util::future::join_all(
        (0..120).map(|_| get_task_from(&gw, "tok-bob", CLIENT, &task_id)),
    )
    .await;
    let mut tally = Tally::default();
    replies.iter().for_each(|r| tally.add(r));
    assert!(
        replies.iter().all(|r| r.status == 200),
        "120 requests with one new token from one address: {:?}",
        tally.0
    );
    // The address's bucket is still (nearly) whole: 39 more unknown tokens are admitted.
    for _ in 0..39 {
        let reply = get_task_from(&gw, &new_id(), CLIENT, &new_id()).await;
        assert_eq!(reply.status, 401, "{}", reply.body);
    }
}

/// With no trusted proxy, `X-Forwarded-For` is the client's own claim and is ignored: made-up
/// tokens "from" a hundred addresses all spend the one bucket of the loopback peer.
#[tokio::test]
async fn a_forwarded_address_from_an_untrusted_peer_is_ignored() {
    let gw = Gateway::start_with(options(&[
        ("Q_A2A_AUTH_TRUSTED_PROXIES", ""),
        ("Q_A2A_AUTH_UNKNOWN_TOKEN_RATE", "1"),
        ("Q_A2A_AUTH_UNKNOWN_TOKEN_BURST", "5"),
    ]))
    .await;
    let started = Instant::now();
    let mut statuses = BTreeMap::<u16, u32>::new();
    for _ in 0..20 {
        let reply = get_task_from(&gw, &new_id(), &random_client(), &new_id()).await;
        *statuses.entry(reply.status).or_default() += 1;
    }
    // The burst of 5, and one a second after it.
    let most = 5 + started.elapsed().as_secs() as u32 + 1;
    let admitted = statuses.get(&401).copied().unwrap_or(0);
    assert!(
        (5..=most).contains(&admitted) && statuses.get(&429).copied().unwrap_or(0) == 20 - admitted,
        "20 unknown tokens under made-up forwarded addresses: {statuses:?}"
    );
}
