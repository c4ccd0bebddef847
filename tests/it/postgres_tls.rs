//! PostgreSQL over TLS: a private server (initdb and postgres on a loopback port) that refuses
//! plain TCP and presents a certificate signed by a test CA. The gateway's migrate, pool,
//! readiness and reconciler work over TLS with that CA trusted; with TLS off, or with another CA
//! trusted, it cannot connect.

use std::time::Duration;

use crate::support::certs::ServerCerts;
use crate::support::gateway::migrate_with;
use crate::support::postgres::PrivatePostgres;
use crate::support::{new_id, Gateway, GatewayOptions, TestDb};

#[tokio::test]
async fn the_gateway_speaks_tls_to_postgres_and_verifies_the_server() {
    let certs = ServerCerts::generate();
    let server = PrivatePostgres::start_tls(&certs).await;
    let url = server.create_database("q_a2a_tls").await;
    let ca = certs.ca().display().to_string();
    let tls = GatewayOptions::with_env(&[
        ("Q_A2A_DATABASE_URL", &url),
        ("Q_A2A_DATABASE_SSLMODE", "verify-full"),
        ("Q_A2A_DATABASE_SSL_ROOT_CERT", &ca),
    ]);
    // The harness's own database only names the Redis key prefix here.
    let harness_db = TestDb::create().await;
    let out = migrate_with(&harness_db, "http://127.0.0.1:9", &tls).await;
    assert!(
        out.status.success(),
        "migrate over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Plain TCP is refused by the server; TLS to a server the trusted CA did not sign is
    // refused by the gateway.
    let plain = GatewayOptions::with_env(&[
        ("Q_A2A_DATABASE_URL", &url),
        ("Q_A2A_DATABASE_SSLMODE", "disable"),
    ]);
    let out = migrate_with(&harness_db, "http://127.0.0.1:9", &plain).await;
    assert!(
        !out.status.success(),
        "plain TCP must not reach this server"
    );
    let foreign = certs.foreign_ca().display().to_string();
    let untrusted = GatewayOptions::with_env(&[
        ("Q_A2A_DATABASE_URL", &url),
        ("Q_A2A_DATABASE_SSLMODE", "verify-full"),
        ("Q_A2A_DATABASE_SSL_ROOT_CERT", &foreign),
    ]);
    let out = migrate_with(&harness_db, "http://127.0.0.1:9", &untrusted).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an untrusted certificate must be refused"
    );
    assert!(
        stderr.contains("certificate") || stderr.contains("UnknownIssuer"),
        "{stderr}"
    );

    let gw = Gateway::start_with(GatewayOptions {
        migrate: false,
        ..tls
    })
    .await;
    let body = gw.wait_readyz(200, Duration::from_secs(20)).await;
    assert_eq!(body["checks"]["database"]["ok"], true, "{body}");
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let task = writer.send_text(&new_id(), "over tls").await.task();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let id = task["id"].as_str().unwrap();
    assert_eq!(
        writer.get_task(id).await.result()["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // Every session the gateway holds in its database is encrypted, the reconciler leader's
    // among them.
    let admin = server.local("postgres").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl), \
                        count(*) FILTER (WHERE l.pid IS NOT NULL) \
                   FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                   LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' \
                  WHERE a.datname = 'q_a2a_tls' AND a.backend_type = 'client backend'",
                &[],
            )
            .await
            .unwrap();
        let (encrypted, plain, leader): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(plain, 0, "a plain session in the gateway's database");
        if encrypted >= 2 && leader == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "encrypted={encrypted} leader={leader}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A server that authenticates clients by certificate: the gateway presents the configured
/// client certificate (migrate and serve); without one, or with one another CA signed, the
/// server refuses it; a certificate without its key is a configuration error naming both keys.
#[tokio::test]
async fn the_gateway_presents_its_client_certificate() {
    let certs = ServerCerts::generate();
    let server = PrivatePostgres::start_tls_client_certs(&certs).await;
    let url = server.create_database("q_a2a_client_cert").await;
    let ca = certs.ca().display().to_string();
    let (cert, key) = certs.client();
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let harness_db = TestDb::create().await;
    let env = |cert: &str, key: &str| {
        let mut env = vec![
            ("Q_A2A_DATABASE_URL", url.clone()),
            ("Q_A2A_DATABASE_SSLMODE", "verify-full".to_owned()),
            ("Q_A2A_DATABASE_SSL_ROOT_CERT", ca.clone()),
        ];
        if !cert.is_empty() {
            env.push(("Q_A2A_DATABASE_SSL_CERT", cert.to_owned()));
        }
        if !key.is_empty() {
            env.push(("Q_A2A_DATABASE_SSL_KEY", key.to_owned()));
        }
        env
    };
    let options = |env: &[(&str, String)]| {
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        GatewayOptions::with_env(&pairs)
    };

    let without = migrate_with(&harness_db, "http://127.0.0.1:9", &options(&env("", ""))).await;
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(!without.status.success(), "no client certificate: {stderr}");
    assert!(stderr.contains("certificate"), "{stderr}");
    let (foreign_cert, foreign_key) = certs.foreign_client();
    let foreign = env(
        &foreign_cert.display().to_string(),
        &foreign_key.display().to_string(),
    );
    let out = migrate_with(&harness_db, "http://127.0.0.1:9", &options(&foreign)).await;
    assert!(
        !out.status.success(),
        "a certificate another CA signed must be refused"
    );
    let half = migrate_with(&harness_db, "http://127.0.0.1:9", &options(&env(&cert, ""))).await;
    let stderr = String::from_utf8_lossy(&half.stderr);
    assert!(!half.status.success());
    assert!(
        stderr.contains("database.ssl_cert and database.ssl_key"),
        "{stderr}"
    );

    let with = env(&cert, &key);
    let out = migrate_with(&harness_db, "http://127.0.0.1:9", &options(&with)).await;
    assert!(
        out.status.success(),
        "migrate with the client certificate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gw = Gateway::start_with(GatewayOptions {
        migrate: false,
        ..options(&with)
    })
    .await;
    let body = gw.wait_readyz(200, Duration::from_secs(20)).await;
    assert_eq!(body["checks"]["database"]["ok"], true, "{body}");
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let task = writer
        .send_text(&new_id(), "client certificate")
        .await
        .task();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    // The server saw the certificate: every gateway session is encrypted and authenticated by it.
    let admin = server.local("postgres").await.unwrap();
    let row = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE s.client_dn = '/CN=postgres'), count(*) \
               FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
              WHERE a.datname = 'q_a2a_client_cert' AND a.backend_type = 'client backend'",
            &[],
        )
        .await
        .unwrap();
    let (by_cert, all): (i64, i64) = (row.get(0), row.get(1));
    assert!(all >= 1 && by_cert == all, "{by_cert} of {all}");
}
