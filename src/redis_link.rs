//! One multiplexed link to Redis, shared by everything the replicas coordinate through it: the
//! observer leases (`crate::lease`) and the deployment-wide limits (`crate::shared_limits`).
//! A single server (reconnecting on its own) or a Redis Cluster (following its slots on its
//! own), in clear or over TLS (`rediss://`); both connect lazily, so the gateway starts with
//! Redis down. Every call is bounded by `redis.timeout_ms`.
//!
//! **A server that stopped being the primary.** Behind a managed endpoint or a Sentinel-fed
//! Service, the address stays while the server behind it changes: the connection made to the
//! old primary, now demoted, answers every write `READONLY`; a server restarting with its data
//! answers `LOADING`; a replica cut from its primary `MASTERDOWN`. The client library keeps
//! such a connection (the server answered, the socket is fine), so on any of the three the
//! single server's connection is replaced by a new one, made through the same address (at
//! most once per connection, however many calls saw the answer;
//! `a2a_redis_reconnects_total{reason}`). The call that saw it runs once more, on the new
//! connection: the server refused it without writing anything, and the address may lead to
//! the promoted server by now (a connection to the old primary idle since the address moved
//! would otherwise fail the first call of every replica). When that fails too, the call fails
//! as Redis unavailable: leases fail closed (503) and the shared limits fall back to
//! per-replica limits until a writable Redis answers. A Redis Cluster already follows
//! `READONLY` and `MOVED` itself.
//!
//! Whether Redis takes writes is kept in [`RedisLink::writable`] (`/readyz`,
//! `a2a_redis_writable`): every refused or failed call says no, every write a caller saw
//! taken says yes ([`RedisLink::wrote`]), and [`RedisLink::check_writable`] asks directly.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{Client, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, TlsCertificates, Value};

use crate::config::RedisConfig;
use crate::writable::Writable;

/// One Redis server or a Redis Cluster, and what the replica last saw of its writes. Both
/// connect lazily.
#[derive(Clone)]
pub struct RedisLink {
    connection: Connection,
    writable: Arc<Writable>,
    /// The key [`RedisLink::check_writable`] sets: in the leases' hash slot, so on a cluster it
    /// asks the node the leases live on.
    probe_key: Arc<str>,
}

#[derive(Clone)]
enum Connection {
    /// Reconnecting on its own after a broken socket; replaced on `READONLY`, `LOADING` and
    /// `MASTERDOWN` (`Single::replace`).
    Single(Arc<Single>),
    /// Following its slots on its own.
    Cluster(ClusterConnection),
}

/// A single server's connection, and what is needed to make a new one.
struct Single {
    client: Client,
    config: redis::aio::ConnectionManagerConfig,
    /// The connection in use and its generation: a replacement happens once per generation.
    current: RwLock<(u64, ConnectionManager)>,
}

/// Server answers that mean the connection is on a server that cannot serve it now, and that a
/// new connection through the same address may reach one that can.
const NOT_SERVING: &[&str] = &["READONLY", "LOADING", "MASTERDOWN"];

impl Single {
    fn current(&self) -> (u64, ConnectionManager) {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        (current.0, current.1.clone())
    }

    /// Replaces the connection of `generation` with a new one (lazy: it connects on first use).
    fn replace(&self, generation: u64, reason: &'static str) {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.0 != generation {
            return;
        }
        match ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone()) {
            Ok(manager) => {
                *current = (generation + 1, manager);
                crate::metrics::redis_reconnect(reason);
                tracing::warn!(
                    reason,
                    "Redis answered {reason}: the server behind the address is not serving writes; reconnecting"
                );
            }
            Err(e) => tracing::warn!(error = %e, "Redis: a new connection could not be set up"),
        }
    }
}

/// The code of a server's error answer (`READONLY`), wherever the client library put it: a
/// command's answer is `Ok` with the error as its value, a pipeline's holds one per command.
trait ServerCode {
    fn server_code(&self) -> Option<&str>;
}

impl ServerCode for Value {
    fn server_code(&self) -> Option<&str> {
        match self {
            Value::ServerError(e) => Some(e.code()),
            _ => None,
        }
    }
}

