//! What Q's answers mean: only a refusal carrying one of the contract's error codes for the call
//! is final. A 401 of the service credential, 408, 429, 5xx, a proxy's bare 404, an unknown code
//! or an unreadable body leaves the task pending for the reconciler, which resolves it by
//! workflow identity to exactly one run. Cancellation under a slow create, a failing cancel and
//! an asynchronous one; unknown enum values and extra fields in Q's answers.
//!
//! Q's workflow-id deduplication is off where the number of runs is the point: every create
//! the gateway sends then shows as a run, so "one run" means "one create that Q accepted".

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{new_id, wait_until, Agent, Gateway, GatewayOptions};

fn workflow_of(task_id: &str) -> String {
    format!("a2a-task-{task_id}")
}

async fn dispatch_of(gw: &Gateway, task_id: &str) -> String {
    gw.db.task_field(task_id, "dispatch").await
}

/// Waits until the task's run is recorded and the task is terminal in the store.
async fn wait_resolved(gw: &Gateway, task_id: &str, within: Duration) {
    let sql = format!(
        "SELECT count(*) FROM a2a_tasks WHERE task_id = '{task_id}' AND run_id IS NOT NULL \
         AND state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_CANCELED')"
    );
    wait_until("the task resolved to its run", within, async || {
        gw.db.count(&sql).await == 1
    })
    .await;
}

/// Waits until the task is WORKING in the store. Q reports no other change of the run until it
/// ends, so nothing but the test's own calls cancels it meanwhile (a change of a run whose
/// cancellation is persisted makes the reconciler cancel it too).
async fn wait_working(gw: &Gateway, task_id: &str) {
    wait_until("the task working", Duration::from_secs(10), async || {
        gw.db.task_state(task_id).await == "TASK_STATE_WORKING"
    })
    .await;
}

