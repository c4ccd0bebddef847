//! The evidence grant that arrives with Q's answer to a run's create (`principal_evidence`):
//! a fresh SendMessage's answer is cleared from it, with no second call to Q; a Q that omits
//! it, or answers a value this contract revision does not define, is asked through `/grants`;
//! and the grant is dated from before the create was sent, so a revocation the feed reports
//! while the create's answer is on its way is never overtaken by it. Kept while the access
//! feed is down, it is trusted no longer than any grant read from Q: the access bound.

use std::time::Duration;

use serde_json::{json, Value};

use tokio::time::Instant;

use super::{carries_content, held, ACCESS_BOUND, SETTLE, TOLERANCE};
use crate::support::{new_id, GatewayOptions, InProcessGateway};

/// Fresh sends per test.
const SENDS: u64 = 5;

/// The contract route calls Q counted, by route name (0 for a route never called).
fn calls(stats: &Value, route: &str) -> u64 {
    stats["requests"][route].as_u64().unwrap_or(0)
}

/// On a new gateway whose Q has `faults` set (none when null), sends `SENDS` fresh messages
/// with `returnImmediately`; the answers, and Q's calls of `create_run` and `run_grant` while
/// they were made.
async fn fresh_sends(faults: Value) -> (Vec<Value>, u64, u64) {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    if !faults.is_null() {
        gw.upstream.faults(faults).await;
    }
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // The caller's workspace access is cached first, so the sends ask Q only about their runs.
    assert_eq!(writer.card().await.status, 200);
    let before = gw.upstream.stats().await;
    let mut answers = Vec::new();
    for i in 0..SENDS {
        let reply = writer
            .send_text_immediately(&new_id(), &format!("words {i}"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        answers.push(reply.body);
    }
    let after = gw.upstream.stats().await;
    let delta = |route| calls(&after, route) - calls(&before, route);
    (answers, delta("create_run"), delta("run_grant"))
}

#[tokio::test]
async fn a_fresh_send_is_cleared_by_the_grant_its_create_answered() {
    let (answers, creates, grants) = fresh_sends(Value::Null).await;
    for answer in &answers {
        assert!(carries_content(answer), "the message is missing: {answer}");
    }
    assert_eq!(creates, SENDS);
    assert_eq!(
        grants, 0,
        "the create answered the caller's grant: no send asks Q for it again"
    );
}

#[tokio::test]
async fn a_create_without_the_grant_is_followed_by_a_grant_read() {
    let (answers, creates, grants) = fresh_sends(json!({"create_omit_evidence": true})).await;
    for answer in &answers {
        assert!(carries_content(answer), "the message is missing: {answer}");
    }
    assert_eq!(creates, SENDS);
    assert_eq!(
        grants, SENDS,
        "one grant read per send when Q does not give it"
    );
}

#[tokio::test]
async fn a_grant_value_this_revision_does_not_define_is_not_kept() {
    let (answers, creates, grants) = fresh_sends(json!({"unknown_enum_values": true})).await;
    for answer in &answers {
        // `/grants` answers the undefined value too: never read as granted.
        assert!(
            !carries_content(answer),
            "content without a grant: {answer}"
        );
    }
    assert_eq!(creates, SENDS);
    assert_eq!(
        grants, SENDS,
        "the undefined value is asked again, not kept"
    );
}

#[tokio::test]
async fn a_grant_carried_by_a_create_answered_before_a_revocation_is_never_served_after_it() {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    assert_eq!(writer.card().await.status, 200);
    gw.upstream.faults(json!({"hold": {"create_run": 1}})).await;
    let sender = writer.clone();
    let racing = tokio::spawn(async move {
        sender
            .send_text_immediately(&new_id(), "secret words")
            .await
    });
    held(&gw).await;
    // Q committed the run and computed its answer (`principal_evidence: granted`), held at
    // the barrier; now the revocation, and the access feed carries it to the gateway.
    let runs = gw.upstream.runs(None).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = runs[0]["id"].as_str().unwrap().to_owned();
    gw.upstream.grant_evidence(&run, "p-alice", false).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    gw.upstream.post("/admin/barrier/release", json!({})).await;
    let sent = racing.await.unwrap();
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert!(
        !carries_content(&sent.body),
        "the grant the create carried outlived the revocation the feed reported: {}",
        sent.body
    );
    let task = sent.task_id();
    for _ in 0..5 {
        let after = writer.get_task(&task).await;
        assert_eq!(after.status, 200, "{}", after.body);
        assert!(
            !carries_content(&after.body),
            "the grant the create carried stood in the cache: {}",
            after.body
        );
    }
}

#[tokio::test]
async fn a_grant_carried_by_a_create_while_the_access_feed_is_down_lasts_no_longer_than_the_access_bound(
) {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    assert_eq!(writer.card().await.status, 200);
    // Every read of the access feed fails from now on; the follower's long polls in flight
    // (300 ms) end meanwhile, so it no longer vouches for anything it holds.
    gw.upstream
        .faults(json!({"status": {"route": "access_changes", "status": 503, "count": 100000}}))
        .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let sent = writer
        .send_text_immediately(&new_id(), "secret words")
        .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert!(
        carries_content(&sent.body),
        "the grant the create carried clears its own answer: {}",
        sent.body
    );
    let task = sent.task_id();
    let runs = gw.upstream.runs(None).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = runs[0]["id"].as_str().unwrap().to_owned();
    // Counted from before Q is told: its commit is later.
    let revoked = Instant::now();
    gw.upstream.grant_evidence(&run, "p-alice", false).await;
    let mut reads = Vec::new();
    while Instant::now() < revoked + ACCESS_BOUND + SETTLE {
        let at = Instant::now() - revoked;
        let read = writer.get_task(&task).await;
        assert_eq!(read.status, 200, "{}", read.body);
        reads.push((at, carries_content(&read.body)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after: Vec<_> = reads
        .iter()
        .filter(|(at, _)| *at > ACCESS_BOUND + TOLERANCE)
        .collect();
    assert!(after.len() >= 3, "too few reads after the bound: {reads:?}");
    let served: Vec<_> = after.iter().filter(|(_, content)| *content).collect();
    assert!(
        served.is_empty(),
        "content served after the bound ({ACCESS_BOUND:?} + {TOLERANCE:?}) with the access feed down: {served:?}"
    );
}
