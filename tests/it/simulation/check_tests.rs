//! The checker finds each kind of violation in a history made to hold it, and nothing in the
//! same history without it.

use serde_json::json;

use super::check::{check, Violation, REDIS_BACK_STAMP_MS};
use super::history::{
    Bounds, Call, Fault, FaultKind, FinalTask, Floors, Frame, History, Identity, Outcome, QRun,
    Seen,
};

fn identity(message: &str) -> Identity {
    Identity {
        principal: "p-alice".into(),
        agent: "ag-writer".into(),
        message_id: message.into(),
    }
}

fn seen(task: &str, state: &str, content: bool) -> Seen {
    Seen {
        task_id: task.into(),
        state: state.into(),
        content,
    }
}

fn call(
    seq: usize,
    token: &str,
    message: Option<&str>,
    span: (u64, u64),
    outcome: Outcome,
) -> Call {
    let principal = if token.starts_with("tok-alice") {
        "p-alice"
    } else {
        "p-bob"
    };
    Call {
        seq,
        replica: 0,
        token: token.into(),
        principal: principal.into(),
        agent: "ag-writer".into(),
        what: "test".into(),
        identity: message.map(identity),
        started: span.0,
        ended: span.1,
        outcome,
    }
}

const DONE: &str = "TASK_STATE_COMPLETED";

/// A read by `token` answering `task` completed, with its content or as a receipt.
fn read(seq: usize, token: &str, span: (u64, u64), task: &str, content: bool) -> Call {
    call(
        seq,
        token,
        None,
        span,
        Outcome::Tasks(vec![seen(task, DONE, content)]),
    )
}

/// Message m1 sent and answered with task t1, whose run r1 succeeded; read back at 20 s.
fn clean() -> History {
    History {
        seed: 0,
        calls: vec![call(
            0,
            "tok-alice",
            Some("m1"),
            (100, 400),
            Outcome::Tasks(vec![seen("t1", DONE, true)]),
        )],
        faults: Vec::new(),
        tasks: vec![FinalTask {
            identity: identity("m1"),
            task_id: "t1".into(),
            workflow_id: "w1".into(),
            run_id: Some("r1".into()),
            stored_state: DONE.into(),
            dispatch: "dispatched".into(),
            created_at: 100,
            status_at: 2_000,
            read: Some(seen("t1", DONE, true)),
            read_at: 20_000,
        }],
        runs: vec![QRun {
            run_id: "r1".into(),
            workflow_id: "w1".into(),
            principal: "p-alice".into(),
            agent: "ag-writer".into(),
            status: "succeeded".into(),
        }],
        q_calls: Vec::new(),
        q_fired: Default::default(),
        bounds: Bounds {
            token_ms: 5_000,
            access_ms: 1_000,
            revocation_tolerance_ms: 50,
            tolerance_ms: 1_000,
            deadline_ms: 8_000,
            reconcile_interval_ms: 200,
            per_principal: 4,
            uncounted_after_redis_restart_ms: 1_000,
            lease_margin_ms: 250,
            // Off here: each invariant's test is about that invariant (`floors_*` turn it on).
            floors: Floors {
                answered: 0,
                completed: 0,
                runs: 0,
                lease_refusals: 0,
                revocations_read: false,
            },
        },
    }
}

fn invariants(found: &[Violation]) -> Vec<&'static str> {
    found.iter().map(|v| v.invariant).collect()
}

#[test]
fn a_clean_history_has_no_violation() {
    assert!(check(&clean()).is_empty(), "{:?}", check(&clean()));
}

#[test]
fn a_second_task_or_run_for_one_identity_is_found() {
    let mut h = clean();
    h.calls.push(call(
        1,
        "tok-alice-wild",
        Some("m1"),
        (150, 450),
        Outcome::Tasks(vec![seen("t2", DONE, true)]),
    ));
    assert!(invariants(&check(&h)).contains(&"one task per identity"));

    let mut h = clean();
    h.runs.push(QRun {
        run_id: "r2".into(),
        ..h.runs[0].clone()
    });
    assert_eq!(invariants(&check(&h)), ["one run per identity"]);

    let mut h = clean();
    h.runs.push(QRun {
        run_id: "r9".into(),
        workflow_id: "w9".into(),
        ..h.runs[0].clone()
    });
    assert_eq!(
        invariants(&check(&h)),
        ["one run per identity"],
        "a run no task names"
    );
}

