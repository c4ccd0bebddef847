//! Each feed rule against answers a keeping and a breaking feed would give.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::*;
use crate::contract_check::follower::Page;
use crate::upstream::contract::{RunChange, RunStatus};

fn change(cursor: u64, run: &str, seq: u64, status: RunStatus) -> RunChange {
    RunChange {
        cursor,
        run_id: run.into(),
        workflow_id: format!("wf-{run}"),
        status,
        status_message: None,
        seq,
        at: Utc::now(),
    }
}

fn page(
    changes: Vec<RunChange>,
    cursor: u64,
    head: u64,
    epoch: &str,
    floor: u64,
) -> Page<RunChange> {
    Page {
        changes,
        cursor,
        head,
        epoch: epoch.into(),
        floor,
    }
}

/// A read sent at `sent` from `after` in epoch `e1`.
fn read(sent: Instant, after: u64, page: Page<RunChange>) -> Read<RunChange> {
    Read {
        sent,
        after,
        following: "e1".into(),
        limit: 10,
        page: Ok(page),
    }
}

fn is_kept(findings: &[Finding]) -> bool {
    matches!(findings, [Finding::Kept(_)])
}

fn broken(findings: &[Finding]) -> String {
    match findings {
        [Finding::Broken(text)] => text.clone(),
        other => panic!("not broken: {other:?}"),
    }
}

use RunStatus::{Canceled, Queued, Running};

/// Two runs through a keeping feed: a first answer with both creates, then the cancels.
fn keeping() -> Vec<Read<RunChange>> {
    let t = Instant::now();
    vec![
        read(t, 0, page(vec![], 0, 0, "e1", 0)),
        read(
            t,
            0,
            page(
                vec![change(1, "a", 1, Queued), change(2, "b", 1, Queued)],
                2,
                2,
                "e1",
                0,
            ),
        ),
        read(
            t,
            2,
            page(
                vec![change(3, "a", 2, Canceled), change(4, "b", 2, Canceled)],
                4,
                5,
                "e1",
                0,
            ),
        ),
    ]
}

#[test]
fn order_keeps_ascending_answers_and_breaks_on_each_disorder() {
    assert!(is_kept(&order(&keeping())));
    let t = Instant::now();
    let reversed = [read(
        t,
        0,
        page(
            vec![change(2, "a", 2, Running), change(1, "a", 1, Queued)],
            2,
            2,
            "e1",
            0,
        ),
    )];
    let text = broken(&order(&reversed));
    assert!(text.contains("cursor 1 after cursor 2"), "{text}");
    assert!(text.contains("a: seq 1 came after seq 2"), "{text}");
    let at_or_below_after = [read(
        t,
        3,
        page(vec![change(3, "a", 1, Queued)], 3, 5, "e1", 0),
    )];
    assert!(broken(&order(&at_or_below_after)).contains("outside (after=3, head=5]"));
    let above_head = [read(
        t,
        0,
        page(vec![change(3, "a", 1, Queued)], 3, 2, "e1", 0),
    )];
    assert!(broken(&order(&above_head)).contains("outside"));
    let cursor_ahead = [read(
        t,
        0,
        page(vec![change(1, "a", 1, Queued)], 4, 5, "e1", 0),
    )];
    assert!(broken(&order(&cursor_ahead)).contains("cursor is 4 where its last change is 1"));
    let empty_moved = [read(t, 2, page(vec![], 3, 5, "e1", 0))];
    let text = broken(&order(&empty_moved));
    assert!(
        text.contains("no change has cursor 3, not its after=2"),
        "{text}"
    );
    // A run's older change in a later answer.
    let late = [
        read(t, 0, page(vec![change(1, "a", 2, Running)], 1, 1, "e1", 0)),
        read(t, 1, page(vec![change(2, "a", 1, Queued)], 2, 2, "e1", 0)),
    ];
    assert!(broken(&order(&late)).contains("a: seq 1 came after seq 2"));
    // Nothing seen: not kept.
    assert!(matches!(
        order(&[read(t, 0, page(vec![], 0, 0, "e1", 0))])[..],
        [Finding::NotChecked(_)]
    ));
}

#[test]
fn order_does_not_hold_bounds_against_a_reader_that_lost_its_place() {
    let t = Instant::now();
    // Another epoch: cursors below the old position are the new history's.
    let failover = [read(
        t,
        9,
        page(vec![change(1, "a", 1, Queued)], 1, 6, "e2", 0),
    )];
    assert!(is_kept(&order(&failover)));
}

fn mark(at: Instant, run: &'static str, status: RunStatus) -> Mark<RunChange> {
    Mark {
        what: format!("{run} {status:?}"),
        at,
        from: 0,
        is: Box::new(move |c| c.run_id == run && c.status == status),
    }
}

