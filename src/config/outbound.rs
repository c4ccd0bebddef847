//! The `[outbound]` section: calls to remote A2A agents (policy, time and byte caps, credential
//! keys, per-tenant limits). Their retention is in `[retention]`.

use serde::Deserialize;

use super::{ConfigError, SecretString};

/// Calls to remote A2A agents (docs/outbound.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    /// Accept `http://` endpoints. Off in production: credentials and answers would travel in
    /// clear. Tests turn it on for loopback remotes.
    pub allow_http: bool,
    /// Non-public address ranges remote calls may still reach, e.g. `["127.0.0.1/32"]`. Empty:
    /// public unicast only.
    pub allow_cidrs: Vec<String>,
    /// Keys sealing stored credentials, `k1:<base64 32 bytes>[,k2:...]`. Set it through the
    /// environment.
    pub credential_keys: SecretString,
    /// Key id new credentials are sealed with; may be omitted when exactly one key is configured.
    pub credential_active_key: String,
    /// Longest the resolution of one remote name may take, every query and retry included, in
    /// milliseconds. Keep it below `connect_timeout_ms`, which bounds resolution and the TCP
    /// connect together, so a silent DNS server is reported as such.
    pub dns_timeout_ms: u64,
    /// DNS queries sent for one name and record type before giving up; `dns_timeout_ms` is
    /// spread over them.
    pub dns_attempts: usize,
    /// TCP connect limit for one remote call, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Total limit for one remote call, body included, in milliseconds.
    pub request_timeout_ms: u64,
    /// Largest remote JSON-RPC answer read, bytes; the read stops past it.
    pub max_response_bytes: usize,
    /// Largest discovered agent card kept, bytes.
    pub max_card_bytes: usize,
    /// Longest a delegation waits for the remote task to finish before answering with its
    /// current state, in milliseconds.
    pub delegation_wait_ms: u64,
    /// Interval between remote GetTask reads while a delegation waits, in milliseconds.
    pub poll_interval_ms: u64,
    /// Largest delegation result kept in the database, bytes of JSON. A larger one is stored as
    /// its task's id and status plus a `truncated` marker; the request that received it still
    /// answers with all of it.
    pub max_stored_result_bytes: usize,
    /// Most registrations one tenant may hold.
    pub max_registrations_per_tenant: i64,
    /// Delegations one tenant may have in flight at once, across the replicas (per replica
    /// while Redis is unreachable).
    pub tenant_delegations: usize,
    /// Card discoveries one tenant may have in flight at once, across the replicas.
    pub tenant_discoveries: usize,
    /// Of `tenant_delegations`, most one principal may hold at once, so one caller cannot
    /// leave its tenant's others refused. Between 1 and `tenant_delegations`.
    pub principal_delegations: usize,
    /// Of `tenant_discoveries`, most one principal may hold at once. Between 1 and
    /// `tenant_discoveries`.
    pub principal_discoveries: usize,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig {
            allow_http: false,
            allow_cidrs: Vec::new(),
            credential_keys: SecretString::default(),
            credential_active_key: String::new(),
            dns_timeout_ms: 1_500,
            dns_attempts: 2,
            connect_timeout_ms: 2_000,
            request_timeout_ms: 10_000,
            max_response_bytes: 1024 * 1024,
            max_card_bytes: 64 * 1024,
            delegation_wait_ms: 30_000,
            poll_interval_ms: 250,
            max_stored_result_bytes: 256 * 1024,
            max_registrations_per_tenant: 500,
            tenant_delegations: 16,
            tenant_discoveries: 4,
            principal_delegations: 8,
            principal_discoveries: 2,
        }
    }
}

impl OutboundConfig {
    /// The allowlist, parsed.
    pub fn allow_nets(&self) -> Result<Vec<ipnet::IpNet>, ConfigError> {
        super::parse_nets(&self.allow_cidrs, "outbound.allow_cidrs")
    }
}
