//! `q-a2a-gateway migrate` against real PostgreSQL: concurrent replicas, idempotence, a
//! database migrated under the migrations' former names, the rollout gate that refuses an
//! enabled profile without the status migration; and the migrations' names against the dates
//! they were written (git).

use q_a2a_gateway::store::migrate::{FORMER_NAMES, MIGRATIONS};
use reqwest::Method;

use crate::support::db::migrate_until;
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
    // Every migration once, plus the former name of each renamed one (a rollback finds them).
    assert_eq!(
        db.count("SELECT count(*) FROM a2a_schema_migrations").await,
        (MIGRATIONS.len() + FORMER_NAMES.len()) as i64
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
    // The log filter too, before anything connects anywhere (the database here is nowhere).
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        serve_refused(&[
            ("RUST_LOG", "q_a2a_gateway=loud"),
            ("Q_A2A_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none"),
            ("Q_A2A_UPSTREAM_SERVICE_TOKEN", "t"),
        ]),
    )
    .await
    .expect("refused at once");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("RUST_LOG") && stderr.contains("loud"),
        "{stderr}"
    );
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

/// A database migrated by a release that named some migrations by later dates: `migrate`
/// recognises them under their former names, applies nothing again and refuses nothing, and
/// records the current names beside the former ones.
#[tokio::test]
async fn a_database_migrated_under_former_names_upgrades_without_reapplying() {
    let db = TestDb::create().await;
    let former_of = |version: &str| {
        FORMER_NAMES
            .iter()
            .find(|(_, current)| *current == version)
            .map(|(former, _)| *former)
    };
    // What the earlier release left: every migration applied, renamed ones under former names.
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE TABLE a2a_schema_migrations (
                version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .unwrap();
    for (version, sql) in MIGRATIONS {
        client.batch_execute(sql).await.unwrap();
        let recorded = former_of(version).unwrap_or(version);
        client
            .execute(
                "INSERT INTO a2a_schema_migrations (version, applied_at) \
                 VALUES ($1, '2026-12-01T12:00:00Z')",
                &[&recorded],
            )
            .await
            .unwrap();
    }
    let upstream = "http://127.0.0.1:9"; // migrate never calls Q
    for _ in 0..2 {
        let out = migrate(&db, upstream).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stdout.contains("applied "), "{stdout}");
        assert!(stdout.contains("up to date"), "{stdout}");
    }
    for (former, current) in FORMER_NAMES {
        let stamps = db
            .count(&format!(
                "SELECT count(*) FROM a2a_schema_migrations \
                 WHERE version IN ('{former}', '{current}') \
                   AND applied_at = '2026-12-01T12:00:00Z'"
            ))
            .await;
        assert_eq!(stamps, 2, "{former} recorded as {current} with its date");
    }
    assert_eq!(
        db.count("SELECT count(*) FROM a2a_schema_migrations").await,
        (MIGRATIONS.len() + FORMER_NAMES.len()) as i64
    );
    // The gateway sees every migration applied: preflight's check passes.
    let upstream = Upstream::start().await;
    let out = crate::support::gateway::preflight(&db, &upstream.url, &[]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.contains("migrations"))
        .unwrap_or_else(|| panic!("no migrations line in\n{table}"));
    assert!(
        line.contains(&format!("all {} applied", MIGRATIONS.len())),
        "{line}"
    );
}

/// Each migration is named by the date it was written: a name dated after the newest commit
/// touching its file (or after today, for a file not committed yet) would sort after the
/// migrations written in between and run after them on a fresh database.
#[test]
fn migration_names_are_not_dated_after_their_commits() {
    let root = env!("CARGO_MANIFEST_DIR");
    let today = chrono::Utc::now().format("%Y%m%d").to_string();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .env("TZ", "UTC")
            .output()
            .expect("git must be installed: migration dates are read from the history");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    for (version, _) in MIGRATIONS {
        let file = format!("migrations/{version}.sql");
        let changed = !git(&["status", "--porcelain", "--", &file]).is_empty();
        let committed = git(&[
            "log",
            "-1",
            "--format=%cd",
            "--date=format-local:%Y%m%d",
            "--",
            &file,
        ]);
        let newest = if changed || committed.is_empty() {
            today.clone()
        } else {
            committed
        };
        assert!(
            version[..8] <= *newest,
            "{file} is named for {} but its newest change is of {newest}: name a migration \
             by the date it is written",
            &version[..8]
        );
    }
}

