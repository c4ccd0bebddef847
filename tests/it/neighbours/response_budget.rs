//! Stalled readers against the response budget: HTTP/2 connections whose windows stay 0 hold
//! large ListTasks pages of Alice's and Bob's (one tenant, t-acme), then one more of Alice's
//! holds small pages in whatever is left, and Carol (t-globex) lists her tasks meanwhile. The gateway runs with a 16 MiB process budget and 4 MiB per
//! connection, so a principal's share is 4 MiB (0.25) and a tenant's 8 MiB (0.5).
//!
//! Before the shares, the first comers held the whole process budget and every other tenant's
//! answer over 16 KiB was refused with 503 for as long as the readers stalled.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::options;
use crate::streaming::stalled_window::{rss_bytes, stalled_connection, StalledAsks};
use crate::support::metrics::metric;
use crate::support::{new_id, Agent, Gateway};

const MIB: usize = 1024 * 1024;
const PROCESS: &str = "16777216";
const PER_CONNECTION: &str = "4194304";
/// A principal's share of the 16 MiB.
const PRINCIPAL_SHARE: usize = 4 * MIB;
/// Tasks on an attacker's page, each with a message of [`TEXT_CHARS`]: about 0.9 MiB.
const PAGE: usize = 30;
const TEXT_CHARS: usize = 31_000;
/// Stalled connections per attacking principal, and the pages each asks for (until refused).
const CONNECTIONS: usize = 3;
const REQUESTS: usize = 6;
/// One-task pages a last connection of Alice's asks for, to fill what the large ones left.
const SMALL_PAGES: usize = 40;
/// RSS growth allowed beyond the process budget (as `streaming::stalled_window`).
const RSS_TOLERANCE: usize = 32 * MIB;

/// How long a stalled connection lives past its first answer's wait (the write timeout): long
/// enough for each test's reads while the readers stall, short enough to see them go.
const WRITE_TIMEOUT: &str = "8";

fn gateway_env() -> [(&'static str, &'static str); 3] {
    [
        ("Q_A2A_RESPONSE_BUFFER_BYTES", PROCESS),
        ("Q_A2A_RESPONSE_BUFFER_BYTES_PER_CONNECTION", PER_CONNECTION),
        ("Q_A2A_WRITE_TIMEOUT_SECONDS", WRITE_TIMEOUT),
    ]
}

/// `count` tasks of `agent`'s caller, each with a message of `chars` characters.
async fn seed(agent: &Agent, count: usize, chars: usize) {
    let text = "m".repeat(chars);
    let sends = (0..count).map(|_| {
        let agent = agent.clone();
        let text = text.clone();
        async move { agent.send_text_immediately(&new_id(), &text).await }
    });
    for sent in futures_util::future::join_all(sends).await {
        assert!(sent.is_result(), "{}", sent.body);
    }
}

/// While Alice and Bob each keep stalled connections full of ~0.9 MiB pages (each sending
/// until refused), Carol's ListTasks of about 50 KiB succeed every time; Alice and Bob each
/// hold at most a principal's share, refused past it (`scope="principal"`); the gateway's RSS
/// grows by at most the process budget plus the stated tolerance.
#[tokio::test]
async fn stalled_readers_of_one_tenant_leave_another_tenant_its_large_answers() {
    let gw = Gateway::start_with(options(&gateway_env())).await;
    let alice = gw.caller("tok-alice").agent("ag-writer");
    let bob = gw.caller("tok-bob").agent("ag-writer");
    let carol = gw.caller("tok-carol").agent("ag-globex");
    seed(&alice, PAGE, TEXT_CHARS).await;
    seed(&bob, PAGE, TEXT_CHARS).await;
    seed(&carol, 5, 10_000).await;
    let victim_page = carol.list_tasks(json!({"pageSize": 5})).await;
    assert_eq!(victim_page.result()["tasks"].as_array().unwrap().len(), 5);
    let victim_bytes = victim_page.body.to_string().len();
    assert!(
        victim_bytes > 32 * 1024,
        "Carol's page is {victim_bytes} bytes"
    );
    let page_bytes = alice
        .list_tasks(json!({"pageSize": PAGE}))
        .await
        .body
        .to_string()
        .len();

    let pid = gw.child.id().unwrap();
    let rss_before = rss_bytes(pid);
    let address = gw.url.trim_start_matches("http://").to_string();
    let url = format!("{}/v1/a2a/agents/ag-writer/rpc", gw.url);
    let in_flight = Arc::new(Semaphore::new(4));
    let mut attackers = Vec::new();
    let mut all_sent = Vec::new();
    for token in ["tok-alice", "tok-bob"] {
        for _ in 0..CONNECTIONS {
            let (sent, sent_seen) = tokio::sync::oneshot::channel();
            let asks = StalledAsks {
                token,
                page_size: PAGE,
                requests: REQUESTS,
            };
            attackers.push(tokio::spawn(stalled_connection(
                address.clone(),
                url.clone(),
                asks,
                in_flight.clone(),
                sent,
            )));
            all_sent.push(sent_seen);
        }
    }
    for sent in all_sent {
        sent.await.unwrap();
    }
    // Then one more of Alice's, with one-task pages (about 31 KiB), into whatever is left.
    let (sent, sent_seen) = tokio::sync::oneshot::channel();
    attackers.push(tokio::spawn(stalled_connection(
        address.clone(),
        url.clone(),
        StalledAsks {
            token: "tok-alice",
            page_size: 1,
            requests: SMALL_PAGES,
        },
        in_flight.clone(),
        sent,
    )));
    sent_seen.await.unwrap();
    // Every stalled connection holds what it was admitted; Carol lists meanwhile.
    let mut rss_peak = rss_before;
    let mut victim = Vec::new();
    let started = Instant::now();
    while victim.len() < 20 {
        let reply = carol.list_tasks(json!({"pageSize": 5})).await;
        let tasks = reply.body["result"]["tasks"].as_array().map_or(0, Vec::len);
        victim.push((reply.status, tasks, reply.body["error"].clone()));
        rss_peak = rss_peak.max(rss_bytes(pid));
    }
    let during = started.elapsed();
    let scrape = gw.metrics().await;
    let buffered = metric(&scrape, "a2a_response_bytes_buffered", &[]).unwrap();

    // The gateway closes the stalled connections at its write timeout: not waited for here.
    for attacker in attackers {
        attacker.abort();
    }
    let refused_principal = metric(
        &scrape,
        "a2a_response_buffer_refusals_total",
        &[("scope", "principal")],
    )
    .unwrap_or(0.0);
    eprintln!(
        "Carol's {} pages in {during:?}: {:?}; buffered {} MiB; principal refusals {refused_principal}; \
         RSS +{} MiB",
        victim.len(),
        victim.iter().map(|(s, n, _)| (*s, *n)).collect::<Vec<_>>(),
        buffered / MIB as f64,
        rss_peak.saturating_sub(rss_before) / MIB
    );
    for (status, tasks, error) in &victim {
        assert_eq!(
            (*status, *tasks),
            (200, 5),
            "Carol's page refused while other tenants' readers stall: {error}"
        );
    }
    // Alice and Bob hold at most their shares: two principals, 8 MiB of the 16.
    assert!(
        buffered <= (2 * PRINCIPAL_SHARE) as f64,
        "{} MiB held by two principals",
        buffered / MIB as f64
    );
    assert!(
        buffered >= (2 * (PRINCIPAL_SHARE - page_bytes)) as f64,
        "each principal holds its share's worth of pages ({} MiB held)",
        buffered / MIB as f64
    );
    assert!(refused_principal > 0.0, "nobody was refused at a share");
    let growth = rss_peak.saturating_sub(rss_before);
    assert!(
        growth <= 16 * MIB + RSS_TOLERANCE,
        "RSS grew by {} MiB",
        growth / MIB
    );
}

