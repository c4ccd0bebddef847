//! A revocation of the caller's workspace access, under each state of Q's access change feed
//! the contract allows: healthy, lagging behind the access API, down, failed over to a copy
//! with another history (its head above our position), and compacted past our position. The
//! bound is the access bound, 1 s, in every case.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::time::Instant;

use super::{Scenario, ACCESS_BOUND};

const WORKSPACE: &str = "ws-acme-main";

async fn revoke(s: &Scenario, announce: bool) -> Instant {
    let at = Instant::now();
    s.gw.upstream
        .post(
            "/admin/grants/workspace",
            json!({"workspace_id": WORKSPACE, "principal_id": "p-alice", "granted": false,
                   "announce": announce}),
        )
        .await;
    at
}

#[tokio::test]
async fn the_feed_healthy() {
    let s = Scenario::start(&[]).await;
    let surfaces = s.open().await;
    let revoked = revoke(&s, true).await;
    surfaces
        .assert_fresh(revoked, revoked, ACCESS_BOUND, "feed healthy")
        .await;
}

#[tokio::test]
async fn the_feed_lagging_behind_the_access_api() {
    let s = Scenario::start(&[]).await;
    let surfaces = s.open().await;
    // The feed withholds every entry younger than 10 s, while its head names them.
    s.gw.upstream
        .faults(json!({"access_feed_lag_ms": 10_000}))
        .await;
    let revoked = revoke(&s, true).await;
    surfaces
        .assert_fresh(revoked, revoked, ACCESS_BOUND, "feed lagging")
        .await;
}

/// Longer than any long-poll of the access feed in flight (the follower's own, 300 ms, or a
/// longer one): once it has passed, the follower's reads all meet the armed fault.
const POLLS_DRAINED: Duration = Duration::from_millis(2500);

/// Every read of the access feed fails from now on, and the follower has seen it.
async fn access_feed_down(s: &Scenario) {
    s.gw.upstream
        .faults(json!({"status": {"route": "access_changes", "status": 503, "count": 100000}}))
        .await;
    tokio::time::sleep(POLLS_DRAINED).await;
}

#[tokio::test]
async fn the_feed_down() {
    let s = Scenario::start(&[]).await;
    let surfaces = s.open().await;
    access_feed_down(&s).await;
    let revoked = revoke(&s, true).await;
    surfaces
        .assert_fresh(revoked, revoked, ACCESS_BOUND, "feed down")
        .await;
}

#[tokio::test]
async fn the_feed_failed_over_to_a_history_without_the_revocation() {
    let s = Scenario::start(&[]).await;
    let surfaces = s.open().await;
    // The revocation's entry is lost with the failover; the new history's head is above the
    // gateway's position, so only the new epoch says the place is lost.
    let revoked = revoke(&s, false).await;
    s.gw.upstream
        .post(
            "/admin/feeds/access/failover",
            json!({"lost": 0, "ahead": 5}),
        )
        .await;
    surfaces
        .assert_fresh(revoked, revoked, ACCESS_BOUND, "feed failed over")
        .await;
}

#[tokio::test]
async fn the_feed_compacted_past_our_position() {
    let s = Scenario::start(&[]).await;
    let surfaces = s.open().await;
    // The follower cannot read for a while; meanwhile the revocation is appended and
    // compacted away. Nobody reads until the feed answers again, so nothing but the floor can
    // tell the follower that its cached answers missed a change.
    access_feed_down(&s).await;
    let revoked = revoke(&s, true).await;
    s.gw.upstream
        .post("/admin/feeds/access/compact", json!({}))
        .await;
    s.gw.upstream
        .admin(Method::DELETE, "/admin/faults", None)
        .await;
    // Reads start later, and go on until well after the follower's backoff has let it read
    // the feed again (and trust it, unless something told it its place was lost).
    let from = revoked + Duration::from_millis(1500);
    let settle = Duration::from_secs(6);
    surfaces
        .assert_fresh_for(revoked, from, ACCESS_BOUND, settle, "feed compacted")
        .await;
}
