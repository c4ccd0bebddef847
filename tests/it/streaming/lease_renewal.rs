//! Lease renewal: one Redis call per replica and round renews every stream's lease (counted by
//! a private Redis itself), a lease Redis lost ends its own stream at the next round and no
//! other, and Redis gone ends every observation before its lease would have expired.

use std::time::Duration;

use crate::support::metrics::metric;
use crate::support::redis::SHARED_REDIS_URL;
use crate::support::redis::{lease_counts_at, lease_keys, script_calls, PrivateRedis};
use crate::support::sse::SseStream;
use crate::support::Gateway;

use super::{approver, waiting_task};

/// `count` open subscriptions of Alice's to one waiting task, each past its first result.
async fn open_streams(gw: &Gateway, count: usize) -> Vec<SseStream> {
    let id = waiting_task(gw, "tok-alice").await;
    let watch = approver(gw, "tok-alice");
    let mut streams = Vec::new();
    for _ in 0..count {
        let mut stream = watch.subscribe(&id).await;
        assert!(stream.is_sse(), "HTTP {}", stream.status);
        stream.next_result().await.unwrap();
        streams.push(stream);
    }
    streams
}

/// Whether the stream ends (cleanly) within `within`; keep-alive comments are read past.
async fn ends_within(stream: &mut SseStream, within: Duration) -> bool {
    let ended = tokio::time::timeout(within, async { while stream.next().await.is_some() {} })
        .await
        .is_ok();
    if ended {
        assert_eq!(stream.broken(), None, "the stream ended cleanly");
    }
    ended
}

async fn lease_metric(gw: &Gateway, name: &str, label: (&str, &str)) -> f64 {
    metric(&gw.metrics().await, name, &[label]).unwrap_or(0.0)
}

#[tokio::test]
async fn one_call_per_round_renews_every_stream_of_a_replica() {
    let redis = PrivateRedis::start().await;
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_REDIS_URL", &redis.url()),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "16"),
        // Rounds every 300 ms: 10 in the 3 s held below.
        ("Q_A2A_LEASE_TTL_MS", "900"),
    ])
    .await;
    let mut streams = open_streams(&gw, 12).await;
    let renewals = "a2a_observer_lease_renewal_calls_total";
    let (scripts_before, renewals_before) = (
        script_calls(&redis.url()).await,
        lease_metric(&gw, renewals, ("outcome", "ok")).await,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let scripts = script_calls(&redis.url()).await - scripts_before;
    let rounds = lease_metric(&gw, renewals, ("outcome", "ok")).await - renewals_before;
    // Ten rounds: a renewal per stream would be 12 × 10 = 120 scripts; the gauge refresh
    // (every 2 s) adds one or two.
    assert!(
        scripts <= 14,
        "{scripts} scripts ran in Redis in 3 s of 300 ms rounds for 12 streams"
    );
    assert!(
        (7.0..=11.0).contains(&rounds),
        "{rounds} renewal calls in 3 s of 300 ms rounds"
    );
    // Renewed, not merely counted: the TTL passed three times over and all twelve are live.
    assert_eq!(
        lease_counts_at(&redis.url(), &gw, "t-acme", "p-alice").await,
        [12, 12, 12]
    );
    for stream in &mut streams {
        assert!(!ends_within(stream, Duration::from_millis(10)).await);
    }
    assert_eq!(
        lease_metric(&gw, "a2a_observer_leases_lost_total", ("reason", "missing")).await,
        0.0
    );
}

#[tokio::test]
async fn a_lease_redis_lost_ends_its_own_stream_at_the_next_round() {
    let gw = Gateway::start_with_env(&[("Q_A2A_LEASE_TTL_MS", "900")]).await;
    let mut alices = open_streams(&gw, 1).await.remove(0);
    let bobs_task = waiting_task(&gw, "tok-bob").await;
    let mut bobs = approver(&gw, "tok-bob").subscribe(&bobs_task).await;
    bobs.next_result().await.unwrap();
    // Redis forgets Alice's lease (as a restart without her key would): only its principal set.
    let client = redis::Client::open(SHARED_REDIS_URL).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let removed: i64 = redis::cmd("DEL")
        .arg(&lease_keys(&gw, "t-acme", "p-alice")[2])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert!(
        ends_within(&mut alices, Duration::from_secs(2)).await,
        "the stream whose lease is gone ends at the next 300 ms round"
    );
    assert_eq!(
        lease_metric(&gw, "a2a_observer_leases_lost_total", ("reason", "missing")).await,
        1.0
    );
    // Removed from every scope, and Bob's stream, renewed in the same rounds, goes on.
    let counts = crate::support::redis::lease_counts(&gw, "t-acme", "p-alice").await;
    assert_eq!(counts[2], 0);
    assert_eq!(counts[0], 1, "only Bob's lease is live: {counts:?}");
    assert!(!ends_within(&mut bobs, Duration::from_secs(1)).await);
    assert_eq!(
        crate::support::redis::lease_counts(&gw, "t-acme", "p-bob").await,
        [1, 1, 1]
    );
}

#[tokio::test]
async fn redis_gone_ends_every_observation_before_its_lease_expires() {
    let redis = PrivateRedis::start().await;
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_REDIS_URL", &redis.url()),
        ("Q_A2A_LEASE_TTL_MS", "1500"),
    ])
    .await;
    let mut streams = open_streams(&gw, 3).await;
    let killed = tokio::time::Instant::now();
    drop(redis); // kill_on_drop
    for stream in &mut streams {
        assert!(
            ends_within(stream, Duration::from_secs(4)).await,
            "an observation outlived its lease by seconds with Redis gone"
        );
    }
    // The last confirmation came at most a round (0.5 s) before the kill, and the lease counts
    // in Redis until 1.5 s after it: ended by then, plus the time to see the end here.
    assert!(
        killed.elapsed() < Duration::from_millis(1500 + 500),
        "ended {:?} after Redis went away",
        killed.elapsed()
    );
    assert_eq!(
        lease_metric(
            &gw,
            "a2a_observer_leases_lost_total",
            ("reason", "unreachable")
        )
        .await,
        3.0
    );
}
