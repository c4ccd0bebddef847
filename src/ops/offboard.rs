//! `q-a2a-gateway tenant delete`: every A2A row of one tenant, deleted in batches by key
//! (tasks with everything keyed on them, registrations with their sealed credentials,
//! delegations, retired-route counters). Running it again deletes what is left; `--dry-run`
//! only counts.

use crate::store::tenant::TenantTable;
use crate::store::{PgTaskStore, StoreError};

/// Rows of each kind: counted (dry run), deleted, or left after the deletion.
pub type Counts = Vec<(&'static str, i64)>;

/// The tenant's rows of every kind.
pub async fn count(store: &PgTaskStore, tenant: &str) -> Result<Counts, StoreError> {
    let mut counts = Vec::new();
    for table in TenantTable::ALL {
        counts.push((table.kind(), store.tenant_count(table, tenant).await?));
    }
    Ok(counts)
}

/// Deletes the tenant's rows of every kind, `batch` at a time; how many of each, and what is
/// left (rows written meanwhile: the tenant was still served).
pub async fn delete(
    store: &PgTaskStore,
    tenant: &str,
    batch: i64,
    mut progress: impl FnMut(&'static str, i64),
) -> Result<(Counts, Counts), StoreError> {
    let mut deleted = Vec::new();
    for table in TenantTable::ALL {
        let mut total = 0i64;
        loop {
            let n = store.delete_tenant_batch(table, tenant, batch).await? as i64;
            total += n;
            if n > 0 {
                progress(table.kind(), total);
            }
            if n < batch {
                break;
            }
        }
        deleted.push((table.kind(), total));
    }
    let left = count(store, tenant)
        .await?
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
    Ok((deleted, left))
}
