//! Gateway configuration: parsed once at start from a TOML file (`config/gateway.toml` documents
//! every key), then overridden by environment variables, each declared once in [`env`]. Nothing
//! reads the environment later.

mod auth;
mod card_signing;
pub mod env;
mod outbound;
mod retention;
mod secret;
mod task_cache;
mod traces;
mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub(crate) use auth::parse_nets;
pub use auth::{
    AuthConfig, MAX_ACCESS_CACHE_AGE_MS, MAX_ACCESS_FEED_TRUST_MS, MAX_AUTH_CACHE_TTL_MS,
    MAX_OUTAGE_READ_GRACE_SECONDS,
};
pub use card_signing::CardSigningConfig;
pub use env::PROFILE_ENABLED as PROFILE_ENABLED_ENV;
pub use outbound::OutboundConfig;
pub use retention::{RetentionConfig, MIN_IDENTITY_RETENTION_SECONDS};
pub use secret::SecretString;
pub use task_cache::{TaskCacheConfig, MAX_TASK_CACHE_TTL_MS};
pub use traces::TracesConfig;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the A2A listener binds.
    pub listen: SocketAddr,
    /// Public base URL clients reach the gateway at, e.g. `https://q.example`. Absolute URLs in
    /// cards come only from here, never from the request's Host or forwarding headers.
    pub public_base_url: String,
    /// Whether the hosted A2A profile's routes answer at all. While false they answer 404.
    pub profile_enabled: bool,
    pub database: DatabaseConfig,
    pub upstream: UpstreamConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    /// Address of the separate Prometheus `/metrics` listener; port 0 picks a free port. Kept
    /// off the A2A listener so it is never exposed through the proxy.
    pub metrics_listen: SocketAddr,
    /// After SIGTERM, how long in-flight requests may take before the process exits anyway,
    /// in seconds.
    pub shutdown_grace_seconds: u64,
    /// The read timeout of the proxy in front of the gateway, in seconds. The gateway cannot see
    /// the proxy; this documents the deployed value so `preflight` can check it exceeds the
    /// observation window.
    pub proxy_read_timeout_seconds: u64,
    pub redis: RedisConfig,
    pub tls: TlsConfig,
    pub reconciler: ReconcilerConfig,
    pub observers: LeaseConfig,
    pub rate_limit: RateLimitConfig,
    pub outbound: OutboundConfig,
    pub card_signing: CardSigningConfig,
    pub retention: RetentionConfig,
    pub task_cache: TaskCacheConfig,
    pub traces: TracesConfig,
    /// Key that signs ListTasks page tokens. Replicas must share it; when empty, a random key is
    /// drawn at start and tokens do not survive a restart.
    pub cursor_key: SecretString,
    /// How many replicas serve this deployment (the Helm chart passes its replica count).
    /// With more than one, an empty `cursor_key` is refused: a page token signed by one
    /// replica would fail on the next.
    pub replicas: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// Redis holding observer leases; may carry a password. `rediss://` is TLS. With `cluster`,
    /// one or more seed nodes of the cluster, comma-separated.
    pub url: SecretString,
    /// The URL names a Redis Cluster. Every lease key carries the same hash tag, so the
    /// leases of a deployment live in one slot and the acquire script stays atomic.
    pub cluster: bool,
    /// PEM file of the CA certificates trusted for a `rediss://` server; none: the system's
    /// trust store.
    pub tls_ca_file: Option<PathBuf>,
    /// Prefix of every key the gateway writes; deployments sharing one Redis use different
    /// prefixes.
    pub key_prefix: String,
    /// Connect and response limit for one Redis call, in milliseconds.
    pub timeout_ms: u64,
    /// How long `/readyz` stays ready after Redis last took a write while none is taken
    /// (Redis unreachable, or a replica or loading server behind its address), in
    /// milliseconds: a failover shorter than this keeps replicas in their Service.
    pub unwritable_grace_ms: u64,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            tls_ca_file: None,
            key_prefix: "q-a2a".into(),
            timeout_ms: 1_000,
            unwritable_grace_ms: 5_000,
        }
    }
}

