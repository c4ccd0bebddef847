//! Environment overrides, each declared once: its name, the file key it overrides, how its
//! value is read, and a one-line doc. `Config::apply_env` walks [`VARIABLES`]; other code refers
//! to a variable through its constant here, never by a string of its own.

use std::path::PathBuf;

use super::{Config, ConfigError, SecretString};

/// One environment override.
pub struct Variable {
    /// Environment variable name.
    pub name: &'static str,
    /// The file key it overrides, dotted (`database.pool_size`).
    pub key: &'static str,
    /// What it sets, in one line.
    pub doc: &'static str,
    apply: fn(&mut Config, String) -> Result<(), ConfigError>,
}

impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variable")
            .field("name", &self.name)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// How a variable's value is read; the field's type must match.
mod read {
    use super::*;

    /// Taken as is.
    pub fn text(_: &'static str, value: String) -> Result<String, ConfigError> {
        Ok(value)
    }

    /// Taken as is, and never printed.
    pub fn secret(_: &'static str, value: String) -> Result<SecretString, ConfigError> {
        Ok(SecretString::from(value))
    }

    /// Numbers and addresses, surrounding whitespace ignored.
    pub fn parsed<T: std::str::FromStr>(var: &'static str, value: String) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        value.trim().parse().map_err(|e: T::Err| ConfigError::Env {
            var,
            reason: e.to_string(),
        })
    }

    /// `1/true/yes/on` or `0/false/no/off/` (empty), any case; anything else is an error rather
    /// than a silent false.
    pub fn flag(var: &'static str, value: String) -> Result<bool, ConfigError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" | "" => Ok(false),
            other => Err(ConfigError::Env {
                var,
                reason: format!("expected true or false, got {other:?}"),
            }),
        }
    }

    /// A file path; the empty string means none, so a deployment can unset a path the file sets.
    pub fn optional_path(_: &'static str, value: String) -> Result<Option<PathBuf>, ConfigError> {
        Ok(Some(PathBuf::from(value)).filter(|p| !p.as_os_str().is_empty()))
    }

    /// Comma-separated; items trimmed, empty items dropped (so the empty string means an empty
    /// list).
    pub fn list(_: &'static str, value: String) -> Result<Vec<String>, ConfigError> {
        Ok(value
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect())
    }
}

/// Declares each variable once: a constant for its name, and its entry in [`VARIABLES`], whose
/// file key is spelled from the very field path it assigns (config fields carry their file
/// names), so the two cannot drift apart.
macro_rules! variables {
    ($(
        #[doc = $doc:literal]
        $konst:ident = $name:literal => $first:ident $(. $rest:ident)* : $read:ident;
    )*) => {
        $(
            #[doc = $doc]
            pub const $konst: &str = $name;
        )*

        /// Every environment override, in the order they are applied.
        pub static VARIABLES: &[Variable] = &[$(
            Variable {
                name: $konst,
                key: concat!(stringify!($first) $(, ".", stringify!($rest))*),
                doc: $doc.trim_ascii(),
                apply: |config, value| {
                    config.$first $(.$rest)* = read::$read($konst, value)?;
                    Ok(())
                },
            },
        )*];
    };
}

