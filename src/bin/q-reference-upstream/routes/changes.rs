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
use crate::breaks::FeedBreaks;
use crate::contract::{AccessChanges, RunChanges};
use crate::error::ApiError;
use crate::feed::{Entry, Feed, Slice};
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
/// where the feed stands, and a subscription to its next entry.
struct Read<T> {
    slice: Slice<T>,
    next: watch::Receiver<u64>,
}

/// The long poll both feeds share: answers at once when there are entries after `after` or
/// the caller has lost its place (another epoch, a position below the floor or above the
/// head), else when one arrives, the wait is over, the feed is replaced (reset) or the server
/// stops. Returns the slice and the cursor to continue from.
async fn long_poll<T>(
    st: &AppState,
    q: ChangesQuery,
    read: impl Fn(&mut Inner, u64, usize) -> Read<T>,
) -> (Slice<T>, u64) {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let until = Instant::now() + Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    let mut shutdown = st.shutdown_rx();
    loop {
        let mut rx = {
            let mut inner = st.lock().await;
            // Subscribed under the lock, which every change is made under, so none can slip
            // between the check and the wait. A reset drops the feed, which also wakes us.
            let Read { slice, next } = read(&mut inner, q.after, limit);
            // A lost place is news too: answer it at once rather than at the end of the wait.
            let lost = slice.head < q.after || q.after < slice.floor;
            if !slice.entries.is_empty()
                || lost
                || Instant::now() >= until
                || *shutdown.borrow_and_update()
            {
                // Cursors are contiguous, so the last entry returned is the one before the
                // first plus their number; a read below the floor starts at the floor.
                let cursor = match slice.entries.last() {
                    Some(_) => q.after.max(slice.floor) + slice.entries.len() as u64,
                    None => q.after,
                };
                return (slice, cursor);
            }
            next
        };
        tokio::select! {
            // A lagging feed has entries it withholds: look again soon rather than at the end.
            _ = tokio::time::timeout_at(until.min(Instant::now() + LAG_RECHECK), rx.changed()) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// How often a long poll looks again while nothing new was appended (a lagging feed releases
/// withheld entries without an append).
const LAG_RECHECK: Duration = Duration::from_millis(100);

/// Q's run change feed: every status change of every run, in order, long-polled.
pub(super) async fn run_changes(
    State(st): State<AppState>,
    query: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<RunChanges>, ApiError> {
    let Query(q) = query?;
    let (mut slice, cursor) = long_poll(&st, q, |inner, after, limit| Read {
        slice: inner.run_changes_after(after, limit),
        next: inner.feed.subscribe(),
    })
    .await;
    serve_broken(&st, &mut slice, st.breaks.run_feed(), |inner| &inner.feed).await;
    Ok(Json(RunChanges {
        changes: slice.entries,
        cursor,
        head: slice.head,
        epoch: slice.epoch,
        floor: slice.floor,
    }))
}

/// Q's access change feed: every grant, revocation and agent change, in order, long-polled.
pub(super) async fn access_changes(
    State(st): State<AppState>,
    query: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<AccessChanges>, ApiError> {
    let Query(q) = query?;
    let (mut slice, cursor) = long_poll(&st, q, |inner, after, limit| Read {
        slice: inner.access_changes_after(after, limit),
        next: inner.access_feed.subscribe(),
    })
    .await;
    serve_broken(&st, &mut slice, st.breaks.access_feed(), |inner| {
        &inner.access_feed
    })
    .await;
    Ok(Json(AccessChanges {
        changes: slice.entries,
        cursor,
        head: slice.head,
        epoch: slice.epoch,
        floor: slice.floor,
    }))
}

/// What a deliberately broken feed (`--break`) does with an answer it serves: lists it newest
/// first (`order`), gives the served cursors to other entries under the same epoch (`epoch`),
/// or discards what it served while reporting its floor as 0 (`floor`). The `head` break is
/// in the read itself (`Inner::run_changes_after`). Nothing, by default.
async fn serve_broken<T: Entry>(
    st: &AppState,
    slice: &mut Slice<T>,
    breaks: FeedBreaks,
    feed: fn(&Inner) -> &Feed<T>,
) {
    if breaks.order {
        slice.entries.reverse();
    }
    if breaks.floor {
        slice.floor = 0;
    }
    let served: Vec<u64> = slice.entries.iter().map(Entry::cursor).collect();
    let Some(&newest) = served.iter().max() else {
        return;
    };
    if breaks.epoch || breaks.floor {
        let inner = st.lock().await;
        if breaks.epoch {
            feed(&inner).refill(&served);
        }
        if breaks.floor {
            feed(&inner).compact(newest);
        }
    }
}