impl RedisConfig {
    /// The servers `url` names, comma-separated (one unless `cluster`), blanks dropped.
    pub fn servers(&self) -> Vec<&str> {
        self.url
            .expose()
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect()
    }
}

/// Observer leases: concurrent observations (streams, subscriptions, blocking sends' waits).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseConfig {
    /// Across all replicas.
    pub global: u32,
    /// Per tenant.
    pub per_tenant: u32,
    /// Per principal.
    pub per_principal: u32,
    /// Lease lifetime without renewal, in milliseconds: how long a dead replica's observers
    /// stay counted. Live observers renew every third of it.
    pub ttl_ms: u64,
    /// Interval of SSE keep-alive comments, in milliseconds. Below the official Python client's
    /// 5 s default read timeout and any common proxy idle timeout.
    pub keepalive_ms: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            global: 256,
            per_tenant: 16,
            per_principal: 4,
            ttl_ms: 15_000,
            keepalive_ms: 3_000,
        }
    }
}

/// Per-principal request rate limit for the deployment (token buckets in Redis, one per
/// admission class: `crate::http::authorize`, `crate::http::rate_limit`); per replica while
/// Redis is unreachable.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    /// Whether requests are limited at all.
    pub enabled: bool,
    /// Sustained requests per second per principal (every route and method but CancelTask).
    pub per_second: u32,
    /// Requests a principal may send at once.
    pub burst: u32,
    /// CancelTask's own bucket, apart so that observation attempts never spend it: sustained
    /// cancellations per second per principal.
    pub cancel_per_second: u32,
    /// Cancellations a principal may send at once.
    pub cancel_burst: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            enabled: true,
            per_second: 50,
            burst: 100,
            cancel_per_second: 10,
            cancel_burst: 20,
        }
    }
}

/// TLS on the A2A listener: both files or neither.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcilerConfig {
    /// Run the reconciler and Q change-feed follower on this replica (one leader at a time
    /// across replicas, chosen through a PostgreSQL advisory lock).
    pub enabled: bool,
    /// Pause between passes, and the long-poll wait on Q's change feed, in milliseconds.
    pub interval_ms: u64,
    /// Age below which an unresolved dispatch is left alone, because the request that created
    /// it may still be dispatching, in milliseconds.
    pub grace_ms: u64,
    /// Most tasks handled per pass.
    pub batch_size: i64,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            enabled: true,
            interval_ms: 1_000,
            grace_ms: 6_000,
            batch_size: 100,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// PostgreSQL connection string; may carry a password.
    pub url: SecretString,
    /// Maximum pooled connections per replica.
    pub pool_size: usize,
    /// How long a request waits for a pooled connection, a new connection's set-up included,
    /// in milliseconds.
    pub acquire_timeout_ms: u64,
    /// Part of `pool_size` (rounded down) one tenant's reads may hold at once on a replica
    /// (ListTasks, GetTask and SubscribeToTask reads that go to the store); 0 < share <= 1.
    pub tenant_share: f64,
    /// Part of `pool_size` (rounded down) one principal's reads may hold at once on a replica;
    /// 0 < share <= 1.
    pub principal_share: f64,
    /// Longest one SQL statement may run, in milliseconds: the `statement_timeout` of every
    /// session the gateway opens. It also bounds the wait for any answer: a connection that has
    /// sent something and heard nothing for this long plus one second is closed, so a server or
    /// proxy that accepts and never answers costs a request this long, not forever. 0 turns both
    /// off (`migrate` always runs without them).
    pub statement_timeout_ms: u64,
    /// TCP keep-alive on every connection: seconds idle before the first probe.
    pub keepalive_idle_seconds: u64,
    /// Seconds between keep-alive probes.
    pub keepalive_interval_seconds: u64,
    /// Unanswered probes after which the kernel drops the connection.
    pub keepalive_retries: u32,
    /// Longest a pooled connection is kept, in seconds, less up to a fifth drawn per
    /// connection: a pool follows a DNS name or Service that now points at a promoted server.
    /// 0: no limit.
    pub max_lifetime_seconds: u64,
    /// How long `/readyz` stays ready after PostgreSQL last took a write while no server
    /// takes one (no primary reachable, or only a standby), in milliseconds: a failover
    /// shorter than this keeps replicas in their Service, a longer one takes them out.
    pub unwritable_grace_ms: u64,
    /// `disable` (plain TCP) or `verify-full` (TLS required; the server's certificate must chain
    /// to `ssl_root_cert` and name the host of the URL).
    pub sslmode: PgSslMode,
    /// PEM file of the CA certificates trusted for the server's certificate; none: the system's
    /// trust store. Only with `sslmode = "verify-full"`.
    pub ssl_root_cert: Option<PathBuf>,
    /// PEM certificate chain the gateway presents to PostgreSQL (libpq's `sslcert`), for
    /// servers that authenticate clients by certificate; with `ssl_key`, only with
    /// `sslmode = "verify-full"`.
    pub ssl_cert: Option<PathBuf>,
    /// PEM private key of `ssl_cert` (libpq's `sslkey`).
    pub ssl_key: Option<PathBuf>,
}