/// Migration 20261206_171800 (the dispatch record as a HOT update) on a table that already
/// holds tasks, as a deployment upgrading has: the unresolved dispatch index gives way to one on
/// SUBMITTED tasks only after that one is built, the table leaves room on its pages, no row is
/// rewritten or lost, and the reconciler finds the same work through the new index: the task
/// whose dispatch is unresolved, and the running task admitted before with no deadline of its
/// own (it falls back to admission plus the execution timeout).
#[tokio::test]
async fn the_hot_dispatch_migration_upgrades_a_table_with_tasks() {
    use q_a2a_gateway::config::DatabaseConfig;
    use q_a2a_gateway::store::{Due, PgTaskStore};
    use std::time::Duration;

    const LAST: &str = "20261206_171800_a2a_tasks_hot_dispatch";
    let db = TestDb::create().await;
    // The release before: every migration up to this one.
    let previous = MIGRATIONS
        .iter()
        .take_while(|(v, _)| *v != LAST)
        .last()
        .expect("a migration before")
        .0;
    migrate_until(&db, previous).await;
    let client = db.client().await;
    // 20,000 completed tasks, one running since two hours with no deadline recorded, one whose
    // dispatch is unresolved since a minute, as that release wrote them.
    client
        .batch_execute(
            "INSERT INTO a2a_tasks (task_id, tenant_id, principal_id, agent_id, message_id,
                                    content_sha256, context_id, workflow_id, message, state,
                                    dispatch, run_id, created_at)
             SELECT gen_random_uuid(), 't1', 'p-alice', 'ag-writer', 'm-' || i, 'x',
                    gen_random_uuid(), 'wf-' || i, '{}', 'TASK_STATE_COMPLETED', 'dispatched',
                    'run-' || i, now() - interval '3 hours'
               FROM generate_series(1, 20000) i;
             INSERT INTO a2a_tasks (task_id, tenant_id, principal_id, agent_id, message_id,
                                    content_sha256, context_id, workflow_id, message, state,
                                    dispatch, run_id, created_at)
             VALUES ('00000000-0000-4000-8000-000000000001', 't1', 'p-alice', 'ag-writer',
                     'm-running', 'x', gen_random_uuid(), 'wf-running', '{}',
                     'TASK_STATE_WORKING', 'dispatched', 'run-running',
                     now() - interval '2 hours'),
                    ('00000000-0000-4000-8000-000000000002', 't1', 'p-alice', 'ag-writer',
                     'm-pending', 'x', gen_random_uuid(), 'wf-pending', '{}',
                     'TASK_STATE_SUBMITTED', 'pending', NULL, now() - interval '1 minute');",
        )
        .await
        .unwrap();
    // Every row's id, state, dispatch, run and status time.
    let rows = || async {
        client
            .query(
                "SELECT task_id::text, state || dispatch || coalesce(run_id, '') || status_timestamp
                   FROM a2a_tasks ORDER BY task_id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    };
    let before = rows().await;

    let out = migrate(&db, "http://127.0.0.1:9").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("applied {LAST}")), "{stdout}");

    let indexes = db
        .count(
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'a2a_tasks'
               AND indexname = 'a2a_tasks_submitted'
               AND indexdef LIKE '%WHERE (state = ''TASK_STATE_SUBMITTED''::text)%'",
        )
        .await;
    assert_eq!(indexes, 1, "the index on SUBMITTED tasks");
    assert_eq!(
        db.count(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'a2a_tasks_unresolved_dispatch'"
        )
        .await,
        0,
        "the index with `dispatch` in its predicate is gone"
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM pg_class WHERE relname = 'a2a_tasks'
               AND 'fillfactor=80' = ANY(reloptions)"
        )
        .await,
        1
    );
    let after = rows().await;
    assert!(
        before == after,
        "every row as it was ({} rows)",
        after.len()
    );

    let store = PgTaskStore::connect(&DatabaseConfig {
        url: db.url.clone().into(),
        pool_size: 1,
        ..DatabaseConfig::default()
    })
    .unwrap();
    let unresolved = store
        .due(Due::Unresolved, Duration::from_secs(6), 100)
        .await
        .unwrap();
    let ids: Vec<String> = unresolved.iter().map(|r| r.task_id.to_string()).collect();
    assert_eq!(ids, ["00000000-0000-4000-8000-000000000002"]);
    let overdue = store
        .due(
            Due::OverdueOrCancelling {
                execution_timeout: Duration::from_secs(3600),
            },
            Duration::from_secs(6),
            100,
        )
        .await
        .unwrap();
    let ids: Vec<String> = overdue.iter().map(|r| r.task_id.to_string()).collect();
    assert_eq!(ids, ["00000000-0000-4000-8000-000000000001"]);
    let counted = store.unresolved_count().await.unwrap();
    assert_eq!((counted.backlog, counted.unknown), (1, 0));
}
