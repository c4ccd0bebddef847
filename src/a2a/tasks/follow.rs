//! A blocking SendMessage's wait: follows the task's run through the run changes this replica
//! follows (`crate::changes`), until it settles (terminal or interrupted), the window ends, the
//! observer lease is lost, or the caller's right to observe lapses ([`super::vigil`]). The run
//! keeps going under its own deadline whatever ends the wait.
//!
//! No long-poll to Q per wait: the subscription starts from the latest change the replica saw
//! and receives every later one. While the run feed is not caught up (failing, stalled), the
//! wait reads its run's events from Q itself, once per [`RUN_FALLBACK_POLL`], and goes back to
//! the feed when it recovers. A task whose run creation is still unresolved is looked up in the
//! store every [`UNRESOLVED_POLL`] until its run is recorded, and resolved by the wait itself
//! once no create is in flight for it (`crate::dispatch`: its claim came back or expired).

use std::time::Duration;

use tokio::time::Instant;

use super::snapshot::Observed;
use super::vigil::Lapse;
use super::TaskService;
use crate::a2a::caller::Caller;
use crate::a2a::task_view::is_settled;
use crate::changes::hub::RunSignal;
use crate::error::Fault;
use crate::lease::ObserverLease;
use crate::store::{task_state, TaskRow};
use crate::upstream::contract::RunChange;

/// How often an observation reads its run from Q while the run feed is not caught up.
pub const RUN_FALLBACK_POLL: Duration = Duration::from_secs(1);

/// How often a wait looks for the run of a task whose dispatch is unresolved.
pub const UNRESOLVED_POLL: Duration = Duration::from_millis(250);

/// What a wait saw when it ended.
pub(crate) struct Waited {
    /// The task as stored when the wait ended (its run id recorded meanwhile, if it was).
    pub row: TaskRow,
    /// The run's last observed state; `None` when nothing was observed beyond the row.
    pub observed: Option<Observed>,
}

impl TaskService {
    /// Waits for `row`'s run to settle within `window` (see the module doc). An `Err` when
    /// the caller's token lapsed: the wait answers that refusal.
    pub(crate) async fn follow_until_settled(
        &self,
        caller: &Caller,
        row: TaskRow,
        window: Duration,
        lease: &mut ObserverLease,
    ) -> Result<Waited, Fault> {
        let deadline = Instant::now() + window;
        let mut vigil = self.vigil(caller);
        let mut row = row;
        // First the run: a dispatch the reconciler has yet to resolve has none.
        let run_id = loop {
            if let Some(run_id) = row.run_id.clone() {
                break run_id;
            }
            // Ended without a run (Q refused it, or its deadline passed before Q confirmed
            // one): no run will come to wait for.
            if row.state.is_terminal() {
                return Ok(Waited {
                    row,
                    observed: None,
                });
            }
            tokio::select! {
                _ = tokio::time::sleep(UNRESOLVED_POLL) => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(Waited { row, observed: None }),
                _ = lease.lost() => return Ok(Waited { row, observed: None }),
            }
            // Resolves it once no create is in flight any more (the claim came back or
            // expired); while one is, this does nothing.
            self.dispatcher.resolve_if_unclaimed(&row).await?;
            if let Some(found) = self.store.find_by_id(row.task_id).await? {
                row = found;
            }
        };
        let mut subscription = self.followers.runs.subscribe(&run_id);
        let mut runs_healthy = self.followers.runs_healthy();
        let mut last: Option<Observed> = subscription.latest.as_deref().map(observed);
        let mut seq = subscription.latest.as_ref().map_or(0, |c| c.seq);
        let mut read_from_q = false;
        loop {
            if last.as_ref().is_some_and(settled) {
                break;
            }
            let healthy = *runs_healthy.borrow_and_update();
            let signal = tokio::select! {
                signal = subscription.next() => Some(signal),
                // The run feed is not caught up: read the run from Q at a bounded rate.
                _ = tokio::time::sleep(RUN_FALLBACK_POLL), if !healthy => Some(RunSignal::Resync),
                Ok(()) = runs_healthy.changed() => None,
                _ = vigil.due() => {
                    match self.keep_vigil(&mut vigil).await {
                        Ok(()) => None,
                        Err(Lapse::Refused(e)) => return Err(e.into()),
                        // The answer shows what access is left (a control receipt at most).
                        Err(Lapse::AccessLost) => break,
                    }
                }
                _ = lease.lost() => break,
                // A drain does not end the wait: the shutdown grace lets it finish.
                _ = tokio::time::sleep_until(deadline) => break,
            };
            match signal {
                None => {}
                Some(RunSignal::Change(change)) => {
                    // Older than what was already seen (a reordering across a resync).
                    if change.seq != 0 && change.seq <= seq {
                        continue;
                    }
                    seq = change.seq;
                    last = Some(observed(&change));
                }
                Some(RunSignal::Resync) => {
                    if !healthy && !read_from_q {
                        tracing::info!(task_id = %row.task_id, "the run feed is not caught up; reading the run from Q");
                        read_from_q = true;
                    }
                    match self.upstream.run_events(&run_id, seq, Duration::ZERO).await {
                        Ok(events) => {
                            if let Some(event) = events.events.last() {
                                seq = event.seq;
                                last = Some(Observed {
                                    run_id: run_id.clone(),
                                    status: event.status,
                                    status_message: event.status_message.clone(),
                                });
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "reading the run from Q failed; waiting for the next change")
                        }
                    }
                }
            }
        }
        Ok(Waited {
            row,
            observed: last,
        })
    }
}

fn observed(change: &RunChange) -> Observed {
    Observed {
        run_id: change.run_id.clone(),
        status: change.status,
        status_message: change.status_message.clone(),
    }
}

fn settled(observed: &Observed) -> bool {
    task_state(observed.status).is_some_and(|state| is_settled(&state))
}
