//! `q-a2a-gateway preflight` against a good stack and against a database without migrations.

use crate::support::gateway::{migrate, preflight};
use crate::support::{TestDb, Upstream};

const KEYS: &str = "k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=,k1:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

/// The line of the report that starts with `check`; panics (showing the report) if none does.
fn line<'a>(stdout: &'a str, check: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(check))
        .unwrap_or_else(|| panic!("no {check} line:\n{stdout}"))
}

#[tokio::test]
async fn preflight_passes_against_a_good_stack() {
    let db = TestDb::create().await;
    let upstream = Upstream::start().await;
    assert!(migrate(&db, &upstream.url).await.status.success());
    let out = preflight(
        &db,
        &upstream.url,
        &[
            ("Q_A2A_CREDENTIAL_KEYS", KEYS),
            ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k2"),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for check in [
        "database",
        "migrations",
        "redis",
        "q_contract",
        "q_service_token",
        "credential_keys",
        "credential_seals",
        "card_signing",
        "timeouts",
        "reconciler",
        "tls",
    ] {
        let line = line(&stdout, check);
        assert!(line.contains(" pass "), "{line}");
    }
    assert!(
        line(&stdout, "card_signing").contains("off: cards are served unsigned"),
        "{stdout}"
    );
    assert!(
        stdout.contains("preflight: all 11 checks passed"),
        "{stdout}"
    );
    // Key material is never printed.
    assert!(!stdout.contains("AAECAwQF"), "{stdout}");
}

#[tokio::test]
async fn preflight_fails_without_migrations_and_names_the_fix() {
    let db = TestDb::create().await;
    let upstream = Upstream::start().await;
    let out = preflight(
        &db,
        &upstream.url,
        &[
            ("Q_A2A_CREDENTIAL_KEYS", KEYS),
            ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k2"),
            ("Q_A2A_PROXY_READ_TIMEOUT_SECONDS", "60"),
            ("Q_A2A_UPSTREAM_SERVICE_TOKEN", "not-the-service-token"),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let migrations = stdout
        .lines()
        .position(|l| l.starts_with("migrations"))
        .unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[migrations].contains("FAIL"), "{stdout}");
    assert!(
        lines[migrations].contains("20261009_030000_a2a_status"),
        "{stdout}"
    );
    assert!(
        lines[migrations + 1].contains("fix: run `q-a2a-gateway migrate`"),
        "{stdout}"
    );
    let timeouts = line(&stdout, "timeouts");
    assert!(timeouts.contains("FAIL") && timeouts.contains("proxy read timeout 60s"));
    assert!(
        line(&stdout, "q_service_token").contains("FAIL"),
        "{stdout}"
    );
    assert!(!stdout.contains("not-the-service-token"));
    assert!(line(&stdout, "database").contains("pass"));
    assert!(
        stdout.contains("preflight: 3 of 11 checks failed"),
        "{stdout}"
    );

    // Missing credential keys fail too.
    assert!(migrate(&db, &upstream.url).await.status.success());
    let out = preflight(&db, &upstream.url, &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let keys = line(&stdout, "credential_keys");
    assert!(keys.contains("FAIL") && keys.contains("Q_A2A_CREDENTIAL_KEYS is not set"));
    assert!(
        stdout.contains("preflight: 1 of 11 checks failed"),
        "{stdout}"
    );
}