#[test]
fn an_acknowledged_task_lost_or_disagreeing_with_q_is_found() {
    let mut h = clean();
    h.tasks[0].read = None;
    assert_eq!(invariants(&check(&h)), ["durability"]);

    let mut h = clean();
    h.tasks.clear();
    // Its run in Q now belongs to no task either.
    assert_eq!(
        invariants(&check(&h)),
        ["one run per identity", "durability"]
    );

    let mut h = clean();
    h.runs[0].status = "canceled".into();
    assert_eq!(invariants(&check(&h)), ["durability"]);

    // Completed while Q's run still runs: the gateway's record ahead of Q's.
    let mut h = clean();
    h.runs[0].status = "running".into();
    assert_eq!(invariants(&check(&h)), ["durability"]);
}

/// Q's record is found by the task's workflow id, not through the run id the row holds: a
/// task failed by the gateway while Q has a run that succeeded, or one still running with no
/// run in Q at all, disagrees with Q.
#[test]
fn a_task_disagreeing_with_the_run_q_holds_for_its_workflow_is_found() {
    let mut h = clean();
    h.tasks[0].run_id = None;
    h.tasks[0].stored_state = "TASK_STATE_FAILED".into();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_FAILED", false));
    let found = check(&h);
    assert_eq!(invariants(&found), ["durability"], "{found:?}");
    assert!(found[0].what.contains("Q's run r1 is succeeded"));

    let mut h = clean();
    h.runs.clear();
    h.tasks[0].run_id = None;
    h.tasks[0].stored_state = "TASK_STATE_WORKING".into();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_WORKING", false));
    h.tasks[0].read_at = 5_000;
    assert_eq!(invariants(&check(&h)), ["durability"]);

    // Ended without a run (refused, or past its deadline unconfirmed): agrees.
    h.tasks[0].stored_state = "TASK_STATE_FAILED".into();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_FAILED", false));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
}

/// A task that moved on from SUBMITTED with its dispatch unresolved is one the reconciler never
/// looks for (it reads SUBMITTED tasks only): found; SUBMITTED or ended, it is not.
#[test]
fn an_unresolved_dispatch_on_a_task_past_submitted_is_found() {
    let mut h = clean();
    h.runs[0].status = "running".into();
    h.tasks[0].read_at = 5_000; // before its deadline
    h.tasks[0].stored_state = "TASK_STATE_WORKING".into();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_WORKING", false));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.tasks[0].dispatch = "unknown".into();
    let found = check(&h);
    assert_eq!(invariants(&found), ["durability"]);
    assert!(found[0].what.contains("dispatch unknown"), "{found:?}");

    h.tasks[0].stored_state = "TASK_STATE_SUBMITTED".into();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_SUBMITTED", false));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.runs.clear();
    h.tasks[0].stored_state = "TASK_STATE_CANCELED".into();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_CANCELED", false));
    h.tasks[0].dispatch = "pending".into();
    assert!(check(&h).is_empty(), "{:?}", check(&h));
}

/// Two identities whose tasks share a workflow would share Q's run: found.
#[test]
fn two_identities_sharing_a_workflow_are_found() {
    let mut h = clean();
    h.tasks.push(FinalTask {
        identity: identity("m2"),
        task_id: "t2".into(),
        ..h.tasks[0].clone()
    });
    let found = check(&h);
    assert!(
        found
            .iter()
            .any(|v| v.invariant == "one task per identity" && v.what.contains("workflow w1")),
        "{found:?}"
    );
}