/// A page asked for when its caller's share is almost spent holds fewer tasks, within what is
/// left, with a token that continues after its last one; the next pages bring the rest once
/// the share is free again.
#[tokio::test]
async fn a_page_is_cut_to_what_is_left_of_its_callers_share() {
    let gw = Gateway::start_with(options(&gateway_env())).await;
    let alice = gw.caller("tok-alice").agent("ag-writer");
    seed(&alice, PAGE, TEXT_CHARS).await;
    let full = alice.list_tasks(json!({"pageSize": PAGE})).await;
    let page_bytes = full.body.to_string().len();
    let held_pages = PRINCIPAL_SHARE / page_bytes;
    assert!(held_pages >= 3, "pages of {page_bytes} bytes");

    // One stalled connection holds as many full pages as Alice's share admits.
    let address = gw.url.trim_start_matches("http://").to_string();
    let url = format!("{}/v1/a2a/agents/ag-writer/rpc", gw.url);
    let (sent, sent_seen) = tokio::sync::oneshot::channel();
    let stalled = tokio::spawn(stalled_connection(
        address,
        url,
        StalledAsks {
            token: "tok-alice",
            page_size: PAGE,
            requests: held_pages,
        },
        Arc::new(Semaphore::new(1)),
        sent,
    ));
    sent_seen.await.unwrap();
    let left = PRINCIPAL_SHARE - held_pages * page_bytes;

    let cut = alice.list_tasks(json!({"pageSize": PAGE})).await;
    let tasks = cut.result()["tasks"].as_array().unwrap().clone();
    let token = cut.result()["nextPageToken"].as_str().unwrap().to_string();
    eprintln!(
        "{held_pages} pages of {page_bytes} bytes held, {left} bytes left: a page of {} tasks, {} bytes",
        tasks.len(),
        cut.body.to_string().len()
    );
    assert!(
        !tasks.is_empty() && tasks.len() < PAGE,
        "a page of {} tasks with {left} bytes left of the share",
        tasks.len()
    );
    assert!(
        cut.body.to_string().len() <= left,
        "the page fits what was left"
    );
    assert!(!token.is_empty(), "the cut page continues");

    // Once the gateway closed the stalled connection (at its write timeout), the rest follows
    // from the token.
    let stalled = stalled.await.unwrap();
    assert!(
        stalled.statuses.iter().all(|s| *s == 200),
        "{:?}",
        stalled.statuses
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen: Vec<String> = tasks.iter().map(|t| t["id"].to_string()).collect();
    let mut next = token;
    while !next.is_empty() {
        let reply = alice
            .list_tasks(json!({"pageSize": PAGE, "pageToken": next}))
            .await;
        if reply.status == 503 {
            // The closed connection's answers are given back as its tasks end.
            assert!(Instant::now() < deadline, "still refused: {}", reply.body);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        for task in reply.result()["tasks"].as_array().unwrap() {
            seen.push(task["id"].to_string());
        }
        next = reply.result()["nextPageToken"]
            .as_str()
            .unwrap()
            .to_string();
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), PAGE, "every task once across the pages");
}
