//! The leader's retention pass: terminal tasks, delegations and discovered cards older than
//! their configured age go, a few small batches of each per pass, so a backlog (retention
//! turned on for an old deployment) drains over several passes without long locks or a long
//! pause of the reconciler's other work. A task leaves a tombstone that keeps its message
//! identity (`crate::store::retention`): a repeat of its messageId answers it, content-free.

use std::time::Duration;

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

/// Runs the pass: up to [`BATCHES_PER_PASS`] batches of each kind that has a retention.
pub(super) async fn expire(state: &Reconciler) -> Result<(), StoreError> {
    let settings = &state.settings.retention;
    let outbound = PgOutboundStore::new(state.store.pool().clone());
    let batch = settings.batch_size;
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
                    state.store.tombstone_expired_tasks(age, batch).await?;
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
        if removed > 0 {
            crate::metrics::retention_removed(kind.name(), removed);
            tracing::info!(
                kind = kind.name(),
                removed,
                "reconciler: rows past retention removed"
            );
        }
    }
    Ok(())
}
