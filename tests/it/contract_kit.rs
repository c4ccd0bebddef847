//! The Q contract kit (`q-a2a-gateway contract-check`, docs/contract-kit.md) as Q's team runs
//! it, against the reference upstream: every promise kept by the reference as it is, with its
//! admin hook as the operator hook; the grant promises "not checked" without a hook (never
//! kept); and each promise broken, alone, by the reference started with that promise's
//! `--break` switch. Every time, the kit cancels every run it created and names each one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};

use crate::support::*;

/// Every promise the kit checks, each the name of the reference's switch that breaks it.
const PROMISES: [&str; 18] = [
    "create-once",
    "create-conflict",
    "lookup-committed",
    "lookup-absent",
    "run-events",
    "run-feed-order",
    "run-feed-complete",
    "run-feed-head",
    "run-feed-epoch",
    "run-feed-floor",
    "access-reflects",
    "access-feed-complete",
    "access-feed-after-api",
    "access-feed-order",
    "access-feed-head",
    "access-feed-epoch",
    "access-feed-floor",
    "error-statuses",
];

/// The promises only the operator hook can exercise (the access feed has no change otherwise).
const NEED_A_HOOK: [&str; 7] = [
    "access-reflects",
    "access-feed-complete",
    "access-feed-after-api",
    "access-feed-order",
    "access-feed-head",
    "access-feed-epoch",
    "access-feed-floor",
];

/// A slow agent, so that no run succeeds before the kit cancels it.
const AGENT: &str = "ag-slower";

/// The kit's longest wait for a feed: above the broken reference's lagging copy (1 s), short
/// enough that a promise broken by a missing change costs seconds.
const WAIT_MS: &str = "3000";

struct KitRun {
    code: i32,
    table: String,
    stderr: String,
    /// Promise id → `kept`, `BROKEN` or `not checked`.
    verdicts: BTreeMap<String, String>,
    /// The run ids the table lists as created.
    runs: BTreeSet<String>,
}

impl KitRun {
    fn with(&self, verdict: &str) -> BTreeSet<&str> {
        self.verdicts
            .iter()
            .filter(|(_, v)| *v == verdict)
            .map(|(p, _)| p.as_str())
            .collect()
    }
}

/// The kit pointed at `q` with the service token, nothing else.
fn command(q: &Upstream) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(GATEWAY_BIN);
    command
        .args(["contract-check", "--upstream", &q.url])
        .env("Q_A2A_UPSTREAM_SERVICE_TOKEN", SERVICE_TOKEN)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    command
}

/// Runs the kit against `q` for p-alice and [`AGENT`] (with the reference's admin hook when
/// `hook`).
async fn kit(q: &Upstream, hook: bool, extra: &[&str]) -> KitRun {
    let mut command = command(q);
    command
        .args([
            "--tenant",
            "t-acme",
            "--principal",
            "p-alice",
            "--agent",
            AGENT,
        ])
        .args(["--wait-ms", WAIT_MS])
        .args(extra);
    if hook {
        command.args(["--hook-url", &format!("{}/admin/contract-hook", q.url)]);
    }
    finish(command).await
}

async fn finish(mut command: tokio::process::Command) -> KitRun {
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the kit finishes within a minute")
        .expect("run the kit");
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut verdicts = BTreeMap::new();
    let mut runs = BTreeSet::new();
    for line in table.lines() {
        let Some((id, rest)) = line.split_once(' ') else {
            continue;
        };
        if PROMISES.contains(&id) {
            let rest = rest.trim_start();
            let verdict = ["kept", "BROKEN", "partly checked", "not checked"]
                .into_iter()
                .find(|v| rest.starts_with(v))
                .unwrap_or_else(|| panic!("no verdict in {line:?}"));
            verdicts.insert(id.to_owned(), verdict.to_owned());
        }
        if let Some(run) = line.strip_prefix("  run-") {
            runs.insert(format!("run-{}", run.split_whitespace().next().unwrap()));
        }
    }
    KitRun {
        code: output.status.code().unwrap_or(-1),
        table,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        verdicts,
        runs,
    }
}

/// Every run Q has is one the kit named, and it is over (canceled by the kit).
async fn runs_named_and_ended(q: &Upstream, kit: &KitRun) -> Result<(), String> {
    let runs = q.runs(None).await;
    let held: BTreeSet<String> = runs
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    if held != kit.runs {
        return Err(format!(
            "Q holds runs {held:?}, the kit named {:?}",
            kit.runs
        ));
    }
    let live: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| {
            !["canceled", "succeeded", "failed", "timed_out"]
                .contains(&r["status"].as_str().unwrap())
        })
        .collect();
    if !live.is_empty() {
        return Err(format!("runs left running: {live:?}"));
    }
    Ok(())
}

#[tokio::test]
async fn the_reference_keeps_every_promise() {
    let q = Upstream::start().await;
    let started = Instant::now();
    let run = kit(&q, true, &[]).await;
    let table = &run.table;
    assert_eq!(run.code, 0, "{table}");
    let ids: BTreeSet<&str> = run.verdicts.keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        PROMISES.into_iter().collect(),
        "one row per promise:\n{table}"
    );
    assert_eq!(run.with("kept").len(), PROMISES.len(), "{table}");
    assert!(table.contains("contract-check: 18 kept, 0 broken, 0 partly checked, 0 not checked"));
    // What docs/contract-kit.md says the kit sends.
    assert!(
        table.contains("8 concurrent creates of contract-check-"),
        "{table}"
    );
    assert!(
        table.contains(
            "20 of 20 provoked errors as documented: 401 unauthorized ×2, 404 agent_not_found ×2, \
             404 output_not_ready ×1, 404 run_not_found ×6, 409 run_terminal ×1, 422 invalid ×8"
        ),
        "{table}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a kit run takes seconds: {:?}",
        started.elapsed()
    );
    // Its runs: named, prefixed, all canceled; nothing else was created.
    assert!(run.runs.len() >= 5, "{table}");
    runs_named_and_ended(&q, &run).await.unwrap();
    for r in q.runs(None).await {
        assert!(r["workflow_id"]
            .as_str()
            .unwrap()
            .starts_with("contract-check-"));
        assert_eq!(r["status"], "canceled", "{r}");
    }
    // The grants it revoked were restored.
    let access = q
        .internal_get("/tenants/t-acme/agents/ag-slower/access?principal_id=p-alice")
        .await;
    assert_eq!(access["workspace_access"], "granted");
}

