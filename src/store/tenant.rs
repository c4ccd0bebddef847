//! One tenant's rows, for export and offboarding (`q-a2a-gateway tenant`): keyset pages by
//! key and deletes in batches by key, each batch its own short statement, so a run can stop
//! anywhere and the next one goes on from what is left.

use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use super::row::{task_from_row, COLUMNS};
use super::{PgTaskStore, StoreError, TaskRow};
use crate::store::pool::on_connection;
use crate::store::Call;

/// The tables holding a tenant's rows, in the order they are exported and deleted. Rows keyed
/// on a task (tables referencing `a2a_tasks`) go with their task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantTable {
    Tasks,
    /// What retention kept of removed tasks (their message identities).
    TaskTombstones,
    Registrations,
    Delegations,
    RetiredRouteHits,
}

impl TenantTable {
    pub const ALL: [TenantTable; 5] = [
        TenantTable::Tasks,
        TenantTable::TaskTombstones,
        TenantTable::Registrations,
        TenantTable::Delegations,
        TenantTable::RetiredRouteHits,
    ];

    /// The kind of record, as exported and reported.
    pub fn kind(self) -> &'static str {
        match self {
            TenantTable::Tasks => "task",
            TenantTable::TaskTombstones => "task_tombstone",
            TenantTable::Registrations => "registration",
            TenantTable::Delegations => "delegation",
            TenantTable::RetiredRouteHits => "retired_route_hits",
        }
    }

    /// Table and key columns (the key within the tenant, in index order).
    fn sql(self) -> (&'static str, &'static str) {
        match self {
            TenantTable::Tasks => ("a2a_tasks", "task_id"),
            TenantTable::TaskTombstones => ("a2a_task_tombstones", "identity"),
            TenantTable::Registrations => ("a2a_remote_agents", "registration_id"),
            TenantTable::Delegations => ("a2a_delegations", "principal_id, task_id"),
            TenantTable::RetiredRouteHits => ("a2a_retired_route_hits", "route, day"),
        }
    }
}

/// One task tombstone of a tenant, as exported.
#[derive(Debug, Clone)]
pub struct TenantTombstone {
    /// The sha256 of the message identity, hex.
    pub identity: String,
    pub task_id: Uuid,
    pub context_id: Uuid,
    pub state: String,
    pub status_timestamp: DateTime<Utc>,
}

/// One tenant's calls to one retired route on one day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredDay {
    pub route: String,
    pub day: NaiveDate,
    pub hits: i64,
    pub last_seen: DateTime<Utc>,
}

impl PgTaskStore {
    /// How many rows of `table` the tenant holds.
    pub async fn tenant_count(&self, table: TenantTable, tenant: &str) -> Result<i64, StoreError> {
        let (name, _) = table.sql();
        on_connection!(self.pool, Call::Read, |client| {
            let row = client
                .query_one(
                    &format!("SELECT count(*) FROM {name} WHERE tenant_id = $1"),
                    &[&tenant],
                )
                .await?;
            Ok(row.try_get(0)?)
        })
    }

    /// Deletes at most `batch` of the tenant's rows of `table`, lowest keys first; how many.
    pub async fn delete_tenant_batch(
        &self,
        table: TenantTable,
        tenant: &str,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let (name, key) = table.sql();
        on_connection!(self.pool, Call::Write, |client| {
            Ok(client
                .execute(
                    &format!(
                        "DELETE FROM {name} WHERE tenant_id = $1 AND ({key}) IN (
                            SELECT {key} FROM {name} WHERE tenant_id = $1
                             ORDER BY {key} LIMIT $2)"
                    ),
                    &[&tenant, &batch],
                )
                .await?)
        })
    }

    /// The tenant's tasks after `after` in id order, at most `limit`
    /// (`a2a_tasks_by_tenant`).
    pub async fn tenant_tasks_after(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM a2a_tasks WHERE tenant_id = $1 AND task_id > $2
                          ORDER BY task_id LIMIT $3"
                    ),
                    // No task has the nil id (they are random v4 ids).
                    &[&tenant, &after.unwrap_or(Uuid::nil()), &limit],
                )
                .await?;
            rows.iter().map(task_from_row).collect()
        })
    }

    /// The tenant's task tombstones after `after` (a hex identity) in identity order, at most
    /// `limit`: identity (hex), task id, context id, final state, its time.
    pub async fn tenant_tombstones_after(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<TenantTombstone>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    "SELECT encode(identity, 'hex'), task_id, context_id, state, status_timestamp
                       FROM a2a_task_tombstones
                      WHERE tenant_id = $1 AND identity > decode($2, 'hex')
                      ORDER BY identity LIMIT $3",
                    &[&tenant, &after.unwrap_or(""), &limit],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(TenantTombstone {
                        identity: r.try_get(0)?,
                        task_id: r.try_get(1)?,
                        context_id: r.try_get(2)?,
                        state: r.try_get(3)?,
                        status_timestamp: r.try_get(4)?,
                    })
                })
                .collect()
        })
    }

    /// The tenant's retired-route counters after `(route, day)`, at most `limit`.
    pub async fn tenant_retired_days_after(
        &self,
        tenant: &str,
        after: Option<(&str, NaiveDate)>,
        limit: i64,
    ) -> Result<Vec<RetiredDay>, StoreError> {
        // Before any day PostgreSQL stores (NaiveDate::MIN is out of its range).
        let first = NaiveDate::from_ymd_opt(1, 1, 1).expect("a valid date");
        let (route, day) = after.unwrap_or(("", first));
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    "SELECT route, day, hits, last_seen FROM a2a_retired_route_hits
                      WHERE tenant_id = $1 AND (route, day) > ($2, $3)
                      ORDER BY route, day LIMIT $4",
                    &[&tenant, &route, &day, &limit],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(RetiredDay {
                        route: r.try_get(0)?,
                        day: r.try_get(1)?,
                        hits: r.try_get(2)?,
                        last_seen: r.try_get(3)?,
                    })
                })
                .collect()
        })
    }
}
