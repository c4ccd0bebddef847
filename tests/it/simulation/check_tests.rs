//! The checker finds each kind of violation in a history made to hold it, and nothing in the
//! same history without it.

use super::check::{check, Violation};
use super::history::{
    Bounds, Call, Fault, FaultKind, FinalTask, Frame, History, Identity, Outcome, QRun, Seen,
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
        bounds: Bounds {
            token_ms: 5_000,
            access_ms: 1_000,
            tolerance_ms: 1_000,
            deadline_ms: 8_000,
            reconcile_interval_ms: 200,
            per_principal: 4,
            uncounted_after_redis_restart_ms: 1_000,
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

    // Q's run still going: nothing to compare yet (the deadline check covers it).
    let mut h = clean();
    h.runs[0].status = "running".into();
    assert!(check(&h).is_empty());
}

#[test]
fn content_past_a_revocation_and_its_bound_is_found() {
    let mut h = clean();
    h.faults.push(Fault {
        kind: FaultKind::TokenRevoked("tok-alice-wild".into()),
        at: 1_000,
        until: None,
    });
    // Within the bound (5 s + 1 s tolerance): allowed.
    h.calls.push(call(
        1,
        "tok-alice-wild",
        None,
        (6_900, 7_000),
        Outcome::Tasks(vec![seen("t1", DONE, true)]),
    ));
    // Past it, but only a control receipt: allowed.
    h.calls.push(call(
        2,
        "tok-alice-wild",
        None,
        (7_100, 7_200),
        Outcome::Tasks(vec![seen("t1", DONE, false)]),
    ));
    // Another token of the same principal: not concerned.
    h.calls.push(call(
        3,
        "tok-alice",
        None,
        (7_100, 7_200),
        Outcome::Tasks(vec![seen("t1", DONE, true)]),
    ));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.calls.push(call(
        4,
        "tok-alice-wild",
        None,
        (7_100, 7_200),
        Outcome::Tasks(vec![seen("t1", DONE, true)]),
    ));
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
    h.calls.push(call(
        2,
        "tok-bob",
        None,
        (9_900, 10_100),
        Outcome::Tasks(vec![seen("t7", DONE, true)]),
    ));
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
    h.calls.push(call(
        4,
        "tok-bob",
        None,
        (5_000, 5_100),
        Outcome::Tasks(vec![seen("t7", DONE, true)]),
    ));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    h.calls.push(call(
        5,
        "tok-bob",
        None,
        (3_500, 3_600),
        Outcome::Tasks(vec![seen("t7", DONE, true)]),
    ));
    assert_eq!(invariants(&check(&h)), ["no content past revocation"]);
}

#[test]
fn a_task_running_past_its_deadline_is_found() {
    let mut h = clean();
    h.tasks[0].read = Some(seen("t1", "TASK_STATE_INPUT_REQUIRED", false));
    h.runs[0].status = "awaiting_approval".into();
    // Answered by 400 ms: due by 400 + 8,000 + 200 + 1,000.
    h.tasks[0].read_at = 9_600;
    assert!(check(&h).is_empty());
    h.tasks[0].read_at = 9_601;
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
}
