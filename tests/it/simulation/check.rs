//! The checker: the gateway's promises, proved (or not) on one recorded [`History`], against
//! Q's own record rather than the gateway's.
//!
//! - **one run per identity**: every (principal, agent, messageId) was answered with one task
//!   id, has one task row and one workflow id of its own, and Q's own record holds at most one
//!   run for that workflow id (Q's deduplication is off in the run, so this counts the
//!   gateway's creates); no run in Q belongs to no task;
//! - **durability**: every task an answer named is still found by its owner at the end; no
//!   task has moved on from SUBMITTED with its dispatch unresolved (the reconciler looks for
//!   those among SUBMITTED tasks only); every task row agrees with Q's run under its workflow
//!   id (found there, not through the row's run id): where the run ended, the task ended in
//!   the same state; where it still runs, the task has not ended; a task without a run in Q
//!   has ended;
//! - **no content past revocation**: no answer or stream frame carried content for a revoked
//!   token, or for a principal whose workspace access was revoked, once the bound had passed;
//! - **deadlines**: every task, answered or not, ended by its execution deadline plus the
//!   reconciler's interval, by the row's own timestamps (or was still running when read back
//!   before that), except while no PostgreSQL primary took writes or Q answered 503;
//! - **observer leases**: no observation was admitted while Redis took no writes (restarted,
//!   or demoted and not yet left), and no principal ever had more streams open at once than
//!   its bound, except within a third of the lease TTL after Redis took writes again;
//! - **floors**: the run did what makes the rest meaningful: calls answered, tasks completed,
//!   runs in Q, a refusal at the observer bound, and a read by each revoked token or principal
//!   once its revocation's bound had passed.
//!
//! Each check is sound on the client's clock: a call's moments bracket the gateway's, so a
//! reported violation happened (within the stated tolerance), while some could go unseen.

use std::collections::{BTreeMap, BTreeSet};

use super::history::{Call, FaultKind, FinalTask, History, Identity, Outcome, QRun};
use super::schedule::ACCESS_PROBE_MS;
use crate::support::db::is_terminal;

/// One broken promise, with the calls and faults that show it.
#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: &'static str,
    pub what: String,
    /// `seq` of the calls involved.
    pub calls: Vec<usize>,
}

/// Every violation in the history (none when every promise held).
pub fn check(h: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    one_task_per_identity(h, &mut found);
    one_run_per_identity(h, &mut found);
    durable(h, &mut found);
    no_content_past_revocation(h, &mut found);
    deadlines(h, &mut found);
    leases(h, &mut found);
    floors(h, &mut found);
    found
}

/// Q's run status as the task state the gateway must show for it (`src/store/state.rs`).
fn state_for(status: &str) -> Option<&'static str> {
    Some(match status {
        "succeeded" => "TASK_STATE_COMPLETED",
        "failed" | "timed_out" => "TASK_STATE_FAILED",
        "canceled" => "TASK_STATE_CANCELED",
        _ => return None,
    })
}

fn one_task_per_identity(h: &History, found: &mut Vec<Violation>) {
    let mut answered: BTreeMap<&Identity, (BTreeSet<&str>, Vec<usize>)> = BTreeMap::new();
    for call in &h.calls {
        let Some(identity) = &call.identity else {
            continue;
        };
        for (_, seen) in call.seen() {
            let entry = answered.entry(identity).or_default();
            entry.0.insert(&seen.task_id);
            entry.1.push(call.seq);
        }
    }
    for (identity, (ids, calls)) in answered {
        if ids.len() > 1 {
            found.push(Violation {
                invariant: "one task per identity",
                what: format!("{identity} was answered with tasks {ids:?}"),
                calls,
            });
        }
    }
    let mut holders: BTreeMap<&str, BTreeSet<&Identity>> = BTreeMap::new();
    for t in &h.tasks {
        holders
            .entry(&t.workflow_id)
            .or_default()
            .insert(&t.identity);
    }
    for (workflow, identities) in holders {
        if identities.len() > 1 {
            found.push(Violation {
                invariant: "one task per identity",
                what: format!("workflow {workflow} is held by {identities:?}"),
                calls: identities.iter().flat_map(|i| calls_of(h, i)).collect(),
            });
        }
    }
    let mut rows: BTreeMap<&Identity, Vec<&str>> = BTreeMap::new();
    for t in &h.tasks {
        rows.entry(&t.identity).or_default().push(&t.task_id);
    }
    for (identity, ids) in rows {
        if ids.len() > 1 {
            found.push(Violation {
                invariant: "one task per identity",
                what: format!("{identity} has task rows {ids:?}"),
                calls: calls_of(h, identity),
            });
        }
    }
}

