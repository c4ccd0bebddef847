//! Q's change feeds, followed once per replica.
//!
//! Two long-polls per replica in total, whatever the number of streams, blocking waits and
//! cached answers it holds:
//!
//! - the **run feed** (`GET /changes/runs`) is fanned out in process ([`hub::RunHub`]) to every
//!   stream and blocking wait on this replica: none of them polls Q itself while the feed is
//!   healthy;
//! - the **access feed** (`GET /changes/access`) invalidates the cached access answers each
//!   change names ([`crate::access::AccessCache::apply`]), confirms the cache when the follower
//!   has read up to the head, and wakes open observations so they check their access again.
//!
//! Each follower starts at Q's head (what happened before this replica started is in the
//! store, or is read from Q on demand) and keeps its epoch and position in memory. It has
//! **lost its place** when an answer names another epoch (a reset, a failover to a copy with
//! another history), a floor above its position (changes compacted away), a head below its
//! position (a reset), or cursors that do not follow its position (a gap it can see): then the
//! run follower tells every subscriber to read its run again, the access follower forgets
//! every cached answer, and both start over at the new head (`a2a_feed_resets_total`).
//!
//! A feed is **caught up** when an answer leaves the follower at the head; only then does the
//! follower vouch for it, stamped with the moment that poll was *sent* (an answer is at least
//! as new as its request). The vouching lapses `trust` after that stamp unless a newer poll
//! renews it: a feed that fails, stalls, lags (a head above what it delivers) or lost its place
//! is not vouched for, and each follower says so at once ([`Followers::access_trusted`],
//! [`Followers::runs_healthy`]) so observations fall back to asking Q themselves.
//!
//! This is per replica by design rather than one leader plus a fan-out across replicas: the
//! observers and caches to feed are in each replica's memory, a cross-replica fan-out would need
//! its own transport (Redis pub/sub) and its own failure handling, and the cost to Q is two
//! long-polls per replica, which grows with replicas, not with requests. The reconciler's
//! leader still follows the run feed separately to project changes into the store from its
//! saved position (`crate::reconciler`).

pub mod hub;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::access::AccessCache;
use crate::upstream::contract::{FeedContinuity, FeedPosition};
use crate::upstream::{UpstreamError, UpstreamRunApi};
use hub::RunHub;

/// Most changes read per long-poll.
const BATCH: usize = 1000;

/// How often runs nobody follows any more are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(30);

/// Pause after a failed read of a feed, doubled after each further failure up to
/// [`RETRY_MAX`].
const RETRY: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The pause after `failures` consecutive failed reads.
fn backoff(failures: u32) -> Duration {
    RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(5))
        .min(RETRY_MAX)
}

/// Settings of the followers, typed once at start-up.
#[derive(Debug, Clone, Copy)]
pub struct FollowSettings {
    /// How long one long-poll of a feed waits for a change; well below `trust`, so a healthy
    /// feed renews its vouching before it lapses.
    pub long_poll: Duration,
    /// How long a caught-up poll vouches for a feed, from the moment it was sent.
    pub trust: Duration,
}

/// The replica's two followers and what they feed.
pub struct Followers {
    upstream: UpstreamRunApi,
    pub runs: Arc<RunHub>,
    pub access: Arc<AccessCache>,
    /// Bumped after every applied access change (and every reset): open observations check
    /// their access again.
    access_changed: watch::Sender<u64>,
    /// Whether the access feed vouches for cached answers right now.
    access_trusted: watch::Sender<bool>,
    /// Whether the run feed is caught up right now (observations rely on it).
    runs_healthy: watch::Sender<bool>,
    settings: FollowSettings,
}

/// The [`Page`] of one answer of either feed of Q's (their answers share these fields).
macro_rules! page {
    ($answer:expr) => {{
        let answer = $answer;
        Page {
            cursors: answer.changes.iter().map(|c| c.cursor).collect(),
            changes: answer.changes,
            cursor: answer.cursor,
            head: answer.head,
            epoch: answer.epoch,
            floor: answer.floor,
        }
    }};
}

impl Followers {
    pub fn new(
        upstream: UpstreamRunApi,
        runs: Arc<RunHub>,
        access: Arc<AccessCache>,
        settings: FollowSettings,
    ) -> Arc<Self> {
        Arc::new(Followers {
            upstream,
            runs,
            access,
            access_changed: watch::channel(0).0,
            access_trusted: watch::channel(false).0,
            runs_healthy: watch::channel(false).0,
            settings,
        })
    }

