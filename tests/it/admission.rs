//! What a connection costs before anyone is authorised, and how long a client can hold one:
//!
//! - a request without a valid credential is answered 401 from its headers, its body never
//!   read (the RPC route and every outbound route that takes a body);
//! - a declared body over the limit is 413 at once; a chunked one is cut at the limit and its
//!   connection closed rather than drained;
//! - connections beyond the listener's cap wait in the kernel's backlog;
//! - HTTP/2 announces bounded streams and windows, and a request whose headers never complete
//!   does not hold its connection;
//! - a client that stops reading its answers loses the connection after the write timeout;
//! - a flood of unauthenticated 1 MiB POSTs against the real process stays within a memory
//!   bound while an authorised GetTask keeps being answered.
//!
//! All on loopback, with raw sockets where the point is what the gateway reads or writes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::report::report;
use crate::support::*;

const MIB: usize = 1024 * 1024;
const RPC: &str = "/v1/a2a/agents/ag-writer/rpc";
const ADMIN: &str = "tok-alice-admin";

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// A request head; `length` is a declared Content-Length, or chunked when `None`.
fn head(method: &str, path: &str, token: Option<&str>, length: Option<usize>) -> String {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\na2a-version: 1.0\r\n"
    );
    if let Some(token) = token {
        head.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    match length {
        Some(n) => head.push_str(&format!("content-length: {n}\r\n")),
        None => head.push_str("transfer-encoding: chunked\r\n"),
    }
    head.push_str("\r\n");
    head
}

/// Reads until a response head is complete; the head (lower-cased), or `None` on EOF, reset or
/// `limit`.
async fn read_head<R: AsyncReadExt + Unpin>(stream: &mut R, limit: Duration) -> Option<String> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(String::from_utf8_lossy(&received[..end]).to_ascii_lowercase());
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// The status of the next response head.
async fn read_status<R: AsyncReadExt + Unpin>(stream: &mut R, limit: Duration) -> Option<u16> {
    let head = read_head(stream, limit).await?;
    head.split(' ').nth(1).and_then(|s| s.parse().ok())
}

