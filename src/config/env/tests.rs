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
fn every_variable_is_in_the_configuration_reference_table() {
    let reference = include_str!("../../../docs/configuration.md");
    let start = reference
        .find("\n## Environment variables\n")
        .expect("docs/configuration.md has an Environment variables section");
    let section = &reference[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
    for name in declared() {
        let cell = format!("`{name}`");
        assert!(
            rows.iter().any(|row| row.contains(&cell)),
            "docs/configuration.md's table does not document {name}"
        );
    }
    let stale: Vec<_> = mentions(section).difference(&declared()).copied().collect();
    assert!(
        stale.is_empty(),
        "docs/configuration.md documents unknown variables {stale:?}"
    );
}

/// `config/gateway.toml` documents each override in brackets in the comments of the section
/// holding its key, next to the (possibly commented-out) key itself.
#[test]
fn every_variable_is_in_the_documented_config_file() {
    let file = include_str!("../../../config/gateway.toml");
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
    // The table itself and these tests are where the names are spelt.
    let exempt = [Path::new(file!()), Path::new("src/config/env.rs")];
    for (path, text) in repo_files("src") {
        if path.extension().is_none_or(|e| e != "rs") || exempt.iter().any(|e| path.ends_with(e)) {
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
        (DATABASE_TENANT_SHARE, "0.6"),
        (DATABASE_PRINCIPAL_SHARE, " 0.3 "),
        (DATABASE_STATEMENT_TIMEOUT_MS, " 31 "),
        (DATABASE_MAX_LIFETIME_SECONDS, "41"),
        (DATABASE_UNWRITABLE_GRACE_MS, "42"),
        (REDIS_UNWRITABLE_GRACE_MS, "43"),
        (DATABASE_SSLMODE, " verify-full "),
        (DATABASE_SSL_ROOT_CERT, "/ca.pem"),
        (DATABASE_SSL_CERT, "/client.crt"),
        (DATABASE_SSL_KEY, "/client.key"),
        (REDIS_CLUSTER, "yes"),
        (REDIS_TLS_CA_FILE, "/redis-ca.pem"),
        (UPSTREAM_URL, "http://q:1"),
        (UPSTREAM_SERVICE_TOKEN, "svc-token"),
        (UPSTREAM_TLS_CA_FILE, "/q-ca.pem"),
        (AUTH_CACHE_TTL_MS, "11"),
        (AUTH_ACCESS_FEED_TRUST_MS, "900"),
        (AUTH_ACCESS_DIRECT_TTL_MS, "2500"),
        (AUTH_ACCESS_CACHE_MAX_AGE_MS, "30000"),
        (AUTH_FEED_LONG_POLL_MS, "250"),
        (AUTH_OUTAGE_READ_GRACE_SECONDS, "7"),
        (AUTH_MAX_INTROSPECTIONS_IN_FLIGHT, "9"),
        (AUTH_STRANGER_INTROSPECTIONS_IN_FLIGHT, " 4 "),
        (AUTH_KNOWN_TOKEN_SECONDS, "600"),
        (AUTH_UNKNOWN_TOKEN_RATE, "5"),
        (AUTH_UNKNOWN_TOKEN_BURST, "6"),
        (AUTH_TRUSTED_PROXIES, " 10.1.0.0/16, ,fd00::/8 "),
        (OBSERVATION_WINDOW_SECONDS, "12"),
        (HEADER_READ_TIMEOUT_SECONDS, "13"),
        (MAX_CONNECTIONS, "30"),
        (WRITE_TIMEOUT_SECONDS, "31"),
        (RESPONSE_BUFFER_BYTES, "40000000"),
        (RESPONSE_BUFFER_BYTES_PER_CONNECTION, " 4000000 "),
        (RESPONSE_BUFFER_TENANT_SHARE, "0.7"),
        (RESPONSE_BUFFER_PRINCIPAL_SHARE, " 0.35 "),
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
        (OUTBOUND_PRINCIPAL_DELEGATIONS, "31"),
        (OUTBOUND_PRINCIPAL_DISCOVERIES, " 32 "),
        (CARD_SIGNING_KEYS_DIR, "/etc/card-keys"),
        (CARD_SIGNING_ACTIVE_KEY, "2026-12"),
        (CARD_SIGNING_PUBLISH_KEYS, "true"),
        (RETENTION_TASKS_SECONDS, "34"),
        (RETENTION_DELEGATIONS_SECONDS, "35"),
        (RETENTION_DISCOVERED_CARDS_SECONDS, "36"),
        (RETENTION_BATCH_SIZE, "37"),
        (TASK_CACHE_TTL_MS, " 38 "),
        (TASK_CACHE_CAPACITY_BYTES, "39"),
        (TRACES_OTLP_ENDPOINT, "http://collector:4318/v1/traces"),
        (TRACES_SAMPLING_RATIO, " 0.25 "),
        (TRACES_SERVICE_NAME, "gw"),
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
    assert_eq!(c.database.tenant_share, 0.6);
    assert_eq!(c.database.principal_share, 0.3);
    assert_eq!(c.database.statement_timeout_ms, 31);
    assert_eq!(c.database.max_lifetime_seconds, 41);
    assert_eq!(c.database.unwritable_grace_ms, 42);
    assert_eq!(c.redis.unwritable_grace_ms, 43);
    assert_eq!(c.database.sslmode, crate::config::PgSslMode::VerifyFull);
    assert_eq!(c.database.ssl_root_cert, Some("/ca.pem".into()));
    assert_eq!(c.database.ssl_cert, Some("/client.crt".into()));
    assert_eq!(c.database.ssl_key, Some("/client.key".into()));
    assert!(c.redis.cluster);
    assert_eq!(c.redis.tls_ca_file, Some("/redis-ca.pem".into()));
    assert_eq!(c.upstream.url, "http://q:1");
    assert_eq!(c.upstream.service_token.expose(), "svc-token");
    assert_eq!(c.upstream.tls_ca_file, Some("/q-ca.pem".into()));
    assert_eq!(c.auth.cache_ttl_ms, 11);
    assert_eq!(c.auth.access_feed_trust_ms, 900);
    assert_eq!(c.auth.access_direct_ttl_ms, 2500);
    assert_eq!(c.auth.access_cache_max_age_ms, 30000);
    assert_eq!(c.auth.feed_long_poll_ms, 250);
    assert_eq!(c.auth.outage_read_grace_seconds, 7);
    assert_eq!(c.auth.max_introspections_in_flight, 9);
    assert_eq!(c.auth.stranger_introspections_in_flight, 4);
    assert_eq!(c.auth.known_token_seconds, 600);
    assert_eq!(
        (c.auth.unknown_token_rate, c.auth.unknown_token_burst),
        (5, 6)
    );
    assert_eq!(c.auth.trusted_proxies, ["10.1.0.0/16", "fd00::/8"]);
    assert_eq!(c.limits.observation_window_seconds, 12);
    assert_eq!(c.limits.header_read_timeout_seconds, 13);
    assert_eq!(c.limits.max_connections, 30);
    assert_eq!(c.limits.write_timeout_seconds, 31);
    assert_eq!(c.limits.response_buffer_bytes, 40_000_000);
    assert_eq!(c.limits.response_buffer_bytes_per_connection, 4_000_000);
    assert_eq!(c.limits.response_buffer_tenant_share, 0.7);
    assert_eq!(c.limits.response_buffer_principal_share, 0.35);
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
    assert_eq!(c.outbound.principal_delegations, 31);
    assert_eq!(c.outbound.principal_discoveries, 32);
    assert_eq!(c.card_signing.keys_dir, Some("/etc/card-keys".into()));
    assert_eq!(c.card_signing.active_key, "2026-12");
    assert!(c.card_signing.publish_keys);
    assert_eq!(
        (
            c.retention.tasks_seconds,
            c.retention.delegations_seconds,
            c.retention.discovered_cards_seconds,
            c.retention.batch_size
        ),
        (34, 35, 36, 37)
    );
    assert_eq!((c.task_cache.ttl_ms, c.task_cache.capacity_bytes), (38, 39));
    assert_eq!(c.traces.otlp_endpoint, "http://collector:4318/v1/traces");
    assert_eq!(c.traces.sampling_ratio, 0.25);
    assert_eq!(c.traces.service_name, "gw");
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
