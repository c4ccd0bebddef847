//! The seeded fault simulation (`scripts/simulate`): three gateway replicas on a private
//! PostgreSQL primary and its synchronous standby, a private Redis primary and its replica
//! behind one address, and the reference upstream with its workflow-id deduplication
//! **off**, driven by a schedule drawn from a seed (`schedule.rs`): client operations (sends
//! blocking, immediate and streaming, fresh and repeated messageIds, several at once; GetTask,
//! ListTasks, CancelTask, SubscribeToTask; approvals in Q) interleaved with the faults Q's
//! contract allows (creates whose answer is lost or fails after the commit, creates held past
//! the timeout, failing reads, Q answering 503 a while, lagging feeds, feed failovers and
//! compactions, a revoked token, a workspace grant revoked and restored, an agent unavailable a
//! while) and process faults (a replica SIGKILLed and restarted, Redis stopped and started
//! again empty, every PostgreSQL connection terminated, the PostgreSQL primary crashed and
//! restarted or failed over to its promoted standby, the Redis primary demoted under its
//! replica). Every call, answer and fault is
//! recorded (`history.rs`), then the checker (`check.rs`) proves the invariants against Q's own
//! record of runs and the gateway's final answers; a violation prints the part of the history
//! that shows it.
//!
//! `Q_A2A_SIM_SEEDS` picks the seeds (`7`, `1,5,9` or `1..1000`; the fixed set below when
//! unset, which must see every kind of fault take effect), `Q_A2A_SIM_HISTORY_DIR` a directory for each seed's whole history (`seed-N.txt`) and each gateway's log (`seed-N-gateway-SLOT.log`); `scripts/test` runs the fixed set, `scripts/simulate --seed N` one seed and
//! `scripts/simulate --seeds N` the soak.

mod check;
mod check_tests;
mod history;
mod schedule;
mod stand_in;
mod world;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::support::report::report;
use history::{History, Outcome};
use schedule::Size;

/// The seeds `scripts/test` runs: together they draw every kind of fault at least twice
/// ([`FAULT_KINDS`]), and the run fails unless each kind took effect in one of them.
const FIXED_SEEDS: &[u64] = &[2, 7, 22, 42, 43];

/// Every kind of fault a schedule draws, as [`fault_kind_name`] and [`took_effect`] name them.
const FAULT_KINDS: &[&str] = &[
    "AgentUnavailable",
    "DemoteRedis",
    "FailOverPostgres",
    "KillPostgresConnections",
    "KillReplica",
    "RestartPostgres",
    "RestartRedis",
    "RevokeToken",
    "RevokeWorkspace",
    "cancel_fail_500_after_commit",
    "create_delay",
    "create_drop_after_commit",
    "create_fail_500_after_commit",
    "create_fail_500_before_commit",
    "feed_compacted",
    "feed_failover",
    "feed_lag",
    "q_unavailable",
    "read_fail_500",
];

/// The kinds of fault that took effect in a run: the process and Q-side faults the world
/// recorded once done (a fault that could not be injected is not recorded), Q's counted
/// faults by what Q says it applied (an armed one no request met does not count), a feed's
/// lag by its being set (every follower polls the feed meanwhile).
fn took_effect(h: &History) -> std::collections::BTreeSet<String> {
    use history::FaultKind;
    let mut kinds = std::collections::BTreeSet::new();
    for fault in &h.faults {
        let kind = match &fault.kind {
            FaultKind::Q(json) if json.contains("_feed_lag_ms") => "feed_lag",
            FaultKind::Q(_) => continue,
            FaultKind::FeedFailover(_) => "feed_failover",
            FaultKind::FeedCompacted(_) => "feed_compacted",
            FaultKind::TokenRevoked(_) => "RevokeToken",
            FaultKind::WorkspaceRevoked { .. } => "RevokeWorkspace",
            FaultKind::AgentUnavailable(_) => "AgentUnavailable",
            FaultKind::ReplicaKilled(_) => "KillReplica",
            FaultKind::RedisRestarted => "RestartRedis",
            FaultKind::PostgresConnectionsKilled => "KillPostgresConnections",
            FaultKind::PostgresRestarted => "RestartPostgres",
            FaultKind::PostgresFailedOver => "FailOverPostgres",
            FaultKind::RedisDemoted => "DemoteRedis",
        };
        kinds.insert(kind.to_string());
    }
    for counter in h.q_fired.keys() {
        let kind = match counter.as_str() {
            c if c.starts_with("status:") => "q_unavailable",
            "create_delay_count" => "create_delay",
            c => c,
        };
        kinds.insert(kind.to_string());
    }
    kinds
}

