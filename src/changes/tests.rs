use std::collections::VecDeque;
use std::sync::Mutex;

use super::*;

/// What a scripted feed answers, one answer per poll; when the script runs out the poll
/// never answers (a stalled feed).
type Script = Mutex<VecDeque<Result<Page<u64>, UpstreamError>>>;

fn page(cursors: &[u64], head: u64, epoch: &str, floor: u64) -> Result<Page<u64>, UpstreamError> {
    Ok(Page {
        changes: cursors.to_vec(),
        cursors: cursors.to_vec(),
        cursor: cursors.last().copied().unwrap_or(0),
        head,
        epoch: epoch.into(),
        floor,
    })
}

/// An empty answer for a reader at `position`.
fn quiet(position: u64, head: u64, epoch: &str) -> Result<Page<u64>, UpstreamError> {
    Ok(Page {
        changes: vec![],
        cursors: vec![],
        cursor: position,
        head,
        epoch: epoch.into(),
        floor: 0,
    })
}

#[derive(Debug, PartialEq)]
enum Seen {
    Restart,
    Changes(Vec<u64>),
    CaughtUp,
    Lapsed,
}

/// Follows the scripted feed for `run_for` and returns what the consumer saw.
async fn follow_script(
    script: Vec<Result<Page<u64>, UpstreamError>>,
    run_for: Duration,
) -> Vec<Seen> {
    let script: Script = Mutex::new(script.into());
    let (stop, shutdown) = watch::channel(false);
    let mut seen = Vec::new();
    let settings = FollowSettings {
        long_poll: Duration::from_millis(10),
        trust: Duration::from_millis(100),
    };
    let poll = |_after, _wait| {
        let next = script.lock().unwrap().pop_front();
        async move {
            match next {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        }
    };
    let feed = Feed {
        name: "access",
        on_reset: "reset",
        on_failure: "failure",
    };
    let stopper = async {
        tokio::time::sleep(run_for).await;
        stop.send_replace(true);
    };
    let follower = follow(feed, settings, shutdown, poll, |step| {
        seen.push(match step {
            Step::Restart => Seen::Restart,
            Step::Changes(c) => Seen::Changes(c),
            Step::CaughtUp(_) => Seen::CaughtUp,
            Step::Lapsed => Seen::Lapsed,
        })
    });
    tokio::join!(follower, stopper);
    seen
}

#[tokio::test(start_paused = true)]
async fn a_caught_up_feed_vouches_and_lapses_when_it_stalls() {
    let seen = follow_script(
        vec![quiet(0, 5, "e1"), page(&[6, 7], 7, "e1", 0)],
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        seen,
        [
            Seen::Restart,
            Seen::CaughtUp,
            Seen::Changes(vec![6, 7]),
            Seen::CaughtUp,
            // The next poll never answers: the vouching lapses.
            Seen::Lapsed,
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn behind_the_head_is_not_caught_up() {
    let seen = follow_script(
        vec![quiet(0, 5, "e1"), page(&[6], 9, "e1", 0), quiet(6, 9, "e1")],
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        seen,
        [
            Seen::Restart,
            Seen::CaughtUp,
            Seen::Changes(vec![6]),
            Seen::Changes(vec![]),
            Seen::Lapsed,
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn another_epoch_a_floor_above_or_a_gap_starts_over() {
    for (answer, why) in [
        (
            page(&[9], 9, "e2", 0),
            "a failover: another epoch, head above",
        ),
        (page(&[9], 9, "e1", 8), "compacted past the position"),
        (page(&[5], 9, "e1", 0), "a cursor at or below the position"),
        (page(&[], 3, "e1", 0), "a head below the position"),
    ] {
        let seen = follow_script(vec![quiet(0, 5, "e1"), answer], Duration::from_millis(50)).await;
        assert_eq!(
            seen,
            [Seen::Restart, Seen::CaughtUp, Seen::Restart, Seen::CaughtUp],
            "{why}"
        );
    }
}

#[test]
fn a_page_that_continues_is_not_a_lost_place() {
    let place = Place {
        epoch: "e1".into(),
        position: 5,
    };
    let ok: Page<u64> = page(&[6, 8], 8, "e1", 5).unwrap();
    assert_eq!(lost_place(&place, &ok), None);
    let unordered: Page<u64> = page(&[7, 6], 8, "e1", 0).unwrap();
    assert_eq!(lost_place(&place, &unordered), Some("gap"));
    let beyond_head: Page<u64> = page(&[9], 8, "e1", 0).unwrap();
    assert_eq!(lost_place(&place, &beyond_head), Some("gap"));
}
