//! What one request costs the store: the statements each method runs, counted by the gateway
//! itself (`a2a_store_calls_total{origin="request"}`: the store calls a request's own future
//! makes, each one statement and one transaction in the common case, the reconciler's and the
//! other background work apart), and the table in docs/operations.md ("Store statements per
//! request") that says the same.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use serde_json::json;

use crate::docs_truth::{read, table};
use crate::support::metrics::metric;
use crate::support::*;

const OPERATIONS: &str = "docs/operations.md";
const SECTION: &str = "Store statements per request";

const FRESH: &str = "SendMessage (returnImmediately), fresh messageId";
const REPEAT_RUNNING: &str =
    "SendMessage (returnImmediately), repeated messageId of a running task";
const REPEAT_DONE: &str = "SendMessage (returnImmediately), repeated messageId of a completed task";
const FIRST_PAGE: &str = "ListTasks, first page of 50";
const NEXT_PAGE: &str = "ListTasks, next page (pageToken)";
const GET_KEPT: &str = "GetTask, completed task the replica holds";

/// Store calls of `origin` (`request`: the gateway's requests; `background`: the reconciler
/// leader's passes, the run feed, retention, the gauges) made so far.
async fn store_calls(gw: &Gateway, origin: &str) -> u64 {
    let text = gw.metrics().await;
    ["read", "write", "write_once"]
        .iter()
        .map(|call| {
            metric(
                &text,
                "a2a_store_calls_total",
                &[("origin", origin), ("call", call)],
            )
            .unwrap_or_else(|| panic!("a2a_store_calls_total{{call={call:?}}} exposed"))
        })
        .sum::<f64>() as u64
}

/// Store calls the gateway's requests made so far.
async fn request_calls(gw: &Gateway) -> u64 {
    store_calls(gw, "request").await
}

/// Store calls the gateway's background work made so far.
async fn background_calls(gw: &Gateway) -> u64 {
    store_calls(gw, "background").await
}

/// The store calls of one request made by `request`, the same on three runs of it.
async fn per_request<F, Fut>(gw: &Gateway, what: &str, request: F) -> u64
where
    F: Fn() -> Fut,
    Fut: Future<Output = Reply>,
{
    let mut seen = Vec::new();
    for _ in 0..3 {
        let before = request_calls(gw).await;
        let reply = request().await;
        assert!(reply.is_result(), "{what}: {}", reply.body);
        seen.push(request_calls(gw).await - before);
    }
    assert!(
        seen.iter().all(|n| *n == seen[0]),
        "{what}: one count per request, not {seen:?}"
    );
    seen[0]
}

#[tokio::test]
async fn each_method_runs_the_statements_the_operations_guide_states() {
    let gw = Gateway::start_with(GatewayOptions::default().under_test()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // Its runs wait for an approval nobody gives: a task that stays running.
    let approver = gw.caller("tok-alice").agent("ag-approver");

    // A completed task with its artifact committed (its first GetTask reads and commits it),
    // a running task, and more than a page of tasks.
    let message_id = new_id();
    let done = writer.send_text(&message_id, "hello").await.task_id();
    writer
        .wait_for_state(&done, "TASK_STATE_COMPLETED", Duration::from_secs(30))
        .await;
    let running_id = new_id();
    let running = approver.send_text_immediately(&running_id, "wait").await;
    assert!(running.is_result(), "{}", running.body);
    for i in 0..60 {
        writer.new_task(&format!("listed {i}")).await;
    }

    let mut measured: BTreeMap<String, u64> = BTreeMap::new();
    let fresh = per_request(&gw, FRESH, || {
        let writer = writer.clone();
        async move { writer.send_text_immediately(&new_id(), "fresh").await }
    })
    .await;
    measured.insert(FRESH.into(), fresh);
    let repeat = per_request(&gw, REPEAT_RUNNING, || {
        approver.send_text_immediately(&running_id, "wait")
    })
    .await;
    measured.insert(REPEAT_RUNNING.into(), repeat);
    let repeat_done = per_request(&gw, REPEAT_DONE, || {
        writer.send_text_immediately(&message_id, "hello")
    })
    .await;
    measured.insert(REPEAT_DONE.into(), repeat_done);
    let first = per_request(&gw, FIRST_PAGE, || {
        writer.list_tasks(json!({"pageSize": 50}))
    })
    .await;
    measured.insert(FIRST_PAGE.into(), first);
    let page = writer.list_tasks(json!({"pageSize": 50})).await;
    let token = page.result()["nextPageToken"].as_str().unwrap().to_string();
    assert!(!token.is_empty(), "a second page: {}", page.body);
    let next = per_request(&gw, NEXT_PAGE, || {
        writer.list_tasks(json!({"pageSize": 50, "pageToken": token}))
    })
    .await;
    measured.insert(NEXT_PAGE.into(), next);
    let kept = per_request(&gw, GET_KEPT, || writer.get_task(&done)).await;
    measured.insert(GET_KEPT.into(), kept);

    // A repeat and a page are one statement each: no second lookup, no separate count; a
    // completed task's repeat reads its artifact too.
    assert_eq!(repeat, 1, "a repeated messageId");
    assert_eq!(repeat_done, 2, "a repeated messageId of a completed task");
    assert_eq!(first, 1, "a ListTasks page");
    assert_eq!(next, 1, "a later ListTasks page");

    let doc = read(OPERATIONS);
    let rows = table(&doc, SECTION);
    let mut documented: BTreeMap<String, u64> = BTreeMap::new();
    for row in &rows {
        assert_eq!(row.len(), 3, "method, statements, transactions: {row:?}");
        let statements: u64 = row[1].parse().unwrap_or_else(|_| panic!("{row:?}"));
        let transactions: u64 = row[2].parse().unwrap_or_else(|_| panic!("{row:?}"));
        // Every statement is its own transaction (none of these runs in an explicit one),
        // and each is prepared once per connection, not per call.
        assert_eq!(statements, transactions, "{row:?}");
        documented.insert(row[0].clone(), statements);
    }
    assert_eq!(documented, measured, "{OPERATIONS}, \"{SECTION}\"");
}

/// Waits until the background's store calls have not moved for `quiet` (at most 30 s).
async fn background_settled(gw: &Gateway, quiet: Duration) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last = background_calls(gw).await;
    loop {
        tokio::time::sleep(quiet).await;
        let now = background_calls(gw).await;
        if now == last {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "background store calls still moving: {last} -> {now}"
        );
        last = now;
    }
}

