//! Calls to the retired routes attributed to tenants (`20261201_010000_a2a_retired_hits`): one
//! counter per tenant, route and UTC day, for the operators running the migration.

use chrono::{DateTime, NaiveDate, Utc};

use super::{PgPool, StoreError};
use crate::store::pool::on_connection;
use crate::store::Call;

/// One tenant's calls to one retired route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredRouteUse {
    pub tenant_id: String,
    pub route: String,
    pub hits: i64,
    pub first_day: NaiveDate,
    pub last_seen: DateTime<Utc>,
}

#[derive(Clone)]
pub struct PgRetiredHits {
    pool: PgPool,
}

impl PgRetiredHits {
    pub fn new(pool: PgPool) -> Self {
        PgRetiredHits { pool }
    }

    /// Counts one call of `route` by `tenant_id` today.
    pub async fn record(&self, tenant_id: &str, route: &str) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::WriteOnce, |client| {
            client
                .execute(
                    "INSERT INTO a2a_retired_route_hits (tenant_id, route, day, hits, last_seen)
                     VALUES ($1, $2, (now() AT TIME ZONE 'UTC')::date, 1, now())
                     ON CONFLICT (tenant_id, route, day)
                     DO UPDATE SET hits = a2a_retired_route_hits.hits + 1, last_seen = now()",
                    &[&tenant_id, &route],
                )
                .await?;
            Ok(())
        })
    }

    /// Every tenant's use of each retired route over the last `days` days, most recent first.
    pub async fn report(&self, days: i32) -> Result<Vec<RetiredRouteUse>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    "SELECT tenant_id, route, sum(hits)::bigint, min(day), max(last_seen)
                       FROM a2a_retired_route_hits
                      WHERE day > (now() AT TIME ZONE 'UTC')::date - $1::int
                      GROUP BY tenant_id, route
                      ORDER BY max(last_seen) DESC, tenant_id, route",
                    &[&days],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|row| RetiredRouteUse {
                    tenant_id: row.get(0),
                    route: row.get(1),
                    hits: row.get(2),
                    first_day: row.get(3),
                    last_seen: row.get(4),
                })
                .collect())
        })
    }
}
