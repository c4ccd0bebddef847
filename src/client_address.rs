//! Which address a request comes from, for the limits that hold before its caller is known
//! (`crate::auth::unknown_tokens`).
//!
//! The server runs each request within [`scope`] of its connection's TCP peer (a task-local of
//! the request's own future, so it holds under HTTP/2 too, whose requests run on tasks of their
//! own). The client is that peer, unless the peer is one of `auth.trusted_proxies`: then it is
//! the right-most address of `X-Forwarded-For` (all its headers, in order) that is not a
//! trusted proxy, since each trusted hop appended the address it saw and anything to the left
//! of the first untrusted one may be the client's own invention. When every listed address is
//! trusted, the left-most; when the header is absent, the peer; an entry that is not an
//! address stops the walk at the hop that appended it. Nothing else (`Forwarded`,
//! `X-Real-IP`) is read.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

tokio::task_local! {
    static PEER: IpAddr;
}

/// Runs `request` with `peer` as its connection's peer address.
pub fn scope<F: Future>(peer: IpAddr, request: F) -> impl Future<Output = F::Output> {
    PEER.scope(peer.to_canonical(), request)
}

/// The peer of the connection the current request came on; `None` outside a request the
/// server runs.
pub fn peer() -> Option<IpAddr> {
    PEER.try_with(|peer| *peer).ok()
}

/// The proxies whose `X-Forwarded-For` names the client.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> Self {
        TrustedProxies(nets)
    }

    fn trusts(&self, address: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&address))
    }

    /// The client of a request that came from `peer` with `headers` (see the module doc).
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return peer;
        }
        let listed: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .collect();
        let mut client = peer;
        for entry in listed.iter().rev() {
            let Some(address) = address_of(entry) else {
                return client;
            };
            client = address;
            if !self.trusts(address) {
                return address;
            }
        }
        client
    }
}

/// An `X-Forwarded-For` entry's address: `ip`, `ip:port` or `[ipv6]:port`.
fn address_of(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies() -> TrustedProxies {
        TrustedProxies::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ])
    }

    fn client(peer: &str, forwarded: &[&str]) -> String {
        let mut headers = HeaderMap::new();
        for value in forwarded {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        proxies()
            .client(peer.parse().unwrap(), &headers)
            .to_string()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        assert_eq!(client("203.0.113.9", &["198.51.100.1"]), "203.0.113.9");
        assert_eq!(client("203.0.113.9", &[]), "203.0.113.9");
        assert_eq!(client("::ffff:203.0.113.9", &["10.0.0.1"]), "203.0.113.9");
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_address() {
        assert_eq!(client("127.0.0.1", &[]), "127.0.0.1");
        assert_eq!(client("127.0.0.1", &["198.51.100.1"]), "198.51.100.1");
        // The client made up the first entry; the proxies appended the rest.
        assert_eq!(
            client("10.1.1.1", &["1.2.3.4, 198.51.100.1, 10.2.2.2"]),
            "198.51.100.1"
        );
        assert_eq!(
            client("::1", &["1.2.3.4", "198.51.100.1:4711", "10.2.2.2"]),
            "198.51.100.1"
        );
        assert_eq!(client("::1", &["[2001:db8::7]:443"]), "2001:db8::7");
        assert_eq!(client("10.1.1.1", &["10.3.3.3, 10.2.2.2"]), "10.3.3.3");
    }

    #[test]
    fn an_entry_that_is_no_address_stops_at_the_hop_that_appended_it() {
        assert_eq!(client("127.0.0.1", &["unknown"]), "127.0.0.1");
        assert_eq!(
            client("127.0.0.1", &["198.51.100.1, garbage, 10.2.2.2"]),
            "10.2.2.2"
        );
    }

    #[tokio::test]
    async fn the_peer_is_known_within_the_scope_only() {
        assert_eq!(peer(), None);
        let inside = scope("::ffff:192.0.2.1".parse().unwrap(), async { peer() }).await;
        assert_eq!(inside, Some("192.0.2.1".parse().unwrap()));
    }
}