impl ServerCode for Vec<Value> {
    fn server_code(&self) -> Option<&str> {
        self.iter().find_map(Value::server_code)
    }
}

impl RedisLink {
    /// What a call's outcome says: a refused or failed call makes Redis not writable, and an
    /// answer from a server not serving replaces a single server's connection.
    /// Whether the call should run once more on a new connection: it was answered by a server
    /// not serving (and so was not carried out), on a single server's connection.
    fn observe<T: ServerCode>(
        &self,
        generation: Option<u64>,
        result: &redis::RedisResult<T>,
    ) -> bool {
        let (code, server_down) = match result {
            Ok(value) => (value.server_code(), false),
            Err(e) => (
                e.code(),
                e.is_io_error() || e.is_timeout() || e.is_connection_dropped(),
            ),
        };
        // Another error (a script's bad argument) says nothing of the server.
        let not_serving = code.and_then(|c| NOT_SERVING.iter().find(|r| **r == c).copied());
        if server_down || not_serving.is_some() {
            self.writable.refused();
        }
        if let (Connection::Single(single), Some(generation), Some(reason)) =
            (&self.connection, generation, not_serving)
        {
            single.replace(generation, reason);
            return true;
        }
        false
    }
}

impl ConnectionLike for RedisLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match &mut self.connection {
                Connection::Single(single) => {
                    let single = Arc::clone(single);
                    let (generation, mut manager) = single.current();
                    let result = manager.req_packed_command(cmd).await;
                    if !self.observe(Some(generation), &result) {
                        return result;
                    }
                    let (generation, mut manager) = single.current();
                    let again = manager.req_packed_command(cmd).await;
                    self.observe(Some(generation), &again);
                    again
                }
                Connection::Cluster(c) => {
                    let result = c.req_packed_command(cmd).await;
                    let _ = self.observe(None, &result);
                    result
                }
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match &mut self.connection {
                Connection::Single(single) => {
                    let single = Arc::clone(single);
                    let (generation, mut manager) = single.current();
                    let result = manager.req_packed_commands(pipeline, offset, count).await;
                    if !self.observe(Some(generation), &result) {
                        return result;
                    }
                    let (generation, mut manager) = single.current();
                    let again = manager.req_packed_commands(pipeline, offset, count).await;
                    self.observe(Some(generation), &again);
                    again
                }
                Connection::Cluster(c) => {
                    let result = c.req_packed_commands(pipeline, offset, count).await;
                    let _ = self.observe(None, &result);
                    result
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &self.connection {
            Connection::Single(single) => single.current().1.get_db(),
            Connection::Cluster(c) => c.get_db(),
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
            let nodes = redis.servers();
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
            Connection::Cluster(
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
            let manager =
                ConnectionManager::new_lazy_with_config(client.clone(), manager_config.clone())?;
            Connection::Single(Arc::new(Single {
                client,
                config: manager_config,
                current: RwLock::new((0, manager)),
            }))
        };
        Ok(RedisLink {
            connection: link,
            writable: Arc::new(Writable::new(crate::metrics::REDIS_WRITABLE)),
            probe_key: format!("{{{}:leases}}:writable", redis.key_prefix).into(),
        })
    }

    /// Whether Redis takes writes, as the calls on this link last showed.
    pub fn writable(&self) -> &Arc<Writable> {
        &self.writable
    }

    /// A caller saw a write taken.
    pub fn wrote(&self) {
        self.writable.confirmed();
    }

    /// Whether Redis takes a write now: a `SET` of the probe key, kept 10 s (readiness, the
    /// shared limits' return, `preflight`).
    pub async fn check_writable(&self) -> redis::RedisResult<()> {
        let mut link = self.clone();
        redis::cmd("SET")
            .arg(&*self.probe_key)
            .arg(1)
            .arg("PX")
            .arg(10_000)
            .query_async::<()>(&mut link)
            .await?;
        self.wrote();
        Ok(())
    }
}

/// Every command is sent at once (`TCP_NODELAY`), as on every other socket of the gateway. The
/// Redis client leaves Nagle's algorithm on by default: a command written while an earlier
/// one on the same multiplexed connection is unacknowledged would wait for that
/// acknowledgement.
fn no_delay() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}