/// Whether the server closes the connection (EOF or reset) within `limit`, discarding what it
/// sends meanwhile.
async fn closed_within<R: AsyncReadExt + Unpin>(stream: &mut R, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Sends a head announcing a 1 MiB body and none of the body: the answer must come from the
/// headers alone, well before the 10 s body read timeout, and say that the connection (whose
/// body was never read) closes.
async fn answer_without_body(url: &str, head: &str) -> (Option<u16>, Duration) {
    let mut stream = TcpStream::connect(addr(url)).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let head = read_head(&mut stream, Duration::from_secs(3)).await;
    let elapsed = started.elapsed();
    if let Some(head) = &head {
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(
            closed_within(&mut stream, Duration::from_secs(3)).await,
            "and closes it"
        );
    }
    let status = head.and_then(|h| h.split(' ').nth(1).and_then(|s| s.parse().ok()));
    (status, elapsed)
}

#[tokio::test]
async fn unauthenticated_requests_are_refused_before_their_body_is_read() {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let routes = [
        ("POST", RPC),
        ("POST", "/v1/a2a/agents/ag-writer/rpc/"),
        ("POST", "/v1/a2a/agents"),
        ("PATCH", "/v1/a2a/agents/reg-unknown"),
        ("POST", "/v1/a2a/agents/reg-unknown/discover"),
        ("POST", "/v1/a2a/tasks"),
    ];
    for (method, path) in routes {
        for token in [None, Some("tok-nope")] {
            for length in [Some(MIB), None] {
                let (status, elapsed) =
                    answer_without_body(&gw.url, &head(method, path, token, length)).await;
                assert_eq!(
                    status,
                    Some(401),
                    "{method} {path} token={token:?} length={length:?}: answered from the headers ({elapsed:?})"
                );
            }
        }
    }
    // Authenticated, the declared length alone is refused: nothing is read to find out.
    for (token, path) in [("tok-alice", RPC), (ADMIN, "/v1/a2a/agents")] {
        let (status, elapsed) =
            answer_without_body(&gw.url, &head("POST", path, Some(token), Some(MIB))).await;
        assert_eq!(status, Some(413), "{path}: 413 at once ({elapsed:?})");
    }
    assert_eq!(gw.db.task_count().await, 0);
}

#[tokio::test]
async fn a_chunked_body_is_cut_at_the_limit_and_its_connection_closed() {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let stream = TcpStream::connect(addr(&gw.url)).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer
        .write_all(head("POST", RPC, Some("tok-alice"), None).as_bytes())
        .await
        .unwrap();
    // 8 KiB chunks for as long as the server takes them: 4 MiB at most.
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = sent.clone();
    let pump = tokio::spawn(async move {
        let chunk = format!("2000\r\n{}\r\n", " ".repeat(0x2000));
        for _ in 0..512 {
            if writer.write_all(chunk.as_bytes()).await.is_err() {
                break;
            }
            counted.fetch_add(0x2000, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let head = read_head(&mut reader, Duration::from_secs(5))
        .await
        .expect("an answer while the body is still coming");
    assert!(
        head.starts_with("http/1.1 413 "),
        "cut once past 64 KiB: {head}"
    );
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(
        closed_within(&mut reader, Duration::from_secs(3)).await,
        "the connection is closed, not drained"
    );
    pump.abort();
    let sent = sent.load(Ordering::Relaxed);
    assert!(
        sent < 4 * MIB,
        "the server stopped taking the body ({sent} bytes)"
    );
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let gw =
        InProcessGateway::start_with(GatewayOptions::with_env(&[("Q_A2A_MAX_CONNECTIONS", "4")]))
            .await;
    let get = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut open = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(addr(&gw.url)).await.unwrap();
        stream.write_all(get).await.unwrap();
        assert_eq!(
            read_status(&mut stream, Duration::from_secs(5)).await,
            Some(200)
        );
        open.push(stream);
    }
    // The fifth connects (the kernel queues it) but is not served while four are open.
    let mut fifth = TcpStream::connect(addr(&gw.url)).await.unwrap();
    fifth.write_all(get).await.unwrap();
    assert_eq!(
        read_status(&mut fifth, Duration::from_secs(1)).await,
        None,
        "a fifth connection waits"
    );
    drop(open.pop());
    assert_eq!(
        read_status(&mut fifth, Duration::from_secs(3)).await,
        Some(200),
        "and is served once a slot frees"
    );
}

// --- HTTP/2 by hand: just enough framing to read settings and hold a request open ----------

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const HEADERS: u8 = 0x1;
const ACK: u8 = 0x1;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

async fn read_frame(stream: &mut TcpStream) -> Option<(u8, u8, Vec<u8>)> {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header).await.ok()?;
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; length];
    stream.read_exact(&mut payload).await.ok()?;
    Some((header[3], header[4], payload))
}

#[tokio::test]
async fn http2_streams_and_windows_are_bounded_and_incomplete_headers_do_not_hold_a_connection() {
    let gw = InProcessGateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_HEADER_READ_TIMEOUT_SECONDS",
        "2",
    )]))
    .await;
    let opened = Instant::now();
    let mut stream = TcpStream::connect(addr(&gw.url)).await.unwrap();
    stream.write_all(H2_PREFACE).await.unwrap();
    stream.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    let (kind, flags, payload) = read_frame(&mut stream).await.expect("server settings");
    assert_eq!((kind, flags), (SETTINGS, 0));
    let settings: Vec<(u16, u32)> = payload
        .chunks(6)
        .map(|s| {
            (
                u16::from_be_bytes([s[0], s[1]]),
                u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
            )
        })
        .collect();
    let setting = |id: u16| settings.iter().find(|(i, _)| *i == id).map(|(_, v)| *v);
    assert_eq!(
        setting(0x3),
        Some(64),
        "MAX_CONCURRENT_STREAMS: {settings:?}"
    );
    assert_eq!(
        setting(0x4),
        Some(65_536),
        "INITIAL_WINDOW_SIZE: {settings:?}"
    );
    assert_eq!(
        setting(0x6),
        Some(16_384),
        "MAX_HEADER_LIST_SIZE: {settings:?}"
    );
    stream
        .write_all(&frame(SETTINGS, ACK, 0, &[]))
        .await
        .unwrap();

    // A request whose header block never ends (HEADERS without END_HEADERS, no CONTINUATION),
    // from a client that otherwise answers every PING.
    stream
        .write_all(&frame(HEADERS, 0, 1, &[0x82]))
        .await
        .unwrap();
    let mut went_away = false;
    let closed = tokio::time::timeout(Duration::from_secs(8), async {
        while let Some((kind, flags, payload)) = read_frame(&mut stream).await {
            if (kind, flags) == (PING, 0) {
                let pong = frame(PING, ACK, 0, &payload);
                if stream.write_all(&pong).await.is_err() {
                    break;
                }
            }
            went_away |= kind == GOAWAY;
        }
    })
    .await
    .is_ok();
    assert!(
        closed,
        "a connection with no complete request is closed after the header timeout"
    );
    assert!(went_away, "with a GOAWAY");
    // No request was ever in progress: the connection closes 2 s (the header timeout) after it
    // opened, with 400 ms (20 %) for the close to reach this client on a loaded machine.
    let open_for = opened.elapsed();
    eprintln!("incomplete HTTP/2 headers: closed {open_for:?} after the connection opened");
    assert!(
        open_for >= Duration::from_millis(1_950) && open_for < Duration::from_millis(2_400),
        "closed {open_for:?} after it opened, the header timeout is 2 s"
    );
}

