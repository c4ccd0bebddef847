//! The checks a configuration must pass before the gateway starts: settings that only work
//! together, and values that parse but cannot work.

use super::{
    Config, ConfigError, PgSslMode, MAX_ACCESS_CACHE_AGE_MS, MAX_ACCESS_FEED_TRUST_MS,
    MAX_AUTH_CACHE_TTL_MS, MAX_OUTAGE_READ_GRACE_SECONDS,
};

/// Highest accepted `limits.max_connections`.
const MAX_CONNECTIONS_CAP: usize = 1 << 20;

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.replicas == 0 {
            return Err(ConfigError::Invalid("replicas must be >= 1".into()));
        }
        if self.replicas > 1 && self.cursor_key.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "replicas = {} needs a shared cursor_key (Q_A2A_CURSOR_KEY): a ListTasks page token \
                 signed by one replica would be refused by the others",
                self.replicas
            )));
        }
        if self.card_signing.keys_dir.is_none()
            && (self.card_signing.publish_keys || !self.card_signing.active_key.is_empty())
        {
            return Err(ConfigError::Invalid(
                "card_signing.publish_keys and card_signing.active_key need card_signing.keys_dir \
                 (Q_A2A_CARD_SIGNING_KEYS_DIR): there are no card signing keys"
                    .into(),
            ));
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err(ConfigError::Invalid(
                "tls.cert_file and tls.key_file must be set together".into(),
            ));
        }
        if self.auth.cache_ttl_ms > MAX_AUTH_CACHE_TTL_MS
            || self.auth.negative_cache_ttl_ms > MAX_AUTH_CACHE_TTL_MS
        {
            return Err(ConfigError::Invalid(format!(
                "auth.cache_ttl_ms and auth.negative_cache_ttl_ms must be <= \
                 {MAX_AUTH_CACHE_TTL_MS} (the identity revocation bound), got {} and {}",
                self.auth.cache_ttl_ms, self.auth.negative_cache_ttl_ms
            )));
        }
        let auth = &self.auth;
        if auth.access_feed_trust_ms > MAX_ACCESS_FEED_TRUST_MS
            || auth.feed_long_poll_ms == 0
            || auth.feed_long_poll_ms >= auth.access_feed_trust_ms
        {
            return Err(ConfigError::Invalid(format!(
                "auth.access_feed_trust_ms must be <= {MAX_ACCESS_FEED_TRUST_MS} (the freshness \
                 bound while the access feed is caught up) and auth.feed_long_poll_ms between 1 \
                 and below it, got {} and {}",
                auth.access_feed_trust_ms, auth.feed_long_poll_ms
            )));
        }
        if auth.access_direct_ttl_ms > MAX_AUTH_CACHE_TTL_MS
            || auth.access_cache_max_age_ms > MAX_ACCESS_CACHE_AGE_MS
            || auth.access_cache_max_age_ms < auth.access_direct_ttl_ms
        {
            return Err(ConfigError::Invalid(format!(
                "auth.access_direct_ttl_ms must be <= {MAX_AUTH_CACHE_TTL_MS} (the freshness \
                 bound without the access feed) and auth.access_cache_max_age_ms between it and \
                 {MAX_ACCESS_CACHE_AGE_MS}, got {} and {}",
                auth.access_direct_ttl_ms, auth.access_cache_max_age_ms
            )));
        }
        if auth.outage_read_grace_seconds > MAX_OUTAGE_READ_GRACE_SECONDS {
            return Err(ConfigError::Invalid(format!(
                "auth.outage_read_grace_seconds must be <= {MAX_OUTAGE_READ_GRACE_SECONDS}, got {} \
                 (Q_A2A_AUTH_OUTAGE_READ_GRACE_SECONDS)",
                auth.outage_read_grace_seconds
            )));
        }
        if auth.max_introspections_in_flight == 0 {
            return Err(ConfigError::Invalid(
                "auth.max_introspections_in_flight must be > 0".into(),
            ));
        }
        if auth.stranger_introspections_in_flight == 0
            || auth.stranger_introspections_in_flight >= auth.max_introspections_in_flight
        {
            return Err(ConfigError::Invalid(format!(
                "auth.stranger_introspections_in_flight must be between 1 and below \
                 auth.max_introspections_in_flight (the rest is left to known tokens), got {} \
                 and {}",
                auth.stranger_introspections_in_flight, auth.max_introspections_in_flight
            )));
        }
        if auth.known_token_seconds == 0
            || auth.unknown_token_rate == 0
            || auth.unknown_token_burst == 0
        {
            return Err(ConfigError::Invalid(format!(
                "auth.known_token_seconds, auth.unknown_token_rate and auth.unknown_token_burst \
                 must be > 0, got {}, {} and {}",
                auth.known_token_seconds, auth.unknown_token_rate, auth.unknown_token_burst
            )));
        }
        auth.trusted_proxy_nets()?;
        if self.upstream.idle_timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "upstream.idle_timeout_ms must be > 0".into(),
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
        let rate = &self.rate_limit;
        if rate.enabled
            && [
                rate.per_second,
                rate.burst,
                rate.cancel_per_second,
                rate.cancel_burst,
            ]
            .contains(&0)
        {
            return Err(ConfigError::Invalid(
                "rate_limit.per_second, burst, cancel_per_second and cancel_burst must be > 0 when enabled".into(),
            ));
        }
        if self.reconciler.interval_ms == 0 || self.reconciler.batch_size <= 0 {
            return Err(ConfigError::Invalid(
                "reconciler.interval_ms and reconciler.batch_size must be > 0".into(),
            ));
        }
        if self.upstream.tls_ca_file.is_some() && !self.upstream.url.starts_with("https://") {
            return Err(ConfigError::Invalid(
                "upstream.tls_ca_file needs an https:// upstream.url".into(),
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
        for (name, share) in [
            ("tenant_share", self.database.tenant_share),
            ("principal_share", self.database.principal_share),
        ] {
            if !(share > 0.0 && share <= 1.0) {
                return Err(ConfigError::Invalid(format!(
                    "database.{name} must be > 0 and <= 1, got {share}"
                )));
            }
            if self.database.share_permits(share) == 0 {
                return Err(ConfigError::Invalid(format!(
                    "database.{name} ({share}) of database.pool_size ({}) is less than one \
                     connection: raise one of them",
                    self.database.pool_size
                )));
            }
        }
        if self.database.keepalive_idle_seconds == 0
            || self.database.keepalive_interval_seconds == 0
            || self.database.keepalive_retries == 0
        {
            return Err(ConfigError::Invalid(
                "database.keepalive_idle_seconds, keepalive_interval_seconds and keepalive_retries \
                 must be > 0"
                    .into(),
            ));
        }
        if self.database.ssl_root_cert.is_some() && self.database.sslmode != PgSslMode::VerifyFull {
            return Err(ConfigError::Invalid(
                "database.ssl_root_cert needs database.sslmode = \"verify-full\"".into(),
            ));
        }
        if self.database.ssl_cert.is_some() != self.database.ssl_key.is_some() {
            return Err(ConfigError::Invalid(
                "database.ssl_cert and database.ssl_key: both or neither".into(),
            ));
        }
        if self.database.ssl_cert.is_some() && self.database.sslmode != PgSslMode::VerifyFull {
            return Err(ConfigError::Invalid(
                "database.ssl_cert needs database.sslmode = \"verify-full\"".into(),
            ));
        }
        let redis_urls = self.redis.servers();
        if redis_urls.len() != 1 && !self.redis.cluster {
            return Err(ConfigError::Invalid(
                "redis.url names one server unless redis.cluster = true".into(),
            ));
        }
        if self.redis.tls_ca_file.is_some()
            && !redis_urls.iter().all(|u| u.starts_with("rediss://"))
        {
            return Err(ConfigError::Invalid(
                "redis.tls_ca_file needs rediss:// URLs in redis.url".into(),
            ));
        }
        self.outbound.allow_nets()?;
        self.retention.validate()?;
        self.task_cache.validate()?;
        self.traces.validate()?;
        if self.outbound.request_timeout_ms == 0
            || self.outbound.connect_timeout_ms == 0
            || self.outbound.dns_timeout_ms == 0
            || self.outbound.dns_attempts == 0
            || self.outbound.max_response_bytes == 0
            || self.outbound.poll_interval_ms == 0
        {
            return Err(ConfigError::Invalid(
                "outbound timeouts, dns_attempts, poll interval and max_response_bytes must be > 0"
                    .into(),
            ));
        }
        if self.outbound.max_registrations_per_tenant <= 0
            || self.outbound.tenant_delegations == 0
            || self.outbound.tenant_discoveries == 0
        {
            return Err(ConfigError::Invalid(
                "outbound max_registrations_per_tenant, tenant_delegations and tenant_discoveries must be > 0"
                    .into(),
            ));
        }
        for (share, name, cap, cap_name) in [
            (
                self.outbound.principal_delegations,
                "principal_delegations",
                self.outbound.tenant_delegations,
                "tenant_delegations",
            ),
            (
                self.outbound.principal_discoveries,
                "principal_discoveries",
                self.outbound.tenant_discoveries,
                "tenant_discoveries",
            ),
        ] {
            if share == 0 || share > cap {
                return Err(ConfigError::Invalid(format!(
                    "outbound.{name} must be between 1 and outbound.{cap_name} (a principal's \
                     share of its tenant's), got {share} and {cap}"
                )));
            }
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
        if self.limits.write_timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "limits.write_timeout_seconds must be > 0".into(),
            ));
        }
        // A connection must be able to hold the largest answer, and the process one connection.
        let limits = &self.limits;
        if limits.response_buffer_bytes_per_connection < limits.max_result_bytes
            || limits.response_buffer_bytes < limits.response_buffer_bytes_per_connection
        {
            return Err(ConfigError::Invalid(format!(
                "limits: max_result_bytes ({}) <= response_buffer_bytes_per_connection ({}) <= response_buffer_bytes ({}) must hold",
                limits.max_result_bytes,
                limits.response_buffer_bytes_per_connection,
                limits.response_buffer_bytes
            )));
        }
        // A principal's and a tenant's share must hold the largest answer too.
        for (name, share) in [
            (
                "response_buffer_tenant_share",
                limits.response_buffer_tenant_share,
            ),
            (
                "response_buffer_principal_share",
                limits.response_buffer_principal_share,
            ),
        ] {
            if !(share > 0.0 && share <= 1.0) {
                return Err(ConfigError::Invalid(format!(
                    "limits.{name} must be > 0 and <= 1, got {share}"
                )));
            }
            if ((limits.response_buffer_bytes as f64 * share) as usize) < limits.max_result_bytes {
                return Err(ConfigError::Invalid(format!(
                    "limits.{name} ({share}) of limits.response_buffer_bytes ({}) is less than \
                     max_result_bytes ({}): raise one of them",
                    limits.response_buffer_bytes, limits.max_result_bytes
                )));
            }
        }
        // The cap is a semaphore's permit count, taken all at once at shutdown (a u32).
        if !(1..=MAX_CONNECTIONS_CAP).contains(&self.limits.max_connections) {
            return Err(ConfigError::Invalid(format!(
                "limits.max_connections must be between 1 and {MAX_CONNECTIONS_CAP}"
            )));
        }
        Ok(())
    }
}
