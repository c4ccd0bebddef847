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
//! unset), `Q_A2A_SIM_HISTORY_DIR` a directory for each seed's whole history (`seed-N.txt`); `scripts/test` runs the fixed set, `scripts/simulate --seed N` one seed and
//! `scripts/simulate --seeds N` the soak.

mod check;
mod check_tests;
mod history;
mod schedule;
mod world;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::support::report::report;
use history::{History, Outcome};
use schedule::Size;

/// The seeds `scripts/test` runs.
const FIXED_SEEDS: &[u64] = &[1, 2, 3];

/// One seed's size: 60 client steps and 10 faults over 15 s, then the settling (every deadline
/// passes) and the final reads: about 40 s a seed on a 2-core machine.
const SIZE: Size = Size {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_histories_keep_every_promise() {
    let seeds = seeds();
    let started = Instant::now();
    let (mut calls, mut faults, mut violations) = (0, 0, 0);
    let (mut all_outcomes, mut all_kinds) = (BTreeMap::new(), BTreeMap::new());
    let mut failing = Vec::new();
    for &seed in &seeds {
        let began = Instant::now();
        let history = world::run(seed, schedule::draw(seed, SIZE)).await;
        let found = check::check(&history);
        let (outcomes, kinds) = tally(&history);
        eprintln!(
            "[simulation] seed {seed}: {} calls {outcomes:?}, {} faults {kinds:?}, {} tasks, {} runs in Q, {} violations, {:.1} s",
            history.calls.len(),
            history.faults.len(),
            history.tasks.len(),
            history.runs.len(),
            found.len(),
            began.elapsed().as_secs_f64()
        );
        for v in &found {
            eprintln!("{}", check::excerpt(&history, v));
        }
        if let Ok(dir) = std::env::var("Q_A2A_SIM_HISTORY_DIR") {
            let path = std::path::Path::new(&dir).join(format!("seed-{seed}.txt"));
            std::fs::create_dir_all(&dir).expect("the history directory");
            std::fs::write(&path, check::whole(&history)).expect("write the history");
            eprintln!("[simulation] seed {seed}: history in {}", path.display());
        }
        for (k, n) in &outcomes {
            *all_outcomes.entry(*k).or_insert(0) += n;
        }
        for (k, n) in &kinds {
            *all_kinds.entry(k.clone()).or_insert(0) += n;
        }
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
}