    /// Wakes when an access change was applied on this replica.
    pub fn access_changes(&self) -> watch::Receiver<u64> {
        self.access_changed.subscribe()
    }

    /// Whether the access feed vouches for cached answers (observations re-check access on
    /// a timer while it does not).
    pub fn access_trusted(&self) -> watch::Receiver<bool> {
        self.access_trusted.subscribe()
    }

    /// Whether the run feed is caught up (observations read their runs from Q while it is
    /// not).
    pub fn runs_healthy(&self) -> watch::Receiver<bool> {
        self.runs_healthy.subscribe()
    }

    /// Runs both followers until `shutdown` turns true.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        tokio::join!(
            self.clone().follow_runs(shutdown.clone()),
            self.follow_access(shutdown),
        );
    }

    async fn follow_runs(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let upstream = self.upstream.clone();
        let mut pruned = Instant::now();
        let feed = Feed {
            name: "runs",
            on_reset: "lost our place in Q's run change feed; streams read their runs again",
            on_failure: "run change feed failed; observations read their runs from Q meanwhile",
        };
        let poll = |after, wait| {
            let upstream = upstream.clone();
            async move { Ok(page!(upstream.run_changes(after, wait, BATCH).await?)) }
        };
        follow(feed, self.settings, shutdown, poll, |step| {
            match step {
                Step::Restart => self.runs.resync_all(),
                Step::Changes(changes) => {
                    for change in changes {
                        self.runs.publish(change);
                    }
                }
                Step::CaughtUp(_) => {
                    self.runs_healthy
                        .send_if_modified(|h| !std::mem::replace(h, true));
                }
                Step::Lapsed => {
                    self.runs_healthy
                        .send_if_modified(|h| std::mem::replace(h, false));
                }
            }
            if pruned.elapsed() > PRUNE_EVERY {
                self.runs.prune();
                pruned = Instant::now();
            }
        })
        .await;
    }

    async fn follow_access(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let upstream = self.upstream.clone();
        let feed = Feed {
            name: "access",
            on_reset: "lost our place in Q's access change feed; forgetting every cached access answer",
            on_failure:
                "access change feed failed; cached access answers serve only within their direct bound",
        };
        let poll = |after, wait| {
            let upstream = upstream.clone();
            async move { Ok(page!(upstream.access_changes(after, wait, BATCH).await?)) }
        };
        follow(feed, self.settings, shutdown, poll, |step| match step {
            // Whatever was cached before this point is not vouched for by the feed.
            Step::Restart => {
                self.access.forget_all();
                self.access_changed.send_modify(|g| *g += 1);
            }
            Step::Changes(changes) => {
                for change in &changes {
                    self.access.apply(change);
                }
                if !changes.is_empty() {
                    self.access_changed.send_modify(|g| *g += 1);
                }
            }
            Step::CaughtUp(sent) => {
                self.access.confirm(sent.into_std());
                self.access_trusted
                    .send_if_modified(|t| !std::mem::replace(t, true));
            }
            Step::Lapsed => {
                self.access_trusted
                    .send_if_modified(|t| std::mem::replace(t, false));
            }
        })
        .await;
    }
}

/// One of Q's feeds as a follower names it in metrics and logs.
struct Feed {
    name: &'static str,
    /// Logged when the follower lost its place.
    on_reset: &'static str,
    /// Logged when a read of the feed fails.
    on_failure: &'static str,
}

/// One answer of a feed, whichever feed.
struct Page<T> {
    changes: Vec<T>,
    /// The cursor of each change, in the order given.
    cursors: Vec<u64>,
    cursor: u64,
    head: u64,
    epoch: String,
    floor: u64,
}

/// What a follower hands its consumer.
enum Step<T> {
    /// Following starts at Q's head: at first, or after the follower lost its place. Nothing
    /// before it will be delivered.
    Restart,
    /// The changes after the position, in order (none when the long-poll ended quietly).
    Changes(Vec<T>),
    /// The follower is at the feed's head as of a poll sent at this instant.
    CaughtUp(Instant),
    /// The last vouching lapsed: no caught-up poll was sent within `trust`.
    Lapsed,
}

/// Where a follower stands in a feed.
struct Place {
    epoch: String,
    position: u64,
}