#[tokio::test]
async fn a_client_that_barely_reads_loses_its_connection_after_the_write_timeout() {
    let gw = InProcessGateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_WRITE_TIMEOUT_SECONDS",
        "2",
    )]))
    .await;
    // A small receive window, so the server's writes block soon.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket
        .connect(addr(&gw.url).parse().unwrap())
        .await
        .unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // Pipelined requests whose answers (about 10 MB together) far exceed the socket buffers.
    const REQUESTS: usize = 60_000;
    let pipelined = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".repeat(REQUESTS);
    let pump = tokio::spawn(async move {
        let _ = writer.write_all(&pipelined).await;
        writer
    });
    // 1 KiB every 100 ms: the answers would take 15 minutes at this pace, and the server sees
    // progress, but far less than it needs to keep the connection.
    let started = Instant::now();
    let mut answered = 0;
    let mut tail = Vec::new();
    let mut buf = vec![0u8; 1024];
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    tail.extend_from_slice(&buf[..n]);
                    answered += tail.windows(12).filter(|w| w == b"HTTP/1.1 200").count();
                    let keep = tail.len().saturating_sub(11);
                    tail.drain(..keep);
                }
            }
        }
    })
    .await
    .is_ok();
    pump.abort();
    assert!(
        ended,
        "the connection is closed ({answered} of {REQUESTS} answered in {:?})",
        started.elapsed()
    );
    assert!(answered < REQUESTS, "{answered} of {REQUESTS} answered");
}

// --- Memory under a flood -----------------------------------------------------------------

/// A `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} missing from /proc/{pid}/status"))
}

