//! Memory is bounded by what clients read: one principal opens HTTP/2 connections whose
//! stream window is 0 (the client never lets a byte of an answer through) and sends ListTasks
//! requests whose answers are about 0.9 MiB each on every one of them: 12 connections, each
//! sending until its first refusal (at most 12), more than either budget holds (the first
//! connection alone fills its own budget before the others start; together they fill the
//! principal's share).
//!
//! What is asserted, at the documented defaults (`limits.response_buffer_bytes_per_connection`
//! 8 MiB, `limits.response_buffer_bytes` 64 MiB of which one principal's answers hold at most
//! `limits.response_buffer_principal_share` 0.25, 16 MiB): the answers admitted on each
//! connection fit 8 MiB, all of them together the principal's 16 MiB, the rest are refused
//! with 503 and `Retry-After`, at the connection's budget and at the principal's share; the
//! `a2a_response_bytes_buffered` gauge never exceeds 16 MiB (and 64 KiB of other answers); the gateway's RSS grows by at
//! most that share plus [`RSS_TOLERANCE`] (the work of building the answers: JSON values,
//! rows, the allocator's slack; without the budgets, these clients' 144 answers alone would
//! hold 127 MiB); another tenant's answer over 16 KiB is served meanwhile; every
//! stalled connection is closed the write timeout (the default, 30 s) after its first answer,
//! within
//! [`CLOSE_TOLERANCE`]; another client is served meanwhile; and once the connections are closed
//! nothing stays counted and a large answer is served again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::support::metrics::metric;
use crate::support::{new_id, Gateway};

const MIB: usize = 1024 * 1024;
const PER_CONNECTION_BUDGET: usize = 8 * MIB;
/// One principal's share of the 64 MiB process budget.
const PRINCIPAL_SHARE: usize = 16 * MIB;
/// The default `limits.write_timeout_seconds`.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections: more than the principal's share holds at the per-connection budget, so both
/// bind.
const CONNECTIONS: usize = 12;
const REQUESTS_PER_CONNECTION: usize = 12;
/// ListTasks requests in flight at once, all connections together.
const IN_FLIGHT: usize = 6;
/// Tasks on one page, each with a message of [`TEXT_CHARS`]: a page of about 0.9 MiB.
const PAGE: usize = 30;
const TEXT_CHARS: usize = 31_000;
/// RSS growth allowed beyond what the answers may hold.
const RSS_TOLERANCE: usize = 32 * MIB;
/// How late after the write timeout a stalled connection may close.
const CLOSE_TOLERANCE: Duration = Duration::from_millis(1500);

pub(crate) fn rss_bytes(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/PID/status");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

/// One stalled connection: its answers' statuses, whether each refusal said when to retry,
/// when its first answer arrived and when the gateway closed it.
pub(crate) struct Stalled {
    pub statuses: Vec<u16>,
    /// The declared length of each answer admitted (200).
    pub admitted_bytes: Vec<usize>,
    pub refusals_with_retry_after: usize,
    pub first_answer: Instant,
    pub closed: Instant,
}

/// Who a stalled connection asks for what: `requests` ListTasks of `page_size` with `token`,
/// one after the other until the first refusal.
#[derive(Clone, Copy)]
pub(crate) struct StalledAsks {
    pub token: &'static str,
    pub page_size: usize,
    pub requests: usize,
}

const ALICE_ASKS: StalledAsks = StalledAsks {
    token: "tok-alice",
    page_size: PAGE,
    requests: REQUESTS_PER_CONNECTION,
};

/// An HTTP/2 connection whose window stays 0: it sends `asks` and never reads an answer's
/// body; `sent` is told once it sent its last request. Resolves when the gateway closed it.
pub(crate) async fn stalled_connection(
    address: String,
    url: String,
    asks: StalledAsks,
    in_flight: Arc<Semaphore>,
    sent: tokio::sync::oneshot::Sender<()>,
) -> Stalled {
    let tcp = TcpStream::connect(address).await.unwrap();
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let connection = tokio::spawn(async move {
        let _ = connection.await;
        Instant::now()
    });
    let mut client = client.ready().await.unwrap();
    let mut statuses = Vec::new();
    let mut admitted_bytes = Vec::new();
    let mut refusals_with_retry_after = 0;
    let mut first_answer = None;
    // Held, never read: the window stays 0.
    let mut unread = Vec::new();
    // One request after the other (each answer's head comes whatever the window), and at most
    // [`IN_FLIGHT`] of all connections at once: the test's database pool serves them without
    // timing out, however loaded the machine.
    for i in 0..asks.requests {
        let request = http::Request::post(&url)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .header("authorization", format!("Bearer {}", asks.token))
            .body(())
            .unwrap();
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "ListTasks",
                          "params": {"pageSize": asks.page_size}});
        let _turn = in_flight.acquire().await.unwrap();
        let answer = async {
            client = client.clone().ready().await?;
            let (response, mut upload) = client.send_request(request, false)?;
            upload.send_data(Bytes::from(body.to_string()), true)?;
            response.await
        };
        let Ok(response) = answer.await else {
            // The gateway closed the connection (its first answer waited the write timeout).
            statuses.push(0);
            break;
        };
        first_answer.get_or_insert_with(Instant::now);
        let status = response.status().as_u16();
        if status == 503 && response.headers().get("retry-after").is_some() {
            refusals_with_retry_after += 1;
        }
        statuses.push(status);
        if status == 200 {
            let length = response
                .headers()
                .get("content-length")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .expect("an admitted answer declares its length");
            admitted_bytes.push(length);
        }
        unread.push(response.into_body());
        if status == 503 {
            // This client's share is full: more would be refused alike.
            break;
        }
    }
    let _ = sent.send(());
    let closed = tokio::time::timeout(4 * WRITE_TIMEOUT, connection)
        .await
        .expect("the gateway closes a connection whose answers are not taken")
        .unwrap();
    drop(unread);
    Stalled {
        statuses,
        admitted_bytes,
        refusals_with_retry_after,
        first_answer: first_answer.unwrap(),
        closed,
    }
}

