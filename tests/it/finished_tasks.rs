//! Finished tasks kept in process for GetTask (`src/a2a/tasks/finished.rs`): a repeated GetTask
//! of a finished task is answered from memory, still checked against its caller on every
//! request, and nothing kept outlives its time bound when the task is deleted behind the
//! replica's back (no replica is told about offboarding or retention).

use std::time::{Duration, Instant};

use crate::support::gateway::run_command;
use crate::support::{new_id, within_revocation_bound, Gateway};

/// `a2a_finished_task_cache_lookups_total{outcome}` as the gateway exports it.
async fn lookups(gw: &Gateway, outcome: &str) -> u64 {
    let series = format!("a2a_finished_task_cache_lookups_total{{outcome=\"{outcome}\"}} ");
    gw.metrics()
        .await
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no series {series}"))
        .trim()
        .parse()
        .unwrap()
}

/// The tenant is offboarded (`tenant delete`, another process, which tells no replica): the
/// replica answers the task it kept from memory, the same answer as before, at most
/// `task_cache.ttl_ms` after the read that kept it; then -32001 like any unknown task.
#[tokio::test]
async fn a_deleted_finished_task_is_answered_at_most_the_ttl_after_it_was_kept() {
    const TTL: Duration = Duration::from_millis(2000);
    let gw = Gateway::start_with_env(&[("Q_A2A_TASK_CACHE_TTL_MS", "2000")]).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "keep me").await.task_id();
    // The first read may take the artifact from Q and commit it; a completed task is kept
    // only with its committed artifact, so the second read keeps it at the latest.
    let first = writer.get_task(&id).await;
    assert!(first.is_result(), "{}", first.body);
    let second = writer.get_task(&id).await;
    let kept_by = Instant::now();
    assert_eq!(second.body["result"], first.body["result"]);
    let hits = lookups(&gw, "hit").await;

    let out = run_command(
        &gw.db,
        &gw.upstream.url,
        &[],
        &["tenant", "delete", "--tenant", "t-acme"],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(gw.db.task_count().await, 0);

    // Answered from memory: the row is gone, the answer is the same.
    let kept = writer.get_task(&id).await;
    assert_eq!(kept.body["result"], first.body["result"], "{}", kept.body);
    assert_eq!(lookups(&gw, "hit").await, hits + 1);
    // Until the bound, then never again.
    let gone = loop {
        let reply = writer.get_task(&id).await;
        if !reply.is_result() {
            break reply;
        }
        assert_eq!(reply.body["result"], first.body["result"]);
        assert!(
            kept_by.elapsed() < TTL + Duration::from_millis(500),
            "a deleted task was still answered {:?} after it was kept",
            kept_by.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(gone.error_code(), Some(-32001), "{}", gone.body);
    assert!(kept_by.elapsed() >= TTL - Duration::from_millis(100));
}

/// A kept task answers only its owner through the agent it was sent to, and its content only
/// under a clearance taken on the request: another principal, another agent and a revoked
/// workspace get -32001; a revoked evidence grant gets the control receipt.
#[tokio::test]
async fn a_kept_task_is_checked_against_its_caller_on_every_read() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "only mine").await.task_id();
    for _ in 0..2 {
        assert!(writer.get_task(&id).await.is_result());
    }
    let hits = lookups(&gw, "hit").await;
    assert!(hits >= 1, "the task was not kept");
    // historyLength still applies to a kept task (its answer is not the one kept).
    let full = writer.get_task(&id).await;
    assert_eq!(full.result()["history"].as_array().unwrap().len(), 1);
    for (length, entries) in [(0, None), (1, Some(1)), (5, Some(1))] {
        let reply = writer
            .rpc(
                "GetTask",
                serde_json::json!({"id": id, "historyLength": length}),
            )
            .await;
        let history = reply.result()["history"].as_array().map(Vec::len);
        assert_eq!(history, entries, "historyLength {length}: {}", reply.body);
        assert_eq!(reply.result()["artifacts"], full.result()["artifacts"]);
    }
    let unknown = writer.get_task(&new_id()).await;

    let bobs = gw.caller("tok-bob").agent("ag-writer").get_task(&id).await;
    let other_agent = gw
        .caller("tok-alice")
        .agent("ag-private")
        .get_task(&id)
        .await;
    for reply in [&bobs, &other_agent] {
        assert_eq!(reply.body["error"], unknown.body["error"], "{}", reply.body);
    }
    assert_eq!(lookups(&gw, "other_owner").await, 2);

    // Grant revoked: the kept task answers as a receipt, within the freshness bound.
    let run_id = gw.db.run_id(&id).await;
    gw.upstream.grant_evidence(&run_id, "p-alice", false).await;
    within_revocation_bound("the content is hidden", async || {
        writer
            .get_task(&id)
            .await
            .result()
            .get("artifacts")
            .is_none()
    })
    .await;
    let receipt = writer.get_task(&id).await;
    assert!(receipt.result().get("history").is_none());
    assert!(
        !receipt.body.to_string().contains("only mine"),
        "{}",
        receipt.body
    );
    gw.upstream.grant_evidence(&run_id, "p-alice", true).await;
    within_revocation_bound("the content is back", async || {
        writer
            .get_task(&id)
            .await
            .result()
            .get("artifacts")
            .is_some()
    })
    .await;

    // Workspace revoked: -32001, as for a task never kept.
    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", false)
        .await;
    within_revocation_bound("the workspace is lost", async || {
        writer.get_task(&id).await.error_code() == Some(-32001)
    })
    .await;
    assert!(
        lookups(&gw, "hit").await > hits,
        "no read was answered from memory"
    );
}

