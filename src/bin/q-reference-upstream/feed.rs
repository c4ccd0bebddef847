//! Q's run change feed (`GET /internal/v1/changes/runs`).
//!
//! The feed belongs to the state (`Inner::feed`), not to the process: `/admin/reset` replaces
//! it with a fresh one, so cursors start over at 1 and `head` reads 0, which is how the
//! contract tells a follower that Q's feed was reset.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::Utc;
use tokio::sync::watch;

use crate::contract::RunChange;
use crate::runs::RunEntry;

/// Q's run change feed: every event of every run gets the next cursor. Long polls subscribe
/// to the newest cursor; dropping the feed (at reset) wakes them.
pub struct ChangeFeed {
    cursor: AtomicU64,
    tx: watch::Sender<u64>,
}

impl Default for ChangeFeed {
    fn default() -> Self {
        ChangeFeed {
            cursor: AtomicU64::new(0),
            tx: watch::channel(0).0,
        }
    }
}

impl ChangeFeed {
    pub fn next(&self) -> u64 {
        let cursor = self.cursor.fetch_add(1, Ordering::SeqCst) + 1;
        self.tx.send_replace(cursor);
        cursor
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// The newest cursor issued.
    pub fn head(&self) -> u64 {
        self.cursor.load(Ordering::SeqCst)
    }
}

/// Feed entries after `after`, oldest first, at most `limit`.
pub fn changes_after(
    runs: &mut HashMap<String, RunEntry>,
    after: u64,
    limit: usize,
) -> Vec<RunChange> {
    let now = Utc::now();
    let mut changes = Vec::new();
    for entry in runs.values_mut() {
        entry.enforce_deadline(now);
        for (event, cursor) in entry.events.iter().zip(&entry.feed_cursors) {
            if *cursor > after {
                changes.push(RunChange {
                    cursor: *cursor,
                    run_id: entry.run.id.clone(),
                    workflow_id: entry.run.workflow_id.clone(),
                    status: event.status,
                    status_message: event.status_message.clone(),
                    seq: event.seq,
                    at: event.at,
                });
            }
        }
    }
    changes.sort_by_key(|c| c.cursor);
    changes.truncate(limit);
    changes
}
