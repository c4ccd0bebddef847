//! One tenant's registrations and delegations in key order, for export
//! (`q-a2a-gateway tenant export`).

use super::row::{delegation_from_row, registration_from_row};
use super::row::{DELEGATION_COLUMNS, REGISTRATION_COLUMNS};
use super::{Delegation, Params, PgOutboundStore, Registration, StoreError};
use crate::store::pool::on_connection;
use crate::store::Call;

impl PgOutboundStore {
    /// The tenant's registrations after `after` in id order, at most `limit`.
    pub async fn tenant_registrations_after(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Registration>, StoreError> {
        self.registrations_page(
            "tenant_id = $1 AND registration_id > $2",
            &[&tenant, &after.unwrap_or(""), &limit],
        )
        .await
    }

    /// Registrations matching `filter` (a fixed text with parameters `$1` and `$2`, one of
    /// them the `registration_id > …` bound) in id order, at most `$3` of them: one page of a
    /// walk by `registration_id`.
    pub(super) async fn registrations_page(
        &self,
        filter: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<Registration>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    &format!(
                        "SELECT {REGISTRATION_COLUMNS} FROM a2a_remote_agents
                          WHERE {filter} ORDER BY registration_id LIMIT $3"
                    ),
                    params,
                )
                .await?;
            rows.iter().map(registration_from_row).collect()
        })
    }

    /// The tenant's delegations after `(principal, taskId)` in key order, at most `limit`.
    pub async fn tenant_delegations_after(
        &self,
        tenant: &str,
        after: Option<(&str, &str)>,
        limit: i64,
    ) -> Result<Vec<Delegation>, StoreError> {
        let (principal, task) = after.unwrap_or(("", ""));
        on_connection!(self.pool, Call::Read, |client| {
            let rows = client
                .query(
                    &format!(
                        "SELECT {DELEGATION_COLUMNS} FROM a2a_delegations
                          WHERE tenant_id = $1 AND (principal_id, task_id) > ($2, $3)
                          ORDER BY principal_id, task_id LIMIT $4"
                    ),
                    &[&tenant, &principal, &task, &limit],
                )
                .await?;
            rows.iter().map(delegation_from_row).collect()
        })
    }
}
