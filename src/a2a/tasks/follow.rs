//! A blocking SendMessage's wait: follows the task's run on Q's long-polled event feed until
//! it settles (terminal or interrupted) or the window ends. The run keeps going under its own
//! deadline when the window ends.

use std::time::Duration;

use tokio::time::Instant;

use super::TaskService;
use crate::a2a::task_view::is_settled;
use crate::store::{task_state, TaskRow};
use crate::upstream::contract::Run;

/// Longest one long-poll of Q's event feed may wait.
const LONG_POLL: Duration = Duration::from_secs(25);

impl TaskService {
    /// Returns the last run read, if any.
    pub(crate) async fn follow_until_settled(
        &self,
        row: &TaskRow,
        window: Duration,
    ) -> Option<Run> {
        let run_id = row.run_id.as_deref()?;
        let deadline = Instant::now() + window;
        let mut after_seq = 0;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            match self
                .upstream
                .run_events(run_id, after_seq, remaining.min(LONG_POLL))
                .await
            {
                Ok(events) => {
                    after_seq = events.last_seq.max(after_seq);
                    if events
                        .events
                        .last()
                        .and_then(|e| task_state(e.status))
                        .is_some_and(|state| is_settled(&state))
                    {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "run event feed failed; retrying within the window");
                    tokio::time::sleep(self.settings.poll_interval.min(remaining)).await;
                }
            }
        }
        match self.upstream.get_run(run_id).await {
            Ok(run) => Some(run),
            Err(e) => {
                tracing::warn!(error = %e, "final run read failed; answering from the stored projection");
                None
            }
        }
    }
}