/// The calls naming the workflow, as `METHOD kind status` lines (for messages).
fn shown(calls: &[Value]) -> String {
    calls
        .iter()
        .map(|c| {
            format!(
                "{} {} {} {}",
                c["method"], c["path"], c["status"], c["error"]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn is_create(call: &Value) -> bool {
    call["method"] == "POST"
}

/// A lookup by workflow identity that Q itself answered "no run" (its `run_not_found`; a
/// proxy's bare 404 is not that).
fn is_lookup_without_run(call: &Value) -> bool {
    call["method"] == "GET"
        && call["path"]
            .as_str()
            .is_some_and(|p| p.contains("/runs/by-workflow/"))
        && call["status"] == 404
        && call["error"] == "run_not_found"
}

/// Every create after the first one of a workflow comes right after a lookup by workflow
/// identity that Q answered with its `run_not_found`; returns the number of creates.
fn creates_follow_lookups_without_run(calls: &[Value]) -> usize {
    let mut creates = 0;
    for (i, call) in calls.iter().enumerate() {
        if !is_create(call) {
            continue;
        }
        creates += 1;
        if creates > 1 {
            assert!(
                i > 0 && is_lookup_without_run(&calls[i - 1]),
                "create #{creates} did not follow a lookup that found no run: {}",
                shown(calls)
            );
        }
    }
    creates
}

/// One row of the "Q status code → outcome" table.
struct Outcome {
    answer: String,
    first_state: String,
    dispatch: String,
    final_state: String,
    runs: usize,
    creates: usize,
}

/// Sends one message while Q answers its creates with `fault` (`count` times), then returns
/// what the task became at once and once the reconciler had its turn.
async fn create_outcome(gw: &Gateway, writer: &Agent, fault: Value, definite: bool) -> Outcome {
    gw.upstream.faults(json!({ "status": fault })).await;
    let reply = writer
        .send_text_immediately(&new_id(), "status fault")
        .await;
    let task = reply.task();
    let task_id = task["id"].as_str().unwrap().to_owned();
    let first_state = task["status"]["state"].as_str().unwrap().to_owned();
    let dispatch = dispatch_of(gw, &task_id).await;
    if !definite {
        wait_resolved(gw, &task_id, Duration::from_secs(20)).await;
    } else {
        // A definite refusal is never sent again: give the reconciler time to (not) do it.
        tokio::time::sleep(Duration::from_millis(1600)).await;
    }
    let workflow = workflow_of(&task_id);
    let calls = gw.upstream.calls_for(&workflow).await;
    Outcome {
        answer: fault.to_string(),
        first_state,
        dispatch,
        final_state: gw.db.task_state(&task_id).await,
        runs: gw.upstream.runs(Some(&workflow)).await.len(),
        creates: creates_follow_lookups_without_run(&calls),
    }
}

#[tokio::test]
async fn only_a_contract_refusal_rejects_a_create_and_the_rest_resolve_to_one_run() {
    let gw = Gateway::start().await;
    gw.upstream.workflow_dedup(false).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let mut table = Vec::new();
    // Not definite: the service credential (rotated), a proxy's bare 404, timeouts, rate
    // limits, a bad gateway, a contract code this call does not define, and a code Q does not
    // define. Each answers two creates (the gateway's and the reconciler's first retry).
    for (status, code) in [
        (401, None),
        (403, None),
        (404, None),
        (408, None),
        (429, None),
        (502, None),
        (503, None),
        (404, Some("run_not_found")),
        (409, Some("run_terminal")),
        (422, Some("quota_exceeded")),
    ] {
        let mut fault = json!({"route": "create_run", "status": status, "count": 2});
        if let Some(code) = code {
            fault["code"] = code.into();
        }
        let row = create_outcome(&gw, &writer, fault, false).await;
        assert_ne!(row.first_state, "TASK_STATE_REJECTED", "{}", row.answer);
        assert_eq!(row.dispatch, "unknown", "{}", row.answer);
        assert_eq!(row.final_state, "TASK_STATE_COMPLETED", "{}", row.answer);
        assert_eq!(row.runs, 1, "exactly one run: {}", row.answer);
        assert_eq!(row.creates, 3, "{}", row.answer);
        table.push(row);
    }
    // Definite: the contract's refusals of a create, under their own status.
    for (status, code) in [
        (403, "workspace_access_denied"),
        (404, "agent_not_found"),
        (422, "invalid"),
    ] {
        let fault = json!({"route": "create_run", "status": status, "count": 1, "code": code});
        let row = create_outcome(&gw, &writer, fault, true).await;
        assert_eq!(row.first_state, "TASK_STATE_REJECTED", "{}", row.answer);
        assert_eq!(row.dispatch, "refused", "{}", row.answer);
        assert_eq!(row.final_state, "TASK_STATE_REJECTED", "{}", row.answer);
        assert_eq!(
            (row.runs, row.creates),
            (0, 1),
            "never retried: {}",
            row.answer
        );
        table.push(row);
    }
    eprintln!("Q answer to a create | first answer | dispatch | final | creates | runs");
    for r in &table {
        eprintln!(
            "{} | {} | {} | {} | {} | {}",
            r.answer, r.first_state, r.dispatch, r.final_state, r.creates, r.runs
        );
    }
}

#[tokio::test]
async fn a_proxys_404_on_a_lookup_neither_creates_again_nor_cancels_locally() {
    // A longer grace keeps the reconciler off each task until the test's own calls are done
    // (and short enough to push the cancellation below while ag-slow's run still goes on).
    let gw = Gateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_RECONCILER_GRACE_MS",
        "3000",
    )]))
    .await;
    gw.upstream.workflow_dedup(false).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // The create commits and its answer is lost; then a proxy answers the lookups 404 without
    // Q's code. Taking that for "no run" would create a second run. Q's change feed is down
    // meanwhile (it would otherwise tell the reconciler about the run without a lookup).
    gw.upstream
        .faults(json!({
            "create_drop_after_commit": 1,
            "status": [{"route": "run_by_workflow", "status": 404, "count": 4},
                       {"route": "run_changes", "status": 503, "count": 100000}]
        }))
        .await;
    // A feed long-poll already in flight (issued before the fault) would still report the
    // run; let it end (it waits one reconciler interval) before the create.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let task_id = writer
        .send_text_immediately(&new_id(), "lost answer, proxy 404")
        .await
        .task_id();
    assert_eq!(dispatch_of(&gw, &task_id).await, "unknown");
    wait_resolved(&gw, &task_id, Duration::from_secs(40)).await;
    let workflow = workflow_of(&task_id);
    assert_eq!(gw.upstream.runs(Some(&workflow)).await.len(), 1);
    let calls = gw.upstream.calls_for(&workflow).await;
    assert_eq!(
        calls.iter().filter(|c| is_create(c)).count(),
        1,
        "{}",
        shown(&calls)
    );
    assert!(
        calls.iter().filter(|c| c["status"] == 404).count() >= 4,
        "the proxy's answers were seen: {}",
        shown(&calls)
    );

    // CancelTask of a task whose run Q has but the gateway has not recorded: a proxy's 404 on
    // the lookup is no proof there is no run, so it is not canceled locally while the run goes
    // on; the cancellation stays persisted and reaches the run.
    let slow = gw.caller("tok-alice").agent("ag-slow");
    gw.upstream
        .faults(json!({"create_drop_after_commit": 1}))
        .await;
    let task_id = slow
        .send_text_immediately(&new_id(), "cancel behind a proxy")
        .await
        .task_id();
    assert_eq!(dispatch_of(&gw, &task_id).await, "unknown");
    gw.upstream
        .faults(json!({"status": {"route": "run_by_workflow", "status": 404, "count": 1}}))
        .await;
    let cancel = slow.cancel(&task_id).await;
    assert_eq!(cancel.error_code(), Some(-32603), "{}", cancel.body);
    let meta = &cancel.body["error"]["data"][0]["metadata"];
    assert_eq!(meta["cancellationPersisted"], "true", "{}", cancel.body);
    assert_eq!(meta["retryable"], "true", "{}", cancel.body);
    let run = wait_run_status(&gw, &workflow_of(&task_id), "canceled").await;
    wait_resolved(&gw, &task_id, Duration::from_secs(40)).await;
    assert_eq!(gw.db.task_state(&task_id).await, "TASK_STATE_CANCELED");
    assert_eq!(gw.db.run_id(&task_id).await, run["id"].as_str().unwrap());

    gw.upstream
        .admin(Method::DELETE, "/admin/faults", None)
        .await;

    // Reads: a proxy's 404 or a 429 on a run read is Q unavailable for now (-32603, retryable),
    // and the task is as it was. (Only a task whose run may still change is read from Q: this
    // one is canceled, so a running one is read.)
    let running = slow
        .send_text_immediately(&new_id(), "still running")
        .await
        .task_id();
    for status in [404, 429] {
        gw.upstream
            .faults(json!({"status": {"route": "get_run", "status": status, "count": 1}}))
            .await;
        let read = slow.get_task(&running).await;
        assert_eq!(read.error_code(), Some(-32603), "{status}: {}", read.body);
        assert_eq!(
            read.body["error"]["data"][0]["metadata"]["retryable"],
            "true"
        );
        assert_eq!(gw.db.task_state(&task_id).await, "TASK_STATE_CANCELED");
    }

    // The agent lookup: a proxy's 404 is not "no such agent" (HTTP 404) but Q unavailable.
    // (An agent this caller has not used yet: a cached answer would not ask Q.)
    let writer = gw.caller("tok-alice").agent("ag-slower");
    gw.upstream
        .faults(json!({"status": {"route": "agent_access", "status": 404, "count": 1}}))
        .await;
    let reply = writer.send_text_immediately(&new_id(), "agent?").await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    gw.upstream
        .faults(
            json!({"status": {"route": "agent_access", "status": 404, "count": 1,
                                  "code": "agent_not_found"}}),
        )
        .await;
    assert_eq!(
        writer
            .send_text_immediately(&new_id(), "agent?")
            .await
            .status,
        404
    );
}

