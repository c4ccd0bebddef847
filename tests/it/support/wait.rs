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
