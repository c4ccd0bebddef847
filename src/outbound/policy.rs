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
//!
//! Every refusal carries a short machine-readable `reason` that is logged as a structured field.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

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

    /// A resolver for the outbound HTTP client that enforces this policy.
    pub fn resolver(self: &Arc<Self>) -> Arc<PolicyResolver> {
        Arc::new(PolicyResolver {
            policy: self.clone(),
        })
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

/// DNS resolution for outbound calls: resolves with the system resolver, then hands the
/// connector only the addresses the policy allows. When none is left the connection fails
/// with the policy's reason, logged here.
#[derive(Debug)]
pub struct PolicyResolver {
    policy: Arc<OutboundPolicy>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })?
                .collect();
            let mut allowed = Vec::new();
            let mut refusal = None;
            for addr in resolved {
                match policy.check_ip(addr.ip()) {
                    Ok(()) => allowed.push(addr),
                    Err(r) => refusal = Some(r),
                }
            }
            if allowed.is_empty() {
                let refusal = refusal.unwrap_or_else(|| PolicyRefusal::new("no_address", &host));
                tracing::warn!(
                    reason = refusal.reason,
                    host = %host,
                    address = %refusal.target,
                    "outbound connection refused by policy"
                );
                return Err(Box::new(PolicyRefusal {
                    reason: refusal.reason,
                    target: format!("{host} ({})", refusal.target),
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> OutboundPolicy {
        OutboundPolicy::new(false, Vec::new())
    }

    fn lab() -> OutboundPolicy {
        OutboundPolicy::new(true, vec!["127.0.0.1/32".parse().unwrap()])
    }

    /// Bypass attempts: every one is refused, with the reason the policy gives.
    #[test]
    fn bypass_corpus_is_refused() {
        let corpus: &[(&str, &str)] = &[
            ("https://127.0.0.1/", "loopback"),
            ("https://2130706433/", "loopback"),
            ("https://0177.0.0.1/", "loopback"),
            ("https://0x7f.0.0.1/", "loopback"),
            ("https://0x7f000001/", "loopback"),
            ("https://127.1/", "loopback"),
            ("https://127.0.1/", "loopback"),
            ("https://[::1]/", "loopback"),
            ("https://[::ffff:127.0.0.1]/", "loopback"),
            ("https://[::ffff:7f00:1]/", "loopback"),
            ("https://[0:0:0:0:0:ffff:127.0.0.1]/", "loopback"),
            ("https://[64:ff9b::127.0.0.1]/", "loopback"),
            ("https://[64:ff9b::a9fe:a9fe]/", "link_local"),
            ("https://[::127.0.0.1]/", "loopback"),
            ("https://0.0.0.0/", "unspecified"),
            ("https://0/", "unspecified"),
            ("https://[::]/", "unspecified"),
            ("https://169.254.169.254/latest/meta-data/", "link_local"),
            ("https://2852039166/", "link_local"),
            ("https://[::ffff:169.254.169.254]/", "link_local"),
            ("https://10.0.0.1/", "private"),
            ("https://172.16.5.4/", "private"),
            ("https://192.168.1.1/", "private"),
            ("https://100.64.0.1/", "cgnat"),
            ("https://198.18.0.1/", "benchmarking"),
            ("https://192.0.2.1/", "documentation"),
            ("https://203.0.113.9/", "documentation"),
            ("https://224.0.0.1/", "multicast"),
            ("https://255.255.255.255/", "broadcast"),
            ("https://240.0.0.1/", "reserved"),
            ("https://[fc00::1]/", "unique_local"),
            ("https://[fd12:3456::1]/", "unique_local"),
            ("https://[fe80::1]/", "link_local"),
            ("https://[ff02::1]/", "multicast"),
            ("https://[2002:7f00:1::1]/", "6to4"),
            ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "teredo"),
            ("https://[2001:db8::1]/", "documentation"),
            ("https://[100::1]/", "discard"),
            ("http://example.com/", "insecure_scheme"),
            ("ftp://example.com/", "scheme"),
            ("file:///etc/passwd", "scheme"),
            ("https://user:pass@example.com/", "userinfo"),
            ("https://user@example.com/", "userinfo"),
            ("https://example.com/rpc#frag", "fragment"),
            ("not a url", "url_invalid"),
        ];
        let policy = strict();
        for (url, reason) in corpus {
            let refused = policy
                .check_url(url)
                .expect_err(&format!("{url} must be refused"));
            assert_eq!(refused.reason, *reason, "{url}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        assert_eq!(
            strict().check_url(&long).unwrap_err().reason,
            "url_too_long"
        );
    }

    #[test]
    fn public_addresses_and_names_pass() {
        let policy = strict();
        for url in [
            "https://remote.example/a2a/rpc",
            "https://93.184.216.34/rpc",
            "https://[2606:4700::1111]/rpc",
            "https://[::ffff:93.184.216.34]/",
            "https://[64:ff9b::93.184.216.34]/",
        ] {
            assert!(policy.check_url(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn allowlist_names_exact_ranges_only() {
        let policy = lab();
        assert!(policy.check_url("http://127.0.0.1:8000/rpc").is_ok());
        assert!(policy.check_url("http://2130706433:8000/rpc").is_ok());
        // The mapped form is the same address and is judged as such.
        assert!(policy.check_url("http://[::ffff:127.0.0.1]/").is_ok());
        for (url, reason) in [
            ("http://127.0.0.2/", "loopback"),
            ("http://2130706434/", "loopback"),
            ("http://[::1]/", "loopback"),
            ("http://0.0.0.0/", "unspecified"),
            ("http://169.254.169.254/", "link_local"),
        ] {
            assert_eq!(policy.check_url(url).unwrap_err().reason, reason, "{url}");
        }
    }

    #[test]
    fn origin_always_names_the_port() {
        let u = Url::parse("https://Remote.Example/a2a/rpc?x=1").unwrap();
        assert_eq!(origin(&u), "https://remote.example:443");
        let u = Url::parse("http://127.0.0.1:8080/rpc").unwrap();
        assert_eq!(origin(&u), "http://127.0.0.1:8080");
        let u = Url::parse("https://[2606:4700::1111]:8443/").unwrap();
        assert_eq!(origin(&u), "https://[2606:4700::1111]:8443");
    }

    #[tokio::test]
    async fn resolver_refuses_names_of_refused_addresses() {
        let policy = Arc::new(strict());
        let resolver = policy.resolver();
        let name: Name = "localhost".parse().unwrap();
        let err = match resolver.resolve(name).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(e) => e,
        };
        let refusal = err.downcast_ref::<PolicyRefusal>().expect("policy refusal");
        assert_eq!(refusal.reason, "loopback");
    }

    #[tokio::test]
    async fn resolver_keeps_allowlisted_addresses() {
        let policy = Arc::new(lab());
        let resolver = policy.resolver();
        let name: Name = "localhost".parse().unwrap();
        let addrs: Vec<SocketAddr> = resolver.resolve(name).await.unwrap().collect();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip() == IpAddr::from([127, 0, 0, 1])));
    }
}
