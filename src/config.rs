//! Gateway configuration: parsed once at start from a TOML file (`config/gateway.toml` documents
//! every key), then overridden by environment variables. Nothing reads the environment later.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Environment variable that turns the hosted A2A profile on (the profile's own name for it).
pub const PROFILE_ENABLED_ENV: &str = "A2A_SERVER_PROFILE_ENABLED";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the A2A listener binds (`Q_A2A_LISTEN`).
    pub listen: SocketAddr,
    /// Public base URL clients reach the gateway at, e.g. `https://q.example`
    /// (`Q_A2A_PUBLIC_BASE_URL`). Absolute URLs in cards come only from here, never from the
    /// request's Host or forwarding headers.
    pub public_base_url: String,
    /// Whether the hosted A2A profile's routes answer at all (`A2A_SERVER_PROFILE_ENABLED`).
    /// While false they answer 404.
    pub profile_enabled: bool,
    pub database: DatabaseConfig,
    pub upstream: UpstreamConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    /// Address of the separate Prometheus `/metrics` listener (`Q_A2A_METRICS_LISTEN`); port 0
    /// picks a free port. Kept off the A2A listener so it is never exposed through the proxy.
    pub metrics_listen: SocketAddr,
    /// After SIGTERM, how long in-flight requests may take before the process exits anyway,
    /// in seconds (`Q_A2A_SHUTDOWN_GRACE_SECONDS`).
    pub shutdown_grace_seconds: u64,
    /// The read timeout of the proxy in front of the gateway, in seconds
    /// (`Q_A2A_PROXY_READ_TIMEOUT_SECONDS`). The gateway cannot see the proxy; this documents
    /// the deployed value so `preflight` can check it exceeds the observation window.
    pub proxy_read_timeout_seconds: u64,
    pub redis: RedisConfig,
    pub tls: TlsConfig,
    pub reconciler: ReconcilerConfig,
    pub observers: LeaseConfig,
    pub rate_limit: RateLimitConfig,
    pub outbound: OutboundConfig,
    /// Key that signs ListTasks page tokens (`Q_A2A_CURSOR_KEY`). Replicas must share it; when
    /// empty, a random key is drawn at start and tokens do not survive a restart. Never logged.
    pub cursor_key: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// Redis holding observer leases (`Q_A2A_REDIS_URL`).
    pub url: String,
    /// Prefix of every key the gateway writes (`Q_A2A_REDIS_KEY_PREFIX`); deployments sharing
    /// one Redis use different prefixes.
    pub key_prefix: String,
    /// Connect and response limit for one Redis call, in milliseconds.
    pub timeout_ms: u64,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            key_prefix: "q-a2a".into(),
            timeout_ms: 1_000,
        }
    }
}

/// Observer leases: concurrent observations (streams, subscriptions, blocking sends' waits).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseConfig {
    /// Across all replicas (`Q_A2A_OBSERVERS_GLOBAL`).
    pub global: u32,
    /// Per tenant (`Q_A2A_OBSERVERS_PER_TENANT`).
    pub per_tenant: u32,
    /// Per principal (`Q_A2A_OBSERVERS_PER_PRINCIPAL`).
    pub per_principal: u32,
    /// Lease lifetime without renewal, in milliseconds: how long a dead replica's observers
    /// stay counted (`Q_A2A_LEASE_TTL_MS`). Live observers renew every third of it.
    pub ttl_ms: u64,
    /// Interval of SSE keep-alive comments, in milliseconds (`Q_A2A_SSE_KEEPALIVE_MS`). Below the
    /// official Python client's 5 s default read timeout and any common proxy idle timeout.
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

/// Per-principal request rate limit, per replica (token bucket).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    /// `Q_A2A_RATE_LIMIT_ENABLED`.
    pub enabled: bool,
    /// Sustained requests per second per principal (`Q_A2A_RATE_LIMIT_PER_SECOND`).
    pub per_second: u32,
    /// Requests a principal may send at once (`Q_A2A_RATE_LIMIT_BURST`).
    pub burst: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            enabled: true,
            per_second: 50,
            burst: 100,
        }
    }
}

