//! Follows one of Q's change feeds for the whole check, as the gateway would, and keeps every
//! read: when it was sent and received, from which position, and what Q answered. The feed
//! checks judge those reads afterwards (`feed_rules`); the other checks wait on them for the
//! changes they made.
//!
//! Reads ask `wait_ms=0`, so each answer says where the feed stood when Q received it (what the
//! head check needs), and the follower reads again at once while answers bring changes, else
//! every [`POLL`]. Only the follower reads a feed during the check, so what one read serves is
//! what the others see. It can be paused, so that changes made meanwhile arrive together (an
//! answer with several changes, for the order checks).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::watch;

use crate::upstream::contract::{AccessChange, FeedContinuity, FeedPosition, RunChange};

use super::client::Q;

/// How often a caught-up follower reads again.
pub const POLL: Duration = Duration::from_millis(100);

/// Changes per read.
pub const LIMIT: usize = 200;

/// One answer of a feed (`RunChanges`, `AccessChanges`).
#[derive(Debug, Clone, Deserialize)]
pub struct Page<C> {
    pub changes: Vec<C>,
    pub cursor: u64,
    pub head: u64,
    pub epoch: String,
    pub floor: u64,
}

impl<C> Page<C> {
    /// Whether a reader at `after` of `epoch` can continue from this answer.
    pub fn continues(&self, epoch: &str, after: u64) -> bool {
        let position = FeedPosition {
            epoch: &self.epoch,
            floor: self.floor,
            head: self.head,
        };
        position.continuity(epoch, after) == FeedContinuity::Continues
    }
}

/// An entry of either feed.
pub trait Change: Clone + DeserializeOwned + Send + Sync + 'static {
    /// The feed's path under `/internal/v1`.
    const PATH: &'static str;
    fn cursor(&self) -> u64;
    /// Whether both name the same change (`at` aside).
    fn same(&self, other: &Self) -> bool;
    fn describe(&self) -> String;
    /// The run and its event `seq`, for a run change that reports one.
    fn run_seq(&self) -> Option<(&str, u64)>;
}

impl Change for RunChange {
    const PATH: &'static str = "/changes/runs";
    fn cursor(&self) -> u64 {
        self.cursor
    }
    fn same(&self, other: &Self) -> bool {
        (&self.run_id, &self.workflow_id, self.status, self.seq)
            == (&other.run_id, &other.workflow_id, other.status, other.seq)
    }
    fn describe(&self) -> String {
        format!("{} {:?} (seq {})", self.run_id, self.status, self.seq)
    }
    fn run_seq(&self) -> Option<(&str, u64)> {
        (self.seq > 0).then_some((self.run_id.as_str(), self.seq))
    }
}

impl Change for AccessChange {
    const PATH: &'static str = "/changes/access";
    fn cursor(&self) -> u64 {
        self.cursor
    }
    fn same(&self, other: &Self) -> bool {
        let ids = |c: &AccessChange| {
            (
                c.kind,
                c.tenant_id.clone(),
                c.workspace_id.clone(),
                c.principal_id.clone(),
                c.agent_id.clone(),
                c.run_id.clone(),
            )
        };
        ids(self) == ids(other)
    }
    fn describe(&self) -> String {
        let ids: Vec<&str> = [
            &self.workspace_id,
            &self.agent_id,
            &self.run_id,
            &self.principal_id,
        ]
        .into_iter()
        .filter_map(|id| id.as_deref())
        .collect();
        format!("{:?} {}", self.kind, ids.join(" "))
    }
    fn run_seq(&self) -> Option<(&str, u64)> {
        None
    }
}

/// One read of the feed.
#[derive(Debug, Clone)]
pub struct Read<C> {
    /// When the request was sent.
    pub sent: Instant,
    /// The position read from, in the epoch the follower was following.
    pub after: u64,
    pub following: String,
    pub limit: usize,
    /// Q's answer, or why there was none that parsed.
    pub page: Result<Page<C>, String>,
}

impl<C> Read<C> {
    /// The answer, when it continues the follower's history (same epoch, position within
    /// floor and head).
    pub fn in_place(&self) -> Option<&Page<C>> {
        self.page
            .as_ref()
            .ok()
            .filter(|p| p.continues(&self.following, self.after))
    }
}

/// Where the feed stood when the follower started.
#[derive(Debug, Clone)]
pub struct Start {
    pub epoch: String,
    pub head: u64,
}

struct Shared<C> {
    reads: Mutex<Vec<Read<C>>>,
    /// The number of reads kept, moved by each one.
    count: watch::Sender<usize>,
    paused: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    /// Held for the length of each read, so a pause can wait for one in flight.
    reading: tokio::sync::Mutex<()>,
}

pub struct Follower<C> {
    shared: Arc<Shared<C>>,
    task: tokio::task::JoinHandle<()>,
    pub start: Start,
}

/// One read of the feed at `after`, parsed.
pub async fn read_page<C: Change>(q: &Q, after: u64, limit: usize) -> Result<Page<C>, String> {
    let path = format!("{}?after={after}&limit={limit}&wait_ms=0", C::PATH);
    let answer = q.get(&path).await?;
    if answer.status != 200 {
        return Err(format!("GET {} answered {}", C::PATH, answer.describe()));
    }
    answer.json()
}

