//! Q's change feeds: the run feed (`GET /internal/v1/changes/runs`) and the access feed
//! (`GET /internal/v1/changes/access`).
//!
//! Each feed is an ordered log: entry `n` has cursor `n` (from 1, without gaps), so a read
//! after cursor `N` is a slice of the log, however many runs or changes there were before it.
//! The feeds belong to the state (`Inner`), not to the process: `/admin/reset` replaces them
//! with fresh ones, so cursors start over at 1 and `head` reads 0, which is how the contract
//! tells a follower that Q's feed was reset.

use std::sync::Mutex;

use tokio::sync::watch;

use crate::contract::{AccessChange, RunChange};

/// Every event of every run, in the order they happened.
pub type ChangeFeed = Feed<RunChange>;

/// Every change of who may use an agent or see a run's content, in the order they happened.
pub type AccessFeed = Feed<AccessChange>;

/// An append-only log whose entries are numbered from 1. Long polls subscribe to the newest
/// cursor; dropping the feed (at reset) wakes them.
pub struct Feed<T> {
    /// Entry `i` has cursor `i + 1`. Appends also happen under the state's lock; this one lets
    /// a run entry append through its shared handle without a second borrow of the state.
    log: Mutex<Vec<T>>,
    tx: watch::Sender<u64>,
}

impl<T> Default for Feed<T> {
    fn default() -> Self {
        Feed {
            log: Mutex::new(Vec::new()),
            tx: watch::channel(0).0,
        }
    }
}

impl<T: Clone> Feed<T> {
    /// Appends the entry `make` builds for the next cursor; returns that cursor.
    pub fn append(&self, make: impl FnOnce(u64) -> T) -> u64 {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let cursor = log.len() as u64 + 1;
        log.push(make(cursor));
        self.tx.send_replace(cursor);
        cursor
    }

    /// The entries with a cursor above `after`, oldest first, at most `limit`: a slice of the
    /// log, whatever its length.
    pub fn after(&self, after: u64, limit: usize) -> Vec<T> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(after).unwrap_or(usize::MAX).min(log.len());
        let end = start.saturating_add(limit).min(log.len());
        log[start..end].to_vec()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// The newest cursor issued (0 for an empty feed).
    pub fn head(&self) -> u64 {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_number_entries_from_one_and_reads_are_slices() {
        let feed = Feed::<(u64, &str)>::default();
        assert_eq!(feed.head(), 0);
        assert!(feed.after(0, 10).is_empty());
        for name in ["a", "b", "c", "d"] {
            feed.append(|cursor| (cursor, name));
        }
        assert_eq!(feed.head(), 4);
        assert_eq!(feed.after(0, 2), [(1, "a"), (2, "b")]);
        assert_eq!(feed.after(2, 10), [(3, "c"), (4, "d")]);
        assert!(feed.after(4, 10).is_empty());
        // A caller past the head (a feed that was reset under it) reads nothing.
        assert!(feed.after(99, 10).is_empty());
    }

    #[tokio::test]
    async fn an_append_wakes_a_subscriber() {
        let feed = Feed::<u64>::default();
        let mut rx = feed.subscribe();
        feed.append(|cursor| cursor);
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), 1);
    }
}
