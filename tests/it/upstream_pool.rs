//! Connections to Q outlast a burst only up to `upstream::IDLE_CONNECTIONS`: a burst of calls
//! in flight opens a connection each, and those returned beyond the bound close at once
//! instead of staying idle for the pool's idle timeout (`upstream.idle_timeout_ms`, 30 s), each
//! with its buffers and task; and a connection left idle closes between that timeout and twice
//! it after its last call.

use std::time::Duration;

use tokio::time::Instant;

use q_a2a_gateway::config::UpstreamConfig;
use q_a2a_gateway::upstream::{UpstreamRunApi, IDLE_CONNECTIONS};

use crate::support::{wait_until, Upstream, SERVICE_TOKEN};

/// Established TCP connections to `port` on this machine, counted from their client side
/// (remote port `port`): this test's reference Q has a port of its own and only this test's
/// client connects to it.
fn connections_to(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let remote_port = fields
                        .get(2)
                        .and_then(|remote| remote.rsplit(':').next())
                        .and_then(|hex| u16::from_str_radix(hex, 16).ok());
                    // State 01: ESTABLISHED.
                    fields.get(3) == Some(&"01") && remote_port == Some(port)
                })
                .count()
        })
        .sum()
}

/// The reference upstream's port (only this test's client connects to it).
fn port_of(upstream: &Upstream) -> u16 {
    upstream
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the reference upstream's URL ends with its port")
}

/// The gateway's client for `upstream`, its connections kept idle for `idle_timeout_ms`.
fn client(upstream: &Upstream, idle_timeout_ms: u64) -> UpstreamRunApi {
    UpstreamRunApi::new(&UpstreamConfig {
        url: upstream.url.clone(),
        service_token: SERVICE_TOKEN.into(),
        idle_timeout_ms,
        ..UpstreamConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_burst_of_calls_leaves_at_most_the_idle_bound_of_connections_open() {
    let upstream = Upstream::start().await;
    let port = port_of(&upstream);
    let api = client(&upstream, UpstreamConfig::default().idle_timeout_ms);
    let head = api.run_changes(0, Duration::ZERO, 1).await.unwrap().head;

    // Twice the bound in flight at once: long polls at the feed's head, each holding its
    // connection until the wait ends (nothing changes meanwhile).
    let burst = 2 * IDLE_CONNECTIONS;
    let calls = (0..burst).map(|_| api.run_changes(head, Duration::from_millis(1500), 1));
    let watch = async {
        wait_until(
            "the burst's connections",
            Duration::from_secs(5),
            async || connections_to(port) >= burst,
        )
        .await;
        connections_to(port)
    };
    let (answers, opened) = tokio::join!(futures_util::future::join_all(calls), watch);
    for answer in answers {
        answer.expect("a long poll at the head answers");
    }
    assert!(
        opened >= burst,
        "the burst opened {opened} connections, fewer than its {burst} calls"
    );

    wait_until(
        "the connections beyond the idle bound to close",
        Duration::from_secs(5),
        async || connections_to(port) <= IDLE_CONNECTIONS,
    )
    .await;
    let kept = connections_to(port);
    assert!(kept > 0, "the pool kept no connection for the next call");
    // The next calls reuse what was kept.
    for _ in 0..3 {
        api.run_changes(head, Duration::ZERO, 1).await.unwrap();
    }
    assert_eq!(connections_to(port), kept);
}

#[tokio::test]
async fn an_idle_connection_closes_between_the_idle_timeout_and_twice_it() {
    const IDLE: Duration = Duration::from_millis(2000);
    // For the close to reach the socket table and this test's 100 ms look at it, on a loaded
    // machine: 10 % of the timeout.
    const TOLERANCE: Duration = Duration::from_millis(200);
    let upstream = Upstream::start().await;
    let port = port_of(&upstream);
    let api = client(&upstream, IDLE.as_millis() as u64);
    api.run_changes(0, Duration::ZERO, 1).await.unwrap();
    let last_call = Instant::now();
    assert_eq!(connections_to(port), 1, "one call, one connection");
    tokio::time::sleep(IDLE * 8 / 10).await;
    assert_eq!(
        connections_to(port),
        1,
        "closed before the idle timeout ({IDLE:?})"
    );
    // The pool looks for expired connections once per timeout: closed between the timeout and
    // twice it, as docs/configuration.md says.
    wait_until(
        "the idle connection to close",
        IDLE * 2 + TOLERANCE,
        async || connections_to(port) == 0,
    )
    .await;
    let closed = last_call.elapsed();
    assert!(
        closed >= IDLE,
        "closed {closed:?} after its last call, before the idle timeout ({IDLE:?})"
    );
    eprintln!("the idle connection closed {closed:?} after its last call");
}
