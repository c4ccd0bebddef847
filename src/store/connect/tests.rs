use super::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The next read of `stream` fails as timed out, at its 200 ms deadline (counted from now), not
/// much later.
async fn fails_at_the_200_ms_deadline<S: AsyncRead + Unpin>(stream: &mut Answered<S>) {
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let err = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the read ends by itself")
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

/// A peer that reads and never answers: the read fails at the deadline, not later.
#[tokio::test]
async fn a_write_without_an_answer_fails_the_read_at_the_deadline() {
    let (near, mut far) = tokio::io::duplex(1024);
    let mut stream = Answered::new(near, Some(Duration::from_millis(200)), Lending::default());
    stream.write_all(b"query").await.unwrap();
    let mut got = [0u8; 5];
    far.read_exact(&mut got).await.unwrap();
    fails_at_the_200_ms_deadline(&mut stream).await;
}

/// An idle connection (nothing written since the last answer) never times out, and an
/// answer disarms the deadline.
#[tokio::test]
async fn idle_and_answered_connections_stay_open() {
    let (near, mut far) = tokio::io::duplex(1024);
    let mut stream = Answered::new(near, Some(Duration::from_millis(100)), Lending::default());
    let mut buf = [0u8; 16];
    assert!(
        tokio::time::timeout(Duration::from_millis(400), stream.read(&mut buf))
            .await
            .is_err(),
        "an idle read waits"
    );
    stream.write_all(b"q").await.unwrap();
    far.write_all(b"answer").await.unwrap();
    assert_eq!(stream.read(&mut buf).await.unwrap(), 6);
    assert!(
        tokio::time::timeout(Duration::from_millis(400), stream.read(&mut buf))
            .await
            .is_err(),
        "answered: no deadline until the next write"
    );
}

/// Lent out by the pool, a connection whose answer starts and then stops coming fails at the
/// deadline after the last bytes; back in the pool, the same silence is an idle connection.
#[tokio::test]
async fn a_lent_connection_whose_answer_stops_midway_fails_at_the_deadline() {
    let lent = Lending::default();
    lent.lend();
    let (near, mut far) = tokio::io::duplex(1024);
    let mut stream = Answered::new(near, Some(Duration::from_millis(200)), lent.clone());
    stream.write_all(b"query").await.unwrap();
    let mut got = [0u8; 5];
    far.read_exact(&mut got).await.unwrap();
    // The first part of a long answer, then more within the deadline, then nothing.
    let mut buf = [0u8; 64];
    far.write_all(b"first part").await.unwrap();
    assert_eq!(stream.read(&mut buf).await.unwrap(), 10);
    tokio::time::sleep(Duration::from_millis(120)).await;
    far.write_all(b"second").await.unwrap();
    assert_eq!(stream.read(&mut buf).await.unwrap(), 6);
    fails_at_the_200_ms_deadline(&mut stream).await;

    // The same exchange on a connection back in the pool waits (an idle connection).
    let (near, mut far) = tokio::io::duplex(1024);
    let lent = Lending::default();
    lent.lend();
    let mut stream = Answered::new(near, Some(Duration::from_millis(100)), lent.clone());
    stream.write_all(b"q").await.unwrap();
    far.write_all(b"whole answer").await.unwrap();
    assert_eq!(stream.read(&mut buf).await.unwrap(), 12);
    lent.give_back();
    assert!(
        tokio::time::timeout(Duration::from_millis(400), stream.read(&mut buf))
            .await
            .is_err(),
        "given back: no deadline until the next write"
    );
}

/// Given back after an answer and lent again once its deadline has long passed, a connection
/// waits for its next statement: the connection task reads before it writes, and that read
/// must not count the old answer's deadline.
#[tokio::test]
async fn a_connection_lent_again_after_idling_past_the_deadline_waits() {
    let lent = Lending::default();
    lent.lend();
    let (near, mut far) = tokio::io::duplex(1024);
    let mut stream = Answered::new(near, Some(Duration::from_millis(100)), lent.clone());
    stream.write_all(b"q").await.unwrap();
    let mut buf = [0u8; 16];
    far.write_all(b"whole answer").await.unwrap();
    assert_eq!(stream.read(&mut buf).await.unwrap(), 12);
    lent.give_back();
    // Idle in the pool for longer than the deadline, then lent out again.
    tokio::time::sleep(Duration::from_millis(250)).await;
    lent.lend();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf))
            .await
            .is_err(),
        "lent again, before any statement: a read waits"
    );
    // The next exchange works.
    stream.write_all(b"q2").await.unwrap();
    let mut got = [0u8; 3];
    far.read_exact(&mut got[..2]).await.unwrap();
    far.write_all(b"answer").await.unwrap();
    assert_eq!(stream.read(&mut buf).await.unwrap(), 6);
    far.write_all(b"part").await.unwrap();
    assert_eq!(stream.read(&mut buf).await.unwrap(), 4);
}

