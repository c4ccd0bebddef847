//! ListTasks in the store: its filters, its page position, and the statement that reads a page
//! and its count.

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
/// true of every row, stated by ListTasks' page and its count and by nothing else, so no
/// other statement (the identity lookup above all) can be planned onto that index.
pub(super) const LISTING_PREDICATE: &str = "status_timestamp > '-infinity'::timestamptz";

/// The WHERE clauses of ListTasks, and their parameters: the filters (shared by the page and
/// its count) and, after them, the page position's (the page's only).
fn list_where(
    owner: &Owner,
    filter: &ListFilter,
    after: Option<ListPosition>,
) -> (String, Option<String>, Vec<SqlParam>) {
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
    let position = after.map(|position| {
        params.push(Box::new(position.status_timestamp));
        let ts = params.len();
        params.push(Box::new(position.task_id));
        format!("(status_timestamp, task_id) < (${ts}, ${})", params.len())
    });
    (clauses.join(" AND "), position, params)
}

/// A ListTasks page and its count in one statement: one row per task of the page (after the
/// position, if any; at most `$limit` of them), each with `total`, the number of all the
/// owner's tasks matching the filters wherever the page starts; one row with `total` and no
/// task when the page is empty. Its text depends only on which filters are set (the limit is
/// a parameter), so each connection prepares it once per combination.
fn page_sql(filters: &str, position: Option<&str>, limit: usize) -> String {
    let page_where = match position {
        Some(position) => format!("{filters} AND {position}"),
        None => filters.to_string(),
    };
    let page_columns = COLUMNS
        .split(", ")
        .map(|c| format!("p.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT c.total, {page_columns}
           FROM (SELECT count(*) AS total FROM a2a_tasks WHERE {filters}) c
           LEFT JOIN (SELECT {COLUMNS} FROM a2a_tasks WHERE {page_where}
                               ORDER BY status_timestamp DESC, task_id DESC
                               LIMIT ${limit}) p ON true
          ORDER BY p.status_timestamp DESC, p.task_id DESC"
    )
}

/// The statements whose plans must not depend on the table's statistics, as sent: the
/// identity lookup and the admission (parameters as [`PgTaskStore::admit_as`] binds them:
/// `$2..$5` = tenant, principal, agent, messageId), and an unfiltered first ListTasks page
/// with its count (`$1..$3` = tenant, principal, agent, `$4` the limit).
/// `tests/it/store_plans.rs` plans them on a table that was never analysed.
#[doc(hidden)]
pub fn statements_for_plan_checks() -> [String; 3] {
    let owner = Owner {
        tenant_id: String::new(),
        principal_id: String::new(),
        agent_id: String::new(),
    };
    let (filters, _, params) = list_where(&owner, &ListFilter::default(), None);
    [
        super::tasks::IDENTITY_LOOKUP.clone(),
        super::tasks::ADMIT.clone(),
        page_sql(&filters, None, params.len() + 1),
    ]
}

/// One ListTasks page with the count of all the tasks its filters match.
#[derive(Debug)]
pub struct Page {
    pub rows: Vec<TaskRow>,
    /// ListTasks `totalSize`: the owner's tasks matching the filters, the page's position
    /// aside.
    pub total: i64,
}

impl PgTaskStore {
    /// One ListTasks page: the owner's tasks matching `filter`, after `after`, ordered by
    /// `(status_timestamp desc, task_id desc)`, at most `limit`, and how many tasks match
    /// `filter` in all (`totalSize`): one statement.
    #[tracing::instrument(target = "otel", name = "db.list", skip_all)]
    pub async fn list(
        &self,
        owner: &Owner,
        filter: &ListFilter,
        after: Option<ListPosition>,
        limit: i64,
    ) -> Result<Page, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            let (filters, position, mut params) = list_where(owner, filter, after);
            params.push(Box::new(limit));
            let sql = page_sql(&filters, position.as_deref(), params.len());
            // Prepared once per connection: an unnamed statement costs a second round trip
            // (and transaction) per page.
            let statement = client.prepare_cached(&sql).await?;
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_ref() as _).collect();
            let found = client.query(&statement, &refs).await?;
            let total = match found.first() {
                Some(row) => row.try_get("total")?,
                None => {
                    return Err(StoreError::Corrupt(
                        "a ListTasks page without its count".into(),
                    ))
                }
            };
            let mut rows = Vec::with_capacity(found.len());
            for row in &found {
                if row.try_get::<_, Option<Uuid>>("task_id")?.is_some() {
                    rows.push(task_from_row(row)?);
                }
            }
            Ok(Page { rows, total })
        })
    }
}