/// One seed's size: 60 client steps and 10 faults over 15 s, then the settling (every deadline
/// passes) and the final reads: about 40 s a seed on a 2-core machine.
pub(crate) const SIZE: Size = Size {
    window_ms: 15_000,
    client_steps: 60,
    fault_steps: 10,
};

fn seeds() -> Vec<u64> {
    let Ok(spec) = std::env::var("Q_A2A_SIM_SEEDS") else {
        return FIXED_SEEDS.to_vec();
    };
    let number = |s: &str| -> u64 {
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("Q_A2A_SIM_SEEDS: {s:?} is not a seed"))
    };
    match spec.split_once("..") {
        Some((from, to)) => (number(from)..number(to)).collect(),
        None => spec.split(',').map(number).collect(),
    }
}

/// The kind a fault step is counted under for coverage: Q's contract faults by what they do
/// (the routes answering 503 as one, either feed's lag as one), the rest by their own name.
pub fn fault_kind_name(step: &schedule::FaultStep) -> String {
    use schedule::FaultStep;
    match step {
        FaultStep::Q(v) | FaultStep::QFor { set: v, .. } => {
            let keys: Vec<&str> = v
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .collect();
            match keys.as_slice() {
                ["status"] => "q_unavailable".into(),
                [k] if k.ends_with("_feed_lag_ms") => "feed_lag".into(),
                keys if keys.contains(&"create_delay_ms") => "create_delay".into(),
                [k] => (*k).into(),
                _ => format!("{keys:?}"),
            }
        }
        FaultStep::FeedFailover(_) => "feed_failover".into(),
        FaultStep::FeedCompact(_) => "feed_compacted".into(),
        other => format!("{other:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or_default()
            .to_string(),
    }
}

/// What a run did, by kind, for the summary lines.
fn tally(h: &History) -> (BTreeMap<&'static str, usize>, BTreeMap<String, usize>) {
    let mut outcomes = BTreeMap::new();
    for call in &h.calls {
        let kind = match call.outcome {
            Outcome::Tasks(_) => "answered",
            Outcome::Stream { .. } => "streamed",
            Outcome::Refused(_) => "refused",
            Outcome::Failed(_) => "failed",
            Outcome::Done(_) => "other",
        };
        *outcomes.entry(kind).or_default() += 1;
    }
    let mut faults = BTreeMap::new();
    for fault in &h.faults {
        let name = format!("{:?}", fault.kind);
        let name = name
            .split(['(', ' '])
            .next()
            .unwrap_or_default()
            .to_string();
        *faults.entry(name).or_default() += 1;
    }
    (outcomes, faults)
}

/// A deployment that fails every call breaks no promise about what it did; the floors fail
/// it. One that acknowledges every send with a task it never creates fails durability and the
/// floors too. Seed 1's schedule, each stand-in in front of every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_ins_that_do_nothing_fail_the_simulation() {
    use stand_in::StandIn;
    for (mode, must) in [
        (StandIn::Unavailable, &["floor"][..]),
        (StandIn::DropsCreates, &["durability", "floor"][..]),
    ] {
        let history = world::run_with(1, schedule::draw(1, SIZE), Some(mode)).await;
        let found = check::check(&history);
        let invariants: std::collections::BTreeSet<&str> =
            found.iter().map(|v| v.invariant).collect();
        eprintln!(
            "[simulation] stand-in {mode:?}: {} violations {invariants:?}",
            found.len()
        );
        for invariant in must {
            assert!(
                invariants.contains(invariant),
                "the stand-in {mode:?} passed {invariant}: {found:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_histories_keep_every_promise() {
    let seeds = seeds();
    let started = Instant::now();
    let (mut calls, mut faults, mut violations) = (0, 0, 0);
    let (mut all_outcomes, mut all_kinds) = (BTreeMap::new(), BTreeMap::new());
    let mut failing = Vec::new();
    let mut effective = std::collections::BTreeSet::new();
    for &seed in &seeds {
        let began = Instant::now();
        let history = world::run(seed, schedule::draw(seed, SIZE)).await;
        let found = check::check(&history);
        let (outcomes, kinds) = tally(&history);
        eprintln!(
            "[simulation] seed {seed}: {} calls {outcomes:?}, {} faults {kinds:?} (Q's that took effect: {:?}), {} tasks, {} runs in Q, {} violations, {:.1} s",
            history.calls.len(),
            history.faults.len(),
            history.q_fired,
            history.tasks.len(),
            history.runs.len(),
            found.len(),
            began.elapsed().as_secs_f64()
        );
        for v in &found {
            eprintln!("{}", history::excerpt(&history, v));
        }
        if let Ok(dir) = std::env::var("Q_A2A_SIM_HISTORY_DIR") {
            let path = std::path::Path::new(&dir).join(format!("seed-{seed}.txt"));
            std::fs::create_dir_all(&dir).expect("the history directory");
            std::fs::write(&path, history::whole(&history)).expect("write the history");
            eprintln!("[simulation] seed {seed}: history in {}", path.display());
        }
        for (k, n) in &outcomes {
            *all_outcomes.entry(*k).or_insert(0) += n;
        }
        for (k, n) in &kinds {
            *all_kinds.entry(k.clone()).or_insert(0) += n;
        }
        effective.extend(took_effect(&history));
        calls += history.calls.len();
        faults += history.faults.len();
        violations += found.len();
        if !found.is_empty() {
            failing.push(seed);
        }
    }
    report(
        "simulation",
        &format!(
            "seeds={} calls={calls} {all_outcomes:?} faults={faults} {all_kinds:?} violations={violations} failing_seeds={failing:?} elapsed={:.0}s",
            seeds.len(),
            started.elapsed().as_secs_f64()
        ),
    );
    assert!(
        failing.is_empty(),
        "seeds with violations: {failing:?} (replay one with scripts/simulate --seed N)"
    );
    if seeds == FIXED_SEEDS {
        let missing: Vec<&str> = FAULT_KINDS
            .iter()
            .filter(|k| !effective.contains(**k))
            .copied()
            .collect();
        assert!(
            missing.is_empty(),
            "fault kinds that took effect in none of the fixed seeds: {missing:?}"
        );
    }
}

/// The fixed seeds draw every kind of fault at least twice, and nothing else is drawn.
#[test]
fn the_fixed_seeds_draw_every_kind_of_fault_twice() {
    let mut drawn: BTreeMap<String, usize> = BTreeMap::new();
    for &seed in FIXED_SEEDS {
        let kinds: std::collections::BTreeSet<String> = schedule::draw(seed, SIZE)
            .steps
            .iter()
            .filter_map(|(_, step)| match step {
                schedule::Step::Fault(f) => Some(fault_kind_name(f)),
                _ => None,
            })
            .collect();
        for kind in kinds {
            *drawn.entry(kind).or_default() += 1;
        }
    }
    let known: std::collections::BTreeSet<&str> = FAULT_KINDS.iter().copied().collect();
    let names: std::collections::BTreeSet<&str> = drawn.keys().map(String::as_str).collect();
    assert_eq!(names, known, "every kind, and no other");
    assert!(drawn.values().all(|n| *n >= 2), "{drawn:?}");
}
