//! Schema migrations, embedded in the binary and applied by `q-a2a-gateway migrate`.
//!
//! Safe when several replicas run it at once: a session-level advisory lock serialises them,
//! each migration runs in its own transaction together with its bookkeeping row, and a
//! migration already recorded is skipped.
//!
//! A migration is named by the date it was written. Some were first named by later dates and
//! renamed ([`FORMER_NAMES`]): a database that recorded a former name has that migration, so
//! it is not applied again, and every migration with a former name is recorded under both names,
//! so a binary of either naming (a rollback included) finds it applied.

use tokio_postgres::Client;

/// Version of the migration the profile requires before enablement.
pub const STATUS_MIGRATION: &str = "20261009_030000_a2a_status";

/// Advisory lock key: "q-a2a-migrate" folded into an i64.
const LOCK_KEY: i64 = 0x71_61_32_61_6d_69_67;

/// Every migration, in order. The version is the file name without `.sql`.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "20261001_000000_a2a_tasks",
        include_str!("../../migrations/20261001_000000_a2a_tasks.sql"),
    ),
    (
        STATUS_MIGRATION,
        include_str!("../../migrations/20261009_030000_a2a_status.sql"),
    ),
    (
        "20261020_000000_a2a_lifecycle",
        include_str!("../../migrations/20261020_000000_a2a_lifecycle.sql"),
    ),
    (
        "20261101_000000_a2a_outbound",
        include_str!("../../migrations/20261101_000000_a2a_outbound.sql"),
    ),
    (
        "20261201_000000_a2a_delegation_identity",
        include_str!("../../migrations/20261201_000000_a2a_delegation_identity.sql"),
    ),
    (
        "20261201_010000_a2a_retired_hits",
        include_str!("../../migrations/20261201_010000_a2a_retired_hits.sql"),
    ),
    (
        "20261201_051251_a2a_outbound_retention",
        include_str!("../../migrations/20261201_051251_a2a_outbound_retention.sql"),
    ),
    (
        "20261201_064942_a2a_task_artifacts",
        include_str!("../../migrations/20261201_064942_a2a_task_artifacts.sql"),
    ),
    (
        "20261201_071531_a2a_task_retention",
        include_str!("../../migrations/20261201_071531_a2a_task_retention.sql"),
    ),
    (
        "20261201_072010_a2a_tenant_keys",
        include_str!("../../migrations/20261201_072010_a2a_tenant_keys.sql"),
    ),
    (
        "20261201_113005_a2a_tasks_listing_partial",
        include_str!("../../migrations/20261201_113005_a2a_tasks_listing_partial.sql"),
    ),
    (
        "20261202_000000_a2a_card_trust",
        include_str!("../../migrations/20261202_000000_a2a_card_trust.sql"),
    ),
    (
        "20261202_010000_a2a_dispatch_claim",
        include_str!("../../migrations/20261202_010000_a2a_dispatch_claim.sql"),
    ),
    (
        "20261202_020000_a2a_task_tombstones",
        include_str!("../../migrations/20261202_020000_a2a_task_tombstones.sql"),
    ),
    (
        "20261206_171800_a2a_tasks_hot_dispatch",
        include_str!("../../migrations/20261206_171800_a2a_tasks_hot_dispatch.sql"),
    ),
];

/// Migrations renamed after release (former name, current name): their SQL is unchanged.
pub const FORMER_NAMES: &[(&str, &str)] = &[
    (
        "20261215_000000_a2a_outbound_retention",
        "20261201_051251_a2a_outbound_retention",
    ),
    (
        "20261220_000000_a2a_task_artifacts",
        "20261201_064942_a2a_task_artifacts",
    ),
    (
        "20270105_000000_a2a_task_retention",
        "20261201_071531_a2a_task_retention",
    ),
    (
        "20270106_000000_a2a_tenant_keys",
        "20261201_072010_a2a_tenant_keys",
    ),
    (
        "20270110_000000_a2a_tasks_listing_partial",
        "20261201_113005_a2a_tasks_listing_partial",
    ),
];