fn calls_of(h: &History, identity: &Identity) -> Vec<usize> {
    h.calls
        .iter()
        .filter(|c| c.identity.as_ref() == Some(identity))
        .map(|c| c.seq)
        .collect()
}

fn one_run_per_identity(h: &History, found: &mut Vec<Violation>) {
    let mut runs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for run in &h.runs {
        runs.entry(&run.workflow_id).or_default().push(&run.run_id);
    }
    let tasks: BTreeMap<&str, &super::history::FinalTask> = h
        .tasks
        .iter()
        .map(|t| (t.workflow_id.as_str(), t))
        .collect();
    for (workflow, ids) in &runs {
        match tasks.get(workflow) {
            None => found.push(Violation {
                invariant: "one run per identity",
                what: format!("Q holds runs {ids:?} for workflow {workflow}, which no task names"),
                calls: Vec::new(),
            }),
            Some(task) if ids.len() > 1 => found.push(Violation {
                invariant: "one run per identity",
                what: format!(
                    "{} (task {}) made {} runs in Q: {ids:?}",
                    task.identity,
                    task.task_id,
                    ids.len()
                ),
                calls: calls_of(h, &task.identity),
            }),
            Some(task) => {
                let run = h.runs.iter().find(|r| r.run_id == ids[0]).unwrap();
                if (run.principal.as_str(), run.agent.as_str())
                    != (
                        task.identity.principal.as_str(),
                        task.identity.agent.as_str(),
                    )
                {
                    found.push(Violation {
                        invariant: "one run per identity",
                        what: format!(
                            "run {} is {}'s at {}, its task {} is {}",
                            run.run_id, run.principal, run.agent, task.task_id, task.identity
                        ),
                        calls: calls_of(h, &task.identity),
                    });
                }
                if task.run_id.as_deref().is_some_and(|r| r != ids[0]) {
                    found.push(Violation {
                        invariant: "one run per identity",
                        what: format!(
                            "task {} names run {:?}, Q's run for its workflow is {}",
                            task.task_id, task.run_id, ids[0]
                        ),
                        calls: calls_of(h, &task.identity),
                    });
                }
            }
        }
    }
}

fn durable(h: &History, found: &mut Vec<Violation>) {
    let tasks: BTreeMap<&str, &FinalTask> =
        h.tasks.iter().map(|t| (t.task_id.as_str(), t)).collect();
    let mut acknowledged: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for call in &h.calls {
        if call.identity.is_none() {
            continue;
        }
        for (_, seen) in call.seen() {
            acknowledged
                .entry(&seen.task_id)
                .or_default()
                .push(call.seq);
        }
    }
    for (task_id, calls) in acknowledged {
        let Some(task) = tasks.get(task_id) else {
            found.push(Violation {
                invariant: "durability",
                what: format!("task {task_id} was acknowledged and has no row at the end"),
                calls,
            });
            continue;
        };
        if task.read.is_none() {
            found.push(Violation {
                invariant: "durability",
                what: format!("task {task_id} was acknowledged; its owner's GetTask finds nothing"),
                calls,
            });
        }
    }
    // The reconciler looks for unresolved dispatches among SUBMITTED tasks only
    // (`src/store/due.rs`): every writer of a later state records the run with it.
    for task in &h.tasks {
        if matches!(task.dispatch.as_str(), "pending" | "unknown")
            && task.stored_state != "TASK_STATE_SUBMITTED"
            && !is_terminal(&task.stored_state)
        {
            found.push(Violation {
                invariant: "durability",
                what: format!(
                    "task {} is {} with its dispatch {}, where the reconciler never looks",
                    task.task_id, task.stored_state, task.dispatch
                ),
                calls: calls_of(h, &task.identity),
            });
        }
    }
    // Q's record decides, found by the workflow id the task was created under.
    let runs: BTreeMap<&str, &QRun> = h.runs.iter().map(|r| (r.workflow_id.as_str(), r)).collect();
    for task in &h.tasks {
        let shown = task.read.as_ref().map(|r| r.state.as_str());
        let disagree = |what: String| Violation {
            invariant: "durability",
            what,
            calls: calls_of(h, &task.identity),
        };
        match runs.get(task.workflow_id.as_str()) {
            Some(run) => match state_for(&run.status) {
                Some(expected)
                    if task.stored_state != expected || shown.is_some_and(|s| s != expected) =>
                {
                    found.push(disagree(format!(
                        "task {} is {} (GetTask: {shown:?}) while Q's run {} is {}",
                        task.task_id, task.stored_state, run.run_id, run.status
                    )))
                }
                Some(_) => {}
                None if is_terminal(&task.stored_state) => found.push(disagree(format!(
                    "task {} ended {} while Q's run {} still runs ({})",
                    task.task_id, task.stored_state, run.run_id, run.status
                ))),
                None => {}
            },
            None if !is_terminal(&task.stored_state) => found.push(disagree(format!(
                "task {} is {} and Q holds no run for its workflow {}",
                task.task_id, task.stored_state, task.workflow_id
            ))),
            None => {}
        }
    }
}