impl<C: Change> Follower<C> {
    /// Learns where the feed stands (one read of its oldest change) and follows it from its
    /// head.
    pub async fn start(q: &Q) -> Result<Follower<C>, String> {
        let first = read_page::<C>(q, 0, 1).await?;
        let start = Start {
            epoch: first.epoch,
            head: first.head,
        };
        let shared = Arc::new(Shared {
            reads: Mutex::new(Vec::new()),
            count: watch::channel(0).0,
            paused: watch::channel(false).0,
            stop: watch::channel(false).0,
            reading: tokio::sync::Mutex::new(()),
        });
        let task = tokio::spawn(follow(q.clone(), shared.clone(), start.clone()));
        Ok(Follower {
            shared,
            task,
            start,
        })
    }

    fn reads(&self) -> std::sync::MutexGuard<'_, Vec<Read<C>>> {
        self.shared.reads.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many reads were kept so far: a later change is in a read from this index on.
    pub fn position(&self) -> usize {
        self.reads().len()
    }

    /// The first change matching `is` in the reads from index `from` on, with the index of its
    /// read, waiting for it until `deadline`.
    pub async fn wait_for(
        &self,
        from: usize,
        deadline: Instant,
        is: impl Fn(&C) -> bool,
    ) -> Option<(usize, C)> {
        let mut count = self.shared.count.subscribe();
        loop {
            let found = self
                .reads()
                .iter()
                .enumerate()
                .skip(from)
                .find_map(|(i, r)| {
                    let page = r.page.as_ref().ok()?;
                    page.changes.iter().find(|c| is(c)).map(|c| (i, c.clone()))
                });
            if found.is_some() {
                return found;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let _ = tokio::time::timeout(left, count.changed()).await;
        }
    }

    /// Stops reading once the read in flight is done; returns how many reads were kept.
    pub async fn pause(&self) -> usize {
        self.shared.paused.send_replace(true);
        let _idle = self.shared.reading.lock().await;
        self.position()
    }

    pub fn resume(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Stops following; returns every read, oldest first.
    pub async fn stop(self) -> Vec<Read<C>> {
        self.shared.stop.send_replace(true);
        let _ = self.task.await;
        let mut reads = self.shared.reads.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *reads)
    }
}

async fn follow<C: Change>(q: Q, shared: Arc<Shared<C>>, start: Start) {
    let mut epoch = start.epoch;
    let mut position = start.head;
    let mut paused = shared.paused.subscribe();
    let mut stop = shared.stop.subscribe();
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if *paused.borrow_and_update() {
            tokio::select! {
                _ = paused.changed() => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let reading = shared.reading.lock().await;
        let sent = Instant::now();
        let page = read_page::<C>(&q, position, LIMIT).await;
        let read = Read {
            sent,
            after: position,
            following: epoch.clone(),
            limit: LIMIT,
            page,
        };
        let brought_changes = match &read.page {
            Ok(page) if page.continues(&epoch, position) => {
                // Where to continue is the answer's cursor; a cursor behind the position
                // (which the order check reports) must not make the follower go back.
                position = position.max(page.cursor);
                !page.changes.is_empty()
            }
            Ok(page) => {
                // The follower lost its place: it follows the new history from its head.
                epoch = page.epoch.clone();
                position = page.head;
                false
            }
            Err(_) => false,
        };
        {
            let mut reads = shared.reads.lock().unwrap_or_else(|e| e.into_inner());
            reads.push(read);
            shared.count.send_replace(reads.len());
        }
        drop(reading);
        if !brought_changes {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// The feed read again from where the follower started, once the check is over.
#[derive(Debug, Clone)]
pub struct Reread<C> {
    pub from: u64,
    pub pages: Vec<Page<C>>,
    pub error: Option<String>,
}

/// Most pages a re-read reads.
const REREAD_PAGES: usize = 200;

/// How often a re-read asks again when the feed answers nothing below a cursor it served
/// before (a lagging copy may answer late), and how long it waits in between.
const REREAD_RETRIES: usize = 3;
const REREAD_PAUSE: Duration = Duration::from_millis(300);

/// Reads the feed again from `from` up to `through` (the newest cursor the follower saw), for
/// the epoch and floor checks.
pub async fn reread<C: Change>(q: &Q, from: u64, through: u64) -> Reread<C> {
    let mut pages = Vec::new();
    let mut after = from;
    let mut retries = 0;
    let mut error = None;
    for _ in 0..REREAD_PAGES {
        if after >= through {
            break;
        }
        match read_page::<C>(q, after, 1000).await {
            Err(e) => {
                error = Some(e);
                break;
            }
            Ok(page) => {
                let last = page.changes.iter().map(Change::cursor).max();
                pages.push(page);
                match last {
                    Some(last) => after = after.max(last),
                    None if retries < REREAD_RETRIES => {
                        retries += 1;
                        tokio::time::sleep(REREAD_PAUSE).await;
                    }
                    None => break,
                }
            }
        }
    }
    Reread { from, pages, error }
}
