//! Redis failover behind one address: the primary is demoted to a replica of its replica,
//! which is promoted, and the address (a forwarder standing in for a managed endpoint or a
//! Sentinel-fed Service) moves to it 5 s later. The connection made to the old primary
//! answers `READONLY` (and `LOADING` while it resyncs); the gateway replaces it, leases fail
//! closed until a writable Redis answers, the shared limits fall back and come back.

use std::time::Duration;

use super::{durable_and_once, failover_env, gateway_bin, Load, Outage, Outcome};
use crate::support::proxy::TcpProxy;
use crate::support::redis::PrivateRedis;
use crate::support::{metrics, new_id, wait_until, Gateway, GatewayOptions, Upstream};

async fn redis_cmd(url: &str, args: &[&str]) -> redis::Value {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?} at {url}: {e}"))
}

/// Waits until the Redis at `url` is a replica whose link to its primary is up.
async fn wait_replicating(url: &str) {
    wait_until(
        &format!("{url} to replicate"),
        Duration::from_secs(15),
        async || {
            let info = redis_cmd(url, &["INFO", "replication"]).await;
            let text = match info {
                redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                redis::Value::VerbatimString { text, .. } => text,
                other => format!("{other:?}"),
            };
            text.contains("master_link_status:up")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_primary_demoted_behind_its_address_is_left_for_the_promoted_replica() {
    let a = PrivateRedis::start().await;
    let b = PrivateRedis::start().await;
    redis_cmd(&b.url(), &["REPLICAOF", "127.0.0.1", &a.port.to_string()]).await;
    wait_replicating(&b.url()).await;
    let address = TcpProxy::start(&format!("127.0.0.1:{}", a.port)).await;

    let upstream = Upstream::start().await;
    upstream.workflow_dedup(false).await;
    let mut env = failover_env();
    env.extend(
        [
            (
                "Q_A2A_REDIS_URL",
                format!("redis://127.0.0.1:{}", address.port),
            ),
            // The shared limits on, high enough never to refuse this load: they must fall back
            // to per-replica limits and come back.
            ("Q_A2A_RATE_LIMIT_ENABLED", "true".into()),
            ("Q_A2A_RATE_LIMIT_PER_SECOND", "2000".into()),
            ("Q_A2A_RATE_LIMIT_BURST", "4000".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let gw = Gateway::start_with_upstream(
        upstream,
        GatewayOptions {
            env,
            bin: gateway_bin(),
            ..GatewayOptions::default()
        },
    )
    .await;
    let mut load = Load::warmed(&gw, 2, 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    load.losing();
    redis_cmd(&b.url(), &["REPLICAOF", "NO", "ONE"]).await;
    redis_cmd(&a.url(), &["REPLICAOF", "127.0.0.1", &b.port.to_string()]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let degraded = metrics::metric(&gw.metrics().await, "a2a_shared_limits_degraded", &[]);
    let writable_gauge = metrics::metric(&gw.metrics().await, "a2a_redis_writable", &[]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    load.restoring();
    address.retarget(&format!("127.0.0.1:{}", b.port));
    load.restored();
    let history = load.finish_checked(Some(true)).await;
    let Outage {
        lost, restoring, ..
    } = history.outage.unwrap();

    // Blocking sends need a lease: refused with 503 while no writable Redis answered, never
    // answered without one. Only a send that also ended before the address moved met no
    // writable Redis at all: one begun just before the move may take its lease after it (a
    // call answered READONLY runs once more on a fresh connection, which leads to the promoted
    // server).
    let during: Vec<_> = history
        .attempts
        .iter()
        .filter(|x| {
            x.blocking && x.at >= lost + Duration::from_millis(500) && x.at + x.took < restoring
        })
        .collect();
    assert!(!during.is_empty(), "blocking sends during the demotion");
    for attempt in &during {
        match &attempt.outcome {
            Outcome::Refused(503, body) => {
                assert!(body.contains("observation_unavailable"), "{body}")
            }
            other => panic!("a blocking send during the demotion: {other:?} ({attempt:?})"),
        }
    }
    // Sends that need no lease are not disturbed.
    let immediate_refused: Vec<_> = history
        .attempts
        .iter()
        .filter(|x| !x.blocking && matches!(x.outcome, Outcome::Refused(..)))
        .collect();
    assert!(
        immediate_refused.is_empty(),
        "sends without a lease failed: {immediate_refused:?}"
    );

    let text = gw.metrics().await;
    assert!(
        metrics::metric(
            &text,
            "a2a_redis_reconnects_total",
            &[("reason", "READONLY")]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "the connection to the demoted primary was replaced"
    );
    assert_eq!(degraded, Some(1.0), "the shared limits fell back");
    assert_eq!(writable_gauge, Some(0.0), "a2a_redis_writable said no");
    assert_eq!(
        metrics::metric(&text, "a2a_shared_limits_degraded", &[]),
        Some(0.0),
        "the shared limits came back"
    );
    assert_eq!(metrics::metric(&text, "a2a_redis_writable", &[]), Some(1.0));
    durable_and_once(&gw, &gw.db.client().await, &history).await;
}

/// The first call after the address moved, on a connection made to the old primary and idle
/// since, is answered: the call that meets `READONLY` runs once more on a fresh connection,
/// which the address now leads to the promoted server, instead of failing closed. (A
/// simulation seed met it: a burst of blocking sends two seconds after a demotion, on a
/// replica that had not written to Redis since, answered 503 for all but the ones that came
/// after the replacement.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_lease_after_the_address_moved_is_taken_through_a_fresh_connection() {
    let a = PrivateRedis::start().await;
    let b = PrivateRedis::start().await;
    redis_cmd(&b.url(), &["REPLICAOF", "127.0.0.1", &a.port.to_string()]).await;
    wait_replicating(&b.url()).await;
    let address = TcpProxy::start(&format!("127.0.0.1:{}", a.port)).await;
    let mut env = failover_env();
    env.push((
        "Q_A2A_REDIS_URL".into(),
        format!("redis://127.0.0.1:{}", address.port),
    ));
    let gw = Gateway::start_with_upstream(
        Upstream::start().await,
        GatewayOptions {
            env,
            bin: gateway_bin(),
            ..GatewayOptions::default()
        },
    )
    .await;
    let alice = gw.caller("tok-alice").agent("ag-writer");
    let before = alice.send_text(&new_id(), "before the move").await;
    assert!(
        before.is_result(),
        "a blocking send takes its lease on the first primary: {} {}",
        before.status,
        before.body
    );

    // Demoted and moved while the gateway is idle: its connection still leads to the old one.
    redis_cmd(&b.url(), &["REPLICAOF", "NO", "ONE"]).await;
    redis_cmd(&a.url(), &["REPLICAOF", "127.0.0.1", &b.port.to_string()]).await;
    wait_replicating(&a.url()).await;
    address.retarget(&format!("127.0.0.1:{}", b.port));

    let after = alice.send_text(&new_id(), "after the move").await;
    assert!(
        after.is_result(),
        "the first blocking send after the move: {} {}",
        after.status,
        after.body
    );
    let text = gw.metrics().await;
    assert_eq!(
        metrics::metric(
            &text,
            "a2a_redis_reconnects_total",
            &[("reason", "READONLY")]
        ),
        Some(1.0),
        "one replacement of the connection to the demoted primary"
    );
    assert_eq!(metrics::metric(&text, "a2a_redis_writable", &[]), Some(1.0));
}
