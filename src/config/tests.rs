//! Configuration: the documented file, environment overrides, validation and redaction.

use super::*;
use std::collections::HashMap;

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
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
    let text = include_str!("../../config/gateway.toml");
    let config: Config = toml::from_str(text).expect("config/gateway.toml parses");
    assert!(!config.profile_enabled);
    assert_eq!(config.limits.max_body_bytes, 65_536);
    assert_eq!(config.limits.observation_window_seconds, 110);
    assert_eq!(config.metrics_listen.port(), 9090);
    assert_eq!(config.shutdown_grace_seconds, 30);
    assert_eq!(config.proxy_read_timeout_seconds, 130);
    assert_eq!(config.redis.url.expose(), "redis://127.0.0.1:6379");
    assert!(config.tls.cert_file.is_none());
    assert!(config.reconciler.enabled);
    assert_eq!(config.upstream.idle_timeout_ms, 30_000);
}

#[test]
fn an_idle_timeout_of_zero_for_connections_to_q_is_refused() {
    let from_file: Config = toml::from_str("[upstream]\nidle_timeout_ms = 0").unwrap();
    let err = from_file.validate().unwrap_err().to_string();
    assert!(err.contains("upstream.idle_timeout_ms"), "{err}");
    let kept: Config = toml::from_str("[upstream]\nidle_timeout_ms = 5000").unwrap();
    assert!(kept.validate().is_ok());
}

#[test]
fn tls_needs_both_files() {
    let mut c = Config::default();
    c.apply_env(vars(&[(env::TLS_CERT_FILE, "/tmp/cert.pem")]))
        .unwrap();
    assert!(c.validate().is_err());
    c.apply_env(vars(&[(env::TLS_KEY_FILE, "/tmp/key.pem")]))
        .unwrap();
    assert!(c.validate().is_ok());
}

#[test]
fn environment_overrides_file() {
    let mut c = Config::default();
    c.apply_env(vars(&[
        (PROFILE_ENABLED_ENV, "true"),
        (env::LISTEN, "127.0.0.1:9999"),
    ]))
    .unwrap();
    assert!(c.profile_enabled);
    assert_eq!(c.listen.port(), 9999);
}

#[test]
fn bad_boolean_is_an_error_not_false() {
    let mut c = Config::default();
    let err = c
        .apply_env(vars(&[(PROFILE_ENABLED_ENV, "maybe")]))
        .unwrap_err();
    assert!(err.to_string().contains(PROFILE_ENABLED_ENV));
}

#[test]
fn outbound_environment_and_redaction() {
    let mut c = Config::default();
    c.apply_env(vars(&[
        (env::OUTBOUND_ALLOW_HTTP, "true"),
        (env::OUTBOUND_ALLOW_CIDRS, "127.0.0.1/32, ::1"),
        (
            env::CREDENTIAL_KEYS,
            "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        ),
        (env::CREDENTIAL_ACTIVE_KEY, "k1"),
    ]))
    .unwrap();
    assert!(c.outbound.allow_http);
    assert_eq!(c.outbound.allow_nets().unwrap().len(), 2);
    assert!(c.validate().is_ok());
    assert!(!format!("{c:?}").contains("AAECAwQF"));
    c.outbound.allow_cidrs = vec!["127.0.0.1/99".into()];
    assert!(c.validate().is_err());
}

/// Every secret, set through the file or the environment, stays out of the printed config.
#[test]
fn printed_config_holds_no_secret() {
    let file = r#"
        cursor_key = "cursor-from-file"
        [database]
        url = "postgres://gw:db-password@db/q_a2a"
        [upstream]
        service_token = "service-token-from-file"
        [redis]
        url = "redis://:redis-password@cache:6379"
        [outbound]
        credential_keys = "k1:keys-from-file"
    "#;
    let from_file: Config = toml::from_str(file).unwrap();
    let mut from_env = Config::default();
    from_env
        .apply_env(vars(&[
            (env::CURSOR_KEY, "cursor-from-env"),
            (env::DATABASE_URL, "postgres://gw:db-env-password@db/q"),
            (env::UPSTREAM_SERVICE_TOKEN, "service-token-from-env"),
            (env::REDIS_URL, "redis://user:redis-env-password@cache"),
            (env::CREDENTIAL_KEYS, "k1:keys-from-env"),
        ]))
        .unwrap();
    let secrets = ["cursor-from", "password", "service-token-from", "keys-from"];
    for config in [&from_file, &from_env] {
        for printed in [format!("{config:?}"), format!("{config:#?}")] {
            assert!(printed.contains("<redacted>"));
            for secret in secrets {
                assert!(!printed.contains(secret), "{secret} in {printed}");
            }
        }
    }
    assert_eq!(
        from_file.database.url.url_without_password(),
        "postgres://gw@db/q_a2a"
    );
}

#[test]
fn relative_public_base_is_refused() {
    let c = Config {
        public_base_url: "q.example".into(),
        ..Config::default()
    };
    assert!(c.validate().is_err());
}

/// No introspection answer may outlive the profile's 5 s revocation bound, whether it comes
/// from the file or the environment.
#[test]
fn auth_cache_ttls_above_the_revocation_bound_are_refused() {
    let mut c = Config::default();
    assert!(c.validate().is_ok());
    c.apply_env(vars(&[(env::AUTH_CACHE_TTL_MS, "5000")]))
        .unwrap();
    assert!(c.validate().is_ok());
    c.apply_env(vars(&[(env::AUTH_CACHE_TTL_MS, "5001")]))
        .unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("auth.cache_ttl_ms"), "{err}");
    let from_file: Config = toml::from_str("[auth]\nnegative_cache_ttl_ms = 6000").unwrap();
    assert!(from_file.validate().is_err());
}