/// Whether a call by this principal and token was made within a revocation's reach: its whole
/// span after the bound passed and, for a revocation that was undone, before the undoing.
fn no_content_past_revocation(h: &History, found: &mut Vec<Violation>) {
    let b = &h.bounds;
    for fault in &h.faults {
        // Whose calls the revocation reaches: a token's, or a principal's.
        let (by_token, whose, from, until) = match &fault.kind {
            FaultKind::TokenRevoked(token) => (
                true,
                token,
                fault.at + b.token_ms + b.revocation_tolerance_ms,
                None,
            ),
            FaultKind::WorkspaceRevoked { principal, .. } => (
                false,
                principal,
                fault.at + b.access_ms + b.revocation_tolerance_ms,
                restored_after(h, &fault.kind, fault.at),
            ),
            _ => continue,
        };
        let reached = |c: &&Call| {
            if by_token {
                &c.token == whose
            } else {
                &c.principal == whose
            }
        };
        for call in h.calls.iter().filter(reached) {
            for (at, seen) in call.seen() {
                // An answer counts over its request's whole span; a frame when it came.
                let (moment, last) = match call.outcome {
                    Outcome::Stream { .. } => (at, at),
                    _ => (call.started, call.ended),
                };
                let before_undone = until.is_none_or(|u| last < u);
                if seen.content && moment >= from && before_undone {
                    found.push(Violation {
                        invariant: "no content past revocation",
                        what: format!(
                            "task {} with content at {moment} ms, past {fault} plus the bound",
                            seen.task_id
                        ),
                        calls: vec![call.seq],
                    });
                }
            }
        }
    }
}

/// When a revoked grant came back: the first restoration of the same grant after `at`, by
/// whichever fault made it (revocations may overlap; the grant is one flag in Q).
fn restored_after(h: &History, kind: &FaultKind, at: u64) -> Option<u64> {
    h.faults
        .iter()
        .filter(|f| &f.kind == kind)
        .filter_map(|f| f.until)
        .filter(|until| *until > at)
        .min()
}