/// Every TCP connection gets keep-alive with the configured timings.
#[tokio::test]
async fn tcp_connections_carry_keepalive() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let db = DatabaseConfig {
        url: format!("postgres://gw@127.0.0.1:{port}/db").into(),
        keepalive_idle_seconds: 17,
        keepalive_interval_seconds: 4,
        keepalive_retries: 5,
        ..DatabaseConfig::default()
    };
    let connector = PgConnector::new(&db).unwrap();
    let (_, name) = open(connector.targets().remove(0), &connector.keepalive)
        .await
        .unwrap();
    assert_eq!(name, "127.0.0.1", "the name the certificate must carry");
    let stream = tcp("127.0.0.1".into(), port, &connector.keepalive)
        .await
        .unwrap();
    let sock = SockRef::from(&stream);
    assert!(sock.keepalive().unwrap());
    assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(17));
    assert_eq!(
        sock.tcp_keepalive_interval().unwrap(),
        Duration::from_secs(4)
    );
    assert_eq!(sock.tcp_keepalive_retries().unwrap(), 5);
}

#[test]
fn statement_timeout_is_a_startup_option_and_tls_follows_sslmode() {
    let db = DatabaseConfig {
        url: "postgres://gw@db/q?options=-c%20search_path%3Dq".into(),
        statement_timeout_ms: 1500,
        ..DatabaseConfig::default()
    };
    let connector = PgConnector::new(&db).unwrap();
    assert_eq!(
        connector.config.get_options(),
        Some("-c search_path=q -c statement_timeout=1500")
    );
    assert_eq!(
        connector.answer_deadline,
        Some(Duration::from_millis(1500) + ANSWER_SLACK)
    );
    assert!(!connector.tls());
    assert_eq!(connector.config.get_ssl_mode(), SslMode::Disable);

    let off = PgConnector::new(&DatabaseConfig {
        statement_timeout_ms: 0,
        ..DatabaseConfig::default()
    })
    .unwrap();
    assert_eq!(off.config.get_options(), None);
    assert_eq!(off.answer_deadline, None);

    let downgrade = PgConnector::new(&DatabaseConfig {
        url: "postgres://gw@db/q?sslmode=require".into(),
        ..DatabaseConfig::default()
    });
    assert!(
        downgrade.is_err(),
        "sslmode=require in the URL is never plain TCP"
    );
}