/// TLS on the A2A listener: both files or neither.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first (`Q_A2A_TLS_CERT_FILE`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) (`Q_A2A_TLS_KEY_FILE`).
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcilerConfig {
    /// Run the reconciler and Q change-feed follower on this replica (one leader at a time
    /// across replicas, chosen through a PostgreSQL advisory lock) (`Q_A2A_RECONCILER_ENABLED`).
    pub enabled: bool,
    /// Pause between passes, and the long-poll wait on Q's change feed, in milliseconds
    /// (`Q_A2A_RECONCILER_INTERVAL_MS`).
    pub interval_ms: u64,
    /// Age below which an unresolved dispatch is left alone, because the request that created
    /// it may still be dispatching, in milliseconds (`Q_A2A_RECONCILER_GRACE_MS`).
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

/// A configuration value that must never be printed.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct SecretString(pub String);

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
}

/// Calls to remote A2A agents (docs/outbound.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    /// Accept `http://` endpoints (`Q_A2A_OUTBOUND_ALLOW_HTTP`). Off in production: credentials
    /// and answers would travel in clear. Tests turn it on for loopback remotes.
    pub allow_http: bool,
    /// Non-public address ranges remote calls may still reach, e.g. `["127.0.0.1/32"]`
    /// (`Q_A2A_OUTBOUND_ALLOW_CIDRS`, comma-separated). Empty: public unicast only.
    pub allow_cidrs: Vec<String>,
    /// Keys sealing stored credentials, `k1:<base64 32 bytes>[,k2:...]`
    /// (`Q_A2A_CREDENTIAL_KEYS`). Set it through the environment. Never logged.
    pub credential_keys: SecretString,
    /// Key id new credentials are sealed with (`Q_A2A_CREDENTIAL_ACTIVE_KEY`); may be omitted
    /// when exactly one key is configured.
    pub credential_active_key: String,
    /// TCP connect limit for one remote call, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Total limit for one remote call, body included, in milliseconds
    /// (`Q_A2A_OUTBOUND_REQUEST_TIMEOUT_MS`).
    pub request_timeout_ms: u64,
    /// Largest remote JSON-RPC answer read, bytes; the read stops past it.
    pub max_response_bytes: usize,
    /// Largest discovered agent card kept, bytes.
    pub max_card_bytes: usize,
    /// Longest a delegation waits for the remote task to finish before answering with its
    /// current state, in milliseconds (`Q_A2A_OUTBOUND_DELEGATION_WAIT_MS`).
    pub delegation_wait_ms: u64,
    /// Interval between remote GetTask reads while a delegation waits, in milliseconds.
    pub poll_interval_ms: u64,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig {
            allow_http: false,
            allow_cidrs: Vec::new(),
            credential_keys: SecretString::default(),
            credential_active_key: String::new(),
            connect_timeout_ms: 2_000,
            request_timeout_ms: 10_000,
            max_response_bytes: 1024 * 1024,
            max_card_bytes: 64 * 1024,
            delegation_wait_ms: 30_000,
            poll_interval_ms: 250,
        }
    }
}

impl OutboundConfig {
    /// The allowlist, parsed.
    pub fn allow_nets(&self) -> Result<Vec<ipnet::IpNet>, ConfigError> {
        self.allow_cidrs
            .iter()
            .map(|c| {
                let c = c.trim();
                c.parse::<ipnet::IpNet>()
                    .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        ConfigError::Invalid(format!("outbound.allow_cidrs: invalid CIDR {c:?}"))
                    })
            })
            .collect()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// PostgreSQL connection string (`Q_A2A_DATABASE_URL`).
    pub url: String,
    /// Maximum pooled connections per replica (`Q_A2A_DATABASE_POOL_SIZE`).
    pub pool_size: usize,
    /// How long a request waits for a pooled connection, in milliseconds.
    pub acquire_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Base URL of Q's internal API (`Q_A2A_UPSTREAM_URL`).
    pub url: String,
    /// Service credential the gateway presents to Q (`Q_A2A_UPSTREAM_SERVICE_TOKEN`).
    /// Never logged.
    pub service_token: String,
    /// TCP connect limit for calls to Q, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Total time limit for one call to Q (reads and run creation), in milliseconds.
    pub request_timeout_ms: u64,
    /// Interval between run reads while a blocking SendMessage waits, in milliseconds.
    pub poll_interval_ms: u64,
    /// Execution deadline saved with every run, in seconds (the profile's one hour).
    pub execution_timeout_seconds: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// How long an introspection result is reused, in milliseconds. Short, so a revoked token
    /// stops working promptly (`Q_A2A_AUTH_CACHE_TTL_MS`).
    pub cache_ttl_ms: u64,
    /// Most tokens held in the introspection cache.
    pub cache_capacity: usize,
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
    /// Longest a blocking SendMessage observes its run, in seconds (`Q_A2A_OBSERVATION_WINDOW_SECONDS`).
    pub observation_window_seconds: u64,
    /// Longest a client may take to send a request's headers (or, on a kept-alive HTTP/1
    /// connection, to start the next request), in seconds (`Q_A2A_HEADER_READ_TIMEOUT_SECONDS`).
    /// Above the 60 s upstream idle timeout of common proxies (nginx, ingress-nginx, AWS ALB), so
    /// a proxy never reuses a connection the gateway is closing.
    pub header_read_timeout_seconds: u64,
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
            cursor_key: String::new(),
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "postgres://postgres@127.0.0.1:5432/q_a2a".into(),
            pool_size: 16,
            acquire_timeout_ms: 2_000,
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            url: "http://127.0.0.1:8090".into(),
            service_token: String::new(),
            connect_timeout_ms: 1_000,
            request_timeout_ms: 5_000,
            poll_interval_ms: 200,
            execution_timeout_seconds: 3_600,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            cache_ttl_ms: 5_000,
            cache_capacity: 10_000,
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
        }
    }
}

