//! Run progression: the task that walks each run through its statuses on timers, stopping at
//! cancel, reset or the execution deadline.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::contract::{Approval, ApprovalKind, ApprovalStatus, RunStatus};
use crate::runs::RunEntry;
use crate::state::{AppState, Inner};

/// The tool an approval-requiring agent asks permission for.
const APPROVAL_TOOL: &str = "web.search";

/// Sleeps `dur`, or less if the deadline comes first. True if the deadline was reached.
async fn pause(dur: Duration, deadline: DateTime<Utc>) -> bool {
    let left = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    if left <= dur {
        tokio::time::sleep(left).await;
        true
    } else {
        tokio::time::sleep(dur).await;
        false
    }
}

/// After a pause: the run (if it still exists and is still in `expected`), with the deadline
/// applied; `None` means the task has nothing more to do.
fn resume<'a>(
    inner: &'a mut Inner,
    run_id: &str,
    expected: RunStatus,
    deadline_hit: bool,
) -> Option<&'a mut RunEntry> {
    let entry = inner.runs.get_mut(run_id)?;
    let now = Utc::now();
    if entry.run.status != expected {
        // Canceled, failed or timed out meanwhile.
        entry.enforce_deadline(now);
        return None;
    }
    if deadline_hit {
        entry.time_out(now);
        return None;
    }
    if entry.enforce_deadline(now) {
        return None;
    }
    Some(entry)
}

/// The progression task of one run:
/// `queued` → (latency/4) → `running` → (latency) → `succeeded`, or, if the agent requires
/// approval, `awaiting_approval` → (approve sets `running`) → (latency) → `succeeded`.
/// Cancel, reset and the deadline stop it.
pub async fn progress(state: AppState, run_id: String) {
    let (latency, deadline, wake, agent) = {
        let inner = state.lock().await;
        let Some(entry) = inner.runs.get(&run_id) else {
            return;
        };
        let Some(agent) = state.fixtures.agent(&entry.run.agent_id) else {
            return;
        };
        (
            state.latency(agent),
            entry.run.deadline_at,
            entry.wake.clone(),
            agent.clone(),
        )
    };

    let hit = pause(latency / 4, deadline).await;
    {
        let mut inner = state.lock().await;
        let Some(entry) = resume(&mut inner, &run_id, RunStatus::Queued, hit) else {
            return;
        };
        entry.transition(RunStatus::Running, None, Utc::now());
    }

    let hit = pause(latency, deadline).await;
    {
        let mut inner = state.lock().await;
        let needs_approval = inner.requires_approval(&agent);
        let Some(entry) = resume(&mut inner, &run_id, RunStatus::Running, hit) else {
            return;
        };
        if !needs_approval {
            entry.transition(RunStatus::Succeeded, None, Utc::now());
            return;
        }
        let prompt = format!("Approve tool '{APPROVAL_TOOL}' to continue");
        entry.approvals.push(Approval {
            id: format!("apr-{}", uuid::Uuid::new_v4().simple()),
            kind: ApprovalKind::ToolApproval,
            prompt: prompt.clone(),
            status: ApprovalStatus::Pending,
        });
        entry.transition(RunStatus::AwaitingApproval, Some(prompt), Utc::now());
    }

    // Wait for approve (which sets `running`), cancel, reset or the deadline.
    let until_deadline = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    let hit = tokio::time::timeout(until_deadline, wake.notified())
        .await
        .is_err();
    if hit {
        let mut inner = state.lock().await;
        if let Some(entry) = inner.runs.get_mut(&run_id) {
            if !entry.run.status.is_terminal() {
                entry.time_out(Utc::now());
            }
        }
        return;
    }

    let hit = pause(latency, deadline).await;
    let mut inner = state.lock().await;
    if let Some(entry) = resume(&mut inner, &run_id, RunStatus::Running, hit) {
        entry.transition(RunStatus::Succeeded, None, Utc::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fixtures, req, wait_for};

    #[tokio::test]
    async fn run_succeeds_and_approval_flow_resumes() {
        let state = AppState::new(fixtures(), 0.01);
        let (_, run) = state
            .create_run(req("wf-a", "ag-writer", &["hi"]))
            .await
            .unwrap();
        wait_for(&state, &run.id, RunStatus::Succeeded).await;

        let (_, run) = state
            .create_run(req("wf-b", "ag-approver", &["hi"]))
            .await
            .unwrap();
        let waiting = wait_for(&state, &run.id, RunStatus::AwaitingApproval).await;
        assert_eq!(
            waiting.status_message.as_deref(),
            Some("Approve tool 'web.search' to continue")
        );
        {
            let mut inner = state.lock().await;
            let e = inner.run_mut(&run.id).unwrap();
            e.approvals[0].status = ApprovalStatus::Approved;
            e.transition(RunStatus::Running, None, Utc::now());
            e.wake();
        }
        wait_for(&state, &run.id, RunStatus::Succeeded).await;
        let inner = state.lock().await;
        let statuses: Vec<RunStatus> = inner.runs[&run.id]
            .events
            .iter()
            .map(|e| e.status)
            .collect();
        assert_eq!(
            statuses,
            [
                RunStatus::Queued,
                RunStatus::Running,
                RunStatus::AwaitingApproval,
                RunStatus::Running,
                RunStatus::Succeeded
            ]
        );
    }
}
