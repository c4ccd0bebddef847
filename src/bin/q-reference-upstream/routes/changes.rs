//! `GET /internal/v1/changes/runs`: Q's run change feed, long-polled.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use tokio::time::Instant;

use super::{read_fault, MAX_WAIT_MS};
use crate::contract::RunChanges;
use crate::error::ApiError;
use crate::feed::changes_after;
use crate::state::AppState;

#[derive(Deserialize)]
pub(super) struct ChangesQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    limit: Option<usize>,
}

/// Q's run change feed: every status change of every run, in order, long-polled.
pub(super) async fn run_changes(
    State(st): State<AppState>,
    query: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<RunChanges>, ApiError> {
    let Query(q) = query?;
    read_fault(&st).await?;
    let limit = q.limit.unwrap_or(500).clamp(1, 1000);
    let until = Instant::now() + Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    let mut shutdown = st.shutdown_rx();
    loop {
        let mut rx = {
            let mut inner = st.lock().await;
            let changes = changes_after(&mut inner, q.after, limit);
            if !changes.is_empty() || Instant::now() >= until || *shutdown.borrow_and_update() {
                let cursor = changes.last().map_or(q.after, |c| c.cursor);
                return Ok(Json(RunChanges {
                    changes,
                    cursor,
                    head: inner.feed.head(),
                }));
            }
            // Subscribed under the lock, which every change is made under, so none can slip
            // between the check and the wait. A reset drops this feed, which also wakes us.
            inner.feed.subscribe()
        };
        tokio::select! {
            _ = tokio::time::timeout_at(until, rx.changed()) => {}
            _ = shutdown.changed() => {}
        }
    }
}