variables! {
    /// Address the A2A listener binds.
    LISTEN = "Q_A2A_LISTEN" => listen: parsed;
    /// Public base URL, the only source of absolute URLs in agent cards.
    PUBLIC_BASE_URL = "Q_A2A_PUBLIC_BASE_URL" => public_base_url: text;
    /// Serve the hosted A2A profile's routes (the profile's own name for the switch).
    PROFILE_ENABLED = "A2A_SERVER_PROFILE_ENABLED" => profile_enabled: flag;
    /// PostgreSQL connection string.
    DATABASE_URL = "Q_A2A_DATABASE_URL" => database.url: secret;
    /// Pooled PostgreSQL connections per replica.
    DATABASE_POOL_SIZE = "Q_A2A_DATABASE_POOL_SIZE" => database.pool_size: parsed;
    /// Part of the pool one tenant's reads may hold at once (0 < share <= 1).
    DATABASE_TENANT_SHARE = "Q_A2A_DATABASE_TENANT_SHARE" => database.tenant_share: parsed;
    /// Part of the pool one principal's reads may hold at once (0 < share <= 1).
    DATABASE_PRINCIPAL_SHARE = "Q_A2A_DATABASE_PRINCIPAL_SHARE"
        => database.principal_share: parsed;
    /// Longest one SQL statement may run, and the bound on any answer (ms); 0 turns both off.
    DATABASE_STATEMENT_TIMEOUT_MS = "Q_A2A_DATABASE_STATEMENT_TIMEOUT_MS"
        => database.statement_timeout_ms: parsed;
    /// Longest a pooled PostgreSQL connection is kept (s, less up to a fifth); 0: no limit.
    DATABASE_MAX_LIFETIME_SECONDS = "Q_A2A_DATABASE_MAX_LIFETIME_SECONDS"
        => database.max_lifetime_seconds: parsed;
    /// How long /readyz stays ready while PostgreSQL takes no write (ms).
    DATABASE_UNWRITABLE_GRACE_MS = "Q_A2A_DATABASE_UNWRITABLE_GRACE_MS"
        => database.unwritable_grace_ms: parsed;
    /// TLS to PostgreSQL: disable or verify-full.
    DATABASE_SSLMODE = "Q_A2A_DATABASE_SSLMODE" => database.sslmode: parsed;
    /// PEM CA certificates for PostgreSQL's certificate; empty means the system's trust store.
    DATABASE_SSL_ROOT_CERT = "Q_A2A_DATABASE_SSL_ROOT_CERT" => database.ssl_root_cert: optional_path;
    /// PEM client certificate chain presented to PostgreSQL; empty means none.
    DATABASE_SSL_CERT = "Q_A2A_DATABASE_SSL_CERT" => database.ssl_cert: optional_path;
    /// PEM private key of the PostgreSQL client certificate; empty means none.
    DATABASE_SSL_KEY = "Q_A2A_DATABASE_SSL_KEY" => database.ssl_key: optional_path;
    /// Base URL of Q's internal API.
    UPSTREAM_URL = "Q_A2A_UPSTREAM_URL" => upstream.url: text;
    /// Service credential the gateway presents to Q.
    UPSTREAM_SERVICE_TOKEN = "Q_A2A_UPSTREAM_SERVICE_TOKEN" => upstream.service_token: secret;
    /// PEM CA certificates for an https:// Q; empty means the built-in public roots.
    UPSTREAM_TLS_CA_FILE = "Q_A2A_UPSTREAM_TLS_CA_FILE" => upstream.tls_ca_file: optional_path;
    /// How long an introspection result is reused (ms).
    AUTH_CACHE_TTL_MS = "Q_A2A_AUTH_CACHE_TTL_MS" => auth.cache_ttl_ms: parsed;
    /// How long cached access answers serve after a caught-up poll of the access feed (ms).
    AUTH_ACCESS_FEED_TRUST_MS = "Q_A2A_AUTH_ACCESS_FEED_TRUST_MS"
        => auth.access_feed_trust_ms: parsed;
    /// How long an access answer fetched from Q serves without the access feed (ms).
    AUTH_ACCESS_DIRECT_TTL_MS = "Q_A2A_AUTH_ACCESS_DIRECT_TTL_MS"
        => auth.access_direct_ttl_ms: parsed;
    /// Hard time-to-live of every cached access answer (ms).
    AUTH_ACCESS_CACHE_MAX_AGE_MS = "Q_A2A_AUTH_ACCESS_CACHE_MAX_AGE_MS"
        => auth.access_cache_max_age_ms: parsed;
    /// How long one long-poll of Q's change feeds waits (ms).
    AUTH_FEED_LONG_POLL_MS = "Q_A2A_AUTH_FEED_LONG_POLL_MS" => auth.feed_long_poll_ms: parsed;
    /// Opt-in outage grace: content-free reads while Q is down (s; 0: never; at most 60).
    AUTH_OUTAGE_READ_GRACE_SECONDS = "Q_A2A_AUTH_OUTAGE_READ_GRACE_SECONDS"
        => auth.outage_read_grace_seconds: parsed;
    /// Most token introspections in flight at once.
    AUTH_MAX_INTROSPECTIONS_IN_FLIGHT = "Q_A2A_AUTH_MAX_INTROSPECTIONS_IN_FLIGHT"
        => auth.max_introspections_in_flight: parsed;
    /// Of those, most for tokens this replica has not seen active.
    AUTH_STRANGER_INTROSPECTIONS_IN_FLIGHT = "Q_A2A_AUTH_STRANGER_INTROSPECTIONS_IN_FLIGHT"
        => auth.stranger_introspections_in_flight: parsed;
    /// How long a token Q said is active stays known to the replica (s).
    AUTH_KNOWN_TOKEN_SECONDS = "Q_A2A_AUTH_KNOWN_TOKEN_SECONDS" => auth.known_token_seconds: parsed;
    /// Requests per second per client address with tokens neither cached nor known.
    AUTH_UNKNOWN_TOKEN_RATE = "Q_A2A_AUTH_UNKNOWN_TOKEN_RATE" => auth.unknown_token_rate: parsed;
    /// Such requests one client address may make at once.
    AUTH_UNKNOWN_TOKEN_BURST = "Q_A2A_AUTH_UNKNOWN_TOKEN_BURST" => auth.unknown_token_burst: parsed;
    /// Proxies whose X-Forwarded-For names the client, comma-separated CIDRs.
    AUTH_TRUSTED_PROXIES = "Q_A2A_AUTH_TRUSTED_PROXIES" => auth.trusted_proxies: list;
    /// Longest a blocking SendMessage observes its run (s).
    OBSERVATION_WINDOW_SECONDS = "Q_A2A_OBSERVATION_WINDOW_SECONDS"
        => limits.observation_window_seconds: parsed;
    /// Longest a client may take to send request headers, and idle connection limit (s).
    HEADER_READ_TIMEOUT_SECONDS = "Q_A2A_HEADER_READ_TIMEOUT_SECONDS"
        => limits.header_read_timeout_seconds: parsed;
    /// Most connections the A2A listener holds at once; more wait to be accepted.
    MAX_CONNECTIONS = "Q_A2A_MAX_CONNECTIONS" => limits.max_connections: parsed;
    /// A blocked write's time to move 64 KiB (or all it has) before the connection closes (s).
    WRITE_TIMEOUT_SECONDS = "Q_A2A_WRITE_TIMEOUT_SECONDS" => limits.write_timeout_seconds: parsed;
    /// Bytes of answers not yet taken by their clients, all connections together.
    RESPONSE_BUFFER_BYTES = "Q_A2A_RESPONSE_BUFFER_BYTES" => limits.response_buffer_bytes: parsed;
    /// Bytes of answers not yet taken by the client, per connection.
    RESPONSE_BUFFER_BYTES_PER_CONNECTION = "Q_A2A_RESPONSE_BUFFER_BYTES_PER_CONNECTION"
        => limits.response_buffer_bytes_per_connection: parsed;
    /// Part of the process's response buffer budget one tenant's answers may hold.
    RESPONSE_BUFFER_TENANT_SHARE = "Q_A2A_RESPONSE_BUFFER_TENANT_SHARE"
        => limits.response_buffer_tenant_share: parsed;
    /// Part of the process's response buffer budget one principal's answers may hold.
    RESPONSE_BUFFER_PRINCIPAL_SHARE = "Q_A2A_RESPONSE_BUFFER_PRINCIPAL_SHARE"
        => limits.response_buffer_principal_share: parsed;
    /// Execution deadline saved with every run (s).
    EXECUTION_TIMEOUT_SECONDS = "Q_A2A_EXECUTION_TIMEOUT_SECONDS"
        => upstream.execution_timeout_seconds: parsed;
    /// Redis holding observer leases and the shared limits.
    REDIS_URL = "Q_A2A_REDIS_URL" => redis.url: secret;
    /// The Redis URL names a cluster (seed nodes, comma-separated).
    REDIS_CLUSTER = "Q_A2A_REDIS_CLUSTER" => redis.cluster: flag;
    /// PEM CA certificates for a rediss:// server; empty means the system's trust store.
    REDIS_TLS_CA_FILE = "Q_A2A_REDIS_TLS_CA_FILE" => redis.tls_ca_file: optional_path;
    /// Prefix of every Redis key the gateway writes.
    REDIS_KEY_PREFIX = "Q_A2A_REDIS_KEY_PREFIX" => redis.key_prefix: text;
    /// How long /readyz stays ready while Redis takes no write (ms).
    REDIS_UNWRITABLE_GRACE_MS = "Q_A2A_REDIS_UNWRITABLE_GRACE_MS" => redis.unwritable_grace_ms: parsed;
    /// Concurrent observations across all replicas.
    OBSERVERS_GLOBAL = "Q_A2A_OBSERVERS_GLOBAL" => observers.global: parsed;
    /// Concurrent observations per tenant.
    OBSERVERS_PER_TENANT = "Q_A2A_OBSERVERS_PER_TENANT" => observers.per_tenant: parsed;
    /// Concurrent observations per principal.
    OBSERVERS_PER_PRINCIPAL = "Q_A2A_OBSERVERS_PER_PRINCIPAL" => observers.per_principal: parsed;
    /// Observer lease lifetime without renewal (ms).
    LEASE_TTL_MS = "Q_A2A_LEASE_TTL_MS" => observers.ttl_ms: parsed;
    /// Interval of SSE keep-alive comments (ms).
    SSE_KEEPALIVE_MS = "Q_A2A_SSE_KEEPALIVE_MS" => observers.keepalive_ms: parsed;
    /// Per-principal rate limit on or off.
    RATE_LIMIT_ENABLED = "Q_A2A_RATE_LIMIT_ENABLED" => rate_limit.enabled: flag;
    /// Sustained requests per second per principal.
    RATE_LIMIT_PER_SECOND = "Q_A2A_RATE_LIMIT_PER_SECOND" => rate_limit.per_second: parsed;
    /// Requests a principal may send at once.
    RATE_LIMIT_BURST = "Q_A2A_RATE_LIMIT_BURST" => rate_limit.burst: parsed;
    /// Sustained CancelTask calls per second per principal (a bucket of their own).
    RATE_LIMIT_CANCEL_PER_SECOND = "Q_A2A_RATE_LIMIT_CANCEL_PER_SECOND"
        => rate_limit.cancel_per_second: parsed;
    /// CancelTask calls a principal may send at once.
    RATE_LIMIT_CANCEL_BURST = "Q_A2A_RATE_LIMIT_CANCEL_BURST" => rate_limit.cancel_burst: parsed;
    /// Key signing ListTasks page tokens; replicas must share it.
    CURSOR_KEY = "Q_A2A_CURSOR_KEY" => cursor_key: secret;
    /// Replicas serving this deployment; above 1 a shared cursor key is required.
    REPLICAS = "Q_A2A_REPLICAS" => replicas: parsed;
    /// Take part in reconciler leader election.
    RECONCILER_ENABLED = "Q_A2A_RECONCILER_ENABLED" => reconciler.enabled: flag;
    /// Pause between reconciler passes and change-feed long-poll wait (ms).
    RECONCILER_INTERVAL_MS = "Q_A2A_RECONCILER_INTERVAL_MS" => reconciler.interval_ms: parsed;
    /// Age before the reconciler touches an unresolved dispatch (ms).
    RECONCILER_GRACE_MS = "Q_A2A_RECONCILER_GRACE_MS" => reconciler.grace_ms: parsed;
    /// Total limit for one call to Q (ms).
    UPSTREAM_REQUEST_TIMEOUT_MS = "Q_A2A_UPSTREAM_REQUEST_TIMEOUT_MS"
        => upstream.request_timeout_ms: parsed;
    /// Address of the Prometheus listener.
    METRICS_LISTEN = "Q_A2A_METRICS_LISTEN" => metrics_listen: parsed;
    /// After SIGTERM, longest wait for in-flight requests (s).
    SHUTDOWN_GRACE_SECONDS = "Q_A2A_SHUTDOWN_GRACE_SECONDS" => shutdown_grace_seconds: parsed;
    /// Read timeout of the proxy in front of the gateway, for preflight (s).
    PROXY_READ_TIMEOUT_SECONDS = "Q_A2A_PROXY_READ_TIMEOUT_SECONDS"
        => proxy_read_timeout_seconds: parsed;
    /// PEM certificate chain of the A2A listener; empty means none.
    TLS_CERT_FILE = "Q_A2A_TLS_CERT_FILE" => tls.cert_file: optional_path;
    /// PEM private key of the A2A listener; empty means none.
    TLS_KEY_FILE = "Q_A2A_TLS_KEY_FILE" => tls.key_file: optional_path;
    /// Accept `http://` remote endpoints.
    OUTBOUND_ALLOW_HTTP = "Q_A2A_OUTBOUND_ALLOW_HTTP" => outbound.allow_http: flag;
    /// Non-public address ranges remote calls may reach, comma-separated.
    OUTBOUND_ALLOW_CIDRS = "Q_A2A_OUTBOUND_ALLOW_CIDRS" => outbound.allow_cidrs: list;
    /// Keys sealing stored remote credentials.
    CREDENTIAL_KEYS = "Q_A2A_CREDENTIAL_KEYS" => outbound.credential_keys: secret;
    /// Key id new credentials are sealed with.
    CREDENTIAL_ACTIVE_KEY = "Q_A2A_CREDENTIAL_ACTIVE_KEY" => outbound.credential_active_key: text;
    /// Longest the resolution of one remote name may take (ms).
    OUTBOUND_DNS_TIMEOUT_MS = "Q_A2A_OUTBOUND_DNS_TIMEOUT_MS" => outbound.dns_timeout_ms: parsed;
    /// Total limit for one remote call (ms).
    OUTBOUND_REQUEST_TIMEOUT_MS = "Q_A2A_OUTBOUND_REQUEST_TIMEOUT_MS"
        => outbound.request_timeout_ms: parsed;
    /// Longest a delegation waits for the remote task (ms).
    OUTBOUND_DELEGATION_WAIT_MS = "Q_A2A_OUTBOUND_DELEGATION_WAIT_MS"
        => outbound.delegation_wait_ms: parsed;
    /// Largest delegation result stored (bytes).
    OUTBOUND_MAX_STORED_RESULT_BYTES = "Q_A2A_OUTBOUND_MAX_STORED_RESULT_BYTES"
        => outbound.max_stored_result_bytes: parsed;
    /// Most registrations per tenant.
    OUTBOUND_MAX_REGISTRATIONS = "Q_A2A_OUTBOUND_MAX_REGISTRATIONS"
        => outbound.max_registrations_per_tenant: parsed;
    /// Concurrent delegations per tenant, across replicas.
    OUTBOUND_TENANT_DELEGATIONS = "Q_A2A_OUTBOUND_TENANT_DELEGATIONS"
        => outbound.tenant_delegations: parsed;
    /// Concurrent card discoveries per tenant, across replicas.
    OUTBOUND_TENANT_DISCOVERIES = "Q_A2A_OUTBOUND_TENANT_DISCOVERIES"
        => outbound.tenant_discoveries: parsed;
    /// Of those delegations, most one principal may hold at once.
    OUTBOUND_PRINCIPAL_DELEGATIONS = "Q_A2A_OUTBOUND_PRINCIPAL_DELEGATIONS"
        => outbound.principal_delegations: parsed;
    /// Of those card discoveries, most one principal may hold at once.
    OUTBOUND_PRINCIPAL_DISCOVERIES = "Q_A2A_OUTBOUND_PRINCIPAL_DISCOVERIES"
        => outbound.principal_discoveries: parsed;
    /// Directory of the keys signing served agent cards, one `<kid>.pem`/`.jwk` file each.
    CARD_SIGNING_KEYS_DIR = "Q_A2A_CARD_SIGNING_KEYS_DIR" => card_signing.keys_dir: optional_path;
    /// Key id that signs served agent cards.
    CARD_SIGNING_ACTIVE_KEY = "Q_A2A_CARD_SIGNING_ACTIVE_KEY" => card_signing.active_key: text;
    /// Serve the card signing public keys unauthenticated (JWK Set).
    CARD_SIGNING_PUBLISH_KEYS = "Q_A2A_CARD_SIGNING_PUBLISH_KEYS" => card_signing.publish_keys: flag;
    /// Age since a task became terminal after which it is deleted (s); 0 keeps them.
    RETENTION_TASKS_SECONDS = "Q_A2A_RETENTION_TASKS_SECONDS" => retention.tasks_seconds: parsed;
    /// Age since a delegation last changed after which it is deleted (s); 0 keeps them.
    RETENTION_DELEGATIONS_SECONDS = "Q_A2A_RETENTION_DELEGATIONS_SECONDS"
        => retention.delegations_seconds: parsed;
    /// Age of a discovered card after which it is cleared (s); 0 keeps them.
    RETENTION_DISCOVERED_CARDS_SECONDS = "Q_A2A_RETENTION_DISCOVERED_CARDS_SECONDS"
        => retention.discovered_cards_seconds: parsed;
    /// OTLP/HTTP endpoint traces are exported to; empty turns export off.
    TRACES_OTLP_ENDPOINT = "Q_A2A_TRACES_OTLP_ENDPOINT" => traces.otlp_endpoint: text;
    /// Share of new traces recorded (0.0 to 1.0).
    TRACES_SAMPLING_RATIO = "Q_A2A_TRACES_SAMPLING_RATIO" => traces.sampling_ratio: parsed;
    /// `service.name` of the exported spans.
    TRACES_SERVICE_NAME = "Q_A2A_TRACES_SERVICE_NAME" => traces.service_name: text;
    /// Rows deleted per retention statement.
    RETENTION_BATCH_SIZE = "Q_A2A_RETENTION_BATCH_SIZE" => retention.batch_size: parsed;
    /// Longest a finished task kept in process answers GetTask after the read that filled it (ms).
    TASK_CACHE_TTL_MS = "Q_A2A_TASK_CACHE_TTL_MS" => task_cache.ttl_ms: parsed;
    /// Bytes of finished tasks kept in process per replica; 0 keeps none.
    TASK_CACHE_CAPACITY_BYTES = "Q_A2A_TASK_CACHE_CAPACITY_BYTES"
        => task_cache.capacity_bytes: parsed;
}

/// Path of the configuration file; read by the command line, since it picks the file.
pub const CONFIG_FILE: &str = "Q_A2A_CONFIG";
/// Log filter, under the log subscriber's conventional name.
pub const LOG_FILTER: &str = "RUST_LOG";

/// Variables read outside `Config` (name, doc): they choose the file and the log filter, so no
/// file key can stand for them.
pub static OUTSIDE_CONFIG: &[(&str, &str)] = &[
    (CONFIG_FILE, "Path of the TOML configuration file."),
    (LOG_FILTER, "Log filter."),
];

/// Applies every variable `lookup` knows, in table order; stops at the first invalid value.
pub(super) fn apply(
    config: &mut Config,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    for var in VARIABLES {
        if let Some(value) = lookup(var.name) {
            (var.apply)(config, value)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
