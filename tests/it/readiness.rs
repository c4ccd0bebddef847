//! `/readyz` follows its dependencies: PostgreSQL (through a TCP proxy the test controls, so
//! the machine's server keeps running), a private Redis the test kills, and Q.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use crate::support::db::{postgres_addr, via_port};
use crate::support::gateway::migrate;
use crate::support::proxy::TcpProxy;
use crate::support::redis::PrivateRedis;
use crate::support::{Gateway, TestDb};

/// Polls `/readyz` until it answers `status`, for 12 s at most.
async fn wait_for(gw: &Gateway, status: u16) -> Value {
    gw.wait_readyz(status, Duration::from_secs(12)).await
}

#[tokio::test]
async fn ready_stack_reports_every_check() {
    let gw = Gateway::start().await;
    let (status, body) = gw.readyz().await;
    assert_eq!(status, 200);
    assert_eq!(body["ready"], true, "{body}");
    for check in ["database", "redis", "upstream", "status_migration"] {
        assert_eq!(body["checks"][check]["ok"], true, "{check}: {body}");
    }
    assert_eq!(body["checks"]["upstream"]["detail"], "Q contract version 1");
    assert_eq!(gw.request(Method::GET, "/healthz").await.status(), 200);
}

#[tokio::test]
async fn readiness_follows_postgres() {
    let mut proxy = TcpProxy::start(&postgres_addr()).await;
    // A migrated database the gateway reaches only through the proxy.
    let db = TestDb::create().await;
    let out = migrate(&db, "http://127.0.0.1:9").await;
    assert!(out.status.success());
    let gw =
        Gateway::start_with_env(&[("Q_A2A_DATABASE_URL", &via_port(&db.url, proxy.port))]).await;
    let body = wait_for(&gw, 200).await;
    assert_eq!(body["checks"]["database"]["ok"], true);

    proxy.stop();
    let body = wait_for(&gw, 503).await;
    assert_eq!(body["ready"], false);
    assert_eq!(body["checks"]["database"]["ok"], false, "{body}");
    assert_eq!(body["checks"]["redis"]["ok"], true);
    assert_eq!(gw.request(Method::GET, "/healthz").await.status(), 200);

    proxy.restart().await;
    let body = wait_for(&gw, 200).await;
    assert_eq!(body["checks"]["database"]["ok"], true);
}

#[tokio::test]
async fn readiness_follows_redis() {
    let mut redis = PrivateRedis::start().await;
    let gw = Gateway::start_with_env(&[("Q_A2A_REDIS_URL", &redis.url())]).await;
    let body = wait_for(&gw, 200).await;
    assert_eq!(body["checks"]["redis"]["ok"], true);

    redis.child.kill().await.unwrap();
    let body = wait_for(&gw, 503).await;
    assert_eq!(body["checks"]["redis"]["ok"], false, "{body}");
    assert_eq!(body["checks"]["database"]["ok"], true);
}

#[tokio::test]
async fn readiness_follows_q() {
    // Reads outlive Q (an outage grace, opted in): Q failing degrades the replica, it stays in
    // service for content-free reads.
    let mut gw = Gateway::start_with_env(&[("Q_A2A_AUTH_OUTAGE_READ_GRACE_SECONDS", "60")]).await;
    wait_for(&gw, 200).await;
    gw.upstream.child.kill().await.unwrap();
    crate::support::wait_until("Q reported degraded", Duration::from_secs(12), async || {
        let (status, body) = gw.readyz().await;
        status == 200 && body["degraded"] == serde_json::json!(["upstream"])
    })
    .await;
    let (_, body) = gw.readyz().await;
    assert_eq!(body["checks"]["upstream"]["ok"], false, "{body}");

    // Without an outage grace (the default), Q failing takes the replica out of service.
    let mut strict = Gateway::start().await;
    wait_for(&strict, 200).await;
    strict.upstream.child.kill().await.unwrap();
    let body = wait_for(&strict, 503).await;
    assert_eq!(body["checks"]["upstream"]["ok"], false, "{body}");
    assert_eq!(body["degraded"], serde_json::json!([]), "{body}");
}

#[tokio::test]
async fn readiness_is_cached_briefly() {
    let gw = Gateway::start().await;
    // Many probes in a burst reach Q's health endpoint about once per second, not per probe.
    let before = gw.upstream.recent_calls().await.len();
    for _ in 0..20 {
        assert_eq!(gw.request(Method::GET, "/readyz").await.status(), 200);
    }
    let recent = gw.upstream.recent_calls().await;
    let health_calls = recent[before..]
        .iter()
        .filter(|s| s["path"] == "/internal/v1/health")
        .count();
    assert!(
        (1..=3).contains(&health_calls),
        "{health_calls} health calls for 20 probes"
    );
}
