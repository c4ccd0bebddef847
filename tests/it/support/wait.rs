//! Waiting for something that happens in the background (a reconciler pass, a feed follower).

use std::time::Duration;

/// Polls `check` every 100 ms until it holds; panics naming `what` after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A revocation in Q reaches every method through Q's access feed within this bound.
pub const REVOCATION_BOUND: Duration = Duration::from_secs(1);

/// Polls `check` every 20 ms until it holds; panics naming `what` if it does not within
/// [`REVOCATION_BOUND`].
pub async fn within_revocation_bound(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + REVOCATION_BOUND;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {REVOCATION_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