/// `task_cache.capacity_bytes = 0` keeps nothing: every GetTask reads the store.
#[tokio::test]
async fn a_capacity_of_zero_keeps_nothing() {
    let gw = Gateway::start_with_env(&[("Q_A2A_TASK_CACHE_CAPACITY_BYTES", "0")]).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "not kept").await.task_id();
    let first = writer.get_task(&id).await;
    gw.db
        .client()
        .await
        .execute("DELETE FROM a2a_tasks", &[])
        .await
        .unwrap();
    assert!(first.is_result());
    assert_eq!(writer.get_task(&id).await.error_code(), Some(-32001));
    assert_eq!(lookups(&gw, "hit").await, 0);
}

/// A miss is a read the table could have saved: a finished task read from the store and kept
/// then, once; reads of a running task are `not_kept`, never misses.
#[tokio::test]
async fn only_a_finished_task_read_from_the_store_is_a_miss() {
    let gw = Gateway::start().await;
    let alice = gw.caller("tok-alice");
    let running = alice
        .agent("ag-slower")
        .send_text_immediately(&new_id(), "still running")
        .await
        .task_id();
    let (misses, not_kept) = (lookups(&gw, "miss").await, lookups(&gw, "not_kept").await);
    for _ in 0..3 {
        let read = alice.agent("ag-slower").get_task(&running).await;
        assert!(read.is_result(), "{}", read.body);
        let state = read.body["result"]["status"]["state"].as_str().unwrap();
        assert!(!state.ends_with("COMPLETED"), "{}", read.body);
    }
    assert_eq!(
        lookups(&gw, "miss").await,
        misses,
        "a running task is no miss"
    );
    assert_eq!(lookups(&gw, "not_kept").await, not_kept + 3);

    let writer = alice.agent("ag-writer");
    let done = writer.send_text(&new_id(), "keep me").await.task_id();
    let hits = lookups(&gw, "hit").await;
    // The first read may commit the artifact it took from Q (not kept yet); the second keeps
    // it at the latest; the rest are hits.
    for _ in 0..4 {
        assert!(writer.get_task(&done).await.is_result());
    }
    assert_eq!(lookups(&gw, "miss").await, misses + 1, "kept once");
    let hits_now = lookups(&gw, "hit").await;
    assert!(hits_now >= hits + 2, "{hits} then {hits_now}");
}
