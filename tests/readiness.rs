//! `/readyz` follows its dependencies: PostgreSQL (through a TCP proxy the test controls, so
//! the machine's server keeps running), a private Redis the test kills, and Q.

mod common;

use std::time::Duration;

use common::*;
use reqwest::Method;
use serde_json::Value;

async fn wait_for(gw: &Gateway, status: u16) -> Value {
    for _ in 0..60 {
        let response = gw.request(Method::GET, "/readyz").await;
        if response.status().as_u16() == status {
            return response.json().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("/readyz never answered {status}");
}

#[tokio::test]
async fn ready_stack_reports_every_check() {
    let gw = Gateway::start().await;
    let response = gw.request(Method::GET, "/readyz").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
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
    let gw = Gateway::start_with(GatewayOptions {
        env: vec![("Q_A2A_DATABASE_URL".into(), via_port(&db.url, proxy.port))],
        ..Default::default()
    })
    .await;
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
    let gw = Gateway::start_with(GatewayOptions {
        env: vec![("Q_A2A_REDIS_URL".into(), redis.url())],
        ..Default::default()
    })
    .await;
    let body = wait_for(&gw, 200).await;
    assert_eq!(body["checks"]["redis"]["ok"], true);

    redis.child.kill().await.unwrap();
    let body = wait_for(&gw, 503).await;
    assert_eq!(body["checks"]["redis"]["ok"], false, "{body}");
    assert_eq!(body["checks"]["database"]["ok"], true);
}

#[tokio::test]
async fn readiness_follows_q() {
    let mut gw = Gateway::start().await;
    wait_for(&gw, 200).await;
    gw.upstream.child.kill().await.unwrap();
    let body = wait_for(&gw, 503).await;
    assert_eq!(body["checks"]["upstream"]["ok"], false, "{body}");
}

#[tokio::test]
async fn readiness_is_cached_briefly() {
    let gw = Gateway::start().await;
    // Many probes in a burst reach Q's health endpoint about once per second, not per probe.
    let before = gw
        .upstream
        .admin(Method::GET, "/admin/last-traceparent", None)
        .await["recent"]
        .as_array()
        .unwrap()
        .len();
    for _ in 0..20 {
        assert_eq!(gw.request(Method::GET, "/readyz").await.status(), 200);
    }
    let recent = gw
        .upstream
        .admin(Method::GET, "/admin/last-traceparent", None)
        .await["recent"]
        .as_array()
        .unwrap()
        .clone();
    let health_calls = recent[before..]
        .iter()
        .filter(|s| s["path"] == "/internal/v1/health")
        .count();
    assert!(
        (1..=3).contains(&health_calls),
        "{health_calls} health calls for 20 probes"
    );
}
