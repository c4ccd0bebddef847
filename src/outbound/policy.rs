//! The one outbound policy: which URLs and addresses a remote call may reach.
//!
//! Every remote call (registration checks, card discovery, delegation) goes through it:
//!
//! - **URL**: `https` only (`http` only when `outbound.allow_http`), no userinfo, no fragment,
//!   a host, at most [`MAX_URL_LEN`] bytes. URLs are parsed by the `url` crate, which
//!   normalises IPv4 literals the WHATWG way (`2130706433`, `0177.0.0.1`, `0x7f.0.0.1` and
//!   `127.1` all become `127.0.0.1`), so the check below sees the address that would be dialled.
//! - **Address**: only public unicast addresses, unless an operator allowlist
//!   (`outbound.allow_cidrs`) names them. Refused: loopback, RFC 1918, link-local (including
//!   the 169.254.169.254 metadata service), CGNAT, unspecified, broadcast, multicast,
//!   documentation, benchmarking, reserved, IPv6 ULA, link-local, site-local, 6to4, Teredo,
//!   and anything outside 2000::/3. IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible and NAT64
//!   (`64:ff9b::/96`) addresses are judged by the IPv4 address they carry.
//! - **At connect time**: IP-literal hosts are checked before the request is built; names are
//!   resolved by [`PolicyResolver`], which hands the connector only addresses that pass. The
//!   connector never resolves on its own, so a name that resolves differently between a check
//!   and the connection (DNS rebinding) cannot slip through.
//! - **Resolution** is asynchronous (hickory, configured from `/etc/resolv.conf` and
//!   `/etc/hosts`) and bounded by `outbound.dns_timeout_ms`: a DNS server that never answers
//!   costs one timer, not a thread of the blocking pool the rest of the gateway shares.
//!
//! Every refusal carries a short machine-readable `reason` that is logged as a structured field.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::NetError;
use hickory_resolver::TokioResolver;
use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// Longest registered endpoint URL, bytes.
pub const MAX_URL_LEN: usize = 2048;

/// Why the policy refused a URL or an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("outbound policy refused {target}: {reason}")]
pub struct PolicyRefusal {
    /// Short machine-readable cause, e.g. `loopback`, `private`, `scheme`.
    pub reason: &'static str,
    /// What was refused (a URL without query, a host or an address); never a credential.
    pub target: String,
}

impl PolicyRefusal {
    fn new(reason: &'static str, target: impl Into<String>) -> Self {
        PolicyRefusal {
            reason,
            target: target.into(),
        }
    }
}

/// The policy's configuration, shared by every outbound call.
#[derive(Debug, Clone, Default)]
pub struct OutboundPolicy {
    allow_http: bool,
    allow: Vec<IpNet>,
}

impl OutboundPolicy {
    pub fn new(allow_http: bool, allow: Vec<IpNet>) -> Self {
        OutboundPolicy { allow_http, allow }
    }

    /// Parses and checks a remote endpoint URL (the registration's, or one derived from it).
    pub fn check_url(&self, raw: &str) -> Result<Url, PolicyRefusal> {
        if raw.len() > MAX_URL_LEN {
            return Err(PolicyRefusal::new("url_too_long", "url"));
        }
        let url = Url::parse(raw).map_err(|_| PolicyRefusal::new("url_invalid", "url"))?;
        let shown = redacted(&url);
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => return Err(PolicyRefusal::new("insecure_scheme", shown)),
            _ => return Err(PolicyRefusal::new("scheme", shown)),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(PolicyRefusal::new("userinfo", shown));
        }
        if url.fragment().is_some() {
            return Err(PolicyRefusal::new("fragment", shown));
        }
        match url.host() {
            None => return Err(PolicyRefusal::new("no_host", shown)),
            Some(url::Host::Ipv4(ip)) => self.check_ip(IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.check_ip(IpAddr::V6(ip))?,
            Some(url::Host::Domain(name)) => {
                // A name that is really a number the URL parser did not turn into an address
                // is refused rather than handed to a resolver that might.
                if name.parse::<IpAddr>().is_ok() || name.is_empty() {
                    return Err(PolicyRefusal::new("host_invalid", shown));
                }
            }
        }
        Ok(url)
    }