/// One unauthenticated POST announcing 1 MiB, without a credential or with an unknown one (Q
/// is asked about it), its body sent at once or in 64 KiB pieces 50 ms apart; the answer's
/// status (0 when the connection ended without one).
async fn unauthenticated_megabyte(
    address: String,
    body: Arc<Vec<u8>>,
    token: Option<String>,
    slow: bool,
) -> u16 {
    let Ok(stream) = TcpStream::connect(&address).await else {
        return 0;
    };
    let (mut reader, mut writer) = stream.into_split();
    let head = head("POST", RPC, token.as_deref(), Some(MIB));
    let pump = tokio::spawn(async move {
        if writer.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        if slow {
            for piece in body.chunks(64 * 1024) {
                if writer.write_all(piece).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            let _ = writer.write_all(&body).await;
        }
        // Hold the connection until the answer is read (the pump is aborted then).
        std::future::pending::<()>().await;
    });
    let status = read_status(&mut reader, Duration::from_secs(30)).await;
    pump.abort();
    status.unwrap_or(0)
}

/// The peak resident set growth allowed while 300 unauthenticated 1 MiB POSTs (100 at a time,
/// half with an unknown token, one in three sending its body slowly) hit the gateway, as
/// docs/operations.md states it. Reading (and buffering) every body before looking at the
/// credential grew the process by about 108 MiB under the same flood; answering from the
/// headers, by about 8 MiB (reported by the test).
const FLOOD_GROWTH_BOUND_KIB: u64 = 16 * 1024;

#[tokio::test]
async fn a_flood_of_unauthenticated_megabyte_posts_stays_within_a_memory_bound() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let task_id = writer
        .send_text_immediately(&new_id(), "before the flood")
        .await
        .task_id();
    let pid = gw.child.id().expect("gateway running");
    let rss_before = status_kib(pid, "VmRSS:");
    let hwm_before = status_kib(pid, "VmHWM:");

    let flooding = Arc::new(AtomicBool::new(true));
    let sampler = {
        let flooding = flooding.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while flooding.load(Ordering::Relaxed) {
                peak = peak.max(status_kib(pid, "VmRSS:"));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    // A GetTask every 20 ms for as long as the flood lasts, each on its own (none waits for
    // the previous one), each answered within 5 s.
    let reads = {
        let flooding = flooding.clone();
        let writer = writer.clone();
        let task_id = task_id.clone();
        tokio::spawn(async move {
            let mut calls = Vec::new();
            while flooding.load(Ordering::Relaxed) {
                let writer = writer.clone();
                let task_id = task_id.clone();
                calls.push(tokio::spawn(async move {
                    let started = Instant::now();
                    let reply =
                        tokio::time::timeout(Duration::from_secs(5), writer.get_task(&task_id))
                            .await
                            .expect("GetTask answered within 5 s during the flood");
                    assert_eq!(reply.status, 200, "{}", reply.body);
                    assert_eq!(reply.result()["id"], task_id.as_str(), "{}", reply.body);
                    started.elapsed()
                }));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            calls
        })
    };

    const REQUESTS: usize = 300;
    let body = Arc::new(vec![b' '; MIB]);
    let address = addr(&gw.url);
    let started = Instant::now();
    let statuses: Vec<u16> = futures_util::stream::iter(0..REQUESTS)
        .map(|i| {
            let token = (i % 2 == 1).then(|| format!("tok-unknown-{i}"));
            unauthenticated_megabyte(address.clone(), body.clone(), token, i % 3 == 0)
        })
        .buffer_unordered(100)
        .collect()
        .await;
    let flood_time = started.elapsed();
    flooding.store(false, Ordering::Relaxed);
    let peak_sampled = sampler.await.unwrap();
    let mut latencies = Vec::new();
    for call in reads.await.unwrap() {
        latencies.push(call.await.expect("GetTask during the flood"));
    }
    let rss_after = status_kib(pid, "VmRSS:");
    let hwm_after = status_kib(pid, "VmHWM:");
    // The high-water mark catches a peak between samples, once it exceeds the earlier one.
    let peak = if hwm_after > hwm_before {
        peak_sampled.max(hwm_after)
    } else {
        peak_sampled
    };
    let growth = peak.saturating_sub(rss_before);
    // Made-up tokens past their address's bucket of unknown tokens (40, then 20/s) are
    // refused 429, and past the strangers' share of the introspection pool 503, at the same
    // stage, before the body too.
    let unauthorized = statuses
        .iter()
        .filter(|s| [401, 429, 503].contains(*s))
        .count();
    let unanswered = statuses.iter().filter(|s| **s == 0).count();
    let slowest = latencies.iter().max().copied().unwrap_or_default();
    report(
        "admission_flood",
        &format!(
            "requests={REQUESTS} refused_before_the_body={unauthorized} ended_without_answer={unanswered} flood_ms={} rss_before_kib={rss_before} rss_peak_kib={peak} rss_after_kib={rss_after} growth_kib={growth} get_task_calls={} slowest_get_task_ms={}",
            flood_time.as_millis(),
            latencies.len(),
            slowest.as_millis()
        ),
    );
    assert!(
        growth < FLOOD_GROWTH_BOUND_KIB,
        "resident set grew by {growth} KiB (bound {FLOOD_GROWTH_BOUND_KIB} KiB): before {rss_before}, peak {peak}, after {rss_after}"
    );
    assert!(
        statuses.iter().all(|s| [401, 429, 503, 0].contains(s)),
        "only refusals of the token (or a reset after one): {statuses:?}"
    );
    assert!(
        unauthorized >= REQUESTS * 9 / 10,
        "{unauthorized} of {REQUESTS} read their refusal"
    );
    assert!(!latencies.is_empty(), "GetTask was called during the flood");
}