/// The gateway writes on every connection: only `target_session_attrs=read-write` (or none,
/// which means it) is taken; every other value is refused at start with what to set instead.
#[test]
fn target_session_attrs_other_than_read_write_are_refused_at_start() {
    for url in [
        "postgres://gw@a:5432,b:5432/q",
        "postgres://gw@a:5432,b:5432/q?target_session_attrs=read-write",
        "postgres://gw@a/q?connect_timeout=2&target_session_attrs=read-write&load_balance_hosts=random",
        "host=a,b user=gw dbname=q target_session_attrs=read-write",
        "host=a,b user=gw dbname=q target_session_attrs='read-write'",
    ] {
        let db = DatabaseConfig {
            url: url.into(),
            ..DatabaseConfig::default()
        };
        assert!(PgConnector::new(&db).is_ok(), "{url}");
    }
    for value in ["any", "read-only", "primary", "standby", "prefer-standby"] {
        for url in [
            format!("postgres://gw@a:5432,b:5432/q?target_session_attrs={value}"),
            format!("postgres://gw@a/q?sslmode=disable&target_session_attrs={value}&x=1"),
            format!("host=a user=gw target_session_attrs={value} dbname=q"),
        ] {
            let db = DatabaseConfig {
                url: url.clone().into(),
                ..DatabaseConfig::default()
            };
            let e = PgConnector::new(&db).unwrap_err().to_string();
            assert!(
                e.contains(&format!("target_session_attrs={value} is not supported"))
                    && e.contains("target_session_attrs=read-write"),
                "{url}: {e}"
            );
        }
    }
    let random = PgConnector::new(&DatabaseConfig {
        url: "postgres://gw@a:1,b:2,c:3/q?load_balance_hosts=random".into(),
        ..DatabaseConfig::default()
    })
    .unwrap();
    assert!(random.random_order);
    let targets: Vec<String> = random.targets().iter().map(Target::label).collect();
    assert_eq!(
        targets,
        ["a:1", "b:2", "c:3"],
        "the URL's order before shuffling"
    );
}

/// Every host of a multi-host URL is tried, in order, and the error names each with its
/// reason (never the URL's password).
#[tokio::test]
async fn every_host_is_tried_in_order_and_the_error_names_each() {
    let mut ports = Vec::new();
    for _ in 0..2 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        ports.push(l.local_addr().unwrap().port());
    }
    let db = DatabaseConfig {
        url: format!(
            "postgres://gw:s3cret@127.0.0.1:{},127.0.0.1:{}/q",
            ports[0], ports[1]
        )
        .into(),
        ..DatabaseConfig::default()
    };
    let connector = PgConnector::new(&db).unwrap();
    let e = connector.connect().await.unwrap_err();
    let ConnectError::Hosts(failed) = &e else {
        panic!("{e}");
    };
    let tried: Vec<&str> = failed.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        tried,
        [
            format!("127.0.0.1:{}", ports[0]),
            format!("127.0.0.1:{}", ports[1])
        ]
    );
    let text = e.to_string();
    assert!(
        text.starts_with("no host accepts writes: 127.0.0.1:"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
    assert!(!connector.writable().now());
}

/// Shuffling keeps every host once.
#[test]
fn shuffling_keeps_every_host_once() {
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50 {
        let mut hosts = vec![1, 2, 3, 4];
        shuffle(&mut hosts);
        let mut sorted = hosts.clone();
        sorted.sort();
        assert_eq!(sorted, [1, 2, 3, 4]);
        seen.insert(hosts);
    }
    assert!(seen.len() > 1, "the order varies");
}

/// Each host of a multi-host URL without `connect_timeout` gets its share of the acquire
/// window (200 ms at least); the URL's `connect_timeout` is each host's when given.
#[test]
fn every_host_gets_its_share_of_the_acquire_window() {
    let timeout = |url: &str| {
        PgConnector::new(&DatabaseConfig {
            url: url.into(),
            acquire_timeout_ms: 2_000,
            ..DatabaseConfig::default()
        })
        .unwrap()
        .connect_timeout
    };
    assert_eq!(timeout("postgres://gw@a/q"), Duration::from_secs(2));
    assert_eq!(timeout("postgres://gw@a,b/q"), Duration::from_secs(1));
    assert_eq!(
        timeout("postgres://gw@a,b,c,d,e,f,g,h,i,j,k,l/q"),
        Duration::from_millis(200)
    );
    assert_eq!(
        timeout("postgres://gw@a,b/q?connect_timeout=3"),
        Duration::from_secs(3)
    );
}