/// Every task, answered or not: ended by its deadline (its execution deadline from the row's
/// creation, the reconciler's interval and the tolerance) by the row's own status timestamp,
/// or still running when read back before that. A moment due while no PostgreSQL primary took
/// writes moves to the end of that outage plus the recovery bound (nothing can be written
/// meanwhile); one due after a replica was killed, to when another replica has taken over the
/// reconciler (docs/methods.md: within the interval, asserted within it plus 1 s) and run a
/// pass, since the killed one may have been the leader that ends overdue tasks. A moment due
/// while Q answered 503 on the request path's routes moves to the end of that span (plus the
/// interval and the tolerance): the end of a run the feed did not carry is learnt only by
/// reading it from Q, and a task may only end as its run did (nothing acknowledged is lost).
fn deadlines(h: &History, found: &mut Vec<Violation>) {
    let b = &h.bounds;
    let outages: Vec<(u64, u64)> = h
        .faults
        .iter()
        .filter_map(|f| match &f.kind {
            FaultKind::PostgresRestarted | FaultKind::PostgresFailedOver => Some((
                f.at,
                f.until.unwrap_or(u64::MAX).saturating_add(RECOVERY_MS),
            )),
            FaultKind::Q(json) if json.starts_with("{\"status\"") => {
                f.until.map(|until| (f.at, until))
            }
            _ => None,
        })
        .collect();
    let kills: Vec<u64> = h
        .faults
        .iter()
        .filter(|f| matches!(f.kind, FaultKind::ReplicaKilled(_)))
        .map(|f| f.at)
        .collect();
    let takeover = b.reconcile_interval_ms + TAKEOVER_MARGIN_MS;
    for task in &h.tasks {
        let mut due = task.created_at + b.deadline_ms + b.reconcile_interval_ms + b.tolerance_ms;
        // Each excuse can move the moment into another's reach: applied until none does.
        loop {
            let before = due;
            for (from, to) in &outages {
                if (*from..*to).contains(&due) {
                    due = to + b.reconcile_interval_ms + b.tolerance_ms;
                }
            }
            for killed in &kills {
                if *killed >= task.created_at && *killed < due {
                    due = due.max(killed + takeover + b.reconcile_interval_ms + b.tolerance_ms);
                }
            }
            if due == before {
                break;
            }
        }
        let late = if is_terminal(&task.stored_state) {
            (task.status_at > due)
                .then(|| format!("ended {} at {} ms", task.stored_state, task.status_at))
        } else {
            (task.read_at > due)
                .then(|| format!("is still {} at {} ms", task.stored_state, task.read_at))
        };
        if let Some(late) = late {
            found.push(Violation {
                invariant: "deadline",
                what: format!(
                    "task {} created at {} ms {late}; it was due to end by {due} ms",
                    task.task_id, task.created_at
                ),
                calls: calls_of(h, &task.identity),
            });
        }
    }
}

/// How soon after a PostgreSQL primary takes writes again the gateway's writes succeed
/// (`tests/it/failover`: 2 s).
const RECOVERY_MS: u64 = 2_000;

/// How much longer than the reconciler's interval another replica may take to lead once the
/// leader died (`tests/it/lifecycle/reconciler.rs` asserts the takeover within the interval
/// plus 1 s).
const TAKEOVER_MARGIN_MS: u64 = 1_000;

/// The span in which a stream's lease was surely held, on the client's clock: from the
/// moment its headers arrived (the lease is taken before) until the client closed it, or until
/// its last frame less a margin for the frame's way, when the server ended it.
fn held(call: &Call) -> Option<(u64, u64)> {
    const MARGIN_MS: u64 = 50;
    let Outcome::Stream {
        opened,
        frames,
        end,
    } = &call.outcome
    else {
        return None;
    };
    let until = if end == "client closed" {
        call.ended
    } else {
        frames
            .last()
            .map_or(*opened, |f| f.at)
            .saturating_sub(MARGIN_MS)
    };
    (until > *opened).then_some((*opened, until))
}

/// How long before the world's stamp of a Redis restarted (or moved) a stream may have taken
/// its lease from the new server: the world stamps it back once it has seen it listen, polling
/// every 50 ms, and a connection and a lease acquisition fit in that poll. A tenth of the
/// lease TTL's third that follows it.
pub(super) const REDIS_BACK_STAMP_MS: u64 = 100;

/// What a revocation's read needs after the schedule's moment for it: the admin calls and
/// the read's own time, with room.
const PROBE_ROOM_MS: u64 = 200;

