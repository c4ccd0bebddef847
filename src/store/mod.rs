//! The store port: the durable A2A identity of each task, its dispatch record and the status
//! projection used for listing, in PostgreSQL. This module holds the pool and its errors; each
//! concern of the task table has its own file.

mod artifacts;
mod connect;
mod feed;
mod listing;
pub mod migrate;
pub mod outbound;
mod retention;
pub mod retired;
mod row;
mod state;
mod tasks;
pub mod tenant;

use std::time::Duration;

use deadpool::managed::{Metrics, RecycleError, RecycleResult};
use deadpool_postgres::ClientWrapper;

use crate::config::DatabaseConfig;

pub use artifacts::StoredArtifact;
use connect::Lending;
pub use connect::{ConnectError, PgConnector, ANSWER_SLACK};
pub use feed::RunChange;
pub use listing::{statements_for_plan_checks, ListFilter, ListPosition};
pub use row::{Dispatch, Owner, TaskRow};
pub use state::{state_name, task_state};
pub use tasks::{Admission, Due, NewTask, Tombstone, Unresolved};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database pool: {0}")]
    Pool(#[from] deadpool::managed::PoolError<ConnectError>),
    #[error("no database connection within {0:?}")]
    AcquireTimeout(Duration),
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("database pool setup: {0}")]
    Setup(String),
    #[error("stored row is invalid: {0}")]
    Corrupt(String),
    /// The task was deleted (retention, offboarding) between reading and writing it: it is
    /// answered like an unknown task.
    #[error("task no longer exists")]
    TaskGone,
}

/// Makes the pool's connections through [`PgConnector`]. deadpool-postgres's `ClientWrapper`
/// keeps the statement cache and aborts the connection's task when the pool drops it.
#[derive(Debug)]
pub struct PgManager {
    connector: PgConnector,
}

/// A pooled connection with the count its byte stream reads: odd while the pool lends it out.
#[derive(Debug)]
pub struct PgConnection {
    client: ClientWrapper,
    lending: Lending,
}

impl std::ops::Deref for PgConnection {
    type Target = ClientWrapper;
    fn deref(&self) -> &ClientWrapper {
        &self.client
    }
}

impl std::ops::DerefMut for PgConnection {
    fn deref_mut(&mut self) -> &mut ClientWrapper {
        &mut self.client
    }
}

impl deadpool::managed::Manager for PgManager {
    type Type = PgConnection;
    type Error = ConnectError;

    async fn create(&self) -> Result<PgConnection, ConnectError> {
        let lending = Lending::default();
        // Boxed: connecting (TCP, TLS, startup) is a future of about 10 KiB, and deadpool's
        // `get` holds `create` inline, so without the box every store call, and every request
        // future holding one, would carry it while it only waits for a pooled connection.
        let (client, task) = Box::pin(self.connector.connect_lendable(lending.clone())).await?;
        Ok(PgConnection {
            client: ClientWrapper::new(client, task),
            lending,
        })
    }

    async fn recycle(
        &self,
        connection: &mut PgConnection,
        _: &Metrics,
    ) -> RecycleResult<ConnectError> {
        // A connection that failed its answer deadline is closed: never handed out again.
        if connection.client.is_closed() {
            return Err(RecycleError::message("connection closed"));
        }
        Ok(())
    }
}

/// A connection lent by the pool, for the statements of one store call. While it is out, an
/// answer that starts and then stops coming fails at the answer deadline (`connect::stream`);
/// dropping it gives it back.
pub struct PooledClient(deadpool::managed::Object<PgManager>);

impl std::ops::Deref for PooledClient {
    type Target = deadpool::managed::Object<PgManager>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for PooledClient {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        self.0.lending.give_back();
    }
}

/// The connection pool, with one bound on getting a connection: waiting for a free slot and
/// opening a new connection together take at most `acquire_timeout_ms`.
#[derive(Clone)]
pub struct PgPool {
    pool: deadpool::managed::Pool<PgManager>,
    acquire: Duration,
}

impl PgPool {
    pub fn new(connector: PgConnector, config: &DatabaseConfig) -> Result<Self, StoreError> {
        let pool = deadpool::managed::Pool::builder(PgManager { connector })
            .max_size(config.pool_size)
            .build()
            .map_err(|e| StoreError::Setup(e.to_string()))?;
        Ok(PgPool {
            pool,
            acquire: Duration::from_millis(config.acquire_timeout_ms),
        })
    }

    pub async fn get(&self) -> Result<PooledClient, StoreError> {
        match tokio::time::timeout(self.acquire, self.pool.get()).await {
            Ok(got) => {
                let got = got?;
                got.lending.lend();
                Ok(PooledClient(got))
            }
            Err(_) => Err(StoreError::AcquireTimeout(self.acquire)),
        }
    }
}

/// PostgreSQL implementation of the task store.
#[derive(Clone)]
pub struct PgTaskStore {
    pool: PgPool,
    connector: PgConnector,
}

impl PgTaskStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let connector = PgConnector::new(config)?;
        Ok(PgTaskStore {
            pool: PgPool::new(connector.clone(), config)?,
            connector,
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Opens connections outside the pool the same way (the reconciler's leader connection).
    pub fn connector(&self) -> &PgConnector {
        &self.connector
    }

    pub async fn migration_applied(&self, version: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        Ok(migrate::is_applied(&client, version).await?)
    }

    /// A round trip to the database on a pooled connection.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client.query_one("SELECT 1", &[]).await?;
        Ok(())
    }
}