/// Polls Q until the workflow's only run has `status`; returns it.
async fn wait_run_status(gw: &Gateway, workflow: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let runs = gw.upstream.runs(Some(workflow)).await;
        assert!(runs.len() <= 1, "one run at most: {runs:?}");
        if let Some(run) = runs.first().filter(|r| r["status"] == status) {
            return run.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run of {workflow} never reached {status}: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn cancel_during_a_slow_create_ends_canceled_and_stops_the_late_run() {
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    gw.upstream
        .faults(json!({"create_delay_ms": 1500, "create_delay_count": 1}))
        .await;
    let sending = {
        let slow = slow.clone();
        tokio::spawn(async move { slow.send_text_immediately(&new_id(), "slow create").await })
    };
    wait_until("the task committed", Duration::from_secs(10), async || {
        gw.db.task_count().await == 1
    })
    .await;
    let task_id: String = gw.db.one("SELECT task_id::text FROM a2a_tasks").await;
    // Q has no run yet (its create is still sleeping): the cancellation ends the task.
    let cancel = slow.cancel(&task_id).await;
    assert_eq!(
        cancel.result()["status"]["state"],
        "TASK_STATE_CANCELED",
        "{}",
        cancel.body
    );
    let sent = sending.await.unwrap();
    assert!(sent.is_result(), "{}", sent.body);
    // The create commits after the cancellation: the run it made is stopped, the task stays
    // CANCELED, and nothing else is created.
    wait_run_status(&gw, &workflow_of(&task_id), "canceled").await;
    assert_eq!(gw.db.task_state(&task_id).await, "TASK_STATE_CANCELED");
    assert_eq!(gw.upstream.stats().await["runs_created"], 1);
}

#[tokio::test]
async fn cancel_answered_5xx_stays_persisted_and_the_reconciler_finishes_it() {
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slower");
    // Q fails before canceling (its own 500, a proxy's 502, after a delay), or cancels and
    // fails to say so.
    for fault in [
        json!({"cancel_fail_500": 1}),
        json!({"status": {"route": "cancel_run", "status": 502, "count": 1}}),
        json!({"cancel_fail_500_after_commit": 1}),
        json!({"cancel_delay_ms": 400, "cancel_fail_500": 1}),
    ] {
        let task_id = slow
            .send_text_immediately(&new_id(), "cancel me")
            .await
            .task_id();
        wait_working(&gw, &task_id).await;
        gw.upstream.faults(fault.clone()).await;
        let cancel = slow.cancel(&task_id).await;
        assert_eq!(
            cancel.error_code(),
            Some(-32603),
            "{fault}: {}",
            cancel.body
        );
        let meta = &cancel.body["error"]["data"][0]["metadata"];
        assert_eq!(meta["cancellationPersisted"], "true", "{fault}");
        assert_eq!(meta["retryable"], "true", "{fault}");
        let persisted: bool = gw
            .db
            .task_field(&task_id, "cancel_requested_at IS NOT NULL")
            .await;
        assert!(persisted, "{fault}");
        wait_resolved(&gw, &task_id, Duration::from_secs(20)).await;
        assert_eq!(gw.db.task_state(&task_id).await, "TASK_STATE_CANCELED");
        wait_run_status(&gw, &workflow_of(&task_id), "canceled").await;
    }
}

#[tokio::test]
async fn an_asynchronous_cancel_answered_still_running_is_not_a_refusal() {
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slower");
    let task_id = slow
        .send_text_immediately(&new_id(), "cancel me later")
        .await
        .task_id();
    wait_working(&gw, &task_id).await;
    gw.upstream
        .faults(json!({"cancel_async": 1, "cancel_async_ms": 800}))
        .await;
    let cancel = slow.cancel(&task_id).await;
    // Q took the cancellation but its answer still shows the run going: the receipt shows the
    // task as it stands, not "not cancelable".
    assert!(cancel.is_result(), "{}", cancel.body);
    assert_eq!(cancel.result()["status"]["state"], "TASK_STATE_WORKING");
    let persisted: bool = gw
        .db
        .task_field(&task_id, "cancel_requested_at IS NOT NULL")
        .await;
    assert!(persisted);
    wait_run_status(&gw, &workflow_of(&task_id), "canceled").await;
    wait_resolved(&gw, &task_id, Duration::from_secs(20)).await;
    assert_eq!(
        slow.get_task(&task_id).await.result()["status"]["state"],
        "TASK_STATE_CANCELED"
    );
}

#[tokio::test]
async fn with_deduplication_off_every_extra_create_follows_a_lookup_that_found_no_run() {
    let gw = Gateway::start().await;
    gw.upstream.workflow_dedup(false).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // Answers that leave creates ambiguous, before and after Q commits, and a proxy answering
    // lookups 404 without Q's code: the gateway may send a create again only when a lookup by
    // workflow identity found no run. Q's change feed is down, so lookups are the only way
    // the reconciler learns of a committed run.
    gw.upstream
        .faults(json!({
            "status": [{"route": "create_run", "status": 502, "count": 4},
                       {"route": "run_by_workflow", "status": 404, "count": 8},
                       {"route": "run_changes", "status": 503, "count": 100000}],
            "create_fail_500_after_commit": 2,
            "create_drop_after_commit": 2,
            "create_fail_500_before_commit": 2,
        }))
        .await;
    let mut sends = Vec::new();
    for i in 0..10 {
        let writer = writer.clone();
        sends.push(tokio::spawn(async move {
            writer
                .send_text_immediately(&new_id(), &format!("message {i}"))
                .await
                .task_id()
        }));
    }
    let mut task_ids = Vec::new();
    for send in sends {
        task_ids.push(send.await.unwrap());
    }
    wait_until(
        "every task has its run",
        Duration::from_secs(30),
        async || {
            gw.db
                .count("SELECT count(*) FROM a2a_tasks WHERE run_id IS NULL")
                .await
                == 0
        },
    )
    .await;
    gw.upstream
        .admin(Method::DELETE, "/admin/faults", None)
        .await;
    for task_id in &task_ids {
        wait_resolved(&gw, task_id, Duration::from_secs(30)).await;
    }
    let mut extra = 0;
    for task_id in &task_ids {
        let workflow = workflow_of(task_id);
        let calls = gw.upstream.calls_for(&workflow).await;
        let creates = creates_follow_lookups_without_run(&calls);
        extra += creates - 1;
        let runs = gw.upstream.runs(Some(&workflow)).await.len();
        assert_eq!(runs, 1, "one run per messageId: {}", shown(&calls));
    }
    assert!(
        extra >= 4,
        "the faults made the gateway create again ({extra})"
    );
    assert_eq!(gw.upstream.stats().await["runs_created"], 10);
}

#[tokio::test]
async fn unknown_enum_values_and_extra_fields_in_answers_are_tolerated() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    gw.upstream
        .faults(json!({"extra_fields": true, "unknown_enum_values": true}))
        .await;
    let message_id = new_id();
    let sent = writer.send_text_immediately(&message_id, "a newer Q").await;
    assert!(sent.is_result(), "{}", sent.body);
    let task_id = sent.task_id();
    assert_eq!(dispatch_of(&gw, &task_id).await, "dispatched");
    // Q's run succeeds while every status it reports is one the contract does not define:
    // nothing final is inferred, reads answer the stored state, the feed changes nothing.
    wait_run_status(&gw, &workflow_of(&task_id), "succeeded").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let read = writer.get_task(&task_id).await;
    assert!(read.is_result(), "{}", read.body);
    assert_eq!(read.result()["status"]["state"], "TASK_STATE_SUBMITTED");
    assert!(!gw.db.task_state(&task_id).await.ends_with("COMPLETED"));
    let listed = writer.list_tasks(json!({})).await;
    assert!(listed.is_result(), "{}", listed.body);

    // Known values again (the extra fields stay): the task completes with its artifact.
    gw.upstream
        .faults(json!({"unknown_enum_values": false}))
        .await;
    let done = writer
        .wait_for_state(&task_id, "TASK_STATE_COMPLETED", Duration::from_secs(10))
        .await;
    assert!(done["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("a newer Q"));
    let again = writer.send_text(&message_id, "a newer Q").await;
    assert_eq!(again.task()["status"]["state"], "TASK_STATE_COMPLETED");
}

/// Q's answers are read only up to a bound per call: an answer padded past it is not read
/// further, and the call fails without taking the gateway's memory or counting Q as down.
#[tokio::test]
async fn answers_larger_than_their_bound_are_not_read() {
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let running = slow
        .send_text_immediately(&new_id(), "still running")
        .await
        .task_id();
    // 1 MiB of padding on a run read (bound 256 KiB) and on an introspection.
    gw.upstream
        .faults(json!({"pad_answers": {"get_run": 1 << 20, "introspect": 1 << 20}}))
        .await;
    let got = slow.get_task(&running).await;
    assert_eq!(got.error_code(), Some(-32603), "{}", got.body);
    let stranger = gw.caller(&new_id()).agent("ag-writer").card().await;
    assert_eq!(stranger.status, 503, "{}", stranger.body);
    assert_eq!(stranger.body["error"], "identity_unavailable");
    let metrics = gw.metrics().await;
    assert_eq!(
        crate::support::metrics::metric(&metrics, "a2a_upstream_down", &[]),
        Some(0.0),
        "an oversize answer is Q answering, not Q down"
    );
    // A padding within the bound is read as any answer with extra fields.
    gw.upstream
        .faults(json!({"pad_answers": {"get_run": 1 << 10, "introspect": 0}}))
        .await;
    assert!(slow.get_task(&running).await.is_result());
}