fn leases(h: &History, found: &mut Vec<Violation>) {
    let b = &h.bounds;
    let outages: Vec<(u64, u64)> = h
        .faults
        .iter()
        // Redis restarted empty lost every lease; a demotion loses the last ones the old
        // primary took before its replica had them (replication is asynchronous).
        .filter(|f| matches!(f.kind, FaultKind::RedisRestarted | FaultKind::RedisDemoted))
        .map(|f| (f.at, f.until.unwrap_or(u64::MAX)))
        .collect();
    // While Redis takes no writes, no observation is admitted: fail closed.
    for call in &h.calls {
        let Some((opened, _)) = held(call) else {
            continue;
        };
        if let Some((at, until)) = outages.iter().find(|(at, until)| {
            at + b.lease_margin_ms <= opened && opened < until.saturating_sub(REDIS_BACK_STAMP_MS)
        }) {
            found.push(Violation {
                invariant: "observer leases",
                what: format!(
                    "a stream was admitted at {opened} ms while Redis took no writes ({at}..{until} ms)"
                ),
                calls: vec![call.seq],
            });
        }
    }
    // Once it does again, an observation admitted before may run uncounted until its next
    // renewal finds its lease gone: a third of the TTL.
    let excused: Vec<(u64, u64)> = outages
        .iter()
        .map(|(_, until)| {
            (
                *until,
                until.saturating_add(b.uncounted_after_redis_restart_ms + b.lease_margin_ms),
            )
        })
        .collect();
    let mut by_principal: BTreeMap<&str, Vec<(u64, u64, usize)>> = BTreeMap::new();
    for call in &h.calls {
        if let Some((from, until)) = held(call) {
            by_principal
                .entry(&call.principal)
                .or_default()
                .push((from, until, call.seq));
        }
    }
    for (principal, spans) in by_principal {
        for &(from, _, _) in &spans {
            let open: Vec<usize> = spans
                .iter()
                .filter(|(f, u, _)| *f <= from && from < *u)
                .map(|s| s.2)
                .collect();
            let is_excused = excused.iter().any(|(a, z)| *a <= from && from <= *z);
            if open.len() > b.per_principal && !is_excused {
                found.push(Violation {
                    invariant: "observer leases",
                    what: format!(
                        "{principal} had {} streams open at {from} ms (bound {})",
                        open.len(),
                        b.per_principal
                    ),
                    calls: open,
                });
                break;
            }
        }
    }
}

/// The least a run must show ([`super::history::Floors`]), and a read by every revoked token
/// (or principal) once its revocation's bound had passed, so that each revocation was tested.
fn floors(h: &History, found: &mut Vec<Violation>) {
    let f = &h.bounds.floors;
    let answered = h
        .calls
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Tasks(_) | Outcome::Stream { .. }))
        .count();
    let completed = h
        .tasks
        .iter()
        .filter(|t| {
            t.read
                .as_ref()
                .is_some_and(|r| r.state == "TASK_STATE_COMPLETED")
        })
        .count();
    let refused_at_bound = h
        .calls
        .iter()
        .filter(|c| matches!(&c.outcome, Outcome::Failed(why) if why.starts_with("HTTP 429")))
        .count();
    for (what, got, floor) in [
        ("calls answered", answered, f.answered),
        ("tasks completed", completed, f.completed),
        ("runs in Q", h.runs.len(), f.runs),
        (
            "refusals at the observer bound",
            refused_at_bound,
            f.lease_refusals,
        ),
    ] {
        if got < floor {
            found.push(Violation {
                invariant: "floor",
                what: format!("{got} {what}, below the floor of {floor}"),
                calls: Vec::new(),
            });
        }
    }
    let b = &h.bounds;
    if !f.revocations_read {
        return;
    }
    for fault in &h.faults {
        let (by_token, whose, from, until) = match &fault.kind {
            FaultKind::TokenRevoked(token) => (true, token, fault.at + b.token_ms, u64::MAX),
            FaultKind::WorkspaceRevoked { principal, .. } => (
                false,
                principal,
                fault.at + b.access_ms,
                restored_after(h, &fault.kind, fault.at).unwrap_or(u64::MAX),
            ),
            _ => continue,
        };
        let probed = h.calls.iter().any(|c| {
            let whom = if by_token { &c.token } else { &c.principal };
            whom == whose
                && c.started >= from
                && c.ended < until
                && !matches!(&c.outcome, Outcome::Done(why) if why.starts_with("skipped"))
        });
        // The schedule reads ACCESS_PROBE_MS after each workspace revocation (300 ms past
        // its bound, the admin call's time after the fault's stamp): a revocation undone
        // sooner by another's restore (the grant is one flag in Q) cannot hold that read,
        // nor any read the checker could rely on, so it is not counted as tested.
        let room = ACCESS_PROBE_MS.saturating_sub(b.access_ms) + PROBE_ROOM_MS;
        if !probed && until > from + room {
            found.push(Violation {
                invariant: "floor",
                what: format!("no read by {whose} once {fault} was past its bound"),
                calls: Vec::new(),
            });
        }
    }
}
