//! Q's change feeds, long-polled: `GET /internal/v1/changes/runs` and
//! `GET /internal/v1/changes/access`, with one set of rules (cursor, `head`, limit, wait).

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::MAX_WAIT_MS;
use crate::contract::{AccessChanges, RunChanges};
use crate::error::ApiError;
use crate::state::{AppState, Inner};

/// Entries per answer when the caller does not say, and at most.
const DEFAULT_LIMIT: usize = 500;
const MAX_LIMIT: usize = 1000;

#[derive(Deserialize)]
pub(super) struct ChangesQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    limit: Option<usize>,
}

/// One read of a feed under the state's lock: the entries after a cursor (at most a limit),
/// the feed's head, and a subscription to its next entry.
struct Read<T> {
    changes: Vec<T>,
    head: u64,
    next: watch::Receiver<u64>,
}

/// The long poll both feeds share: answers at once when there are entries after `after` or
/// the head is below it (a reset), else when one arrives, the wait is over, the feed is
/// replaced (reset) or the server stops.
/// Returns the entries, the cursor to continue from and the head.
async fn long_poll<T>(
    st: &AppState,
    q: ChangesQuery,
    read: impl Fn(&mut Inner, u64, usize) -> Read<T>,
) -> (Vec<T>, u64, u64) {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let until = Instant::now() + Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    let mut shutdown = st.shutdown_rx();
    loop {
        let mut rx = {
            let mut inner = st.lock().await;
            // Subscribed under the lock, which every change is made under, so none can slip
            // between the check and the wait. A reset drops the feed, which also wakes us.
            let Read {
                changes,
                head,
                next,
            } = read(&mut inner, q.after, limit);
            // A head below the caller's position is news too (the feed was reset): answer it
            // at once rather than at the end of the wait.
            let reset = head < q.after;
            if !changes.is_empty()
                || reset
                || Instant::now() >= until
                || *shutdown.borrow_and_update()
            {
                // Cursors are contiguous, so the last entry returned is `after + len`.
                let cursor = q.after + changes.len() as u64;
                return (changes, cursor, head);
            }
            next
        };
        tokio::select! {
            _ = tokio::time::timeout_at(until, rx.changed()) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Q's run change feed: every status change of every run, in order, long-polled.
pub(super) async fn run_changes(
    State(st): State<AppState>,
    query: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<RunChanges>, ApiError> {
    let Query(q) = query?;
    let (changes, cursor, head) = long_poll(&st, q, |inner, after, limit| Read {
        changes: inner.run_changes_after(after, limit),
        head: inner.feed.head(),
        next: inner.feed.subscribe(),
    })
    .await;
    Ok(Json(RunChanges {
        changes,
        cursor,
        head,
    }))
}

/// Q's access change feed: every grant, revocation and agent change, in order, long-polled.
pub(super) async fn access_changes(
    State(st): State<AppState>,
    query: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<AccessChanges>, ApiError> {
    let Query(q) = query?;
    let (changes, cursor, head) = long_poll(&st, q, |inner, after, limit| Read {
        changes: inner.access_feed.after(after, limit),
        head: inner.access_feed.head(),
        next: inner.access_feed.subscribe(),
    })
    .await;
    Ok(Json(AccessChanges {
        changes,
        cursor,
        head,
    }))
}
