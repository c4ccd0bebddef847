//! The store port: the durable A2A identity of each task, its dispatch record and the status
//! projection used for listing, in PostgreSQL. This module holds the pool and its errors; each
//! concern of the task table has its own file.

mod feed;
mod listing;
pub mod migrate;
pub mod outbound;
pub mod retired;
mod row;
mod state;
mod tasks;

use std::time::Duration;

use deadpool_postgres::{Pool, PoolConfig, Runtime, Timeouts};
use tokio_postgres::NoTls;

use crate::config::DatabaseConfig;

pub use listing::{ListFilter, ListPosition};
pub use row::{Dispatch, Owner, TaskRow};
pub use state::{state_name, task_state};
pub use tasks::{Admission, Due, NewTask, Unresolved};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("database pool setup: {0}")]
    Setup(String),
    #[error("stored row is invalid: {0}")]
    Corrupt(String),
}

/// PostgreSQL implementation of the task store.
#[derive(Clone)]
pub struct PgTaskStore {
    pool: Pool,
}

impl PgTaskStore {
    pub fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let mut pg = deadpool_postgres::Config::new();
        pg.url = Some(config.url.expose().to_owned());
        let wait = Duration::from_millis(config.acquire_timeout_ms);
        pg.pool = Some(PoolConfig {
            max_size: config.pool_size,
            timeouts: Timeouts {
                wait: Some(wait),
                create: Some(wait),
                recycle: Some(wait),
            },
            ..PoolConfig::default()
        });
        let pool = pg
            .create_pool(Some(Runtime::Tokio1), NoTls)
            .map_err(|e| StoreError::Setup(e.to_string()))?;
        Ok(PgTaskStore { pool })
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
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
