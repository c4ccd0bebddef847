//! Q's run change feed (`GET /internal/v1/changes/runs`).
//!
//! The feed belongs to the state (`Inner::feed`), not to the process: `/admin/reset` replaces
//! it with a fresh one, so cursors start over at 1 and `head` reads 0, which is how the
//! contract tells a follower that Q's feed was reset.
//!
//! The feed keeps the run of every cursor in cursor order, so a read finds its page by position
//! (cursor N is entry N - 1) rather than by looking through every run: it runs under the
//! state's one lock, which every other call of Q waits on meanwhile.

use std::sync::Mutex;

use chrono::Utc;
use tokio::sync::watch;

use crate::contract::RunChange;
use crate::state::Inner;

/// Q's run change feed: every event of every run gets the next cursor. Long polls subscribe
/// to the newest cursor; dropping the feed (at reset) wakes them.
pub struct ChangeFeed {
    /// The run id of each cursor: entry `i` is cursor `i + 1`.
    runs: Mutex<Vec<String>>,
    tx: watch::Sender<u64>,
}

impl Default for ChangeFeed {
    fn default() -> Self {
        ChangeFeed {
            runs: Mutex::new(Vec::new()),
            tx: watch::channel(0).0,
        }
    }
}

impl ChangeFeed {
    /// The next cursor, for an event of `run_id`.
    pub fn next(&self, run_id: &str) -> u64 {
        let cursor = {
            let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
            runs.push(run_id.to_owned());
            runs.len() as u64
        };
        self.tx.send_replace(cursor);
        cursor
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// The newest cursor issued.
    pub fn head(&self) -> u64 {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).len() as u64
    }

    /// Cursors after `after` with their run ids, oldest first, at most `limit`.
    fn after(&self, after: u64, limit: usize) -> Vec<(u64, String)> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(after).unwrap_or(usize::MAX).min(runs.len());
        runs[start..]
            .iter()
            .take(limit)
            .enumerate()
            .map(|(i, run_id)| ((start + i + 1) as u64, run_id.clone()))
            .collect()
    }
}

/// Feed entries after `after`, oldest first, at most `limit`. Runs past their execution
/// deadline are timed out first, so their `timed_out` is in the feed.
pub fn changes_after(inner: &mut Inner, after: u64, limit: usize) -> Vec<RunChange> {
    inner.enforce_due_deadlines(Utc::now());
    let page = inner.feed.after(after, limit);
    page.into_iter()
        .filter_map(|(cursor, run_id)| {
            let entry = inner.runs.get(&run_id)?;
            let index = entry.feed_cursors.binary_search(&cursor).ok()?;
            let event = &entry.events[index];
            Some(RunChange {
                cursor,
                run_id,
                workflow_id: entry.run.workflow_id.clone(),
                status: event.status,
                status_message: event.status_message.clone(),
                seq: event.seq,
                at: event.at,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::RunStatus;
    use crate::state::AppState;
    use crate::testing::{fixtures, req};

    #[tokio::test]
    async fn pages_follow_the_cursor_across_runs() {
        // Runs this slow stay queued for the whole test.
        let state = AppState::new(fixtures(), 1000.0);
        let mut ids = Vec::new();
        for i in 0..5 {
            let (_, run) = state
                .create_run(req(&format!("wf-page-{i}"), "ag-writer", &["hi"]))
                .await
                .unwrap();
            ids.push(run.id);
        }
        let mut inner = state.lock().await;
        let page = changes_after(&mut inner, 1, 3);
        let cursors: Vec<u64> = page.iter().map(|c| c.cursor).collect();
        assert_eq!(cursors, [2, 3, 4]);
        let runs: Vec<&str> = page.iter().map(|c| c.run_id.as_str()).collect();
        assert_eq!(runs, [&ids[1], &ids[2], &ids[3]]);
        assert!(page
            .iter()
            .all(|c| c.status == RunStatus::Queued && c.seq == 1));
        assert_eq!(changes_after(&mut inner, 5, 10), []);
        assert_eq!(changes_after(&mut inner, 99, 10), []);
        assert_eq!(inner.feed.head(), 5);
    }

    #[tokio::test]
    async fn a_read_times_out_runs_past_their_deadline_first() {
        let state = AppState::new(fixtures(), 1000.0);
        let (_, run) = state
            .create_run(req("wf-deadline", "ag-writer", &["hi"]))
            .await
            .unwrap();
        let mut inner = state.lock().await;
        inner.enforce_due_deadlines(run.deadline_at - chrono::TimeDelta::seconds(1));
        assert_eq!(changes_after(&mut inner, 1, 10), []);
        inner.enforce_due_deadlines(run.deadline_at);
        let page = changes_after(&mut inner, 1, 10);
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].status, RunStatus::TimedOut);
        assert!(inner.deadlines.is_empty());
    }
}
