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

fn dns(timeout_ms: u64) -> DnsSettings {
    DnsSettings {
        timeout: Duration::from_millis(timeout_ms),
        attempts: 2,
    }
}

async fn resolve(resolver: &PolicyResolver, name: &str) -> Result<Vec<SocketAddr>, BoxError> {
    let addrs = resolver.resolve(name.parse().unwrap()).await?;
    Ok(addrs.collect())
}

fn refusal(err: &BoxError) -> &PolicyRefusal {
    err.downcast_ref::<PolicyRefusal>()
        .unwrap_or_else(|| panic!("a policy refusal, got {err}"))
}

/// `localhost` with the system's configuration: answered without a query, then judged
/// by the policy like any resolved address.
#[tokio::test]
async fn system_resolver_answers_localhost_and_applies_the_policy() {
    let strict = PolicyResolver::system(Arc::new(strict()), dns(1_000)).unwrap();
    let err = resolve(&strict, "localhost").await.unwrap_err();
    assert_eq!(refusal(&err).reason, "loopback");

    let lab = PolicyResolver::system(Arc::new(lab()), dns(1_000)).unwrap();
    let addrs = resolve(&lab, "localhost").await.unwrap();
    assert!(!addrs.is_empty());
    assert!(addrs.iter().all(|a| a.ip() == IpAddr::from([127, 0, 0, 1])));
}

/// A name a DNS server answers resolves, and its address is still checked: kept when
/// allowlisted, refused with the policy's reason otherwise.
#[tokio::test]
async fn names_resolve_through_dns_and_the_policy_still_applies() {
    let server = test_dns::LoopbackDns::answering(Ipv4Addr::LOCALHOST).await;
    let lab =
        PolicyResolver::with_udp_name_servers(Arc::new(lab()), &[server.addr], dns(2_000)).unwrap();
    let addrs = resolve(&lab, "agent.test").await.unwrap();
    assert_eq!(addrs, [SocketAddr::from(([127, 0, 0, 1], 0))]);
    assert!(server.queries() > 0, "asked the DNS server");

    let strict =
        PolicyResolver::with_udp_name_servers(Arc::new(strict()), &[server.addr], dns(2_000))
            .unwrap();
    let err = resolve(&strict, "agent.test").await.unwrap_err();
    let refused = refusal(&err);
    assert_eq!(refused.reason, "loopback");
    assert_eq!(
        refused.target, "agent.test",
        "the resolved address is not shown"
    );
}

/// Without a usable resolv.conf the gateway still starts: `localhost` and /etc/hosts
/// resolve, any other name fails at once with `dns`.
#[tokio::test]
async fn without_name_servers_only_local_names_resolve() {
    let none = ResolverConfig::from_parts(None, Vec::new(), Vec::new());
    let resolver =
        PolicyResolver::build(Arc::new(lab()), none, ResolverOpts::default(), dns(1_000)).unwrap();
    assert!(resolve(&resolver, "localhost").await.is_ok());
    let err = resolve(&resolver, "agent.test").await.unwrap_err();
    let failure = err
        .downcast_ref::<ResolveFailure>()
        .expect("resolve failure");
    assert_eq!(failure.reason, "dns", "{failure}");
}

/// `localhost` never reaches the name servers.
#[tokio::test]
async fn localhost_needs_no_query() {
    let server = test_dns::LoopbackDns::silent().await;
    let lab =
        PolicyResolver::with_udp_name_servers(Arc::new(lab()), &[server.addr], dns(300)).unwrap();
    let addrs = resolve(&lab, "localhost").await.unwrap();
    assert_eq!(addrs, [SocketAddr::from(([127, 0, 0, 1], 0))]);
    assert_eq!(server.queries(), 0);
}

/// A DNS server that never answers: every resolution fails with `dns_timeout` within the
/// configured limit, and the blocking pool (one thread here) stays free throughout, where
/// `getaddrinfo` would hold one thread per lookup.
#[test]
fn a_silent_dns_server_fails_within_the_timeout_and_holds_no_blocking_thread() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = test_dns::LoopbackDns::silent().await;
        let resolver =
            PolicyResolver::with_udp_name_servers(Arc::new(lab()), &[server.addr], dns(400))
                .unwrap();
        let started = std::time::Instant::now();
        let lookups: Vec<_> = (0..8)
            .map(|n| {
                let resolver = resolver.clone();
                tokio::spawn(async move { resolve(&resolver, &format!("n{n}.agent.test")).await })
            })
            .collect();
        // While the lookups wait, the one blocking thread is free for others.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let blocking = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::task::spawn_blocking(|| "done"),
        )
        .await;
        assert_eq!(blocking.expect("blocking pool free").unwrap(), "done");
        for lookup in lookups {
            let err = lookup.await.unwrap().unwrap_err();
            let failure = err
                .downcast_ref::<ResolveFailure>()
                .unwrap_or_else(|| panic!("a resolve failure, got {err}"));
            assert_eq!(failure.reason, "dns_timeout", "{failure}");
            assert!(failure.host.ends_with(".agent.test"));
        }
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_millis(1_000), "{elapsed:?}");
        assert!(server.queries() > 0, "asked the silent server");
    });
}
