//! Neighbours on the store's pool: one principal's flood of reads holds at most its share of
//! the connections, and other principals and tenants keep theirs.
//!
//! To hold connections deterministically, the test locks `a2a_task_artifacts` (ACCESS
//! EXCLUSIVE, from its own connection) for a few seconds: Alice's ListTasks with
//! `includeArtifacts` read it and wait on the lock with their connection, while Bob's and
//! Carol's ListTasks without artifacts, and Carol's SendMessage, touch only `a2a_tasks`.
//! Without the shares, Alice's flood takes every connection and the others wait out the
//! acquire timeout (2 s) and fail.
//!
//! `Q_A2A_TEST_GATEWAY_BIN` (with its configuration file in `Q_A2A_TEST_GATEWAY_CONFIG`) runs
//! it against another build, to see what it catches in it.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::support::metrics::metric;
use crate::support::{new_id, Gateway, GatewayOptions, Reply};

/// The pool of the gateway under test: a tenant's share is 2, a principal's 1.
const POOL: &str = "4";
/// Alice's ListTasks in flight at once.
const FLOOD: usize = 24;
/// How long the artifacts stay locked: past the acquire timeout, within the statement timeout.
const LOCKED: Duration = Duration::from_millis(3_500);

/// The options of the gateway under test: this build's, or the one `Q_A2A_TEST_GATEWAY_BIN`
/// names, with `env` on top.
fn options(env: &[(&str, &str)]) -> GatewayOptions {
    GatewayOptions::with_env(env).under_test()
}

/// A refusal as the store's retryable error: -32603 with `metadata.retryable`.
fn retryable(reply: &Reply) -> bool {
    reply.error_code() == Some(-32603)
        && reply.body["error"]["data"][0]["metadata"]["retryable"] == "true"
}

/// While Alice's 24 concurrent ListTasks with artifacts wait on their reads, Bob (her tenant)
/// and Carol (another tenant) list their tasks, and Carol sends a message, each answered at
/// once; Alice's reads over her share are refused with the store's retryable error once the
/// acquire window passes, and counted as `a2a_store_share_refusals_total{scope="principal"}`.
#[tokio::test]
async fn one_principal_holds_at_most_its_share_of_the_store_pool() {
    let gw = Gateway::start_with(options(&[("Q_A2A_DATABASE_POOL_SIZE", POOL)])).await;
    let alice = gw.caller("tok-alice").agent("ag-writer");
    let bob = gw.caller("tok-bob").agent("ag-writer");
    let carol = gw.caller("tok-carol").agent("ag-globex");
    for _ in 0..3 {
        let task = alice.send_text(&new_id(), "a long answer").await.task();
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    }
    bob.send_text(&new_id(), "bob's").await.task();
    carol.send_text(&new_id(), "carol's").await.task();
    // Alice's artifacts are committed, and every listing answers, before the lock.
    let page = alice
        .list_tasks(json!({"includeArtifacts": true, "pageSize": 100}))
        .await;
    assert_eq!(page.result()["tasks"].as_array().unwrap().len(), 3);
    assert!(
        page.result()["tasks"][0]["artifacts"].is_array(),
        "{}",
        page.body
    );
    assert!(bob.list_tasks(json!({})).await.is_result());

    let locker = gw.db.client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE a2a_task_artifacts IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let locked_at = Instant::now();
    let flood: Vec<_> = (0..FLOOD)
        .map(|_| {
            let alice = alice.clone();
            tokio::spawn(async move {
                alice
                    .list_tasks(json!({"includeArtifacts": true, "pageSize": 100}))
                    .await
            })
        })
        .collect();
    // Alice's reads have reached the locked table and wait there.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut neighbours = Vec::new();
    for round in 0..3 {
        let started = Instant::now();
        let answers = [
            ("bob ListTasks", bob.list_tasks(json!({})).await),
            ("carol ListTasks", carol.list_tasks(json!({})).await),
            (
                "carol SendMessage",
                carol.send_text_immediately(&new_id(), "during").await,
            ),
        ];
        for (what, reply) in answers {
            neighbours.push((round, what, reply.is_result(), reply.body.clone()));
        }
        neighbours.push((
            round,
            "round",
            started.elapsed() < Duration::from_secs(1),
            json!({}),
        ));
    }
    let neighbours_done = locked_at.elapsed();
    tokio::time::sleep(LOCKED.saturating_sub(locked_at.elapsed())).await;
    locker.batch_execute("COMMIT").await.unwrap();

    let failed: Vec<_> = neighbours.iter().filter(|(_, _, ok, _)| !ok).collect();
    assert!(
        failed.is_empty(),
        "other principals and tenants are served at once while Alice floods \
         (done {neighbours_done:?} after the lock): {failed:#?}"
    );
    let mut answered = 0;
    let mut refused = 0;
    for task in flood {
        let reply = task.await.unwrap();
        if reply.is_result() {
            answered += 1;
        } else {
            assert!(
                retryable(&reply),
                "only the retryable refusal: {}",
                reply.body
            );
            refused += 1;
        }
    }
    assert!(answered >= 1, "Alice keeps her share: {answered} answered");
    assert!(
        refused >= 1,
        "Alice is held to her share: {refused} refused"
    );
    let metrics = gw.metrics().await;
    let counted = metric(
        &metrics,
        "a2a_store_share_refusals_total",
        &[("scope", "principal")],
    )
    .unwrap_or(0.0);
    assert_eq!(counted as usize, refused, "every refusal counted");
    assert_eq!(
        metric(
            &metrics,
            "a2a_store_share_refusals_total",
            &[("scope", "tenant")]
        ),
        Some(0.0)
    );
}
