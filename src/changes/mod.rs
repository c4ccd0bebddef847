//! Q's change feeds, followed once per replica.
//!
//! Two long-polls per replica in total, whatever the number of streams, blocking waits and
//! cached answers it holds:
//!
//! - the **run feed** (`GET /changes/runs`) is fanned out in process ([`hub::RunHub`]) to every
//!   stream and blocking wait on this replica: none of them polls Q itself;
//! - the **access feed** (`GET /changes/access`) removes the cached access answers each change
//!   may affect ([`crate::access::AccessCache::apply`]), then confirms the cache, and wakes
//!   open observations so they check their access again.
//!
//! Each follower starts at Q's head (what happened before this replica started is in the
//! store, or is read from Q on demand) and keeps its position in memory. A `head` below the
//! position means Q's feed was reset: the run follower tells every subscriber to read its run
//! again, the access follower forgets every cached answer; both continue from the new head.
//! While a feed fails, its follower retries with a short back-off; the access cache stops
//! being trusted `feed_trust` after the last answer (see `crate::access`).
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

use crate::access::AccessCache;
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
    /// How long one long-poll of a feed waits for a change; well below the access cache's
    /// trust window, so a healthy feed confirms the cache before it stops being trusted.
    pub long_poll: Duration,
}

/// The replica's two followers and what they feed.
pub struct Followers {
    upstream: UpstreamRunApi,
    pub runs: Arc<RunHub>,
    pub access: Arc<AccessCache>,
    /// Bumped after every applied access change: open observations re-check their access.
    access_changed: watch::Sender<u64>,
    settings: FollowSettings,
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
            settings,
        })
    }

    /// Wakes when an access change was applied on this replica.
    pub fn access_changes(&self) -> watch::Receiver<u64> {
        self.access_changed.subscribe()
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
        let mut pruned = tokio::time::Instant::now();
        let feed = Feed {
            name: "runs",
            on_reset: "Q's run change feed was reset; streams read their runs again",
            on_failure: "run change feed failed; retrying",
        };
        let poll = |after, wait| {
            let upstream = upstream.clone();
            async move {
                let c = upstream.run_changes(after, wait, BATCH).await?;
                Ok(Page {
                    changes: c.changes,
                    cursor: c.cursor,
                    head: c.head,
                })
            }
        };
        follow(feed, self.settings.long_poll, shutdown, poll, |step| {
            match step {
                Step::Restart => self.runs.resync_all(),
                Step::Changes(changes) => {
                    for change in changes {
                        self.runs.publish(change);
                    }
                }
            }
            if pruned.elapsed() > PRUNE_EVERY {
                self.runs.prune();
                pruned = tokio::time::Instant::now();
            }
        })
        .await;
    }

    async fn follow_access(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let upstream = self.upstream.clone();
        let feed = Feed {
            name: "access",
            on_reset: "Q's access change feed was reset; forgetting every cached access answer",
            on_failure:
                "access change feed failed; cached access answers are not trusted until it answers",
        };
        let poll = |after, wait| {
            let upstream = upstream.clone();
            async move {
                let c = upstream.access_changes(after, wait, BATCH).await?;
                Ok(Page {
                    changes: c.changes,
                    cursor: c.cursor,
                    head: c.head,
                })
            }
        };
        follow(feed, self.settings.long_poll, shutdown, poll, |step| {
            let any = match step {
                // Whatever was cached before this point is not vouched for by the feed.
                Step::Restart => {
                    self.access.forget_all();
                    true
                }
                Step::Changes(changes) => {
                    for change in &changes {
                        self.access.apply(change);
                    }
                    !changes.is_empty()
                }
            };
            if any {
                self.access_changed.send_modify(|g| *g += 1);
            }
            self.access.confirm();
        })
        .await;
    }
}

/// One of Q's feeds as a follower names it in metrics and logs.
struct Feed {
    name: &'static str,
    /// Logged when Q's feed was reset (its head fell below the follower's position).
    on_reset: &'static str,
    /// Logged when a read of the feed fails.
    on_failure: &'static str,
}

/// One answer of a feed, whichever feed.
struct Page<T> {
    changes: Vec<T>,
    cursor: u64,
    head: u64,
}

/// What a follower hands its consumer.
enum Step<T> {
    /// Following starts at Q's head: at first, or after Q's feed was reset. Nothing before it
    /// will be delivered.
    Restart,
    /// The changes after the position, in order (none when the long-poll ended quietly).
    Changes(Vec<T>),
}

/// Follows one feed until `shutdown` turns true: first Q's head, then long-polls from the
/// position, each answer handed to `consume` before the position moves; a reset starts over
/// at the new head; a failed read is retried with [`backoff`].
async fn follow<T, P, F>(
    feed: Feed,
    long_poll: Duration,
    mut shutdown: watch::Receiver<bool>,
    poll: P,
    mut consume: impl FnMut(Step<T>),
) where
    P: Fn(u64, Duration) -> F,
    F: std::future::Future<Output = Result<Page<T>, UpstreamError>>,
{
    let mut position: Option<u64> = None;
    let mut failures = 0u32;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let (after, wait) = match position {
            // First the head: nothing before it is this replica's to follow.
            None => (u64::MAX / 2, Duration::ZERO),
            Some(p) => (p, long_poll),
        };
        let answer = tokio::select! {
            a = poll(after, wait) => a,
            _ = shutdown.changed() => return,
        };
        match answer {
            Ok(page) => {
                failures = 0;
                let at = position.unwrap_or(page.head);
                if position.is_none() || page.head < at {
                    if position.is_some() {
                        tracing::warn!(position = at, head = page.head, "{}", feed.on_reset);
                    }
                    consume(Step::Restart);
                    position = Some(page.head);
                    crate::metrics::feed_answer(feed.name, page.head, page.head);
                    continue;
                }
                let next = page.cursor.max(at);
                consume(Step::Changes(page.changes));
                crate::metrics::feed_answer(feed.name, next, page.head);
                position = Some(next);
            }
            Err(e) => {
                crate::metrics::feed_failure(feed.name);
                failures += 1;
                // Changes after the position are still to come; nothing to resync.
                tracing::warn!(error = %e, failures, "{}", feed.on_failure);
                tokio::select! {
                    _ = tokio::time::sleep(backoff(failures)) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}
