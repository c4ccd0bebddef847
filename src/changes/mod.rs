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
use crate::upstream::UpstreamRunApi;
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

    async fn follow_runs(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut position: Option<u64> = None;
        let mut failures = 0u32;
        let mut pruned = tokio::time::Instant::now();
        loop {
            if *shutdown.borrow() {
                return;
            }
            if pruned.elapsed() > PRUNE_EVERY {
                self.runs.prune();
                pruned = tokio::time::Instant::now();
            }
            let (after, wait) = match position {
                // First the head: nothing before it is this replica's to fan out.
                None => (u64::MAX / 2, Duration::ZERO),
                Some(p) => (p, self.settings.long_poll),
            };
            let answer = tokio::select! {
                a = self.upstream.run_changes(after, wait, BATCH) => a,
                _ = shutdown.changed() => return,
            };
            match answer {
                Ok(changes) => {
                    let at = position.unwrap_or(changes.head);
                    if changes.head < at || position.is_none() {
                        if position.is_some() {
                            tracing::warn!(
                                position = at,
                                head = changes.head,
                                "Q's run change feed was reset; streams read their runs again"
                            );
                        }
                        failures = 0;
                        self.runs.resync_all();
                        position = Some(changes.head);
                        crate::metrics::feed_answer("runs", changes.head, changes.head);
                        continue;
                    }
                    failures = 0;
                    let next = changes.cursor.max(at);
                    for change in changes.changes {
                        self.runs.publish(change);
                    }
                    crate::metrics::feed_answer("runs", next, changes.head);
                    position = Some(next);
                }
                Err(e) => {
                    crate::metrics::feed_failure("runs");
                    failures += 1;
                    tracing::warn!(error = %e, failures, "run change feed failed; retrying");
                    // Changes after the position are still to come; nothing to resync.
                    tokio::select! {
                        _ = tokio::time::sleep(backoff(failures)) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
        }
    }

    async fn follow_access(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut position: Option<u64> = None;
        let mut failures = 0u32;
        loop {
            if *shutdown.borrow() {
                return;
            }
            let (after, wait) = match position {
                None => (u64::MAX / 2, Duration::ZERO),
                Some(p) => (p, self.settings.long_poll),
            };
            let answer = tokio::select! {
                a = self.upstream.access_changes(after, wait, BATCH) => a,
                _ = shutdown.changed() => return,
            };
            match answer {
                Ok(changes) => {
                    let at = position.unwrap_or(changes.head);
                    if changes.head < at || position.is_none() {
                        if position.is_some() {
                            tracing::warn!(
                                position = at,
                                head = changes.head,
                                "Q's access change feed was reset; forgetting every cached access answer"
                            );
                        }
                        // Whatever was cached before this point is not vouched for by the feed.
                        self.access.forget_all();
                        self.access_changed.send_modify(|g| *g += 1);
                        failures = 0;
                        position = Some(changes.head);
                        self.access.confirm();
                        crate::metrics::feed_answer("access", changes.head, changes.head);
                        continue;
                    }
                    failures = 0;
                    let next = changes.cursor.max(at);
                    let any = !changes.changes.is_empty();
                    for change in &changes.changes {
                        self.access.apply(change);
                    }
                    if any {
                        self.access_changed.send_modify(|g| *g += 1);
                    }
                    self.access.confirm();
                    crate::metrics::feed_answer("access", next, changes.head);
                    position = Some(next);
                }
                Err(e) => {
                    crate::metrics::feed_failure("access");
                    failures += 1;
                    tracing::warn!(error = %e, failures, "access change feed failed; cached access answers are not trusted until it answers");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff(failures)) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
        }
    }
}
