//! The leader's retention pass: terminal tasks, delegations and discovered cards older than
//! their configured age go, a few small batches of each per pass, so a backlog (retention
//! turned on for an old deployment) drains over several passes without long locks or a long
//! pause of the reconciler's other work. A task leaves a tombstone that keeps its message
//! identity (`crate::store::retention`): a repeat of its messageId answers it, content-free.

use std::time::Duration;

use tokio::time::Instant;

use super::Reconciler;
use crate::store::outbound::PgOutboundStore;
use crate::store::StoreError;

/// Batches of each kind per pass; the rest waits for the next pass.
pub const BATCHES_PER_PASS: usize = 20;

/// How long each kind of row is kept (`None`: forever), and the batch size.
#[derive(Debug, Clone)]
pub struct RetentionSettings {
    /// Since a task reached a terminal state.
    pub tasks: Option<Duration>,
    /// Since a delegation row last changed.
    pub delegations: Option<Duration>,
    /// Since a card was discovered.
    pub discovered_cards: Option<Duration>,
    /// Rows per statement.
    pub batch_size: i64,
    /// How long a task's tombstone stands before the task itself is deleted: longer than any
    /// admission statement can run (the statement timeout), see `crate::store::retention`.
    pub tombstone_settle: Duration,
}

impl RetentionSettings {
    /// Nothing is ever deleted.
    pub fn keep_everything() -> Self {
        RetentionSettings {
            tasks: None,
            delegations: None,
            discovered_cards: None,
            batch_size: 500,
            tombstone_settle: Duration::from_secs(60),
        }
    }
}

/// One kind of row: its name in logs and metrics, and one batch of its deletion.
#[derive(Clone, Copy)]
enum Kind {
    Tasks,
    Delegations,
    DiscoveredCards,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tasks => "tasks",
            Kind::Delegations => "delegations",
            Kind::DiscoveredCards => "discovered_cards",
        }
    }
}

/// How long after a retention pass that found nothing to do the next one runs (the
/// reconciler's passes in between skip it): an idle deployment's retention costs its four
/// statements once in this time, not once a pass. A pass that wrote tombstones or removed rows
/// is followed by another on the next reconciler pass, and tombstones still settling bring the
/// next one forward to the moment they have ([`Pacing`]).
pub const IDLE_RETENTION_EVERY: Duration = Duration::from_secs(5);

/// Past a tombstone's settle time. The tombstone's time is its statement's start, before the
/// pass that wrote it returned, and the deletion's is its own start, after the moment below:
/// PostgreSQL's clock has seen at least the settle time pass; this is only slack.
pub const SETTLED_MARGIN: Duration = Duration::from_millis(100);

/// When the leader's next retention pass is due.
#[derive(Debug, Default)]
pub(super) struct Pacing {
    /// When the last tombstones written have settled, while that is ahead.
    settles_at: Option<Instant>,
}

impl Pacing {
    /// The next pass's moment, after one at `now` that removed `removed` rows and wrote
    /// `tombstoned` tombstones, which stand `settle` before their tasks may go.
    pub(super) fn after(
        &mut self,
        now: Instant,
        removed: u64,
        tombstoned: u64,
        settle: Duration,
    ) -> Instant {
        if tombstoned > 0 {
            self.settles_at = Some(now + settle + SETTLED_MARGIN);
        }
        if removed > 0 || tombstoned > 0 {
            return now;
        }
        let idle = now + IDLE_RETENTION_EVERY;
        match self.settles_at {
            Some(settled) if settled > now => settled.min(idle),
            _ => {
                self.settles_at = None;
                idle
            }
        }
    }
}

/// Runs the pass: up to [`BATCHES_PER_PASS`] batches of each kind that has a retention.
/// Returns when the next one is due ([`Pacing`]).
pub(super) async fn expire(state: &Reconciler, pacing: &mut Pacing) -> Result<Instant, StoreError> {
    let settings = &state.settings.retention;
    let outbound = PgOutboundStore::new(state.store.pool().clone());
    let batch = settings.batch_size;
    let (mut all_removed, mut tombstoned) = (0, 0);
    for (kind, age) in [
        (Kind::Tasks, settings.tasks),
        (Kind::Delegations, settings.delegations),
        (Kind::DiscoveredCards, settings.discovered_cards),
    ] {
        let Some(age) = age else { continue };
        let mut removed = 0;
        for _ in 0..BATCHES_PER_PASS {
            let n = match kind {
                Kind::Tasks => {
                    // Identity first, content after: see `crate::store::retention`.
                    tombstoned += state.store.tombstone_expired_tasks(age, batch).await?;
                    let settle = settings.tombstone_settle;
                    state.store.delete_expired_tasks(age, settle, batch).await?
                }
                Kind::Delegations => outbound.delete_stale_delegations(age, batch).await?,
                Kind::DiscoveredCards => outbound.clear_stale_cards(age, batch).await?,
            };
            removed += n;
            if n < batch as u64 {
                break;
            }
        }
        all_removed += removed;
        if removed > 0 {
            crate::metrics::retention_removed(kind.name(), removed);
            tracing::info!(
                kind = kind.name(),
                removed,
                "reconciler: rows past retention removed"
            );
        }
    }
    Ok(pacing.after(
        Instant::now(),
        all_removed,
        tombstoned,
        settings.tombstone_settle,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_runs_again_at_once_only_while_it_finds_work() {
        let now = Instant::now();
        let settle = Duration::from_secs(10);
        let mut pacing = Pacing::default();
        // Nothing to do: the idle wait.
        assert_eq!(pacing.after(now, 0, 0, settle), now + IDLE_RETENTION_EVERY);
        // A backlog (rows removed, tombstones written): the next reconciler pass.
        assert_eq!(pacing.after(now, 3, 0, settle), now);
        assert_eq!(pacing.after(now, 0, 7, settle), now);
        // Nothing more to tombstone, the last ones still settling: the idle wait, then the
        // moment they have settled, whichever is first.
        let settled = now + settle + SETTLED_MARGIN;
        assert_eq!(pacing.after(now, 0, 0, settle), now + IDLE_RETENTION_EVERY);
        let later = now + Duration::from_secs(8);
        assert_eq!(pacing.after(later, 0, 0, settle), settled);
        // Settled and removed: at once again; then idle.
        assert_eq!(pacing.after(settled, 7, 0, settle), settled);
        let after = settled + Duration::from_secs(1);
        assert_eq!(
            pacing.after(after, 0, 0, settle),
            after + IDLE_RETENTION_EVERY
        );
    }
}