/// A run that did none of what the promises are about breaks no promise: the floors fail
/// it, and a revocation no read followed once its bound had passed is not counted as tested.
#[test]
fn floors_fail_a_run_that_did_nothing() {
    let mut h = clean();
    h.bounds.floors = Floors {
        answered: 1,
        completed: 1,
        runs: 1,
        lease_refusals: 0,
        revocations_read: true,
    };
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    // Every call failed: nothing answered, nothing completed, no run.
    h.calls[0].outcome = Outcome::Failed("HTTP 503".into());
    h.tasks.clear();
    h.runs.clear();
    assert_eq!(invariants(&check(&h)), ["floor", "floor", "floor"]);

    let mut h = clean();
    h.bounds.floors.lease_refusals = 1;
    assert_eq!(invariants(&check(&h)), ["floor"]);
    h.calls.push(call(
        1,
        "tok-alice",
        None,
        (3_000, 3_010),
        Outcome::Failed("HTTP 429".into()),
    ));
    assert!(check(&h).is_empty(), "{:?}", check(&h));

    let mut h = clean();
    h.bounds.floors.revocations_read = true;
    h.faults.push(Fault {
        kind: FaultKind::TokenRevoked("tok-alice-wild".into()),
        at: 1_000,
        until: None,
    });
    assert_eq!(invariants(&check(&h)), ["floor"], "no read after the bound");
    // A read before the bound does not test it; one after does, whatever its answer.
    h.calls.push(call(
        1,
        "tok-alice-wild",
        None,
        (5_500, 5_600),
        Outcome::Refused("HTTP 401".into()),
    ));
    assert_eq!(invariants(&check(&h)), ["floor"]);
    h.calls.push(call(
        2,
        "tok-alice-wild",
        None,
        (6_100, 6_200),
        Outcome::Refused("HTTP 401".into()),
    ));
    assert!(check(&h).is_empty(), "{:?}", check(&h));

    // A workspace revocation undone by an earlier one's restore (one grant in Q) before the
    // schedule's read could come (300 ms past the bound) is not required to have it; one
    // whose revocation lasted long enough is.
    let revoked = |at, until| Fault {
        kind: FaultKind::WorkspaceRevoked {
            principal: "p-bob".into(),
            workspace: "ws-acme-main".into(),
        },
        at,
        until: Some(until),
    };
    let bob_reads = || {
        let refused = Outcome::Refused("HTTP 403".into());
        call(1, "tok-bob", None, (4_300, 4_400), refused)
    };
    let mut h = clean();
    h.bounds.floors.revocations_read = true;
    h.faults.push(revoked(3_000, 6_253));
    h.faults.push(revoked(5_000, 8_000));
    let found = check(&h);
    assert_eq!(invariants(&found), ["floor"], "{found:?}");
    assert!(found[0].what.contains("at 3000 ms"), "{found:?}");
    h.calls.push(bob_reads());
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    let mut h = clean();
    h.bounds.floors.revocations_read = true;
    h.faults.push(revoked(3_000, 6_600));
    h.faults.push(revoked(5_000, 8_000));
    h.calls.push(bob_reads());
    let found = check(&h);
    assert_eq!(invariants(&found), ["floor"], "{found:?}");
    assert!(found[0].what.contains("at 5000 ms"), "{found:?}");
}

