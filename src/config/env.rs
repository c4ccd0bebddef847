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
    /// Longest one SQL statement may run, and the bound on any answer (ms); 0 turns both off.
    DATABASE_STATEMENT_TIMEOUT_MS = "Q_A2A_DATABASE_STATEMENT_TIMEOUT_MS"
        => database.statement_timeout_ms: parsed;
    /// TLS to PostgreSQL: disable or verify-full.
    DATABASE_SSLMODE = "Q_A2A_DATABASE_SSLMODE" => database.sslmode: parsed;
    /// PEM CA certificates for PostgreSQL's certificate; empty means the system's trust store.
    DATABASE_SSL_ROOT_CERT = "Q_A2A_DATABASE_SSL_ROOT_CERT" => database.ssl_root_cert: optional_path;
    /// Base URL of Q's internal API.
    UPSTREAM_URL = "Q_A2A_UPSTREAM_URL" => upstream.url: text;
    /// Service credential the gateway presents to Q.
    UPSTREAM_SERVICE_TOKEN = "Q_A2A_UPSTREAM_SERVICE_TOKEN" => upstream.service_token: secret;
    /// How long an introspection result is reused (ms).
    AUTH_CACHE_TTL_MS = "Q_A2A_AUTH_CACHE_TTL_MS" => auth.cache_ttl_ms: parsed;
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
    /// Execution deadline saved with every run (s).
    EXECUTION_TIMEOUT_SECONDS = "Q_A2A_EXECUTION_TIMEOUT_SECONDS"
        => upstream.execution_timeout_seconds: parsed;
    /// Redis holding observer leases.
    REDIS_URL = "Q_A2A_REDIS_URL" => redis.url: secret;
    /// The Redis URL names a cluster (seed nodes, comma-separated).
    REDIS_CLUSTER = "Q_A2A_REDIS_CLUSTER" => redis.cluster: flag;
    /// PEM CA certificates for a rediss:// server; empty means the system's trust store.
    REDIS_TLS_CA_FILE = "Q_A2A_REDIS_TLS_CA_FILE" => redis.tls_ca_file: optional_path;
    /// Prefix of every Redis key the gateway writes.
    REDIS_KEY_PREFIX = "Q_A2A_REDIS_KEY_PREFIX" => redis.key_prefix: text;
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
    /// Concurrent delegations per tenant, per replica.
    OUTBOUND_TENANT_DELEGATIONS = "Q_A2A_OUTBOUND_TENANT_DELEGATIONS"
        => outbound.tenant_delegations: parsed;
    /// Concurrent card discoveries per tenant, per replica.
    OUTBOUND_TENANT_DISCOVERIES = "Q_A2A_OUTBOUND_TENANT_DISCOVERIES"
        => outbound.tenant_discoveries: parsed;
    /// Age after which delegations and discovered cards are removed (s); 0 keeps them.
    OUTBOUND_RETENTION_SECONDS = "Q_A2A_OUTBOUND_RETENTION_SECONDS"
        => outbound.retention_seconds: parsed;
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
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};
    use std::path::Path;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn declared() -> BTreeSet<&'static str> {
        VARIABLES
            .iter()
            .map(|v| v.name)
            .chain(OUTSIDE_CONFIG.iter().map(|(name, _)| *name))
            .collect()
    }

    /// Names of this gateway's variables mentioned in `text` (whole words).
    fn mentions(text: &str) -> BTreeSet<&str> {
        text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .filter(|w| w.starts_with("Q_A2A_") || w.starts_with("A2A_SERVER_"))
            .collect()
    }

    #[test]
    fn names_and_keys_are_unique() {
        let mut names = BTreeSet::new();
        let mut keys = BTreeSet::new();
        for var in VARIABLES {
            assert!(names.insert(var.name), "{} declared twice", var.name);
            assert!(keys.insert(var.key), "{} overridden twice", var.key);
            assert!(
                !var.doc.is_empty() && !var.doc.contains('\n'),
                "{}",
                var.name
            );
        }
        for (name, doc) in OUTSIDE_CONFIG {
            assert!(names.insert(name), "{name} declared twice");
            assert!(!doc.is_empty());
        }
    }

    #[test]
    fn every_variable_is_in_the_readme_configuration_table() {
        let readme = include_str!("../../README.md");
        let start = readme
            .find("\n## Configuration\n")
            .expect("README has a Configuration section");
        let section = &readme[start + 1..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
        let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
        for name in declared() {
            let cell = format!("`{name}`");
            assert!(
                rows.iter().any(|row| row.contains(&cell)),
                "README.md's Configuration table does not document {name}"
            );
        }
        let stale: Vec<_> = mentions(section).difference(&declared()).copied().collect();
        assert!(
            stale.is_empty(),
            "README.md documents unknown variables {stale:?}"
        );
    }

    /// `config/gateway.toml` documents each override in brackets in the comments of the section
    /// holding its key, next to the (possibly commented-out) key itself.
    #[test]
    fn every_variable_is_in_the_documented_config_file() {
        let file = include_str!("../../config/gateway.toml");
        let mut sections: HashMap<&str, String> = HashMap::new();
        let mut current = "";
        for line in file.lines() {
            let trimmed = line.trim();
            if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                current = header;
                continue;
            }
            sections
                .entry(current)
                .or_default()
                .push_str(&format!("{trimmed}\n"));
        }
        for var in VARIABLES {
            let (section, field) = var.key.rsplit_once('.').unwrap_or(("", var.key));
            let text = sections
                .get(section)
                .unwrap_or_else(|| panic!("config/gateway.toml has no [{section}]"));
            let comments: String = text
                .lines()
                .filter(|l| l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                mentions(&comments).contains(var.name),
                "config/gateway.toml does not document {} in the comments of [{section}]",
                var.name
            );
            let assigned = text.lines().any(|l| {
                let l = l.trim_start_matches('#').trim_start();
                l.strip_prefix(field)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            });
            assert!(assigned, "config/gateway.toml has no key {}", var.key);
        }
        let stale: Vec<_> = mentions(file).difference(&declared()).copied().collect();
        assert!(
            stale.is_empty(),
            "config/gateway.toml documents unknown variables {stale:?}"
        );
    }

    fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files_under(&path, out);
            } else {
                out.push(path);
            }
        }
    }

    fn repo_files(dir: &str) -> Vec<(std::path::PathBuf, String)> {
        let mut paths = Vec::new();
        files_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut paths);
        paths
            .into_iter()
            .filter_map(|p| std::fs::read_to_string(&p).ok().map(|text| (p, text)))
            .collect()
    }

    /// The chart sets only variables the gateway reads: an env entry under a name it does not
    /// know would be ignored without a word.
    #[test]
    fn the_helm_chart_sets_only_declared_variables() {
        let declared = declared();
        let files = repo_files("helm");
        assert!(files
            .iter()
            .any(|(p, _)| p.ends_with("templates/_helpers.tpl")));
        for (path, text) in &files {
            let set = text.lines().filter_map(|l| {
                let name = l.trim().strip_prefix("- name:")?.trim();
                let env_like = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                env_like.then_some(name)
            });
            for name in set.chain(mentions(text)) {
                assert!(
                    declared.contains(name),
                    "{} uses {name}, which is not declared in src/config/env.rs",
                    path.display()
                );
            }
        }
    }

    /// Other code names a variable through its constant; messages that mention one in prose
    /// must still name a real one.
    #[test]
    fn sources_name_variables_only_through_this_table() {
        let declared = declared();
        let this = Path::new(file!());
        for (path, text) in repo_files("src") {
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with(this) {
                continue;
            }
            for name in mentions(&text) {
                assert!(
                    declared.contains(name),
                    "{} mentions {name}, which is not declared",
                    path.display()
                );
                assert!(
                    !text.contains(&format!("\"{name}\"")),
                    "{} spells {name} as a string; use crate::config::env's constant",
                    path.display()
                );
            }
        }
    }

    /// Every variable still reaches its field, with its own parsing rule.
    #[test]
    fn every_variable_applies() {
        let pairs = [
            (LISTEN, "127.0.0.1:9999"),
            (PUBLIC_BASE_URL, "https://q.example/"),
            (PROFILE_ENABLED, " YES "),
            (DATABASE_URL, "postgres://gw:pw@db/q"),
            (DATABASE_POOL_SIZE, " 7 "),
            (DATABASE_STATEMENT_TIMEOUT_MS, " 31 "),
            (DATABASE_SSLMODE, " verify-full "),
            (DATABASE_SSL_ROOT_CERT, "/ca.pem"),
            (REDIS_CLUSTER, "yes"),
            (REDIS_TLS_CA_FILE, "/redis-ca.pem"),
            (UPSTREAM_URL, "http://q:1"),
            (UPSTREAM_SERVICE_TOKEN, "svc-token"),
            (AUTH_CACHE_TTL_MS, "11"),
            (OBSERVATION_WINDOW_SECONDS, "12"),
            (HEADER_READ_TIMEOUT_SECONDS, "13"),
            (MAX_CONNECTIONS, "30"),
            (WRITE_TIMEOUT_SECONDS, "31"),
            (EXECUTION_TIMEOUT_SECONDS, "14"),
            (REDIS_URL, "redis://:pw@cache:6380"),
            (REDIS_KEY_PREFIX, " p "),
            (OBSERVERS_GLOBAL, "15"),
            (OBSERVERS_PER_TENANT, "16"),
            (OBSERVERS_PER_PRINCIPAL, "17"),
            (LEASE_TTL_MS, "18"),
            (SSE_KEEPALIVE_MS, "19"),
            (RATE_LIMIT_ENABLED, "off"),
            (RATE_LIMIT_PER_SECOND, "20"),
            (RATE_LIMIT_BURST, "21"),
            (RATE_LIMIT_CANCEL_PER_SECOND, "30"),
            (RATE_LIMIT_CANCEL_BURST, "31"),
            (CURSOR_KEY, "cursor"),
            (REPLICAS, "29"),
            (RECONCILER_ENABLED, "0"),
            (RECONCILER_INTERVAL_MS, "22"),
            (RECONCILER_GRACE_MS, "23"),
            (UPSTREAM_REQUEST_TIMEOUT_MS, "24"),
            (METRICS_LISTEN, "127.0.0.1:0"),
            (SHUTDOWN_GRACE_SECONDS, "25"),
            (PROXY_READ_TIMEOUT_SECONDS, "26"),
            (TLS_CERT_FILE, "/c.pem"),
            (TLS_KEY_FILE, ""),
            (OUTBOUND_ALLOW_HTTP, "on"),
            (OUTBOUND_ALLOW_CIDRS, " 10.0.0.0/8, ,::1 "),
            (CREDENTIAL_KEYS, "keys"),
            (CREDENTIAL_ACTIVE_KEY, "k1"),
            (OUTBOUND_REQUEST_TIMEOUT_MS, "27"),
            (OUTBOUND_DELEGATION_WAIT_MS, "28"),
            (OUTBOUND_DNS_TIMEOUT_MS, " 29 "),
            (OUTBOUND_MAX_STORED_RESULT_BYTES, "30"),
            (OUTBOUND_MAX_REGISTRATIONS, "31"),
            (OUTBOUND_TENANT_DELEGATIONS, "32"),
            (OUTBOUND_TENANT_DISCOVERIES, "33"),
            (OUTBOUND_RETENTION_SECONDS, "34"),
        ];
        let covered: BTreeSet<_> = pairs.iter().map(|(name, _)| *name).collect();
        let all: BTreeSet<_> = VARIABLES.iter().map(|v| v.name).collect();
        assert_eq!(covered, all, "this test must set every declared variable");

        let mut c = Config::default();
        c.tls.key_file = Some("/from-file.pem".into());
        c.apply_env(env(&pairs)).unwrap();
        assert_eq!(c.listen.port(), 9999);
        assert_eq!(c.public_base_url, "https://q.example/");
        assert!(c.profile_enabled);
        assert_eq!(c.database.url.expose(), "postgres://gw:pw@db/q");
        assert_eq!(c.database.pool_size, 7);
        assert_eq!(c.database.statement_timeout_ms, 31);
        assert_eq!(c.database.sslmode, crate::config::PgSslMode::VerifyFull);
        assert_eq!(c.database.ssl_root_cert, Some("/ca.pem".into()));
        assert!(c.redis.cluster);
        assert_eq!(c.redis.tls_ca_file, Some("/redis-ca.pem".into()));
        assert_eq!(c.upstream.url, "http://q:1");
        assert_eq!(c.upstream.service_token.expose(), "svc-token");
        assert_eq!(c.auth.cache_ttl_ms, 11);
        assert_eq!(c.limits.observation_window_seconds, 12);
        assert_eq!(c.limits.header_read_timeout_seconds, 13);
        assert_eq!(c.limits.max_connections, 30);
        assert_eq!(c.limits.write_timeout_seconds, 31);
        assert_eq!(c.upstream.execution_timeout_seconds, 14);
        assert_eq!(c.redis.url.expose(), "redis://:pw@cache:6380");
        assert_eq!(c.redis.key_prefix, " p ");
        assert_eq!(
            (
                c.observers.global,
                c.observers.per_tenant,
                c.observers.per_principal
            ),
            (15, 16, 17)
        );
        assert_eq!((c.observers.ttl_ms, c.observers.keepalive_ms), (18, 19));
        assert!(!c.rate_limit.enabled);
        assert_eq!((c.rate_limit.per_second, c.rate_limit.burst), (20, 21));
        assert_eq!(
            (c.rate_limit.cancel_per_second, c.rate_limit.cancel_burst),
            (30, 31)
        );
        assert_eq!(c.cursor_key.expose(), "cursor");
        assert_eq!(c.replicas, 29);
        assert!(!c.reconciler.enabled);
        assert_eq!((c.reconciler.interval_ms, c.reconciler.grace_ms), (22, 23));
        assert_eq!(c.upstream.request_timeout_ms, 24);
        assert_eq!(c.metrics_listen.port(), 0);
        assert_eq!(c.shutdown_grace_seconds, 25);
        assert_eq!(c.proxy_read_timeout_seconds, 26);
        assert_eq!(c.tls.cert_file, Some("/c.pem".into()));
        assert_eq!(c.tls.key_file, None, "empty means none, even over the file");
        assert!(c.outbound.allow_http);
        assert_eq!(c.outbound.allow_cidrs, ["10.0.0.0/8", "::1"]);
        assert_eq!(c.outbound.credential_keys.expose(), "keys");
        assert_eq!(c.outbound.credential_active_key, "k1");
        assert_eq!(c.outbound.request_timeout_ms, 27);
        assert_eq!(c.outbound.delegation_wait_ms, 28);
        assert_eq!(c.outbound.dns_timeout_ms, 29);
        assert_eq!(c.outbound.max_stored_result_bytes, 30);
        assert_eq!(c.outbound.max_registrations_per_tenant, 31);
        assert_eq!(c.outbound.tenant_delegations, 32);
        assert_eq!(c.outbound.tenant_discoveries, 33);
        assert_eq!(c.outbound.retention_seconds, 34);
    }

    #[test]
    fn unset_variables_leave_the_file_value() {
        let mut c = Config::default();
        c.redis.url = "redis://from-file:6379".into();
        c.apply_env(env(&[(LISTEN, "127.0.0.1:1")])).unwrap();
        assert_eq!(c.redis.url.expose(), "redis://from-file:6379");
        c.apply_env(env(&[(REDIS_URL, "redis://from-env:6379")]))
            .unwrap();
        assert_eq!(c.redis.url.expose(), "redis://from-env:6379");
    }

    #[test]
    fn flags_accept_the_usual_spellings_and_nothing_else() {
        for (value, expected) in [
            ("1", true),
            ("TRUE", true),
            ("yes", true),
            ("On", true),
            ("0", false),
            ("false", false),
            ("NO", false),
            ("off", false),
            ("", false),
            ("  ", false),
        ] {
            assert_eq!(
                read::flag(RATE_LIMIT_ENABLED, value.into()).unwrap(),
                expected,
                "{value:?}"
            );
        }
        assert!(read::flag(RATE_LIMIT_ENABLED, "enabled".into()).is_err());
    }

    #[test]
    fn an_invalid_value_names_its_variable() {
        let mut c = Config::default();
        let err = c
            .apply_env(env(&[(DATABASE_POOL_SIZE, "many")]))
            .unwrap_err();
        assert!(err.to_string().contains(DATABASE_POOL_SIZE), "{err}");
        let err = c.apply_env(env(&[(LISTEN, "nowhere")])).unwrap_err();
        assert!(err.to_string().contains(LISTEN), "{err}");
    }
}
