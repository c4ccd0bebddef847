//! The store port: the durable A2A identity of each task, its dispatch record and the status
//! projection used for listing, in PostgreSQL. This module holds the pool and its errors; each
//! concern of the task table has its own file.

mod artifacts;
mod connect;
mod due;
pub mod fault;
mod feed;
mod listing;
pub mod migrate;
pub mod outbound;
mod pool;
mod retention;
pub mod retired;
mod row;
pub mod share;
mod state;
mod tasks;
pub mod tenant;

use std::time::Duration;

use crate::config::DatabaseConfig;
use pool::on_connection;

pub use artifacts::StoredArtifact;
pub use connect::{read_only, ConnectError, PgConnector, ANSWER_SLACK};
pub use due::{Due, Unresolved};
pub use feed::{FeedBatch, RunChange};
pub use listing::{statements_for_plan_checks, ListFilter, ListPosition, Page};
pub use pool::{Call, PgConnection, PgManager, PgPool, PooledClient};
pub use row::{Dispatch, Owner, TaskRow};
pub use state::{state_name, task_state};
pub use tasks::{Admission, NewTask, Tombstone};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database pool: {0}")]
    Pool(#[from] deadpool::managed::PoolError<ConnectError>),
    #[error("no database connection within {0:?}")]
    AcquireTimeout(Duration),
    /// A caller's read found its principal's or tenant's share of the pool in use for the
    /// whole acquire window ([`share`]).
    #[error("the {scope} share of the database pool stayed in use for {window:?}", scope = .0.label(), window = .1)]
    ShareExhausted(share::Scope, Duration),
    #[error("database: {}", fault::describe(.0))]
    Db(#[from] tokio_postgres::Error),
    /// The server a pooled connection is on answered `transaction_read_only = on`.
    #[error("database: the server accepts no writes (a standby, or in read-only mode)")]
    ReadOnly,
    #[error("database pool setup: {0}")]
    Setup(String),
    #[error("stored row is invalid: {0}")]
    Corrupt(String),
    /// The task was deleted (retention, offboarding) between reading and writing it: it is
    /// answered like an unknown task.
    #[error("task no longer exists")]
    TaskGone,
}

/// PostgreSQL implementation of the task store.
#[derive(Clone)]
pub struct PgTaskStore {
    pool: PgPool,
    connector: PgConnector,
    shares: share::ReadShares,
}

impl PgTaskStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let connector = PgConnector::new(config)?;
        Ok(PgTaskStore {
            pool: PgPool::new(connector.clone(), config)?,
            connector,
            shares: share::ReadShares::new(
                config.share_permits(config.tenant_share),
                config.share_permits(config.principal_share),
                Duration::from_millis(config.acquire_timeout_ms),
            ),
        })
    }

    /// The permits a read on behalf of `owner` holds while its store calls run: its
    /// principal's and its tenant's share of the pool ([`share`]).
    pub async fn read_share(&self, owner: &Owner) -> Result<share::ReadPermit, StoreError> {
        self.shares.take(owner).await
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Opens connections outside the pool the same way (the reconciler's leader connection).
    pub fn connector(&self) -> &PgConnector {
        &self.connector
    }

    pub async fn migration_applied(&self, version: &str) -> Result<bool, StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            Ok(migrate::is_applied(client, version).await?)
        })
    }

    /// Whether the server a pooled connection is on takes writes now (readiness,
    /// `preflight`): [`StoreError::ReadOnly`] if not, and that connection, with every one made
    /// before it, leaves the pool.
    pub async fn check_writable(&self) -> Result<(), StoreError> {
        on_connection!(self.pool, Call::Read, |client| {
            if connect::read_only(client).await? {
                return Err(StoreError::ReadOnly);
            }
            Ok(())
        })?;
        self.pool.writable().confirmed();
        Ok(())
    }

    /// Whether the store takes writes, as its connections and calls last showed.
    pub fn writable(&self) -> &std::sync::Arc<crate::writable::Writable> {
        self.pool.writable()
    }
}
