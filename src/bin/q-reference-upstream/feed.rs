//! Q's change feeds: the run feed (`GET /internal/v1/changes/runs`) and the access feed
//! (`GET /internal/v1/changes/access`).
//!
//! Each feed is an ordered log: entry `n` has cursor `n` (from 1, without gaps), so a read
//! after cursor `N` is a slice of the log, however many runs or changes there were before it.
//! Each log has an **epoch** (a fresh id whenever its cursors stop meaning what they meant) and
//! a **floor** (every entry above it is still served). The feeds belong to the state (`Inner`),
//! not to the process: `/admin/reset` replaces them with fresh ones (a new epoch, cursors from
//! 1 again, `head` 0).
//!
//! The faults a real Q's feed may show, for tests (driven through `/admin/feeds/...` and
//! `/admin/faults`): **compaction** (entries at or below a cursor are dropped and the floor
//! rises), **failover** (another epoch whose history lacks the newest entries and whose head
//! is nevertheless above every reader's position) and **lag** (entries younger than a delay
//! are withheld while `head` still names them, as a feed served from a lagging copy reports the
//! primary's head).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use chrono::Utc;

use crate::contract::{AccessChange, AccessChangeKind, RunChange, RunStatus};

/// Every event of every run, in the order they happened.
pub type ChangeFeed = Feed<RunChange>;

/// Every change of who may use an agent or see a run's content, in the order they happened.
pub type AccessFeed = Feed<AccessChange>;

/// An entry of a feed that carries its own cursor (the filler a failover appends is
/// renumbered).
pub trait Entry: Clone {
    fn cursor(&self) -> u64;
    fn set_cursor(&mut self, cursor: u64);
    /// An entry that changes nothing, put where another history has entries this one lacks
    /// (a failover's filler).
    fn filler() -> Self;
}

impl Entry for RunChange {
    fn cursor(&self) -> u64 {
        self.cursor
    }

    fn set_cursor(&mut self, cursor: u64) {
        self.cursor = cursor;
    }

    fn filler() -> Self {
        RunChange {
            cursor: 0,
            run_id: "run-failover-filler".into(),
            workflow_id: "failover-filler".into(),
            status: RunStatus::Running,
            status_message: None,
            seq: 0,
            at: Utc::now(),
        }
    }
}

impl Entry for AccessChange {
    fn cursor(&self) -> u64 {
        self.cursor
    }

    fn set_cursor(&mut self, cursor: u64) {
        self.cursor = cursor;
    }

    fn filler() -> Self {
        AccessChange {
            cursor: 0,
            kind: AccessChangeKind::Agent,
            tenant_id: Some("t-failover-filler".into()),
            workspace_id: None,
            principal_id: None,
            agent_id: Some("ag-failover-filler".into()),
            run_id: None,
            at: Utc::now(),
        }
    }
}

/// One answer of a feed: the entries after a cursor and where the feed stands.
#[derive(Debug, Clone)]
pub struct Slice<T> {
    pub entries: Vec<T>,
    pub head: u64,
    /// The newest cursor outside the withheld (lagging) entries: the head a lagging copy has.
    pub visible_head: u64,
    pub epoch: String,
    pub floor: u64,
}

/// An append-only log whose entries are numbered from 1. Long polls subscribe to the newest
/// cursor; dropping the feed (at reset) wakes them.
pub struct Feed<T> {
    /// Appends also happen under the state's lock; this one lets a run entry append through
    /// its shared handle without a second borrow of the state.
    log: Mutex<Log<T>>,
    tx: watch::Sender<u64>,
}

struct Log<T> {
    /// Entries above the floor, oldest first, with the moment each was appended.
    entries: VecDeque<(Instant, T)>,
    /// Every cursor at or below it may have been dropped; `entries[0]` has cursor `floor + 1`.
    floor: u64,
    epoch: String,
}

impl<T> Log<T> {
    fn head(&self) -> u64 {
        self.floor + self.entries.len() as u64
    }
}

fn new_epoch() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl<T> Default for Feed<T> {
    fn default() -> Self {
        Feed {
            log: Mutex::new(Log {
                entries: VecDeque::new(),
                floor: 0,
                epoch: new_epoch(),
            }),
            tx: watch::channel(0).0,
        }
    }
}

impl<T: Entry> Feed<T> {
    fn log(&self) -> std::sync::MutexGuard<'_, Log<T>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the entry `make` builds for the next cursor; returns that cursor.
    pub fn append(&self, make: impl FnOnce(u64) -> T) -> u64 {
        let mut log = self.log();
        let cursor = log.head() + 1;
        log.entries.push_back((Instant::now(), make(cursor)));
        self.tx.send_replace(cursor);
        cursor
    }

