//! The promises about runs: one run per workflow id however many creates race
//! (`create-once`), a changed request refused (`create-conflict`), the lookup by workflow id
//! finding every committed run (`lookup-committed`) and answering `run_not_found` only when
//! none was (`lookup-absent`), each run's events numbered from 1 in order (`run-events`), and
//! every one of those events in the run feed (`run-feed-complete`).

use std::collections::{BTreeMap, HashSet};

use futures_util::future::join_all;

use crate::upstream::contract::{input_sha256, ErrorCode, Run, RunEvents, RunStatus};

use super::client::{describe, encode, indefinite, Reply};
use super::report::{Finding, Promise};
use super::Kit;

/// How many creates with one workflow id the kit sends at once.
pub const CONCURRENT_CREATES: usize = 8;

/// The run a create answered with, when it answered 200 or 201 with one.
fn created(reply: &Reply) -> Option<(u16, Run)> {
    let answer = reply.as_ref().ok()?;
    if answer.status != 200 && answer.status != 201 {
        return None;
    }
    Some((answer.status, answer.json().ok()?))
}

pub async fn create_once(kit: &Kit) {
    let p = Promise::CreateOnce;
    let workflow_id = kit.workflow("once");
    let request = kit.request(&workflow_id, "contract check: one run per workflow id");
    let replies =
        join_all((0..CONCURRENT_CREATES).map(|_| kit.ledger.create(&kit.q, &request))).await;
    let f = &kit.findings;
    if let Some(reply) = replies.iter().find(|r| indefinite(r)) {
        f.not_checked(
            p,
            format!(
                "a create of {workflow_id} got no definite answer: {}",
                describe(reply)
            ),
        );
        return;
    }
    let runs: Vec<(u16, Run)> = replies.iter().filter_map(created).collect();
    if runs.len() < replies.len() {
        let other = replies.iter().find(|r| created(r).is_none()).map(describe);
        f.broken(
            p,
            format!(
                "{CONCURRENT_CREATES} creates of {workflow_id}: one answered {}",
                other.unwrap_or_default()
            ),
        );
        return;
    }
    let new = runs.iter().filter(|(status, _)| *status == 201).count();
    let ids: Vec<&str> = runs
        .iter()
        .map(|(_, r)| r.id.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    f.judge(
        p,
        new == 1 && ids.len() == 1,
        format!(
            "{CONCURRENT_CREATES} concurrent creates of {workflow_id}: one 201, {} × 200, all \
             naming {}",
            CONCURRENT_CREATES - 1,
            ids[0]
        ),
        format!(
            "{CONCURRENT_CREATES} concurrent creates of {workflow_id}: {new} × 201, {} × 200, \
             naming {} runs: {}",
            CONCURRENT_CREATES - new,
            ids.len(),
            ids.join(", ")
        ),
    );
    let run = &runs[0].1;
    let hash = input_sha256(&request.input);
    f.judge(
        p,
        run.input_sha256 == hash && run.workflow_id == workflow_id,
        "the run carries its workflow id and the input_sha256 of the canonical input".into(),
        format!(
            "the run has workflow_id {:?} and input_sha256 {}, the canonical hash is {hash}",
            run.workflow_id, run.input_sha256
        ),
    );
    // A retry later, and one with another deadline (not part of the comparison).
    let mut longer = request.clone();
    longer.execution_timeout_seconds += 60;
    for (what, replay) in [
        ("a replay", &request),
        ("a replay with another execution_timeout_seconds", &longer),
    ] {
        let reply = kit.ledger.create(&kit.q, replay).await;
        let same = created(&reply).is_some_and(|(s, r)| s == 200 && ids.contains(&r.id.as_str()));
        f.judge_reply(
            p,
            &reply,
            same,
            format!("{what} answered 200 with the same run"),
            format!(
                "{what} answered {}{}",
                describe(&reply),
                created(&reply)
                    .map(|(_, r)| format!(" naming {}", r.id))
                    .unwrap_or_default()
            ),
        );
    }
}

pub async fn create_conflict(kit: &Kit) {
    let p = Promise::CreateConflict;
    let f = &kit.findings;
    let workflow_id = kit.workflow("conflict");
    let request = kit.request(&workflow_id, "contract check: the original request");
    let reply = kit.ledger.create(&kit.q, &request).await;
    let Some((_, original)) = created(&reply) else {
        f.not_checked(
            p,
            format!(
                "the first create of {workflow_id} answered {}",
                describe(&reply)
            ),
        );
        return;
    };
    let changed = kit.request(&workflow_id, "contract check: a changed request");
    let reply = kit.ledger.create(&kit.q, &changed).await;
    let conflict = reply
        .as_ref()
        .is_ok_and(|a| a.is(ErrorCode::WorkflowIdConflict));
    f.judge_reply(
        p,
        &reply,
        conflict,
        "a changed input under the same workflow id answered 409 workflow_id_conflict".into(),
        format!(
            "a changed input under {workflow_id} answered {}{}",
            describe(&reply),
            created(&reply)
                .map(|(_, r)| format!(" naming {}", r.id))
                .unwrap_or_default()
        ),
    );
    let reply = kit.ledger.create(&kit.q, &request).await;
    let kept = created(&reply).is_some_and(|(s, r)| {
        s == 200 && r.id == original.id && r.input_sha256 == original.input_sha256
    });
    f.judge_reply(
        p,
        &reply,
        kept,
        "the original request replayed after it still answered 200 with the original run".into(),
        format!(
            "the original request replayed after the changed one answered {}",
            describe(&reply)
        ),
    );
}

/// `GET /runs/by-workflow/{id}`.
async fn lookup(kit: &Kit, workflow_id: &str) -> Reply {
    kit.q
        .get(&format!("/runs/by-workflow/{}", encode(workflow_id)))
        .await
}

pub async fn lookups(kit: &Kit) {
    let f = &kit.findings;
    // Right after the create answered: the lookup reads what the create committed.
    let workflow_id = kit.workflow("lookup");
    let reply = kit
        .ledger
        .create(&kit.q, &kit.request(&workflow_id, "contract check: lookup"))
        .await;
    match created(&reply) {
        Some((_, run)) => {
            let found = lookup(kit, &workflow_id).await;
            let same = found.as_ref().is_ok_and(|a| a.status == 200)
                && created(&found).is_some_and(|(_, r)| r.id == run.id);
            f.judge_reply(
                Promise::LookupCommitted,
                &found,
                same,
                format!("a lookup right after the create answered found {}", run.id),
                format!(
                    "a lookup of {workflow_id} right after its create answered {} answered {}",
                    run.id,
                    describe(&found)
                ),
            );
        }
        None => f.not_checked(
            Promise::LookupCommitted,
            format!("the create of {workflow_id} answered {}", describe(&reply)),
        ),
    }
    let p = Promise::LookupAbsent;
    let never = kit.workflow("never-created");
    let reply = lookup(kit, &never).await;
    f.judge_reply(
        p,
        &reply,
        reply.as_ref().is_ok_and(|a| a.is(ErrorCode::RunNotFound)),
        "a workflow id never used: 404 run_not_found".into(),
        format!(
            "a workflow id never used ({never}) answered {}",
            describe(&reply)
        ),
    );
    // A create Q refused committed nothing: the lookup must say so, as Q's own code.
    let refused = kit.workflow("refused");
    let mut request = kit.request(&refused, "contract check: refused");
    request.agent_id = kit.workflow("no-such-agent");
    let reply = kit.ledger.create(&kit.q, &request).await;
    let status = reply.as_ref().map(|a| a.status).unwrap_or(0);
    if !(400..500).contains(&status) {
        f.not_checked(
            p,
            format!(
                "a create for an unknown agent answered {}",
                describe(&reply)
            ),
        );
        return;
    }
    let reply = lookup(kit, &refused).await;
    f.judge_reply(
        p,
        &reply,
        reply.as_ref().is_ok_and(|a| a.is(ErrorCode::RunNotFound)),
        "a workflow id whose create was refused: 404 run_not_found".into(),
        format!(
            "the workflow id of a refused create ({refused}) answered {}",
            describe(&reply)
        ),
    );
}

/// Every run the kit created is found by its workflow id (the run, or with racing creates one
/// of the runs that workflow id named).
pub async fn lookup_every_run(kit: &Kit) {
    let runs = kit.ledger.runs();
    let mut by_workflow: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
    for run in &runs {
        by_workflow
            .entry(run.workflow_id.as_str())
            .or_default()
            .insert(run.id.as_str());
    }
    let answers = join_all(by_workflow.keys().map(|w| lookup(kit, w))).await;
    let mut missed = Vec::new();
    let p = Promise::LookupCommitted;
    for ((workflow_id, ids), reply) in by_workflow.iter().zip(&answers) {
        let found = reply.as_ref().is_ok_and(|a| a.status == 200)
            && created(reply).is_some_and(|(_, r)| ids.contains(r.id.as_str()));
        let text = format!("{workflow_id} answered {}", describe(reply));
        if indefinite(reply) {
            kit.findings.not_checked(p, text);
        } else if !found {
            missed.push(text);
        }
    }
    if missed.is_empty() {
        kit.findings.kept(
            p,
            format!(
                "each of the {} workflow ids with a run found its run",
                by_workflow.len()
            ),
        );
    } else {
        kit.findings.broken(
            p,
            format!(
                "{} of {} workflow ids with a committed run: {}",
                missed.len(),
                by_workflow.len(),
                missed.join("; ")
            ),
        );
    }
}

/// Once the runs are canceled: each run's events are numbered from 1 in order, and each of
/// them is in the run feed.
pub async fn events_and_completeness(kit: &Kit) {
    let runs = kit.ledger.runs();
    let deadline = kit.deadline();
    let (mut numbered, mut complete) = (0, 0);
    for run in &runs {
        let (events, finding) = run_events(kit, run).await;
        match finding {
            Finding::Kept(_) => numbered += 1,
            finding => kit.findings.add(Promise::RunEvents, finding),
        }
        let Some(events) = events else {
            continue;
        };
        complete += 1;
        for event in &events.events {
            let (seq, status) = (event.seq, event.status);
            let found = kit
                .run_feed
                .wait_for(0, deadline, |c| {
                    c.run_id == run.id
                        && if c.seq > 0 {
                            c.seq == seq
                        } else {
                            c.status == status
                        }
                })
                .await;
            if found.is_none() {
                complete -= 1;
                kit.findings.broken(
                    Promise::RunFeedComplete,
                    format!(
                        "{} {status:?} (seq {seq}) was not in the run feed within {} ms",
                        run.id,
                        kit.options.wait.as_millis()
                    ),
                );
                break;
            }
        }
    }
    if numbered > 0 {
        kit.findings.kept(
            Promise::RunEvents,
            format!(
                "{numbered} runs: events numbered from 1 (queued) without a gap, last_seq the \
                 last, the run's status the last event's, after_seq=1 answering the rest"
            ),
        );
    }
    if complete > 0 {
        kit.findings.kept(
            Promise::RunFeedComplete,
            format!("the run feed carried every event of {complete} runs"),
        );
    }
}

/// Reads one run's events and judges them (`run-events`); returns them when they could be
/// read.
async fn run_events(kit: &Kit, run: &Run) -> (Option<RunEvents>, Finding) {
    let path = format!("/runs/{}/events?after_seq=0", encode(&run.id));
    let reply = kit.q.get(&path).await;
    let events: RunEvents = match reply.as_ref().map_err(Clone::clone).and_then(|a| {
        if a.status == 200 {
            a.json()
        } else {
            Err(a.describe())
        }
    }) {
        Ok(events) => events,
        Err(e) => {
            return (
                None,
                Finding::NotChecked(format!("the events of {}: {e}", run.id)),
            )
        }
    };
    let seqs: Vec<u64> = events.events.iter().map(|e| e.seq).collect();
    let numbered = seqs.iter().copied().eq(1..=seqs.len() as u64);
    let first = events.events.first().map(|e| e.status);
    let last = events.events.last().map(|e| e.status);
    let current = kit.q.get(&format!("/runs/{}", encode(&run.id))).await;
    let status_now = created(&current).map(|(_, r)| r.status);
    let holds = numbered
        && first == Some(RunStatus::Queued)
        && events.last_seq == seqs.len() as u64
        && status_now.is_some()
        && last == status_now;
    let after_one = kit
        .q
        .get(&format!("/runs/{}/events?after_seq=1", encode(&run.id)))
        .await;
    let tail: Option<RunEvents> = after_one.as_ref().ok().and_then(|a| a.json().ok());
    let tail_holds = tail.is_some_and(|t| t.events.iter().map(|e| e.seq).eq(2..=seqs.len() as u64));
    let finding = if holds && tail_holds {
        Finding::Kept(run.id.clone())
    } else {
        Finding::Broken(format!(
            "{}: event seqs {seqs:?} (first {first:?}), last_seq {}, run status {status_now:?}; \
             after_seq=1 answered {}",
            run.id,
            events.last_seq,
            describe(&after_one)
        ))
    };
    (Some(events), finding)
}
