//! A blocking SendMessage's wait: follows the task's run through the run changes this replica
//! follows (`crate::changes`), until it settles (terminal or interrupted) or the window ends.
//! No long-poll to Q per wait: the subscription starts from the latest change the replica saw
//! and receives every later one. The run keeps going under its own deadline when the window
//! ends.

use std::time::Duration;

use tokio::time::Instant;

use super::snapshot::Observed;
use super::TaskService;
use crate::a2a::task_view::is_settled;
use crate::changes::hub::RunSignal;
use crate::store::{task_state, TaskRow};
use crate::upstream::contract::RunChange;

impl TaskService {
    /// The run's last observed state when the wait ends; `None` when nothing was observed
    /// beyond what the row says (no window, or no run yet).
    pub(crate) async fn follow_until_settled(
        &self,
        row: &TaskRow,
        window: Duration,
    ) -> Option<Observed> {
        let run_id = row.run_id.as_deref()?;
        if window.is_zero() {
            // Answer from the row: the dispatcher recorded what Q said when it created the run.
            return None;
        }
        let deadline = Instant::now() + window;
        let mut subscription = self.followers.runs.subscribe(run_id);
        let mut last: Option<Observed> = subscription.latest.as_deref().map(observed);
        let mut seq = subscription.latest.as_ref().map_or(0, |c| c.seq);
        loop {
            if last.as_ref().is_some_and(settled) {
                break;
            }
            let signal = tokio::select! {
                signal = subscription.next() => signal,
                // A drain does not end the wait: the shutdown grace lets it finish.
                _ = tokio::time::sleep_until(deadline) => break,
            };
            match signal {
                RunSignal::Change(change) => {
                    // Older than what was already seen (a reordering across a resync).
                    if change.seq != 0 && change.seq <= seq {
                        continue;
                    }
                    seq = change.seq;
                    last = Some(observed(&change));
                }
                RunSignal::Resync => match self.upstream.get_run(run_id).await {
                    Ok(run) => last = Some(Observed::from(&run)),
                    Err(e) => {
                        tracing::warn!(error = %e, "run read after a feed resync failed; waiting for the next change")
                    }
                },
            }
        }
        last
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