    /// Whether a connection to `ip` is allowed.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), PolicyRefusal> {
        let canonical = canonical(ip);
        if self.allow.iter().any(|net| net.contains(&canonical)) {
            return Ok(());
        }
        match classify(ip) {
            None => Ok(()),
            Some(reason) => Err(PolicyRefusal::new(reason, ip.to_string())),
        }
    }
}

/// `scheme://host:port/path` of a URL, without query or userinfo: safe to log.
pub fn redacted(url: &Url) -> String {
    format!(
        "{}://{}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port().map(|p| format!(":{p}")).unwrap_or_default()
    ) + url.path()
}

/// The origin `scheme://host:port` (explicit port, always) a credential is bound to.
pub fn origin(url: &Url) -> String {
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
        Some(h) => h.to_string(),
        None => String::new(),
    };
    format!(
        "{}://{}:{}",
        url.scheme(),
        host,
        url.port_or_known_default().unwrap_or(0)
    )
}

/// An IPv6 address that carries an IPv4 address (mapped, compatible) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// The IPv4 address inside `::ffff:a.b.c.d`, `::a.b.c.d` or `64:ff9b::a.b.c.d`.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        // IPv4-compatible (deprecated), but `::` and `::1` are themselves.
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        _ => None,
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(Ipv6Addr::from(net)) & mask)
}

/// The reason an address is not public unicast, or `None` when it is.
pub fn classify(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return classify_v4(v4).or(
                    // Only the well-known NAT64 prefix and mapped forms reach a public IPv4
                    // address; the deprecated compatible form is never dialled.
                    if v6.segments()[5] == 0xffff || v6.segments()[0] == 0x64 {
                        None
                    } else {
                        Some("reserved")
                    },
                );
            }
            classify_v6(v6)
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const TABLE: &[([u8; 4], u8, &str)] = &[
        ([0, 0, 0, 0], 8, "unspecified"),
        ([10, 0, 0, 0], 8, "private"),
        ([100, 64, 0, 0], 10, "cgnat"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([169, 254, 0, 0], 16, "link_local"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 0, 0, 0], 24, "reserved"),
        ([192, 0, 2, 0], 24, "documentation"),
        ([192, 88, 99, 0], 24, "reserved"),
        ([192, 168, 0, 0], 16, "private"),
        ([198, 18, 0, 0], 15, "benchmarking"),
        ([198, 51, 100, 0], 24, "documentation"),
        ([203, 0, 113, 0], 24, "documentation"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([255, 255, 255, 255], 32, "broadcast"),
        ([240, 0, 0, 0], 4, "reserved"),
    ];
    TABLE
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
}

fn classify_v6(ip: Ipv6Addr) -> Option<&'static str> {
    const TABLE: &[([u16; 8], u8, &str)] = &[
        ([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified"),
        ([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback"),
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "nat64_local"),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard"),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "teredo"),
        ([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48, "benchmarking"),
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "reserved"),
        ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4"),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique_local"),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link_local"),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site_local"),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
    ];
    if let Some((_, _, reason)) = TABLE
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
    {
        return Some(reason);
    }
    // Global unicast lives in 2000::/3; everything else is reserved.
    if !in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        return Some("reserved");
    }
    None
}

/// How outbound names are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnsSettings {
    /// Longest the resolution of one name may take, every query and retry included.
    pub timeout: Duration,
    /// Queries sent for one record type before giving up.
    pub attempts: usize,
}

/// A name that could not be resolved; nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot resolve {host}: {detail}")]
pub struct ResolveFailure {
    /// `dns_timeout` (no answer within `outbound.dns_timeout_ms`) or `dns` (the name does not
    /// exist, has no address, or the resolver failed otherwise).
    pub reason: &'static str,
    pub host: String,
    pub detail: String,
}

/// DNS resolution for outbound calls: resolves asynchronously, then hands the connector only
/// the addresses the policy allows. When none is left the connection fails with the policy's
/// reason, logged here.
#[derive(Clone)]
pub struct PolicyResolver {
    policy: Arc<OutboundPolicy>,
    dns: TokioResolver,
    timeout: Duration,
}