/// Why a follower lost its place, if it did, for the answer `page` to a read after `place`.
fn lost_place<T>(place: &Place, page: &Page<T>) -> Option<&'static str> {
    let at = FeedPosition {
        epoch: &page.epoch,
        floor: page.floor,
        head: page.head,
    };
    match at.continuity(&place.epoch, place.position) {
        FeedContinuity::EpochChanged => return Some("epoch"),
        FeedContinuity::Compacted => return Some("compacted"),
        FeedContinuity::HeadBelowPosition => return Some("head_below"),
        FeedContinuity::Continues => {}
    }
    // Every change after the position, in increasing order, within the head, and a cursor
    // to continue from that is none of them behind.
    let mut previous = place.position;
    for &cursor in &page.cursors {
        if cursor <= previous || cursor > page.head {
            return Some("gap");
        }
        previous = cursor;
    }
    (page.cursor < previous).then_some("gap")
}

/// Follows one feed until `shutdown` turns true: first Q's head, then long-polls from the
/// position, each answer handed to `consume` before the position moves; a lost place starts
/// over at the new head; a failed read is retried with [`backoff`]. Says when the feed is
/// caught up, and when that lapses while a poll is outstanding or failing.
async fn follow<T, P, F>(
    feed: Feed,
    settings: FollowSettings,
    mut shutdown: watch::Receiver<bool>,
    poll: P,
    mut consume: impl FnMut(Step<T>),
) where
    P: Fn(u64, Duration) -> F,
    F: std::future::Future<Output = Result<Page<T>, UpstreamError>>,
{
    let mut place: Option<Place> = None;
    let mut failures = 0u32;
    // When the newest caught-up poll was sent, while its vouching has not lapsed.
    let mut vouched: Option<Instant> = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let (after, wait) = match &place {
            // First the head: nothing before it is this replica's to follow.
            None => (u64::MAX / 2, Duration::ZERO),
            Some(p) => (p.position, settings.long_poll),
        };
        let sent = Instant::now();
        let answer = {
            let read = poll(after, wait);
            tokio::pin!(read);
            loop {
                let lapse = vouched.map(|at| at + settings.trust);
                tokio::select! {
                    a = &mut read => break a,
                    _ = tokio::time::sleep_until(lapse.unwrap_or(sent)), if lapse.is_some() => {
                        vouched = None;
                        consume(Step::Lapsed);
                    }
                    _ = shutdown.changed() => return,
                }
            }
        };
        let page = match answer {
            Ok(page) => page,
            Err(e) => {
                crate::metrics::feed_failure(feed.name);
                failures += 1;
                // Changes after the position are still to come; nothing to resync.
                tracing::warn!(error = %e, failures, "{}", feed.on_failure);
                let pause = tokio::time::sleep(backoff(failures));
                tokio::pin!(pause);
                loop {
                    let lapse = vouched.map(|at| at + settings.trust);
                    tokio::select! {
                        _ = &mut pause => break,
                        _ = tokio::time::sleep_until(lapse.unwrap_or(sent)), if lapse.is_some() => {
                            vouched = None;
                            consume(Step::Lapsed);
                        }
                        _ = shutdown.changed() => return,
                    }
                }
                continue;
            }
        };
        failures = 0;
        let reason = match &place {
            None => Some("start"),
            Some(p) => lost_place(p, &page),
        };
        if let Some(reason) = reason {
            if reason != "start" {
                tracing::warn!(
                    reason,
                    position = place.as_ref().map_or(0, |p| p.position),
                    head = page.head,
                    floor = page.floor,
                    "{}",
                    feed.on_reset
                );
                crate::metrics::feed_reset(feed.name, reason);
            }
            consume(Step::Restart);
            place = Some(Place {
                epoch: page.epoch,
                position: page.head,
            });
            crate::metrics::feed_answer(feed.name, page.head, page.head);
            // Everything up to the head as of this poll is behind the follower.
            vouched = Some(sent);
            consume(Step::CaughtUp(sent));
            continue;
        }
        let position = place.as_ref().map_or(0, |p| p.position);
        let next = page.cursor.max(position);
        consume(Step::Changes(page.changes));
        crate::metrics::feed_answer(feed.name, next, page.head);
        if let Some(p) = place.as_mut() {
            p.position = next;
        }
        if next >= page.head {
            vouched = Some(sent);
            consume(Step::CaughtUp(sent));
        }
    }
}

#[cfg(test)]
mod tests;
