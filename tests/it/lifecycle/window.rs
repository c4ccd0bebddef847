//! The observation window and the profile's defaults: "HTTP observation waits use 110-second
//! windows. Expiry or disconnect ends observation, while the durable run continues under its
//! saved one-hour execution deadline", with observer bounds 256/16/4 by default.
//!
//! A blocking SendMessage past its window answers the task as it stands and frees its lease; one
//! whose client goes away mid-wait frees its lease at once; in both the run goes on in Q, under a
//! deadline fixed an hour after admission, and completes; a repeat recovers it without a second
//! run. The defaults are asserted as shipped: the built-in configuration, `config/gateway.toml`
//! (which every test gateway runs on) and a running gateway's own figures.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use q_a2a_gateway::config::Config;

use crate::support::metrics::metric;
use crate::support::redis::lease_counts;
use crate::support::{new_id, repo_path, wait_until, Gateway, GatewayOptions};

/// The saved execution deadline of `task_id`'s run in Q, less the task's admission: the one hour
/// the profile gives a run, fixed when the task was admitted.
async fn deadline_after_admission(gw: &Gateway, task_id: &str) -> chrono::Duration {
    let runs = gw.upstream.runs(Some(&format!("a2a-task-{task_id}"))).await;
    assert_eq!(runs.len(), 1, "one run in Q: {runs:?}");
    let deadline: DateTime<Utc> = runs[0]["deadline_at"].as_str().unwrap().parse().unwrap();
    let admitted: DateTime<Utc> = gw.db.task_field(task_id, "created_at").await;
    deadline - admitted
}

fn about_an_hour(after_admission: chrono::Duration) -> bool {
    (after_admission - chrono::Duration::seconds(3_600))
        .num_milliseconds()
        .abs()
        < 2_000
}

#[tokio::test]
async fn a_blocking_send_past_its_window_answers_the_task_as_it_stands_and_the_run_goes_on() {
    const WINDOW: Duration = Duration::from_secs(2);
    let gw = Gateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_OBSERVATION_WINDOW_SECONDS",
        "2",
    )]))
    .await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let message_id = new_id();
    let started = Instant::now();
    // ag-slow's run takes about 5 s: longer than the window.
    let reply = slow.send_text(&message_id, "outlast the window").await;
    let took = started.elapsed();
    let task = reply.task();
    let state = task["status"]["state"].as_str().unwrap().to_string();
    assert!(
        state == "TASK_STATE_SUBMITTED" || state == "TASK_STATE_WORKING",
        "the task as it stands when the window ends: {}",
        reply.body
    );
    // The window's figure, with 400 ms (20 %) for the answer to reach this client.
    assert!(
        took >= WINDOW && took < WINDOW + Duration::from_millis(400),
        "answered {took:?} after the send, the window is {WINDOW:?}"
    );
    // The wait's lease ended with it.
    assert_eq!(lease_counts(&gw, "t-acme", "p-alice").await, [0, 0, 0]);
    // The run goes on and completes; GetTask (or another wait) sees it.
    let id = task["id"].as_str().unwrap();
    slow.wait_for_state(id, "TASK_STATE_COMPLETED", Duration::from_secs(15))
        .await;
    assert!(about_an_hour(deadline_after_admission(&gw, id).await));
    // Observing again is a repeat: the same task, completed, and no second run.
    let again = slow.send_text(&message_id, "outlast the window").await;
    assert_eq!(again.task()["id"], task["id"]);
    assert_eq!(again.task()["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        gw.upstream
            .runs(Some(&format!("a2a-task-{id}")))
            .await
            .len(),
        1
    );
}

/// A blocking send (on the shipped 110 s window) whose client goes away mid-wait: its lease is
/// freed within a second, the run goes on to completion, and the client's repeat recovers the
/// task without a second create.
#[tokio::test]
async fn a_blocking_send_whose_client_goes_away_frees_its_lease_and_the_run_goes_on() {
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let message_id = new_id();
    let waiting = tokio::spawn({
        let slow = slow.clone();
        let message_id = message_id.clone();
        async move { slow.send_text(&message_id, "then hang up").await }
    });
    wait_until(
        "the wait to hold its lease",
        Duration::from_secs(5),
        async || lease_counts(&gw, "t-acme", "p-alice").await == [1, 1, 1],
    )
    .await;
    let id: String = gw.db.one("SELECT task_id::text FROM a2a_tasks").await;
    // The client goes away: its request (and connection) dropped mid-wait.
    waiting.abort();
    let gone = Instant::now();
    wait_until(
        "the lease to be freed",
        Duration::from_secs(1),
        async || lease_counts(&gw, "t-acme", "p-alice").await == [0, 0, 0],
    )
    .await;
    eprintln!(
        "the lease was freed {:?} after the client left",
        gone.elapsed()
    );
    assert_ne!(
        gw.db.task_state(&id).await,
        "TASK_STATE_COMPLETED",
        "mid-run"
    );
    slow.wait_for_state(&id, "TASK_STATE_COMPLETED", Duration::from_secs(15))
        .await;
    assert!(about_an_hour(deadline_after_admission(&gw, &id).await));
    let again = slow.send_text(&message_id, "then hang up").await;
    assert_eq!(again.task()["id"], id.as_str());
    assert_eq!(again.task()["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(gw.upstream.stats().await["runs_created"], 1);
}

/// The profile's figures are the defaults as shipped: without the file, in `config/gateway.toml`,
/// and in a running gateway started on that file (the observer bounds it exports; the window and
/// deadline are asserted in the two tests above).
#[tokio::test]
async fn the_profiles_figures_are_the_shipped_defaults() {
    let required = |name: &str| match name {
        "Q_A2A_DATABASE_URL" => Some("postgres://q@127.0.0.1/q".to_string()),
        "Q_A2A_UPSTREAM_URL" => Some("http://127.0.0.1:1".to_string()),
        "Q_A2A_UPSTREAM_SERVICE_TOKEN" | "Q_A2A_CURSOR_KEY" => Some("x".repeat(32)),
        _ => None,
    };
    let shipped = Config::load_with(Some(&repo_path("config/gateway.toml")), required)
        .expect("config/gateway.toml loads");
    for (source, config) in [("built in", Config::default()), ("gateway.toml", shipped)] {
        assert_eq!(config.limits.observation_window_seconds, 110, "{source}");
        assert_eq!(config.upstream.execution_timeout_seconds, 3_600, "{source}");
        assert_eq!(
            (
                config.observers.global,
                config.observers.per_tenant,
                config.observers.per_principal
            ),
            (256, 16, 4),
            "{source}"
        );
    }
    let gw = Gateway::start().await;
    // The bound gauges are set once the replica's store is up, which may follow its first
    // `listening on` on a loaded machine.
    wait_until(
        "the lease bound gauges",
        Duration::from_secs(10),
        async || {
            metric(
                &gw.metrics().await,
                "a2a_observer_lease_limit",
                &[("scope", "global")],
            )
            .is_some()
        },
    )
    .await;
    let metrics = gw.metrics().await;
    for (scope, bound) in [("global", 256.0), ("tenant", 16.0), ("principal", 4.0)] {
        assert_eq!(
            metric(&metrics, "a2a_observer_lease_limit", &[("scope", scope)]),
            Some(bound),
            "{scope}"
        );
    }
}