#[tokio::test]
async fn stalled_windows_hold_at_most_the_budget_and_lose_their_connections() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let text = "m".repeat(TEXT_CHARS);
    let sends = (0..PAGE).map(|_| {
        let writer = writer.clone();
        let text = text.clone();
        async move { writer.send_text_immediately(&new_id(), &text).await }
    });
    for sent in futures_util::future::join_all(sends).await {
        assert!(sent.is_result(), "{}", sent.body);
    }
    // Another tenant's caller, whose one-task page (over 16 KiB) is served meanwhile.
    let carol = gw.caller("tok-carol").agent("ag-globex");
    assert!(carol
        .send_text_immediately(&new_id(), &text)
        .await
        .is_result());
    let page = writer.list_tasks(json!({"pageSize": PAGE})).await;
    assert_eq!(page.result()["tasks"].as_array().unwrap().len(), PAGE);
    let page_bytes = page.body.to_string().len();
    assert!(
        (800 * 1024..MIB).contains(&page_bytes),
        "a page of {page_bytes} bytes"
    );

    let pid = gw.child.id().unwrap();
    let rss_before = rss_bytes(pid);
    let address = gw.url.trim_start_matches("http://").to_string();
    let url = format!("{}/v1/a2a/agents/ag-writer/rpc", gw.url);
    let started = Instant::now();
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let connect = || {
        let (sent, all_sent) = tokio::sync::oneshot::channel();
        let client = tokio::spawn(stalled_connection(
            address.clone(),
            url.clone(),
            ALICE_ASKS,
            in_flight.clone(),
            sent,
        ));
        (client, all_sent)
    };
    // The first connection alone, up to its budget; then the others, up to the principal's.
    let (first, all_sent) = connect();
    all_sent.await.unwrap();
    let mut clients = vec![first];
    for _ in 1..CONNECTIONS {
        clients.push(connect().0);
    }

    // Meanwhile: RSS and the gauge sampled, and another client served.
    let mut rss_peak = rss_before;
    let mut buffered_peak = 0.0f64;
    let mut served = Vec::new();
    while !clients.iter().all(|c| c.is_finished()) {
        rss_peak = rss_peak.max(rss_bytes(pid));
        let scrape = gw.metrics().await;
        buffered_peak =
            buffered_peak.max(metric(&scrape, "a2a_response_bytes_buffered", &[]).unwrap());
        if served.len() < 5 && started.elapsed() > Duration::from_millis(500) {
            let asked = Instant::now();
            let other = carol.list_tasks(json!({"pageSize": 1})).await;
            served.push((other.status, asked.elapsed()));
        }
        assert!(started.elapsed() < 60 * WRITE_TIMEOUT, "the test is stuck");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut stalled = Vec::new();
    for client in clients {
        stalled.push(client.await.unwrap());
    }

    let mut admitted_total = 0;
    for (i, connection) in stalled.iter().enumerate() {
        let admitted: usize = connection.admitted_bytes.iter().sum();
        let refused = connection.statuses.iter().filter(|s| **s == 503).count();
        eprintln!(
            "connection {i}: {:?} bytes admitted, {refused} refused",
            connection.admitted_bytes
        );
        assert!(
            connection
                .statuses
                .iter()
                .all(|s| [200, 503, 0].contains(s)),
            "connection {i}: {:?}",
            connection.statuses
        );
        assert_eq!(connection.refusals_with_retry_after, refused);
        assert!(
            admitted <= PER_CONNECTION_BUDGET,
            "connection {i}: {admitted} bytes admitted"
        );
        admitted_total += admitted;
        // Its first answer was admitted a moment before the client saw its head.
        let open_for = connection.closed - connection.first_answer;
        assert!(
            open_for <= WRITE_TIMEOUT + CLOSE_TOLERANCE
                && open_for >= WRITE_TIMEOUT - Duration::from_millis(500),
            "connection {i} closed {open_for:?} after its first answer"
        );
    }
    // The first connection alone fills its own budget: full pages, then one cut to what was
    // left (the page's first task and its frame at most short of it).
    let first: usize = stalled[0].admitted_bytes.iter().sum();
    assert!(
        first + page_bytes / PAGE + 1024 >= PER_CONNECTION_BUDGET,
        "the first connection holds {first} bytes of its {PER_CONNECTION_BUDGET}"
    );
    // The gauge counts every answer in flight: Carol's one-task page and the refusals (small,
    // always admitted) beside Alice's share.
    assert!(
        buffered_peak <= (PRINCIPAL_SHARE + 64 * 1024) as f64,
        "gauge peaked at {buffered_peak}"
    );
    assert!(
        admitted_total <= PRINCIPAL_SHARE,
        "{admitted_total} bytes admitted for one principal"
    );
    let growth = rss_peak.saturating_sub(rss_before);
    eprintln!(
        "RSS {} MiB before, peak {} MiB (+{} MiB); {admitted_total} bytes admitted; buffered peak {} MiB",
        rss_before / MIB,
        rss_peak / MIB,
        growth / MIB,
        buffered_peak / MIB as f64
    );
    assert!(
        growth <= PRINCIPAL_SHARE + RSS_TOLERANCE,
        "RSS grew by {} MiB",
        growth / MIB
    );
    assert!(!served.is_empty(), "the stalled connections ended too fast");
    for (status, took) in &served {
        assert_eq!(*status, 200);
        assert!(*took < Duration::from_secs(2), "served in {took:?}");
    }

    // Everything the stalled connections held is given back.
    let scrape = gw.metrics().await;
    // Every 200 was a whole page: no ListTasks failed.
    let failed: Vec<&str> = scrape
        .lines()
        .filter(|l| {
            l.starts_with("a2a_http_requests_total")
                && l.contains("rpc_method=\"ListTasks\"")
                && !l.contains("rpc_code=\"ok\"")
        })
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(
        metric(&scrape, "a2a_response_bytes_buffered", &[]),
        Some(0.0)
    );
    assert_eq!(
        metric(&scrape, "a2a_stalled_connections_closed_total", &[]),
        Some(CONNECTIONS as f64)
    );
    let refused_seen: usize = stalled
        .iter()
        .map(|c| c.statuses.iter().filter(|s| **s == 503).count())
        .sum();
    let refused: f64 = ["connection", "principal"]
        .iter()
        .map(|scope| {
            metric(
                &scrape,
                "a2a_response_buffer_refusals_total",
                &[("scope", scope)],
            )
            .unwrap()
        })
        .sum();
    assert_eq!(refused as usize, refused_seen);
    for scope in ["connection", "principal"] {
        assert!(
            metric(
                &scrape,
                "a2a_response_buffer_refusals_total",
                &[("scope", scope)]
            )
            .unwrap()
                > 0.0,
            "no refusal at the {scope} budget"
        );
    }
    // And a large answer is served again.
    let page_again = writer.list_tasks(json!({"pageSize": PAGE})).await;
    assert_eq!(page_again.status, 200);
}