#[tokio::test]
async fn without_a_hook_the_grant_promises_are_not_checked_and_never_kept() {
    let q = Upstream::start().await;
    let run = kit(&q, false, &["--workflow-prefix", "kit-no-hook"]).await;
    let table = &run.table;
    assert_eq!(run.code, 0, "nothing is broken:\n{table}");
    assert_eq!(
        run.with("not checked"),
        NEED_A_HOOK.into_iter().collect(),
        "{table}"
    );
    assert_eq!(run.with("kept").len(), PROMISES.len() - NEED_A_HOOK.len());
    assert!(table.contains("access-reflects        not checked     not checked: no hook given"));
    assert!(table.contains("operator hook: none"));
    runs_named_and_ended(&q, &run).await.unwrap();
    assert!(q.runs(None).await.iter().all(|r| r["workflow_id"]
        .as_str()
        .unwrap()
        .starts_with("kit-no-hook-")));
    // With --strict, a promise left unchecked fails the run (and still nothing is broken).
    let strict = kit(&q, false, &["--strict"]).await;
    assert_eq!(strict.code, 3, "{}", strict.table);
    assert!(strict.with("BROKEN").is_empty());
}

#[tokio::test]
async fn each_broken_switch_breaks_its_promise_alone() {
    // A few references at a time: each case mostly waits on the network.
    let failures: Vec<String> = stream::iter(PROMISES)
        .map(|promise| async move {
            let q = Upstream::start_with(&["--break", promise]).await;
            let run = kit(&q, true, &[]).await;
            let broken = run.with("BROKEN");
            let mut wrong = Vec::new();
            if run.code != 1 {
                wrong.push(format!("exit {}", run.code));
            }
            if broken != BTreeSet::from([promise]) {
                wrong.push(format!("broken: {broken:?}"));
            }
            if let Err(e) = runs_named_and_ended(&q, &run).await {
                wrong.push(e);
            }
            (!wrong.is_empty())
                .then(|| format!("--break {promise}: {}\n{}", wrong.join("; "), run.table))
        })
        .buffer_unordered(6)
        .filter_map(|failure| async move { failure })
        .collect()
        .await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test]
async fn what_keeps_the_kit_from_running_is_said_and_nothing_is_created() {
    let q = Upstream::start().await;
    let alice = [
        "--tenant",
        "t-acme",
        "--principal",
        "p-alice",
        "--agent",
        AGENT,
    ];
    let cases: [(Vec<&str>, &str); 5] = [
        (
            [&alice[..], &["--workflow-prefix", "has space"]].concat(),
            "--workflow-prefix \"has space\" must be 1 to 64 letters",
        ),
        (
            [&alice[..], &["--wait-ms", "0"]].concat(),
            "--wait-ms must be above 0",
        ),
        (
            [&alice[..], &["--service-token", "not-the-token"]].concat(),
            "Q refused the service token",
        ),
        // p-bob is no member of ag-private's workspace.
        (
            vec![
                "--tenant",
                "t-acme",
                "--principal",
                "p-bob",
                "--agent",
                "ag-private",
            ],
            "principal \"p-bob\" has workspace_access None on agent \"ag-private\"",
        ),
        // ag-globex is another tenant's.
        (
            vec![
                "--tenant",
                "t-acme",
                "--principal",
                "p-alice",
                "--agent",
                "ag-globex",
            ],
            "answered 404 agent_not_found: the kit needs an agent Q serves",
        ),
    ];
    for (args, expected) in cases {
        let mut command = command(&q);
        command.args(&args);
        let run = finish(command).await;
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.table.is_empty(),
            "{args:?}: no table, got {}",
            run.table
        );
        assert!(
            run.stderr.contains("contract-check: cannot run: ") && run.stderr.contains(expected),
            "{args:?}: {}",
            run.stderr
        );
    }
    assert!(q.runs(None).await.is_empty());
    assert!(q.stats().await["requests"].get("create_run").is_none());
}

/// Q answering 503 to one observation of a promise it keeps otherwise: the promise is partly
/// checked, never kept, and the run fails by default (exit 3), nothing broken.
#[tokio::test]
async fn a_promise_partly_checked_is_not_kept_and_fails_the_run() {
    let q = Upstream::start().await;
    q.faults(
        serde_json::json!({"status": {"route": "run_by_workflow", "status": 503, "count": 1}}),
    )
    .await;
    let run = kit(&q, true, &["--workflow-prefix", "kit-partly"]).await;
    let table = &run.table;
    assert_eq!(run.code, 3, "{table}");
    assert!(run.with("BROKEN").is_empty(), "{table}");
    let partly = run.with("partly checked");
    assert!(!partly.is_empty(), "{table}");
    assert!(
        partly.iter().all(|id| id.starts_with("lookup")),
        "only the lookups met the 503: {partly:?}\n{table}"
    );
}