/// TLS to PostgreSQL, named after libpq's `sslmode` values. There is no mode that encrypts
/// without checking the certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PgSslMode {
    #[default]
    Disable,
    VerifyFull,
}

impl std::str::FromStr for PgSslMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disable" => Ok(PgSslMode::Disable),
            "verify-full" => Ok(PgSslMode::VerifyFull),
            other => Err(format!("expected disable or verify-full, got {other:?}")),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Base URL of Q's internal API.
    pub url: String,
    /// Service credential the gateway presents to Q.
    pub service_token: SecretString,
    /// TCP connect limit for calls to Q, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Total time limit for one call to Q (reads and run creation), in milliseconds.
    pub request_timeout_ms: u64,
    /// How long a connection to Q is kept open with no call on it, in milliseconds. The pool
    /// looks for expired connections once per this interval, so one closes between this long
    /// and twice this long after its last call (and is never reused past this long). Keep it
    /// below the idle timeout of anything between the gateway and Q.
    pub idle_timeout_ms: u64,
    /// No longer used (blocking sends and streams follow Q's run feed); still accepted so
    /// existing configuration files load.
    pub poll_interval_ms: u64,
    /// Execution deadline saved with every run, in seconds (the profile's one hour).
    pub execution_timeout_seconds: u64,
    /// PEM CA certificates an `https://` Q's certificate must chain to (an in-cluster CA);
    /// none: the public web PKI roots built into the gateway.
    pub tls_ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Most text parts in one message.
    pub max_parts: usize,
    /// Most characters (Unicode scalar values) of text in one message, all parts together.
    pub max_text_chars: usize,
    /// Largest JSON result of GetTask/ListTasks, bytes.
    pub max_result_bytes: usize,
    /// Longest a blocking SendMessage observes its run, in seconds.
    pub observation_window_seconds: u64,
    /// Longest a client may take to send a request's headers (or, on a kept-alive connection,
    /// HTTP/1 or HTTP/2, to start the next request), in seconds. Above the 60 s upstream idle timeout
    /// of common proxies (nginx, ingress-nginx, AWS ALB), so a proxy never reuses a connection
    /// the gateway is closing.
    pub header_read_timeout_seconds: u64,
    /// Most connections the A2A listener holds at once; beyond it new connections wait in the
    /// kernel's accept queue, costing the process nothing.
    pub max_connections: usize,
    /// Once a write to a client blocks (a client that stops reading its answer), the time it
    /// has to take everything pending or at least 64 KiB, in seconds; then the connection is
    /// closed. The same limit holds for an answer waiting for its HTTP/2 stream's
    /// flow-control window: an answer whose next part the client does not take within it
    /// closes its connection.
    pub write_timeout_seconds: u64,
    /// Bytes of answers handed to the connections and not yet taken by their clients, all
    /// connections together; past it a new answer larger than 16 KiB is refused with HTTP 503
    /// and `Retry-After` (`crate::http::response_budget`).
    pub response_buffer_bytes: usize,
    /// The same bound for one connection (all its HTTP/2 streams together).
    pub response_buffer_bytes_per_connection: usize,
    /// Part of `response_buffer_bytes` one tenant's answers may hold at once; 0 < share <= 1.
    pub response_buffer_tenant_share: f64,
    /// Part of `response_buffer_bytes` one principal's answers may hold at once.
    pub response_buffer_principal_share: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".parse().expect("static address"),
            public_base_url: "http://127.0.0.1:8080".into(),
            profile_enabled: false,
            database: DatabaseConfig::default(),
            upstream: UpstreamConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            metrics_listen: "127.0.0.1:9090".parse().expect("static address"),
            shutdown_grace_seconds: 30,
            proxy_read_timeout_seconds: 130,
            redis: RedisConfig::default(),
            tls: TlsConfig::default(),
            reconciler: ReconcilerConfig::default(),
            observers: LeaseConfig::default(),
            rate_limit: RateLimitConfig::default(),
            outbound: OutboundConfig::default(),
            card_signing: CardSigningConfig::default(),
            retention: RetentionConfig::default(),
            task_cache: TaskCacheConfig::default(),
            traces: TracesConfig::default(),
            cursor_key: SecretString::default(),
            replicas: 1,
        }
    }
}

