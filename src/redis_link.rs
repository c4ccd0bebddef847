//! One multiplexed link to Redis, shared by everything the replicas coordinate through it: the
//! observer leases (`crate::lease`) and the deployment-wide limits (`crate::shared_limits`).
//! A single server (reconnecting on its own) or a Redis Cluster (following its slots on its
//! own), in clear or over TLS (`rediss://`); both connect lazily, so the gateway starts with
//! Redis down. Every call is bounded by `redis.timeout_ms`.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{Client, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, TlsCertificates, Value};

use crate::config::RedisConfig;

/// One Redis server (reconnecting on its own) or a Redis Cluster (following its slots on its
/// own). Both connect lazily.
#[derive(Clone)]
pub enum RedisLink {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisLink::Single(c) => c.req_packed_command(cmd),
            RedisLink::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisLink::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisLink::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisLink::Single(c) => c.get_db(),
            RedisLink::Cluster(c) => c.get_db(),
        }
    }
}

impl RedisLink {
    /// Connects lazily.
    pub fn connect(redis: &RedisConfig) -> Result<Self, redis::RedisError> {
        let timeout = Duration::from_millis(redis.timeout_ms);
        let certificates = match &redis.tls_ca_file {
            Some(path) => Some(TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(path).map_err(|e| {
                    redis::RedisError::from(std::io::Error::new(
                        e.kind(),
                        format!("redis.tls_ca_file {}: {e}", path.display()),
                    ))
                })?),
            }),
            None => None,
        };
        let link = if redis.cluster {
            let nodes: Vec<&str> = redis
                .url
                .expose()
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .collect();
            let mut builder = ClusterClient::builder(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .tcp_settings(no_delay());
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            // The per-connection settings override the builder's: the same limits again.
            let settings = ClusterConfig::new()
                .set_connection_timeout(timeout)
                .set_response_timeout(timeout);
            RedisLink::Cluster(
                builder
                    .build()?
                    .get_pending_async_connection_with_config(settings),
            )
        } else {
            let info = redis
                .url
                .expose()
                .into_connection_info()?
                .set_tcp_settings(no_delay());
            let client = match certificates {
                Some(certificates) => Client::build_with_tls(info, certificates)?,
                None => Client::open(info)?,
            };
            let manager_config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(500));
            RedisLink::Single(ConnectionManager::new_lazy_with_config(
                client,
                manager_config,
            )?)
        };
        Ok(link)
    }

    /// A round trip (readiness, preflight, the shared limits' probe).
    pub async fn ping(&self) -> redis::RedisResult<()> {
        let mut link = self.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut link)
            .await
            .map(|_| ())
    }
}

/// Every command is sent at once (`TCP_NODELAY`), as on every other socket of the gateway. The
/// Redis client leaves Nagle's algorithm on by default: a command written while an earlier
/// one on the same multiplexed connection is unacknowledged would wait for that
/// acknowledgement.
fn no_delay() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}