fn parse_bool(var: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        other => Err(ConfigError::Env {
            var,
            reason: format!("expected true or false, got {other:?}"),
        }),
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
        config.apply_env(|name| std::env::var(name).ok())?;
        config.validate()?;
        Ok(config)
    }

    /// Applies overrides from `lookup` (the environment in production, a map in tests).
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        fn parse<T: std::str::FromStr>(var: &'static str, value: String) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            value.trim().parse().map_err(|e: T::Err| ConfigError::Env {
                var,
                reason: e.to_string(),
            })
        }
        if let Some(v) = lookup("Q_A2A_LISTEN") {
            self.listen = parse("Q_A2A_LISTEN", v)?;
        }
        if let Some(v) = lookup("Q_A2A_PUBLIC_BASE_URL") {
            self.public_base_url = v;
        }
        if let Some(v) = lookup(PROFILE_ENABLED_ENV) {
            self.profile_enabled = parse_bool(PROFILE_ENABLED_ENV, &v)?;
        }
        if let Some(v) = lookup("Q_A2A_DATABASE_URL") {
            self.database.url = v;
        }
        if let Some(v) = lookup("Q_A2A_DATABASE_POOL_SIZE") {
            self.database.pool_size = parse("Q_A2A_DATABASE_POOL_SIZE", v)?;
        }
        if let Some(v) = lookup("Q_A2A_UPSTREAM_URL") {
            self.upstream.url = v;
        }
        if let Some(v) = lookup("Q_A2A_UPSTREAM_SERVICE_TOKEN") {
            self.upstream.service_token = v;
        }
        if let Some(v) = lookup("Q_A2A_AUTH_CACHE_TTL_MS") {
            self.auth.cache_ttl_ms = parse("Q_A2A_AUTH_CACHE_TTL_MS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_OBSERVATION_WINDOW_SECONDS") {
            self.limits.observation_window_seconds = parse("Q_A2A_OBSERVATION_WINDOW_SECONDS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_HEADER_READ_TIMEOUT_SECONDS") {
            self.limits.header_read_timeout_seconds =
                parse("Q_A2A_HEADER_READ_TIMEOUT_SECONDS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_EXECUTION_TIMEOUT_SECONDS") {
            self.upstream.execution_timeout_seconds = parse("Q_A2A_EXECUTION_TIMEOUT_SECONDS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_REDIS_URL") {
            self.redis.url = v;
        }
        if let Some(v) = lookup("Q_A2A_REDIS_KEY_PREFIX") {
            self.redis.key_prefix = v;
        }
        if let Some(v) = lookup("Q_A2A_OBSERVERS_GLOBAL") {
            self.observers.global = parse("Q_A2A_OBSERVERS_GLOBAL", v)?;
        }
        if let Some(v) = lookup("Q_A2A_OBSERVERS_PER_TENANT") {
            self.observers.per_tenant = parse("Q_A2A_OBSERVERS_PER_TENANT", v)?;
        }
        if let Some(v) = lookup("Q_A2A_OBSERVERS_PER_PRINCIPAL") {
            self.observers.per_principal = parse("Q_A2A_OBSERVERS_PER_PRINCIPAL", v)?;
        }
        if let Some(v) = lookup("Q_A2A_LEASE_TTL_MS") {
            self.observers.ttl_ms = parse("Q_A2A_LEASE_TTL_MS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_SSE_KEEPALIVE_MS") {
            self.observers.keepalive_ms = parse("Q_A2A_SSE_KEEPALIVE_MS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_RATE_LIMIT_ENABLED") {
            self.rate_limit.enabled = parse_bool("Q_A2A_RATE_LIMIT_ENABLED", &v)?;
        }
        if let Some(v) = lookup("Q_A2A_RATE_LIMIT_PER_SECOND") {
            self.rate_limit.per_second = parse("Q_A2A_RATE_LIMIT_PER_SECOND", v)?;
        }
        if let Some(v) = lookup("Q_A2A_RATE_LIMIT_BURST") {
            self.rate_limit.burst = parse("Q_A2A_RATE_LIMIT_BURST", v)?;
        }
        if let Some(v) = lookup("Q_A2A_CURSOR_KEY") {
            self.cursor_key = v;
        }
        if let Some(v) = lookup("Q_A2A_RECONCILER_ENABLED") {
            self.reconciler.enabled = parse_bool("Q_A2A_RECONCILER_ENABLED", &v)?;
        }
        if let Some(v) = lookup("Q_A2A_RECONCILER_INTERVAL_MS") {
            self.reconciler.interval_ms = parse("Q_A2A_RECONCILER_INTERVAL_MS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_RECONCILER_GRACE_MS") {
            self.reconciler.grace_ms = parse("Q_A2A_RECONCILER_GRACE_MS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS") {
            self.upstream.request_timeout_ms = parse("Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_METRICS_LISTEN") {
            self.metrics_listen = parse("Q_A2A_METRICS_LISTEN", v)?;
        }
        if let Some(v) = lookup("Q_A2A_SHUTDOWN_GRACE_SECONDS") {
            self.shutdown_grace_seconds = parse("Q_A2A_SHUTDOWN_GRACE_SECONDS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_PROXY_READ_TIMEOUT_SECONDS") {
            self.proxy_read_timeout_seconds = parse("Q_A2A_PROXY_READ_TIMEOUT_SECONDS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_REDIS_URL") {
            self.redis.url = v;
        }
        if let Some(v) = lookup("Q_A2A_TLS_CERT_FILE") {
            self.tls.cert_file = Some(v.into()).filter(|p: &PathBuf| !p.as_os_str().is_empty());
        }
        if let Some(v) = lookup("Q_A2A_TLS_KEY_FILE") {
            self.tls.key_file = Some(v.into()).filter(|p: &PathBuf| !p.as_os_str().is_empty());
        }
        if let Some(v) = lookup("Q_A2A_OUTBOUND_ALLOW_HTTP") {
            self.outbound.allow_http = parse_bool("Q_A2A_OUTBOUND_ALLOW_HTTP", &v)?;
        }
        if let Some(v) = lookup("Q_A2A_OUTBOUND_ALLOW_CIDRS") {
            self.outbound.allow_cidrs = v
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
        }
        if let Some(v) = lookup("Q_A2A_CREDENTIAL_KEYS") {
            self.outbound.credential_keys = SecretString(v);
        }
        if let Some(v) = lookup("Q_A2A_CREDENTIAL_ACTIVE_KEY") {
            self.outbound.credential_active_key = v;
        }
        if let Some(v) = lookup("Q_A2A_OUTBOUND_REQUEST_TIMEOUT_MS") {
            self.outbound.request_timeout_ms = parse("Q_A2A_OUTBOUND_REQUEST_TIMEOUT_MS", v)?;
        }
        if let Some(v) = lookup("Q_A2A_OUTBOUND_DELEGATION_WAIT_MS") {
            self.outbound.delegation_wait_ms = parse("Q_A2A_OUTBOUND_DELEGATION_WAIT_MS", v)?;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err(ConfigError::Invalid(
                "tls.cert_file and tls.key_file must be set together".into(),
            ));
        }
        if self.upstream.execution_timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "upstream.execution_timeout_seconds must be > 0".into(),
            ));
        }
        if self.observers.ttl_ms < 300 || self.observers.keepalive_ms == 0 {
            return Err(ConfigError::Invalid(
                "observers.ttl_ms must be >= 300 and observers.keepalive_ms > 0".into(),
            ));
        }
        if self.rate_limit.enabled
            && (self.rate_limit.per_second == 0 || self.rate_limit.burst == 0)
        {
            return Err(ConfigError::Invalid(
                "rate_limit.per_second and rate_limit.burst must be > 0 when enabled".into(),
            ));
        }
        if self.reconciler.interval_ms == 0 || self.reconciler.batch_size <= 0 {
            return Err(ConfigError::Invalid(
                "reconciler.interval_ms and reconciler.batch_size must be > 0".into(),
            ));
        }
        let base = self.public_base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ConfigError::Invalid(format!(
                "public_base_url must be an absolute http(s) URL, got {:?}",
                self.public_base_url
            )));
        }
        if self.database.pool_size == 0 {
            return Err(ConfigError::Invalid(
                "database.pool_size must be > 0".into(),
            ));
        }
        self.outbound.allow_nets()?;
        crate::outbound::credential::CredentialKeys::parse(
            &self.outbound.credential_keys.0,
            &self.outbound.credential_active_key,
        )
        .map_err(|e| ConfigError::Invalid(format!("outbound credential keys: {e}")))?;
        if self.outbound.request_timeout_ms == 0
            || self.outbound.connect_timeout_ms == 0
            || self.outbound.max_response_bytes == 0
            || self.outbound.poll_interval_ms == 0
        {
            return Err(ConfigError::Invalid(
                "outbound timeouts, poll interval and max_response_bytes must be > 0".into(),
            ));
        }
        if self.limits.observation_window_seconds == 0 {
            return Err(ConfigError::Invalid(
                "limits.observation_window_seconds must be > 0".into(),
            ));
        }
        if self.limits.header_read_timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "limits.header_read_timeout_seconds must be > 0".into(),
            ));
        }
        Ok(())
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn profile_is_off_by_default() {
        assert!(!Config::default().profile_enabled);
    }

    #[test]
    fn documented_file_parses_and_keeps_profile_off() {
        let text = include_str!("../config/gateway.toml");
        let config: Config = toml::from_str(text).expect("config/gateway.toml parses");
        assert!(!config.profile_enabled);
        assert_eq!(config.limits.max_body_bytes, 65_536);
        assert_eq!(config.limits.observation_window_seconds, 110);
        assert_eq!(config.metrics_listen.port(), 9090);
        assert_eq!(config.shutdown_grace_seconds, 30);
        assert_eq!(config.proxy_read_timeout_seconds, 130);
        assert_eq!(config.redis.url, "redis://127.0.0.1:6379");
        assert!(config.tls.cert_file.is_none());
        assert!(config.reconciler.enabled);
    }

    #[test]
    fn tls_needs_both_files() {
        let mut c = Config::default();
        c.apply_env(env(&[("Q_A2A_TLS_CERT_FILE", "/tmp/cert.pem")]))
            .unwrap();
        assert!(c.validate().is_err());
        c.apply_env(env(&[("Q_A2A_TLS_KEY_FILE", "/tmp/key.pem")]))
            .unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn environment_overrides_file() {
        let mut c = Config::default();
        c.apply_env(env(&[
            (PROFILE_ENABLED_ENV, "true"),
            ("Q_A2A_LISTEN", "127.0.0.1:9999"),
        ]))
        .unwrap();
        assert!(c.profile_enabled);
        assert_eq!(c.listen.port(), 9999);
    }

    #[test]
    fn bad_boolean_is_an_error_not_false() {
        let mut c = Config::default();
        let err = c
            .apply_env(env(&[(PROFILE_ENABLED_ENV, "maybe")]))
            .unwrap_err();
        assert!(err.to_string().contains(PROFILE_ENABLED_ENV));
    }

    #[test]
    fn outbound_environment_and_redaction() {
        let mut c = Config::default();
        c.apply_env(env(&[
            ("Q_A2A_OUTBOUND_ALLOW_HTTP", "true"),
            ("Q_A2A_OUTBOUND_ALLOW_CIDRS", "127.0.0.1/32, ::1"),
            (
                "Q_A2A_CREDENTIAL_KEYS",
                "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            ),
            ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k1"),
        ]))
        .unwrap();
        assert!(c.outbound.allow_http);
        assert_eq!(c.outbound.allow_nets().unwrap().len(), 2);
        assert!(c.validate().is_ok());
        assert!(!format!("{c:?}").contains("AAECAwQF"));
        c.outbound.allow_cidrs = vec!["127.0.0.1/99".into()];
        assert!(c.validate().is_err());
    }

    #[test]
    fn relative_public_base_is_refused() {
        let c = Config {
            public_base_url: "q.example".into(),
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }
}