impl DatabaseConfig {
    /// The connections a share of the pool comes to: `pool_size × share`, rounded down.
    pub fn share_permits(&self, share: f64) -> usize {
        (self.pool_size as f64 * share).floor() as usize
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "postgres://postgres@127.0.0.1:5432/q_a2a".into(),
            pool_size: 16,
            acquire_timeout_ms: 2_000,
            tenant_share: 0.5,
            principal_share: 0.25,
            statement_timeout_ms: 5_000,
            keepalive_idle_seconds: 30,
            keepalive_interval_seconds: 10,
            keepalive_retries: 3,
            max_lifetime_seconds: 300,
            unwritable_grace_ms: 5_000,
            sslmode: PgSslMode::Disable,
            ssl_root_cert: None,
            ssl_cert: None,
            ssl_key: None,
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            url: "http://127.0.0.1:8090".into(),
            service_token: SecretString::default(),
            connect_timeout_ms: 1_000,
            request_timeout_ms: 5_000,
            idle_timeout_ms: 30_000,
            poll_interval_ms: 200,
            execution_timeout_seconds: 3_600,
            tls_ca_file: None,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body_bytes: 64 * 1024,
            max_parts: 16,
            max_text_chars: 32_000,
            max_result_bytes: 1024 * 1024,
            observation_window_seconds: 110,
            header_read_timeout_seconds: 75,
            max_connections: 1024,
            write_timeout_seconds: 30,
            response_buffer_bytes: 64 * 1024 * 1024,
            response_buffer_bytes_per_connection: 8 * 1024 * 1024,
            response_buffer_tenant_share: 0.5,
            response_buffer_principal_share: 0.25,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("invalid value for {var}: {reason}")]
    Env { var: &'static str, reason: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Reads the file (if given), then applies the process environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with(path, |name| std::env::var(name).ok())
    }

    /// [`Config::load`] with the overrides taken from `lookup` instead of the process
    /// environment (a gateway started inside a test process must not read or race on it).
    pub fn load_with(
        path: Option<&Path>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                toml::from_str(&text).map_err(|source| ConfigError::Parse {
                    path: path.display().to_string(),
                    source,
                })?
            }
            None => Config::default(),
        };
        config.apply_env(lookup)?;
        config.validate()?;
        Ok(config)
    }

    /// Applies overrides from `lookup` (the environment in production, a map in tests).
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        env::apply(self, lookup)
    }

    /// `public_base_url` without a trailing slash.
    pub fn public_base(&self) -> &str {
        self.public_base_url.trim_end_matches('/')
    }

    pub fn observation_window(&self) -> Duration {
        Duration::from_secs(self.limits.observation_window_seconds)
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }
}

#[cfg(test)]
mod tests;