#[test]
fn content_past_a_revocation_and_its_bound_is_found() {
    let mut h = clean();
    h.faults.push(Fault {
        kind: FaultKind::TokenRevoked("tok-alice-wild".into()),
        at: 1_000,
        until: None,
    });
    // Within the bound (5 s + 50 ms tolerance): allowed.
    h.calls
        .push(read(1, "tok-alice-wild", (6_040, 6_100), "t1", true));
    // Past it, but only a control receipt: allowed.
    h.calls
        .push(read(2, "tok-alice-wild", (6_060, 6_100), "t1", false));
    // Another token of the same principal: not concerned.
    h.calls
        .push(read(3, "tok-alice", (6_060, 6_100), "t1", true));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    // 60 ms past the bound, within what the old 1 s tolerance let pass.
    h.calls
        .push(read(4, "tok-alice-wild", (6_060, 6_100), "t1", true));
    let found = check(&h);
    assert_eq!(invariants(&found), ["no content past revocation"]);
    assert_eq!(found[0].calls, [4]);

    // A stream's frame counts when it arrived, whenever the stream was opened.
    let mut h = clean();
    h.faults.push(Fault {
        kind: FaultKind::WorkspaceRevoked {
            principal: "p-bob".into(),
            workspace: "ws".into(),
        },
        at: 1_000,
        until: Some(10_000),
    });
    let frame = |at, content| Frame {
        at,
        seen: seen("t7", "TASK_STATE_WORKING", content),
    };
    h.calls.push(call(
        1,
        "tok-bob",
        None,
        (500, 9_000),
        Outcome::Stream {
            opened: 600,
            frames: vec![frame(700, true), frame(2_500, false)],
            end: "server closed".into(),
        },
    ));
    // Answered after the grant came back: allowed.
    h.calls
        .push(read(2, "tok-bob", (9_900, 10_100), "t7", true));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.calls.push(call(
        3,
        "tok-bob",
        None,
        (500, 9_000),
        Outcome::Stream {
            opened: 600,
            frames: vec![frame(3_100, true)],
            end: "server closed".into(),
        },
    ));
    assert_eq!(invariants(&check(&h)), ["no content past revocation"]);

    // Revocations that overlap: the grant is back at the first restoration after each.
    h.calls.pop();
    h.faults.push(Fault {
        kind: h.faults[0].kind.clone(),
        at: 2_000,
        until: Some(4_000),
    });
    h.calls.push(read(4, "tok-bob", (5_000, 5_100), "t7", true));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.calls.push(read(5, "tok-bob", (3_500, 3_600), "t7", true));
    // Past both revocations' bounds, before either was undone: each reports it.
    assert_eq!(
        invariants(&check(&h)),
        ["no content past revocation", "no content past revocation"]
    );
}

#[test]
fn a_task_running_past_its_deadline_is_found() {
    let mut h = clean();
    h.tasks[0].stored_state = "TASK_STATE_INPUT_REQUIRED".into();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_INPUT_REQUIRED", false));
    h.runs[0].status = "awaiting_approval".into();
    // Created at 100 ms: due by 100 + 8,000 + 200 + 1,000.
    h.tasks[0].read_at = 9_300;
    assert!(check(&h).is_empty());
    h.tasks[0].read_at = 9_301;
    assert_eq!(invariants(&check(&h)), ["deadline"]);

    // Ended, but after its deadline, by the row's own timestamp (read long after).
    let mut h = clean();
    h.tasks[0].status_at = 9_300;
    assert!(check(&h).is_empty());
    h.tasks[0].status_at = 9_301;
    assert_eq!(invariants(&check(&h)), ["deadline"]);

    // A task nobody was answered with is held to it too.
    h.calls.clear();
    assert_eq!(invariants(&check(&h)), ["deadline"]);

    // Due while PostgreSQL had no writable primary: due once it had one again (+ 2 s).
    h.faults.push(Fault {
        kind: FaultKind::PostgresFailedOver,
        at: 8_000,
        until: Some(10_000),
    });
    h.tasks[0].status_at = 13_200;
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.tasks[0].status_at = 13_201;
    assert_eq!(invariants(&check(&h)), ["deadline"]);
}

/// A task due while Q answered 503 on the request path's routes is due once it answers again:
/// the end of a run the feed did not carry can only be read from Q, and the task may only end
/// as its run did. Other faults of Q's, and a span with no recorded end, excuse nothing.
#[test]
fn a_task_due_while_q_answered_503_is_due_once_it_answers_again() {
    let unavailable = |until| Fault {
        kind: FaultKind::Q(
            json!({"status": [{"route": "get_run", "status": 503, "count": 9}]}).to_string(),
        ),
        at: 8_000,
        until,
    };
    let mut h = clean();
    h.faults.push(unavailable(Some(10_000)));
    // Due at 9,300 ms, within the span: by 10,000 + 200 + 1,000.
    h.tasks[0].status_at = 11_200;
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.tasks[0].status_at = 11_201;
    assert_eq!(invariants(&check(&h)), ["deadline"]);
    // A span over before the task was due excuses nothing.
    h.faults[0].until = Some(9_300);
    h.tasks[0].status_at = 9_301;
    assert_eq!(invariants(&check(&h)), ["deadline"]);
    // Nor one whose end was not recorded, nor another fault of Q's.
    h.faults[0] = unavailable(None);
    assert_eq!(invariants(&check(&h)), ["deadline"]);
    h.faults[0] = Fault {
        kind: FaultKind::Q(json!({"read_fail_500": 3}).to_string()),
        at: 8_000,
        until: Some(10_000),
    };
    assert_eq!(invariants(&check(&h)), ["deadline"]);
}

