//! ListTasks in the store: its filters, its page position, and the page and count queries.

use a2a::TaskState;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::row::{task_from_row, COLUMNS};
use super::state::state_name;
use super::{Owner, PgTaskStore, StoreError, TaskRow};
use crate::store::pool::on_connection;
use crate::store::Call;

/// ListTasks filters, applied within one owner.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    pub context_id: Option<Uuid>,
    pub state: Option<TaskState>,
    pub status_timestamp_after: Option<DateTime<Utc>>,
}

/// Position after the last task of a page: `(status_timestamp, task_id)`, strictly descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPosition {
    pub status_timestamp: DateTime<Utc>,
    pub task_id: Uuid,
}

type SqlParam = Box<dyn tokio_postgres::types::ToSql + Sync + Send>;

/// The listing index's predicate (migration `20261201_113005_a2a_tasks_listing_partial`):
/// true of every row, stated by ListTasks' page and count queries and by nothing else, so no
/// other statement (the identity lookup above all) can be planned onto that index.
pub(super) const LISTING_PREDICATE: &str = "status_timestamp > '-infinity'::timestamptz";

/// WHERE clause and parameters shared by ListTasks' page and count queries.
fn list_where(
    owner: &Owner,
    filter: &ListFilter,
    after: Option<ListPosition>,
) -> (String, Vec<SqlParam>) {
    let mut clauses = vec![
        LISTING_PREDICATE.to_string(),
        "tenant_id = $1".to_string(),
        "principal_id = $2".to_string(),
        "agent_id = $3".to_string(),
    ];
    let mut params: Vec<SqlParam> = vec![
        Box::new(owner.tenant_id.clone()),
        Box::new(owner.principal_id.clone()),
        Box::new(owner.agent_id.clone()),
    ];
    if let Some(context_id) = filter.context_id {
        params.push(Box::new(context_id));
        clauses.push(format!("context_id = ${}", params.len()));
    }
    if let Some(state) = &filter.state {
        params.push(Box::new(state_name(state)));
        clauses.push(format!("state = ${}", params.len()));
    }
    if let Some(ts) = filter.status_timestamp_after {
        params.push(Box::new(ts));
        clauses.push(format!("status_timestamp >= ${}", params.len()));
    }
    if let Some(position) = after {
        params.push(Box::new(position.status_timestamp));
        let ts = params.len();
        params.push(Box::new(position.task_id));
        clauses.push(format!(
            "(status_timestamp, task_id) < (${ts}, ${})",
            params.len()
        ));
    }
    (clauses.join(" AND "), params)
}

fn page_sql(where_sql: &str, limit: i64) -> String {
    format!(
        "SELECT {COLUMNS} FROM a2a_tasks WHERE {where_sql}
          ORDER BY status_timestamp DESC, task_id DESC LIMIT {limit}"
    )
}

fn count_sql(where_sql: &str) -> String {
    format!("SELECT count(*) FROM a2a_tasks WHERE {where_sql}")
}

/// The statements whose plans must not depend on the table's statistics, as sent, with
/// parameters `$1..$4` = tenant, principal, agent, messageId (the page and count of an
/// unfiltered first page use the first three): the identity lookup, a ListTasks page of
/// `limit` and its count. `tests/it/store_plans.rs` plans them on a table that was never
/// analysed.
#[doc(hidden)]
pub fn statements_for_plan_checks(limit: i64) -> [String; 3] {
    let owner = Owner {
        tenant_id: String::new(),
        principal_id: String::new(),
        agent_id: String::new(),
    };
    let (where_sql, _) = list_where(&owner, &ListFilter::default(), None);
    [
        super::tasks::IDENTITY_LOOKUP.clone(),
        page_sql(&where_sql, limit),
        count_sql(&where_sql),
    ]
}

impl PgTaskStore {
    /// One ListTasks page: the owner's tasks matching `filter`, after `after`, ordered by
    /// `(status_timestamp desc, task_id desc)`, at most `limit`.
    #[tracing::instrument(target = "otel", name = "db.list", skip_all)]
    pub async fn list(
        &self,
        owner: &Owner,
        filter: &ListFilter,
        after: Option<ListPosition>,
        limit: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let (where_sql, params) = list_where(owner, filter, after);
            let sql = page_sql(&where_sql, limit);
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_ref() as _).collect();
            let rows = client.query(&sql, &refs).await?;
            rows.iter().map(task_from_row).collect()
        })
    }

    /// Number of the owner's tasks matching `filter` (ListTasks `totalSize`).
    #[tracing::instrument(target = "otel", name = "db.count", skip_all)]
    pub async fn count(&self, owner: &Owner, filter: &ListFilter) -> Result<i64, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let (where_sql, params) = list_where(owner, filter, None);
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_ref() as _).collect();
            let row = client.query_one(&count_sql(&where_sql), &refs).await?;
            Ok(row.try_get(0)?)
        })
    }
}