    /// The entries with a cursor above `after`, oldest first, at most `limit`, leaving out
    /// those appended less than `lag` ago (and every one after them); `head` still names the
    /// newest entry.
    pub fn after(&self, after: u64, limit: usize, lag: Duration) -> Slice<T> {
        let log = self.log();
        let start = usize::try_from(after.saturating_sub(log.floor))
            .unwrap_or(usize::MAX)
            .min(log.entries.len());
        let now = Instant::now();
        let young = log
            .entries
            .iter()
            .rev()
            .take_while(|(at, _)| now.duration_since(*at) < lag)
            .count();
        let entries = log
            .entries
            .iter()
            .skip(start)
            .take(limit)
            .take_while(|(at, _)| now.duration_since(*at) >= lag)
            .map(|(_, entry)| entry.clone())
            .collect();
        Slice {
            entries,
            head: log.head(),
            visible_head: log.head() - young as u64,
            epoch: log.epoch.clone(),
            floor: log.floor,
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// The newest cursor issued (0 for an empty feed).
    pub fn head(&self) -> u64 {
        self.log().head()
    }

    /// Drops the entries at or below `through` (at most the head); returns the new floor.
    pub fn compact(&self, through: u64) -> u64 {
        let mut log = self.log();
        let through = through.min(log.head());
        while log.floor < through {
            log.entries.pop_front();
            log.floor += 1;
        }
        self.tx.send_replace(log.head());
        log.floor
    }

    /// Puts a filler entry under each of these cursors (those still held), keeping the epoch:
    /// the cursors now name other changes (the `--break` of a feed whose epoch lies).
    pub fn refill(&self, cursors: &[u64]) {
        let mut log = self.log();
        let floor = log.floor;
        for &cursor in cursors {
            let Some(index) = cursor.checked_sub(floor + 1) else {
                continue;
            };
            if let Some((_, entry)) = log.entries.get_mut(index as usize) {
                let mut filler = T::filler();
                filler.set_cursor(cursor);
                *entry = filler;
            }
        }
    }

    /// A failover to a copy with another history: a new epoch whose log lacks the newest
    /// `lost` entries, then `ahead` filler entries (renumbered), so its head is above every
    /// reader's position. Returns the new head.
    pub fn fail_over(&self, lost: u64, ahead: u64) -> u64 {
        let mut log = self.log();
        for _ in 0..lost.min(log.entries.len() as u64) {
            log.entries.pop_back();
        }
        let now = Instant::now();
        for _ in 0..(ahead + lost) {
            let mut entry = T::filler();
            entry.set_cursor(log.head() + 1);
            log.entries.push_back((now, entry));
        }
        log.epoch = new_epoch();
        let head = log.head();
        self.tx.send_replace(head);
        head
    }

    /// The feed's current epoch.
    pub fn epoch(&self) -> String {
        self.log().epoch.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::AccessChangeKind;

    fn change(cursor: u64) -> AccessChange {
        AccessChange {
            cursor,
            kind: AccessChangeKind::Agent,
            tenant_id: None,
            workspace_id: None,
            principal_id: None,
            agent_id: Some(format!("ag-{cursor}")),
            run_id: None,
            at: chrono::Utc::now(),
        }
    }

    fn cursors(slice: &Slice<AccessChange>) -> Vec<u64> {
        slice.entries.iter().map(|c| c.cursor).collect()
    }

    #[test]
    fn cursors_number_entries_from_one_and_reads_are_slices() {
        let feed = AccessFeed::default();
        assert_eq!(feed.head(), 0);
        assert!(feed.after(0, 10, Duration::ZERO).entries.is_empty());
        for _ in 0..4 {
            feed.append(change);
        }
        assert_eq!(feed.head(), 4);
        assert_eq!(cursors(&feed.after(0, 2, Duration::ZERO)), [1, 2]);
        assert_eq!(cursors(&feed.after(2, 10, Duration::ZERO)), [3, 4]);
        assert!(feed.after(4, 10, Duration::ZERO).entries.is_empty());
        // A caller past the head (a feed that was reset under it) reads nothing.
        assert!(feed.after(99, 10, Duration::ZERO).entries.is_empty());
    }

    #[test]
    fn compaction_raises_the_floor_and_a_read_below_it_misses_entries() {
        let feed = AccessFeed::default();
        for _ in 0..5 {
            feed.append(change);
        }
        assert_eq!(feed.compact(3), 3);
        let slice = feed.after(1, 10, Duration::ZERO);
        assert_eq!((slice.floor, slice.head), (3, 5));
        assert_eq!(cursors(&slice), [4, 5]);
        assert_eq!(feed.append(change), 6);
    }

    #[test]
    fn a_failover_changes_the_epoch_and_lands_above_every_reader() {
        let feed = AccessFeed::default();
        for _ in 0..5 {
            feed.append(change);
        }
        let before = feed.epoch();
        assert_eq!(feed.fail_over(1, 3), 8);
        let slice = feed.after(0, 10, Duration::ZERO);
        assert_ne!(slice.epoch, before);
        assert_eq!(cursors(&slice), [1, 2, 3, 4, 5, 6, 7, 8]);
        // Entry 5 of the old history is gone: cursor 5 is now filler.
        assert_eq!(
            slice.entries[4].agent_id.as_deref(),
            Some("ag-failover-filler")
        );
    }

    #[test]
    fn lag_withholds_young_entries_but_not_the_head() {
        let feed = AccessFeed::default();
        feed.append(change);
        let slice = feed.after(0, 10, Duration::from_secs(60));
        assert!(slice.entries.is_empty());
        assert_eq!((slice.head, slice.visible_head), (1, 0));
        assert_eq!(feed.after(0, 10, Duration::ZERO).visible_head, 1);
    }

    #[test]
    fn refilled_cursors_name_other_entries_under_the_same_epoch() {
        let feed = AccessFeed::default();
        for _ in 0..4 {
            feed.append(change);
        }
        feed.compact(1);
        let epoch = feed.epoch();
        // Cursor 1 is compacted away and 9 was never issued: both are left alone.
        feed.refill(&[1, 2, 4, 9]);
        let slice = feed.after(0, 10, Duration::ZERO);
        assert_eq!(slice.epoch, epoch);
        assert_eq!(cursors(&slice), [2, 3, 4]);
        let agents: Vec<_> = slice.entries.iter().map(|e| e.agent_id.clone()).collect();
        assert_eq!(
            agents,
            [
                Some("ag-failover-filler".to_owned()),
                Some("ag-3".to_owned()),
                Some("ag-failover-filler".to_owned())
            ]
        );
    }

    #[tokio::test]
    async fn an_append_wakes_a_subscriber() {
        let feed = AccessFeed::default();
        let mut rx = feed.subscribe();
        feed.append(change);
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), 1);
    }
}