async fn feed_requests(gw: &Gateway) -> u64 {
    gw.upstream.stats().await["requests"]["run_changes"]
        .as_u64()
        .unwrap_or(0)
}

/// What a task costs the store in the background from its send to its completion (its run's
/// changes from Q's feed, its output committed), with no reconciler pass meanwhile (passes a
/// minute apart): one statement per feed answer that holds changes (the projection, the
/// cancellations pending on its live runs and the position after it), none for an answer
/// without changes, and two for the output (which completed tasks lack one, the insert).
/// Before, every answer read the position first, and one with changes then ran the
/// projection, the cancellation check and the position's save: 4 statements an answer.
#[tokio::test]
async fn a_task_costs_the_background_one_statement_per_feed_answer_and_two_for_its_output() {
    let gw = Gateway::start_with(
        GatewayOptions::with_env(&[("Q_A2A_RECONCILER_INTERVAL_MS", "60000")]).under_test(),
    )
    .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // The leader's first pass, and the feed's first answer, are over.
    let before = background_settled(&gw, Duration::from_millis(1500)).await;
    let answers_before = feed_requests(&gw).await;

    let task = writer.new_task("in the background").await;
    gw.db
        .wait_count(
            "the task completed with its output committed",
            &format!(
                "SELECT count(*) FROM a2a_tasks t JOIN a2a_task_artifacts a USING (task_id)
                  WHERE t.task_id = '{task}' AND t.state = 'TASK_STATE_COMPLETED'"
            ),
            1,
            Duration::from_secs(30),
        )
        .await;
    let after = background_settled(&gw, Duration::from_millis(1500)).await;
    let answers = feed_requests(&gw).await - answers_before;
    let calls = after - before;
    eprintln!("background: {calls} store calls over {answers} feed answers");
    assert!(
        calls >= 3,
        "at least one answer with the run's changes and the output's two statements: {calls}"
    );
    assert!(
        calls <= answers + 2,
        "{calls} store calls for {answers} feed answers: more than one an answer and two for \
         the output"
    );
}

/// An idle leader's passes: the two reconciler queries (unresolved dispatches; cancellations
/// and deadlines due) every pass, and retention's four statements only once in
/// `IDLE_RETENTION_EVERY` (5 s) while it finds nothing to do. Before, retention ran on every
/// pass (6 statements a pass, 200 ms apart here) and each feed answer read the position.
#[tokio::test]
async fn an_idle_leader_runs_retention_once_in_five_seconds_not_every_pass() {
    let gw = Gateway::start_with(GatewayOptions::default().under_test()).await;
    let passes = || async {
        metric(&gw.metrics().await, "a2a_reconciler_passes_total", &[]).unwrap_or(0.0) as u64
    };
    // Startup's passes and the first answer of the feed are over.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (calls_before, passes_before) = (background_calls(&gw).await, passes().await);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let calls = background_calls(&gw).await - calls_before;
    let passes = passes().await - passes_before;
    eprintln!("idle: {calls} background store calls over {passes} passes");
    assert!(passes >= 10, "passes every 200 ms: {passes} in 6 s");
    // Two retention passes at most in the 6 s (one every 5 s), four statements each.
    assert!(
        calls <= 2 * passes + 2 * 4,
        "{calls} store calls over {passes} idle passes"
    );
    assert!(calls >= 2 * passes, "each pass asks what is due: {calls}");
}