#[test]
fn the_access_feed_trust_is_bounded_and_its_long_poll_below_it() {
    let mut c = Config::default();
    c.apply_env(vars(&[(env::AUTH_ACCESS_FEED_TRUST_MS, "1001")]))
        .unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("auth.access_feed_trust_ms"), "{err}");
    for toml in [
        "[auth]\naccess_feed_trust_ms = 500\nfeed_long_poll_ms = 500",
        "[auth]\nfeed_long_poll_ms = 0",
        "[auth]\naccess_direct_ttl_ms = 5001",
        "[auth]\naccess_cache_max_age_ms = 60001",
        "[auth]\naccess_direct_ttl_ms = 3000\naccess_cache_max_age_ms = 2000",
        "[auth]\nmax_introspections_in_flight = 0",
    ] {
        let from_file: Config = toml::from_str(toml).unwrap();
        assert!(from_file.validate().is_err(), "{toml}");
    }
    let ok: Config = toml::from_str(
        "[auth]\naccess_feed_trust_ms = 800\nfeed_long_poll_ms = 400\naccess_direct_ttl_ms = 5000",
    )
    .unwrap();
    assert!(ok.validate().is_ok());
}

#[test]
fn the_outage_grace_is_off_by_default_and_capped() {
    let c = Config::default();
    assert_eq!(c.auth.outage_read_grace_seconds, 0);
    assert!(c.validate().is_ok());
    let mut c = Config::default();
    c.apply_env(vars(&[(env::AUTH_OUTAGE_READ_GRACE_SECONDS, "61")]))
        .unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("auth.outage_read_grace_seconds must be <= 60"),
        "{err}"
    );
    let from_file: Config = toml::from_str("[auth]\noutage_read_grace_seconds = 60").unwrap();
    assert!(from_file.validate().is_ok());
}

/// Strangers get a share of the introspection pool below the whole, so known tokens always
/// have the rest; the per-address limit and the known window are never zero; trusted proxies
/// are CIDRs or addresses.
#[test]
fn the_stranger_share_is_below_the_pool_and_proxies_are_cidrs() {
    let c = Config::default();
    assert_eq!(
        (
            c.auth.max_introspections_in_flight,
            c.auth.stranger_introspections_in_flight,
            c.auth.known_token_seconds,
            c.auth.unknown_token_rate,
            c.auth.unknown_token_burst,
        ),
        (128, 32, 3_600, 20, 40)
    );
    assert_eq!(c.auth.trusted_proxies, ["127.0.0.0/8", "::1/128"]);
    assert!(c.validate().is_ok());
    for toml in [
        "[auth]\nstranger_introspections_in_flight = 0",
        "[auth]\nstranger_introspections_in_flight = 128",
        "[auth]\nmax_introspections_in_flight = 16",
        "[auth]\nknown_token_seconds = 0",
        "[auth]\nunknown_token_rate = 0",
        "[auth]\nunknown_token_burst = 0",
        "[auth]\ntrusted_proxies = [\"10.0.0.0/33\"]",
        "[auth]\ntrusted_proxies = [\"proxy.internal\"]",
    ] {
        let from_file: Config = toml::from_str(toml).unwrap();
        assert!(from_file.validate().is_err(), "{toml}");
    }
    let mut c = Config::default();
    c.apply_env(vars(&[
        (env::AUTH_MAX_INTROSPECTIONS_IN_FLIGHT, "16"),
        (env::AUTH_STRANGER_INTROSPECTIONS_IN_FLIGHT, "15"),
        (env::AUTH_TRUSTED_PROXIES, "10.0.0.1, fd00::/8"),
    ]))
    .unwrap();
    assert!(c.validate().is_ok());
    assert_eq!(
        c.auth.trusted_proxy_nets().unwrap(),
        [
            "10.0.0.1/32".parse::<ipnet::IpNet>().unwrap(),
            "fd00::/8".parse().unwrap()
        ]
    );
    c.apply_env(vars(&[(env::AUTH_STRANGER_INTROSPECTIONS_IN_FLIGHT, "16")]))
        .unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("auth.stranger_introspections_in_flight"),
        "{err}"
    );
}