#[test]
fn head_breaks_when_a_read_sent_after_the_api_answered_is_below_the_change() {
    let answered = Instant::now();
    let after = answered + Duration::from_millis(5);
    // The feed carried it or counted it in its head: kept.
    let carried = [read(
        after,
        0,
        page(vec![change(1, "a", 1, Queued)], 1, 1, "e1", 0),
    )];
    assert!(is_kept(&head(&carried, &[mark(answered, "a", Queued)])));
    let counted = [
        read(after, 0, page(vec![], 0, 1, "e1", 0)),
        read(
            after,
            0,
            page(vec![change(1, "a", 1, Queued)], 1, 1, "e1", 0),
        ),
    ];
    assert!(is_kept(&head(&counted, &[mark(answered, "a", Queued)])));
    // A lagging copy that reports its own head.
    let lagging = [
        read(after, 0, page(vec![], 0, 0, "e1", 0)),
        read(
            after,
            0,
            page(vec![change(1, "a", 1, Queued)], 1, 1, "e1", 0),
        ),
    ];
    let text = broken(&head(&lagging, &[mark(answered, "a", Queued)]));
    assert!(
        text.contains("a Queued had head 0, below its cursor 1"),
        "{text}"
    );
    // A read sent before the answer proves nothing either way.
    let before = [read(answered, 0, page(vec![], 0, 0, "e1", 0))];
    let marks = [mark(answered + Duration::from_millis(1), "a", Queued)];
    assert!(matches!(
        head(&before, &marks)[..],
        [Finding::NotChecked(_)]
    ));
    // A change that never arrived: for the completeness check to report.
    let never = head(&keeping(), &[mark(answered, "z", Queued)]);
    assert!(matches!(&never[..], [Finding::NotChecked(t)] if t.contains("completeness")));
}

fn reread(pages: Vec<Page<RunChange>>) -> Reread<RunChange> {
    Reread {
        from: 0,
        pages,
        error: None,
    }
}

#[test]
fn history_keeps_a_feed_that_serves_the_same_changes_again() {
    let again = reread(vec![page(
        vec![
            change(1, "a", 1, Queued),
            change(2, "b", 1, Queued),
            change(3, "a", 2, Canceled),
            change(4, "b", 2, Canceled),
        ],
        4,
        4,
        "e1",
        0,
    )]);
    let (epoch, floor) = history(&keeping(), &again);
    assert!(is_kept(&epoch) && is_kept(&floor), "{epoch:?} {floor:?}");
    // Compacted honestly: the floor rose above what was seen, and says so.
    let compacted = reread(vec![page(vec![change(4, "b", 2, Canceled)], 4, 4, "e1", 3)]);
    let (epoch, floor) = history(&keeping(), &compacted);
    assert!(is_kept(&epoch));
    assert!(matches!(&floor[..], [Finding::Kept(t)] if t.contains("3 compacted")));
}

#[test]
fn history_tells_a_reused_cursor_from_a_discarded_one() {
    // Cursors 1 and 2 now name other changes under the same epoch: the epoch lies.
    let refilled = reread(vec![page(
        vec![
            change(1, "filler", 0, Running),
            change(2, "filler", 0, Running),
            change(3, "a", 2, Canceled),
            change(4, "b", 2, Canceled),
        ],
        4,
        4,
        "e1",
        0,
    )]);
    let (epoch, floor) = history(&keeping(), &refilled);
    assert!(broken(&epoch).contains("cursor 1 named a Queued (seq 1), now names filler"));
    assert!(is_kept(&floor));
    // Cursors 1 and 2 are gone while the floor says 0: the floor lies.
    let discarded = reread(vec![page(
        vec![change(3, "a", 2, Canceled), change(4, "b", 2, Canceled)],
        4,
        4,
        "e1",
        0,
    )]);
    let (epoch, floor) = history(&keeping(), &discarded);
    assert!(is_kept(&epoch));
    assert!(broken(&floor).contains("cursor 1 (a Queued (seq 1)) is no longer served"));
}

#[test]
fn history_cannot_judge_another_epoch_and_catches_a_falling_floor() {
    let other = reread(vec![page(vec![change(1, "x", 1, Queued)], 1, 1, "e2", 0)]);
    let (epoch, floor) = history(&keeping(), &other);
    assert!(matches!(&epoch[..], [Finding::NotChecked(_)]));
    assert!(matches!(&floor[..], [Finding::NotChecked(_)]));
    let mut reads = keeping();
    reads.push(read(Instant::now(), 4, page(vec![], 4, 5, "e1", 2)));
    reads.push(read(Instant::now(), 4, page(vec![], 4, 5, "e1", 1)));
    let same = reread(vec![page(
        vec![change(3, "a", 2, Canceled), change(4, "b", 2, Canceled)],
        4,
        5,
        "e1",
        2,
    )]);
    let (_, floor) = history(&reads, &same);
    assert!(broken(&floor).contains("the floor fell from 2 to 1 within epoch e1"));
    let failed = Reread::<RunChange> {
        from: 0,
        pages: Vec::new(),
        error: Some("HTTP 503".into()),
    };
    let (epoch, _) = history(&keeping(), &failed);
    assert!(matches!(&epoch[..], [Finding::NotChecked(t)] if t.contains("503")));
}
