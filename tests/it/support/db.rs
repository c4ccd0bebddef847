//! PostgreSQL: a database created for one test and dropped after it, reached at
//! `Q_A2A_TEST_DATABASE_ADMIN_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`).

use std::time::Duration;

use tokio_postgres::types::FromSql;
use tokio_postgres::NoTls;

use super::wait::wait_until;

/// Whether a stored task state is terminal (`TASK_STATE_COMPLETED`, `_FAILED`, `_CANCELED`,
/// `_REJECTED`).
pub fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_COMPLETED"
            | "TASK_STATE_FAILED"
            | "TASK_STATE_CANCELED"
            | "TASK_STATE_REJECTED"
    )
}

/// A fresh task admitted through `store` under `message_id` (tenant `t1`, `p-alice`,
/// `ag-writer`), as SendMessage admits one.
pub async fn admit_task(
    store: &q_a2a_gateway::store::PgTaskStore,
    message_id: &str,
) -> q_a2a_gateway::store::TaskRow {
    use q_a2a_gateway::store::Admission;
    let admitted = store.admit(&new_task(message_id)).await.unwrap();
    let Admission::Created(row) = admitted else {
        panic!("a fresh identity creates its task: {admitted:?}");
    };
    row
}

/// A message to admit under `message_id` (tenant `t1`, `p-alice`, `ag-writer`), as SendMessage
/// admits one.
pub fn new_task(message_id: &str) -> q_a2a_gateway::store::NewTask {
    use q_a2a_gateway::store::{NewTask, Owner};
    NewTask {
        owner: Owner {
            tenant_id: "t1".into(),
            principal_id: "p-alice".into(),
            agent_id: "ag-writer".into(),
        },
        message_id: message_id.into(),
        content_sha256: "0".repeat(64),
        message: serde_json::json!({
            "role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": message_id
        }),
        dispatch_claim: Duration::from_secs(30),
        execution_timeout: Duration::from_secs(3600),
    }
}

pub fn admin_url() -> String {
    std::env::var("Q_A2A_TEST_DATABASE_ADMIN_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database created for one test and dropped afterwards.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let name = format!("q_a2a_test_{}", uuid::Uuid::new_v4().simple());
        let admin = admin_url();
        let (client, conn) = tokio_postgres::connect(&admin, NoTls)
            .await
            .expect("PostgreSQL must be running (see README: scripts/test starts it)");
        tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        TestDb {
            url: format!("{base}/{name}"),
            name,
        }
    }

    /// A database the test made elsewhere (a private server): its URL, under a name of its
    /// own, so dropping it touches nothing on the shared server.
    pub fn elsewhere(url: String) -> TestDb {
        TestDb {
            name: format!("q_a2a_elsewhere_{}", uuid::Uuid::new_v4().simple()),
            url,
        }
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url, NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }

    /// The single value of a one-row, one-column query.
    pub async fn one<T: for<'a> FromSql<'a>>(&self, sql: &str) -> T {
        self.client()
            .await
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.one(sql).await
    }

    pub async fn task_count(&self) -> i64 {
        self.count("SELECT count(*) FROM a2a_tasks").await
    }

    /// One column of one task's row.
    pub async fn task_field<T: for<'a> FromSql<'a>>(&self, task_id: &str, column: &str) -> T {
        let sql = format!("SELECT {column} FROM a2a_tasks WHERE task_id = $1::text::uuid");
        self.client()
            .await
            .query_one(&sql, &[&task_id])
            .await
            .unwrap_or_else(|e| panic!("{sql} ({task_id}): {e}"))
            .get(0)
    }

    /// The task's state as stored in the status index.
    pub async fn task_state(&self, task_id: &str) -> String {
        self.task_field(task_id, "state").await
    }

    /// The id of the task's run in Q.
    pub async fn run_id(&self, task_id: &str) -> String {
        self.task_field(task_id, "run_id").await
    }

    /// Polls the status index (every 100 ms, 15 s at most) until the task is in `state`.
    pub async fn wait_task_state(&self, task_id: &str, state: &str) {
        wait_until(
            &format!("task {task_id} to be {state} in the status index"),
            Duration::from_secs(15),
            async || self.task_state(task_id).await == state,
        )
        .await;
    }

    /// Polls a `count(*)` query (every 100 ms) until it answers `expected`; panics naming
    /// `what` after `limit`.
    pub async fn wait_count(&self, what: &str, sql: &str, expected: i64, limit: Duration) {
        wait_until(what, limit, async || self.count(sql).await == expected).await;
    }

    /// Polls until every task is COMPLETED; panics after `limit`.
    pub async fn wait_all_completed(&self, limit: Duration) {
        let sql = "SELECT count(*) FROM a2a_tasks WHERE state <> 'TASK_STATE_COMPLETED'";
        self.wait_count("every task completed", sql, 0, limit).await;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Best effort, off the test's runtime (which may be shutting down).
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok((client, conn)) = tokio_postgres::connect(&admin_url(), NoTls).await {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// `host:port` of the test PostgreSQL server.
pub fn postgres_addr() -> String {
    let url = admin_url();
    let after_at = url.rsplit_once('@').map(|(_, r)| r).unwrap_or(&url);
    let host_port = after_at.split('/').next().unwrap_or("127.0.0.1:5432");
    if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:5432")
    }
}

/// A test database's URL with its host and port replaced (to go through a
/// [`TcpProxy`](super::proxy::TcpProxy)).
pub fn via_port(db_url: &str, port: u16) -> String {
    let (scheme_creds, rest) = db_url.rsplit_once('@').expect("database URL with user@");
    let path = rest.split_once('/').map(|(_, p)| p).unwrap_or("");
    format!("{scheme_creds}@127.0.0.1:{port}/{path}")
}

/// Applies the embedded migrations up to and including `last`, as `migrate` would.
pub async fn migrate_until(db: &TestDb, last: &str) {
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE TABLE a2a_schema_migrations (version text PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .unwrap();
    for (version, sql) in q_a2a_gateway::store::migrate::MIGRATIONS {
        client.batch_execute(sql).await.unwrap();
        client
            .execute(
                "INSERT INTO a2a_schema_migrations (version) VALUES ($1)",
                &[version],
            )
            .await
            .unwrap();
        if *version == last {
            return;
        }
    }
    panic!("no migration {last}");
}