impl std::fmt::Debug for PolicyResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyResolver")
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl PolicyResolver {
    /// Name servers, search list and `ndots` from the system's `/etc/resolv.conf`; names in
    /// `/etc/hosts` (and `localhost`) answer without a query.
    pub fn system(policy: Arc<OutboundPolicy>, settings: DnsSettings) -> Result<Self, NetError> {
        let (config, options) = match hickory_resolver::system_conf::read_system_conf() {
            Ok(system) => system,
            Err(e) => {
                // Outbound calls are optional: start anyway, with names answered only from
                // /etc/hosts, and say why every other name fails.
                tracing::warn!(
                    error = %e,
                    "no usable /etc/resolv.conf: outbound names resolve from /etc/hosts only"
                );
                let none = ResolverConfig::from_parts(None, Vec::new(), Vec::new());
                (none, ResolverOpts::default())
            }
        };
        Self::build(policy, config, options, settings)
    }

    fn build(
        policy: Arc<OutboundPolicy>,
        config: ResolverConfig,
        mut options: ResolverOpts,
        settings: DnsSettings,
    ) -> Result<Self, NetError> {
        let attempts = settings.attempts.max(1);
        // hickory's timeout is per query: spread the limit over the attempts, so the queries
        // fit in it. The limit itself is enforced around the whole lookup in `addresses`.
        options.timeout = settings.timeout / attempts as u32;
        options.attempts = attempts;
        let mut builder = TokioResolver::builder_with_config(config, TokioRuntimeProvider::new());
        *builder.options_mut() = options;
        Ok(PolicyResolver {
            policy,
            dns: builder.build()?,
            timeout: settings.timeout,
        })
    }

    pub fn policy(&self) -> &Arc<OutboundPolicy> {
        &self.policy
    }

    /// Every address `host` resolves to, before the policy; within `timeout`, whatever the
    /// name servers do.
    async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, ResolveFailure> {
        let failure = |reason, detail: String| ResolveFailure {
            reason,
            host: host.to_string(),
            detail,
        };
        match tokio::time::timeout(self.timeout, self.dns.lookup_ip(host)).await {
            Ok(Ok(lookup)) => Ok(lookup.iter().collect()),
            Ok(Err(e @ NetError::Timeout)) => Err(failure("dns_timeout", e.to_string())),
            Ok(Err(e)) => Err(failure("dns", e.to_string())),
            Err(_) => Err(failure(
                "dns_timeout",
                format!("no answer within {} ms", self.timeout.as_millis()),
            )),
        }
    }

    /// The addresses of `host` the policy allows, or why there are none.
    async fn allowed(&self, host: &str) -> Result<Vec<SocketAddr>, BoxError> {
        let resolved = self.addresses(host).await?;
        let mut allowed = Vec::new();
        let mut refusal = None;
        for ip in resolved {
            match self.policy.check_ip(ip) {
                Ok(()) => allowed.push(SocketAddr::new(ip, 0)),
                Err(r) => refusal = Some(r),
            }
        }
        if allowed.is_empty() {
            let refusal = refusal.unwrap_or_else(|| PolicyRefusal::new("no_address", host));
            tracing::warn!(
                reason = refusal.reason,
                host = %host,
                address = %refusal.target,
                "outbound connection refused by policy"
            );
            // The address a name resolved to is internal knowledge: it is logged above, and
            // the caller's error names the host only.
            return Err(Box::new(PolicyRefusal {
                reason: refusal.reason,
                target: host.to_string(),
            }));
        }
        Ok(allowed)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            let allowed = this.allowed(name.as_str()).await?;
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
pub(crate) mod test_dns;

#[cfg(test)]
impl PolicyResolver {
    /// Resolves through the given UDP name servers only (tests run their own on loopback).
    pub(crate) fn with_udp_name_servers(
        policy: Arc<OutboundPolicy>,
        servers: &[SocketAddr],
        settings: DnsSettings,
    ) -> Result<Self, NetError> {
        use hickory_resolver::config::{ConnectionConfig, NameServerConfig};
        let servers = servers
            .iter()
            .map(|addr| {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                NameServerConfig::new(addr.ip(), true, vec![udp])
            })
            .collect();
        let config = ResolverConfig::from_parts(None, Vec::new(), servers);
        Self::build(policy, config, ResolverOpts::default(), settings)
    }
}

#[cfg(test)]
mod tests;