/// A replica killed before a task was due may have been the reconciler's leader, which ends
/// overdue tasks: another takes over within the interval plus 1 s, then runs a pass. Seed 38
/// of a soak: the leader killed 96 ms before a task's deadline, the task ended by the new
/// leader 68 ms past the bound that ignored the takeover.
#[test]
fn a_task_due_after_a_replica_was_killed_is_held_to_the_takeover() {
    let mut h = clean();
    h.faults.push(Fault {
        kind: FaultKind::ReplicaKilled(1),
        at: 8_000,
        until: Some(9_000),
    });
    // Killed at 8,000 ms: another leads by 8,000 + 200 + 1,000, its pass ends the task within
    // an interval and the tolerance: by 10,400 ms.
    h.tasks[0].status_at = 10_400;
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.tasks[0].status_at = 10_401;
    assert_eq!(invariants(&check(&h)), ["deadline"]);
    // A kill after the task was due excuses nothing.
    h.faults[0].at = 9_301;
    h.tasks[0].status_at = 9_301;
    assert_eq!(invariants(&check(&h)), ["deadline"]);
}

#[test]
fn more_open_streams_than_a_principal_may_hold_are_found() {
    let stream = |seq, opened, closed| {
        call(
            seq,
            "tok-alice",
            None,
            (opened - 10, closed),
            Outcome::Stream {
                opened,
                frames: vec![Frame {
                    at: opened + 5,
                    seen: seen("t1", "TASK_STATE_WORKING", false),
                }],
                end: "client closed".into(),
            },
        )
    };
    let mut h = clean();
    for seq in 1..=4 {
        h.calls.push(stream(seq, 1_000 + seq as u64, 3_000));
    }
    // A fifth opened as the first four closed: never more than four at once.
    h.calls.push(stream(5, 3_000, 4_000));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.calls.push(stream(6, 2_000, 2_500));
    let found = check(&h);
    assert_eq!(invariants(&found), ["observer leases"]);
    assert_eq!(found[0].calls.len(), 5);

    // Right after Redis came back empty, streams it forgot may overlap new ones a while.
    h.faults.push(Fault {
        kind: FaultKind::RedisRestarted,
        at: 1_500,
        until: Some(1_800),
    });
    assert!(check(&h).is_empty(), "{:?}", check(&h));

    // Only after it came back: while it was down, nothing may be admitted at all.
    let mut h = clean();
    h.faults.push(Fault {
        kind: FaultKind::RedisDemoted,
        at: 1_500,
        until: Some(3_000),
    });
    h.calls.push(stream(1, 1_600, 2_500));
    assert!(
        check(&h).is_empty(),
        "admitted before Redis said no: {:?}",
        check(&h)
    );
    h.calls.push(stream(2, 2_000, 2_500));
    let found = check(&h);
    assert_eq!(invariants(&found), ["observer leases"], "{found:?}");
    assert!(found[0].what.contains("while Redis took no writes"));

    // The world stamps a restarted Redis back once it has seen it listen: a stream admitted
    // a few ms before that stamp took its lease from the new server (seed 226: 5 ms), one
    // admitted longer before did not.
    let mut h = clean();
    h.faults.push(Fault {
        kind: FaultKind::RedisRestarted,
        at: 1_000,
        until: Some(3_000),
    });
    h.calls.push(stream(1, 3_000 - REDIS_BACK_STAMP_MS, 3_500));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.calls
        .push(stream(2, 3_000 - REDIS_BACK_STAMP_MS - 1, 3_500));
    let found = check(&h);
    assert_eq!(invariants(&found), ["observer leases"], "{found:?}");
    assert_eq!(found[0].calls, [2]);
}