/// Every name `version` has been recorded under: its own, then its former one if any.
fn names_of(version: &str) -> impl Iterator<Item = &str> {
    std::iter::once(version).chain(
        FORMER_NAMES
            .iter()
            .filter(move |(_, current)| *current == version)
            .map(|(former, _)| *former),
    )
}

const BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS a2a_schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// Applies every pending migration; returns the versions it applied.
pub async fn run(client: &mut Client) -> Result<Vec<String>, tokio_postgres::Error> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY])
        .await?;
    let result = apply_pending(client).await;
    // Unlock even when a migration failed; the session ends soon anyway.
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK_KEY])
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_pending(client: &mut Client) -> Result<Vec<String>, tokio_postgres::Error> {
    client.batch_execute(BOOKKEEPING).await?;
    let mut applied = Vec::new();
    for (version, sql) in MIGRATIONS {
        let tx = client.transaction().await?;
        let names: Vec<&str> = names_of(version).collect();
        let recorded: Vec<String> = tx
            .query(
                "SELECT version FROM a2a_schema_migrations WHERE version = ANY($1)",
                &[&names],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if !recorded.is_empty() {
            // Applied under one of its names: record the others, never run it again.
            for name in names.iter().filter(|n| !recorded.iter().any(|r| r == *n)) {
                tx.execute(
                    "INSERT INTO a2a_schema_migrations (version, applied_at) \
                     SELECT $1, min(applied_at) FROM a2a_schema_migrations WHERE version = ANY($2)",
                    &[name, &names],
                )
                .await?;
            }
            tx.commit().await?;
            continue;
        }
        tx.batch_execute(sql).await?;
        for name in &names {
            tx.execute(
                "INSERT INTO a2a_schema_migrations (version) VALUES ($1)",
                &[name],
            )
            .await?;
        }
        tx.commit().await?;
        applied.push(version.to_string());
    }
    Ok(applied)
}

/// Whether `version` has been applied, under its name or a former one (false when the
/// bookkeeping table does not exist).
pub async fn is_applied(client: &Client, version: &str) -> Result<bool, tokio_postgres::Error> {
    let table = client
        .query_one(
            "SELECT to_regclass('a2a_schema_migrations') IS NOT NULL",
            &[],
        )
        .await?
        .get::<_, bool>(0);
    if !table {
        return Ok(false);
    }
    let names: Vec<&str> = names_of(version).collect();
    Ok(client
        .query_opt(
            "SELECT 1 FROM a2a_schema_migrations WHERE version = ANY($1) LIMIT 1",
            &[&names],
        )
        .await?
        .is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_ordered_and_match_files() {
        let versions: Vec<&str> = MIGRATIONS.iter().map(|(v, _)| *v).collect();
        let mut sorted = versions.clone();
        sorted.sort();
        assert_eq!(versions, sorted);
        let mut files: Vec<String> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
                .unwrap()
                .map(|e| {
                    e.unwrap()
                        .file_name()
                        .to_string_lossy()
                        .trim_end_matches(".sql")
                        .to_string()
                })
                .collect();
        files.sort();
        assert_eq!(
            files, versions,
            "every migrations/*.sql file is embedded, in order"
        );
        assert!(versions.contains(&STATUS_MIGRATION));
    }

    #[test]
    fn former_names_belong_to_renamed_migrations_only() {
        for (former, current) in FORMER_NAMES {
            assert!(MIGRATIONS.iter().any(|(v, _)| v == current), "{current}");
            assert!(MIGRATIONS.iter().all(|(v, _)| v != former), "{former}");
            // Same suffix: only the date part changed.
            assert_eq!(former[16..], current[16..]);
        }
        assert_eq!(
            names_of("20261201_071531_a2a_task_retention").collect::<Vec<_>>(),
            [
                "20261201_071531_a2a_task_retention",
                "20270105_000000_a2a_task_retention"
            ]
        );
        assert_eq!(names_of(STATUS_MIGRATION).count(), 1);
    }
}
