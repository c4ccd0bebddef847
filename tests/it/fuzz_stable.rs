//! The fuzz targets of `fuzz/` on stable Rust: the same target bodies (`fuzz/src/lib.rs`, compiled
//! here as a module) fed by a seeded mutation driver instead of libFuzzer. It has no coverage
//! feedback, so it finds less than `cargo +nightly fuzz run` does; it runs in every test run.
//!
//! Each target starts from its seeds (`fuzz/seeds/<target>/`) plus a few built in here, and
//! applies 1–8 stacked mutations (bit flips, byte sets, inserts, deletes, duplications, splices
//! and JSON-ish dictionary tokens) per input. A panic is a crash: the input is saved under
//! `target/fuzz-crashes/` and the test fails.
//!
//! Time per target: `Q_A2A_FUZZ_SECONDS` (default 5; 60 with `Q_A2A_LONG_TESTS=1`). Replay a run
//! with `Q_A2A_TEST_SEED`.

// The bodies cargo-fuzz runs, compiled here too.
#[path = "../../fuzz/src/lib.rs"]
mod targets;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::report::{long_tests, report};
use crate::support::rng::{seed, Rng};

const DICTIONARY: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1e999",
    "-0",
    "9223372036854775808",
    "\\u0000",
    "\\ud800",
    "\\n",
    "\r\n",
    "\"jsonrpc\":\"2.0\"",
    "\"id\":",
    "\"method\":\"SendMessage\"",
    "\"params\":",
    "\"message\":",
    "\"messageId\":",
    "\"role\":\"ROLE_USER\"",
    "\"parts\":",
    "\"text\":",
    "\"taskId\":",
    "\"contextId\":",
    "\"metadata\":",
    "\"tenant\":",
    "\"configuration\":",
    "\"returnImmediately\":",
    "\"historyLength\":",
    "\"mediaType\":",
    "\"url\":",
    "\"raw\":",
    "\"data\":",
    "\"extensions\":",
    "\"referenceTaskIds\":",
    "\"taskPushNotificationConfig\":",
    "\"acceptedOutputModes\":",
    "text/markdown",
    "1.0",
    "1.0.",
    ".",
    "\u{0}",
    "\u{feff}",
    "\u{10ffff}",
    "é",
    "\n\ndata: ",
];

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            seeds.push(std::fs::read(path).unwrap());
        }
    }
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
    for _ in 0..rng.range(1, 9) {
        let len = input.len() as u64;
        match rng.range(0, 8) {
            0 if len > 0 => {
                let at = rng.range(0, len) as usize;
                input[at] ^= 1 << rng.range(0, 8);
            }
            1 if len > 0 => {
                let at = rng.range(0, len) as usize;
                input[at] = rng.next_u64() as u8;
            }
            2 => {
                let at = rng.range(0, len + 1) as usize;
                input.insert(at, rng.next_u64() as u8);
            }
            3 if len > 1 => {
                let from = rng.range(0, len) as usize;
                let to = (from + rng.range(1, 16) as usize).min(input.len());
                input.drain(from..to);
            }
            4 if len > 1 && len < 1 << 16 => {
                let from = rng.range(0, len) as usize;
                let to = (from + rng.range(1, 64) as usize).min(input.len());
                let chunk = input[from..to].to_vec();
                let at = rng.range(0, input.len() as u64 + 1) as usize;
                input.splice(at..at, chunk);
            }
            5 => {
                let other = rng.pick(pool);
                if !other.is_empty() {
                    let cut = rng.range(0, other.len() as u64) as usize;
                    let at = rng.range(0, len + 1) as usize;
                    input.truncate(at);
                    input.extend_from_slice(&other[cut..]);
                }
            }
            _ => {
                let token = rng.pick(DICTIONARY).as_bytes();
                let at = rng.range(0, len + 1) as usize;
                input.splice(at..at, token.iter().copied());
            }
        }
    }
}

fn budget() -> Duration {
    let seconds = match std::env::var("Q_A2A_FUZZ_SECONDS") {
        Ok(v) => v
            .parse()
            .expect("Q_A2A_FUZZ_SECONDS must be a number of seconds"),
        Err(_) if long_tests() => 60,
        Err(_) => 5,
    };
    Duration::from_secs(seconds)
}

fn run(target: &str) {
    let check = targets::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, f)| *f)
        .unwrap();
    let seed = seed();
    let mut rng = Rng::new(seed ^ target.len() as u64);
    let pool = seeds(target);
    let budget = budget();
    let crash_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-crashes");
    let started = Instant::now();
    let mut tried = 0u64;
    let mut crashes = Vec::new();
    let mut inputs = pool.clone().into_iter();
    while started.elapsed() < budget {
        // The seeds as they are first, then mutations of them.
        let input = inputs.next().unwrap_or_else(|| {
            let mut input = rng.pick(&pool).clone();
            mutate(&mut rng, &mut input, &pool);
            input
        });
        tried += 1;
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| check(&input))) {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let _ = std::fs::create_dir_all(&crash_dir);
            let path = crash_dir.join(format!("{target}-{seed}-{tried}"));
            let _ = std::fs::write(&path, &input);
            crashes.push(format!("{} ({what})", path.display()));
            if crashes.len() >= 5 {
                break;
            }
        }
    }
    report(
        "fuzz",
        &format!(
            "target={target} seed={seed} inputs_tried={tried} crashes={} in {:.1}s",
            crashes.len(),
            started.elapsed().as_secs_f64()
        ),
    );
    assert!(crashes.is_empty(), "{target} crashed on: {crashes:#?}");
}

#[test]
fn fuzz_envelope() {
    run("envelope");
}

#[test]
fn fuzz_send_params() {
    run("send_params");
}

#[test]
fn fuzz_version() {
    run("version");
}

#[test]
fn fuzz_cursor() {
    run("cursor");
}

#[test]
fn fuzz_sse() {
    run("sse");
}
