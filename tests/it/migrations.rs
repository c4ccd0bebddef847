//! `q-a2a-gateway migrate` against real PostgreSQL: concurrent replicas, idempotence, and the
//! rollout gate that refuses an enabled profile without the status migration.

use reqwest::Method;

use crate::support::gateway::{migrate, serve_refused};
use crate::support::{Gateway, GatewayOptions, TestDb, Upstream, GATEWAY_BIN};

#[tokio::test]
async fn two_replicas_migrating_at_once_both_succeed_once() {
    let db = TestDb::create().await;
    let upstream = "http://127.0.0.1:9"; // migrate never calls Q
    let (a, b) = tokio::join!(migrate(&db, upstream), migrate(&db, upstream));
    for out in [&a, &b] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&a.stdout),
        String::from_utf8_lossy(&b.stdout)
    );
    assert_eq!(
        printed
            .matches("applied 20261009_030000_a2a_status")
            .count(),
        1,
        "{printed}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM a2a_schema_migrations").await,
        q_a2a_gateway::store::migrate::MIGRATIONS.len() as i64
    );
    let again = migrate(&db, upstream).await;
    assert!(String::from_utf8_lossy(&again.stdout).contains("up to date"));
    assert_eq!(
        db.count("SELECT count(*) FROM pg_trigger WHERE tgname = 'a2a_tasks_stamp_status'")
            .await,
        1
    );
}

#[tokio::test]
async fn enabled_profile_refuses_to_start_without_the_status_migration() {
    let db = TestDb::create().await;
    let upstream = Upstream::start().await;
    let output = serve_refused(&[
        ("Q_A2A_LISTEN", "127.0.0.1:0"),
        ("Q_A2A_DATABASE_URL", &db.url),
        ("Q_A2A_UPSTREAM_URL", &upstream.url),
        (
            "Q_A2A_UPSTREAM_SERVICE_TOKEN",
            crate::support::SERVICE_TOKEN,
        ),
        ("A2A_SERVER_PROFILE_ENABLED", "true"),
    ])
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("20261009_030000_a2a_status"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("listening on"));
}

#[tokio::test]
async fn disabled_profile_starts_without_migrations() {
    let gw = Gateway::start_with(GatewayOptions::profile_off().unmigrated()).await;
    assert_eq!(gw.request(Method::GET, "/healthz").await.status(), 200);
}

#[tokio::test]
async fn invalid_configuration_is_a_clear_startup_error() {
    let output = serve_refused(&[("A2A_SERVER_PROFILE_ENABLED", "perhaps")]).await;
    assert!(String::from_utf8_lossy(&output.stderr).contains("A2A_SERVER_PROFILE_ENABLED"));
}

/// Configurations that would serve badly refuse to start, with the fix named: several
/// replicas without a shared cursor key (their page tokens would fail on each other), an empty
/// service token (Q would refuse every call). `preflight` loads the same configuration.
#[tokio::test]
async fn unsafe_deployments_refuse_to_start() {
    let db = crate::support::TestDb::create().await;
    let cases: [(&[(&str, &str)], &str); 3] = [
        (
            &[
                ("Q_A2A_REPLICAS", "2"),
                ("Q_A2A_UPSTREAM_SERVICE_TOKEN", "t"),
            ],
            "Q_A2A_CURSOR_KEY",
        ),
        (
            &[
                ("Q_A2A_REPLICAS", "2"),
                ("Q_A2A_CURSOR_KEY", ""),
                ("Q_A2A_UPSTREAM_SERVICE_TOKEN", "t"),
            ],
            "Q_A2A_CURSOR_KEY",
        ),
        (
            &[("Q_A2A_UPSTREAM_SERVICE_TOKEN", "")],
            "Q_A2A_UPSTREAM_SERVICE_TOKEN",
        ),
    ];
    for (env, named) in cases {
        for command in ["serve", "preflight"] {
            if command == "preflight" && named == "Q_A2A_UPSTREAM_SERVICE_TOKEN" {
                continue; // preflight reports an empty token as a failed check instead
            }
            let mut process = tokio::process::Command::new(GATEWAY_BIN);
            process
                .env_clear()
                .env("Q_A2A_DATABASE_URL", &db.url)
                .env("Q_A2A_LISTEN", "127.0.0.1:0")
                .env("Q_A2A_METRICS_LISTEN", "127.0.0.1:0");
            for (k, v) in env {
                process.env(k, v);
            }
            let output = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                process.arg(command).output(),
            )
            .await
            .expect("exits by itself")
            .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !output.status.success(),
                "{command} {env:?} started: {stderr}"
            );
            assert!(stderr.contains(named), "{command} {env:?}: {stderr}");
        }
    }
    // One replica without a key still starts (a random per-process key, as documented).
    let mut process = tokio::process::Command::new(GATEWAY_BIN);
    let output = process
        .env_clear()
        .env("Q_A2A_DATABASE_URL", &db.url)
        .env("Q_A2A_UPSTREAM_SERVICE_TOKEN", "t")
        .env("Q_A2A_REPLICAS", "1")
        .arg("migrate")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
