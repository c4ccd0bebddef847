//! The `[auth]` settings: the introspection cache and pool, the access cache and feed, the
//! outage grace, and who may send unknown tokens how fast.

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// How long Q's answer for an active token is reused, in milliseconds; at most
    /// [`MAX_AUTH_CACHE_TTL_MS`], so a revoked token stops working within the profile's bound.
    pub cache_ttl_ms: u64,
    /// Most active tokens held in the introspection cache.
    pub cache_capacity: u64,
    /// How long Q's "inactive" (revoked, expired or unknown token) is reused, in milliseconds;
    /// at most [`MAX_AUTH_CACHE_TTL_MS`]. Kept apart from active tokens, so a flood of bad
    /// tokens asks Q once per token per TTL and cannot evict good entries.
    pub negative_cache_ttl_ms: u64,
    /// Most inactive tokens held.
    pub negative_cache_capacity: u64,
    /// How long after a caught-up poll of Q's access change feed was *sent* the cached agent
    /// access and evidence grants serve, in milliseconds; at most [`MAX_ACCESS_FEED_TRUST_MS`],
    /// the freshness bound while the feed is caught up (`crate::access`).
    pub access_feed_trust_ms: u64,
    /// While the access feed does not vouch for them, how long an answer fetched from Q
    /// serves, in milliseconds (from when its request was sent); at most
    /// [`MAX_AUTH_CACHE_TTL_MS`], the freshness bound without the feed.
    pub access_direct_ttl_ms: u64,
    /// Hard time-to-live of every cached access answer, whatever the feed says, in
    /// milliseconds; at most [`MAX_ACCESS_CACHE_AGE_MS`].
    pub access_cache_max_age_ms: u64,
    /// How long one long-poll of Q's change feeds waits, in milliseconds; below
    /// `access_feed_trust_ms`, so a healthy feed renews its vouching before it lapses.
    pub feed_long_poll_ms: u64,
    /// Most entries (of typical size; larger ones count for more) of each access cache
    /// (agent access, evidence grants).
    pub access_cache_capacity: u64,
    /// Opt-in outage grace, in seconds, at most [`MAX_OUTAGE_READ_GRACE_SECONDS`]: while Q is
    /// down for this replica and was last heard from within it, GetTask and ListTasks answer
    /// content-free receipts to a caller known from before the outage. 0 (the default) fails
    /// every read closed. A deviation from the profile an operator accepts on purpose.
    pub outage_read_grace_seconds: u64,
    /// Most token introspections in flight at once; past it a request is answered 503 at once.
    pub max_introspections_in_flight: usize,
    /// Of those, most for tokens this replica has not seen active (strangers); below
    /// `max_introspections_in_flight`, so the rest of the pool is always left to known tokens
    /// (`crate::auth::pool`).
    pub stranger_introspections_in_flight: usize,
    /// How long after Q last said a token is active this replica counts it as known, in
    /// seconds (its sha256 only, at most [`crate::auth::KNOWN_TOKENS_CAPACITY`] of them).
    pub known_token_seconds: u64,
    /// Requests per second one client address may make with tokens that are neither cached
    /// nor known, sustained; past it HTTP 429 `too_many_unknown_tokens`.
    pub unknown_token_rate: u32,
    /// Such requests one client address may make at once.
    pub unknown_token_burst: u32,
    /// Peers whose `X-Forwarded-For` names the client (CIDRs or addresses): the client is then
    /// the right-most address in it that is not one of them. Every other peer is the client.
    pub trusted_proxies: Vec<String>,
}

impl AuthConfig {
    /// `trusted_proxies`, parsed (an address alone is its own /32 or /128).
    pub fn trusted_proxy_nets(&self) -> Result<Vec<ipnet::IpNet>, ConfigError> {
        parse_nets(&self.trusted_proxies, "auth.trusted_proxies")
    }
}

/// A setting's list of CIDRs, parsed (an address alone is its own /32 or /128); `field` names
/// the setting in the error.
pub(crate) fn parse_nets(values: &[String], field: &str) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    values
        .iter()
        .map(|c| {
            let c = c.trim();
            c.parse::<ipnet::IpNet>()
                .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| ConfigError::Invalid(format!("{field}: invalid CIDR {c:?}")))
        })
        .collect()
}

/// The profile's identity revocation bound: no introspection answer is reused longer, and the
/// bound of access answers without the access feed.
pub const MAX_AUTH_CACHE_TTL_MS: u64 = 5_000;

/// The freshness bound while the access feed is caught up.
pub const MAX_ACCESS_FEED_TRUST_MS: u64 = 1_000;

/// The hard time-to-live of any cached access answer.
pub const MAX_ACCESS_CACHE_AGE_MS: u64 = 60_000;

/// The longest outage grace an operator may opt in to.
pub const MAX_OUTAGE_READ_GRACE_SECONDS: u64 = 60;

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            cache_ttl_ms: 5_000,
            cache_capacity: 10_000,
            negative_cache_ttl_ms: 1_000,
            negative_cache_capacity: 10_000,
            access_feed_trust_ms: 1_000,
            access_direct_ttl_ms: 1_000,
            access_cache_max_age_ms: 60_000,
            feed_long_poll_ms: 300,
            access_cache_capacity: 100_000,
            outage_read_grace_seconds: 0,
            max_introspections_in_flight: 128,
            stranger_introspections_in_flight: 32,
            known_token_seconds: 3_600,
            unknown_token_rate: 20,
            unknown_token_burst: 40,
            trusted_proxies: vec!["127.0.0.0/8".into(), "::1/128".into()],
        }
    }
}