/// A principal's share of its tenant's outbound calls in flight is at least one and at most
/// the tenant's cap.
#[test]
fn a_principals_outbound_share_is_within_its_tenants_cap() {
    let c = Config::default();
    assert_eq!(
        (
            c.outbound.tenant_delegations,
            c.outbound.principal_delegations,
            c.outbound.tenant_discoveries,
            c.outbound.principal_discoveries,
        ),
        (16, 8, 4, 2)
    );
    assert!(c.validate().is_ok());
    for toml in [
        "[outbound]\nprincipal_delegations = 0",
        "[outbound]\nprincipal_delegations = 17",
        "[outbound]\ntenant_delegations = 4",
        "[outbound]\nprincipal_discoveries = 0",
        "[outbound]\nprincipal_discoveries = 5",
        "[outbound]\ntenant_discoveries = 1",
    ] {
        let from_file: Config = toml::from_str(toml).unwrap();
        let err = from_file.validate().unwrap_err().to_string();
        assert!(err.contains("outbound.principal_"), "{toml}: {err}");
    }
    let mut c = Config::default();
    c.apply_env(vars(&[
        (env::OUTBOUND_TENANT_DELEGATIONS, "2"),
        (env::OUTBOUND_PRINCIPAL_DELEGATIONS, "2"),
        (env::OUTBOUND_TENANT_DISCOVERIES, "1"),
        (env::OUTBOUND_PRINCIPAL_DISCOVERIES, "1"),
    ]))
    .unwrap();
    assert!(c.validate().is_ok(), "a share may be the whole cap");
}

/// A share of the store pool is a part of it (0 < share <= 1) that comes to one connection at
/// least; the defaults give a tenant 8 and a principal 4 of 16.
#[test]
fn store_pool_shares_are_parts_of_at_least_one_connection() {
    let c = Config::default();
    assert!(c.validate().is_ok());
    assert_eq!(c.database.share_permits(c.database.tenant_share), 8);
    assert_eq!(c.database.share_permits(c.database.principal_share), 4);
    for (tenant, principal, pool, ok) in [
        (0.5, 0.25, 4, true),
        (0.0, 0.25, 16, false),
        (0.5, 1.5, 16, false),
        (f64::NAN, 0.25, 16, false),
        (1.0, 1.0, 1, true),
        (0.5, 0.25, 2, false),
        (0.5, 0.5, 2, true),
    ] {
        let mut c = Config::default();
        c.database.tenant_share = tenant;
        c.database.principal_share = principal;
        c.database.pool_size = pool;
        assert_eq!(c.validate().is_ok(), ok, "{tenant} {principal} of {pool}");
    }
}

#[test]
fn response_buffer_shares_are_parts_that_hold_the_largest_answer() {
    let c = Config::default();
    assert!(c.validate().is_ok());
    assert_eq!(
        (
            c.limits.response_buffer_tenant_share,
            c.limits.response_buffer_principal_share
        ),
        (0.5, 0.25)
    );
    // With the 1 MiB result bound: 4 MiB of buffers leave a principal 1 MiB at 0.25.
    for (tenant, principal, process, ok) in [
        (0.5, 0.25, 64 << 20, true),
        (0.5, 0.25, 4 << 20, true),
        (0.5, 0.2, 4 << 20, false),
        (0.0, 0.25, 64 << 20, false),
        (0.5, 1.5, 64 << 20, false),
        (f64::NAN, 0.25, 64 << 20, false),
        (1.0, 1.0, 1 << 20, true),
    ] {
        let mut c = Config::default();
        c.limits.response_buffer_tenant_share = tenant;
        c.limits.response_buffer_principal_share = principal;
        c.limits.response_buffer_bytes = process;
        c.limits.response_buffer_bytes_per_connection = 1 << 20;
        assert_eq!(
            c.validate().is_ok(),
            ok,
            "{tenant} {principal} of {process}"
        );
    }
}
