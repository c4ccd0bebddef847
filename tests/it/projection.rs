//! Reads from the committed store: a completed task's reads make no call to Q, its artifact is
//! committed once and verified again on every read, revocations reach every method through Q's
//! access feed within 1 s, reads of committed tasks outlive Q, and the caches converge after
//! Q's feeds are reset.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::proxy::TcpProxy;
use crate::support::{
    artifact_text, new_id, wait_until, within_revocation_bound, Gateway, GatewayOptions,
};

/// Calls Q received since `from` (an index into its recent calls), the feeds' long-polls
/// excepted: what the requests in between cost Q.
async fn calls_since(gw: &Gateway, from: usize) -> Vec<String> {
    gw.upstream.recent_calls().await[from..]
        .iter()
        .map(|c| c["path"].as_str().unwrap_or_default().to_owned())
        .filter(|path| !path.starts_with("/internal/v1/changes/"))
        .collect()
}

fn shows_content(task: &Value) -> bool {
    task.get("artifacts").is_some() || task.get("history").is_some()
}

#[tokio::test]
async fn a_completed_tasks_reads_and_the_card_make_no_call_to_q() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let task = writer.send_text(&new_id(), "remember me").await.task();
    let id = task["id"].as_str().unwrap();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    // Warm: the first read commits the artifact and caches the grant; the card caches access.
    assert!(artifact_text(writer.get_task(id).await.result()).contains("remember me"));
    assert_eq!(writer.card().await.status, 200);

    let from = gw.upstream.recent_calls().await.len();
    for _ in 0..5 {
        let got = writer.get_task(id).await;
        assert!(
            artifact_text(got.result()).contains("remember me"),
            "{}",
            got.body
        );
    }
    let page = writer.list_tasks(json!({"includeArtifacts": true})).await;
    assert_eq!(page.result()["tasks"][0]["id"], id);
    assert!(
        page.result()["tasks"][0]["artifacts"].is_array(),
        "{}",
        page.body
    );
    for _ in 0..3 {
        assert_eq!(writer.card().await.status, 200);
    }
    let calls = calls_since(&gw, from).await;
    assert!(calls.is_empty(), "calls to Q: {calls:?}");
}

/// What the store holds is verified on every read of the store. A replica keeps a finished
/// task it verified for at most `task_cache.ttl_ms` (`tests/it/finished_tasks.rs`): within it,
/// GetTask answers the artifact as verified, never the tampered text; after it, the store's
/// text is verified again and refused.
#[tokio::test]
async fn the_artifact_is_committed_once_and_verified_again_on_every_read() {
    const TTL: Duration = Duration::from_millis(1000);
    let gw = Gateway::start_with_env(&[("Q_A2A_TASK_CACHE_TTL_MS", "1000")]).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "commit me").await.task_id();
    let first = writer.get_task(&id).await;
    assert!(artifact_text(first.result()).contains("commit me"));
    let stored: i64 = gw
        .db
        .one("SELECT count(*) FROM a2a_task_artifacts WHERE text LIKE '%commit me%'")
        .await;
    assert_eq!(stored, 1);

    // Q's output changing afterwards changes nothing: the committed artifact is the answer.
    let run_id = gw.db.run_id(&id).await;
    gw.upstream.corrupt_output(&run_id, "checksum").await;
    let again = writer.get_task(&id).await;
    assert_eq!(again.result()["artifacts"], first.result()["artifacts"]);

    // A stored text that no longer matches its checksum is refused, never served.
    let db = gw.db.client().await;
    db.execute(
        "UPDATE a2a_task_artifacts SET text = text || ' tampered'",
        &[],
    )
    .await
    .unwrap();
    let tampered_at = std::time::Instant::now();
    let listed = writer.list_tasks(json!({"includeArtifacts": true})).await;
    assert_eq!(listed.error_code(), Some(-32006), "{}", listed.body);
    let tampered = loop {
        let reply = writer.get_task(&id).await;
        if !reply.is_result() {
            break reply;
        }
        assert_eq!(reply.result()["artifacts"], first.result()["artifacts"]);
        assert!(
            tampered_at.elapsed() < TTL + Duration::from_millis(500),
            "the kept artifact outlived its bound"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(tampered.error_code(), Some(-32006), "{}", tampered.body);
}

#[tokio::test]
async fn an_output_over_the_result_bound_is_refused_from_the_store_too() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = gw.completed_with_corrupt_output("oversize").await;
    // The first read takes the output from Q (refused); the next are refused without Q.
    assert_eq!(writer.get_task(&id).await.error_code(), Some(-32006));
    let from = gw.upstream.recent_calls().await.len();
    for _ in 0..2 {
        assert_eq!(writer.get_task(&id).await.error_code(), Some(-32006));
    }
    let stored: Option<String> = gw.db.one("SELECT text FROM a2a_task_artifacts").await;
    assert!(stored.is_none(), "an oversize text was stored");
    // (Access may be asked again if the feed's vouching lapsed meanwhile; the output is not.)
    let calls = calls_since(&gw, from).await;
    let outputs: Vec<&String> = calls.iter().filter(|p| p.ends_with("/output")).collect();
    assert!(outputs.is_empty(), "the output was asked again: {calls:?}");
}

#[tokio::test]
async fn revoking_evidence_hides_content_within_the_bound_on_reads_streams_and_waits() {
    let gw = Gateway::start().await;
    let alice = gw.caller("tok-alice");
    let writer = alice.agent("ag-writer");
    let slow = alice.agent("ag-slow");
    let id = writer.send_text(&new_id(), "secret words").await.task_id();
    let run_id = gw.db.run_id(&id).await;
    // Warm every cache first: the revocation must reach what is cached.
    assert!(shows_content(writer.get_task(&id).await.result()));
    let listed = writer.list_tasks(json!({})).await;
    assert!(shows_content(&listed.result()["tasks"][0]));

    // An open stream of a running task and an open blocking send, both by Alice.
    let running = slow
        .send_text_immediately(&new_id(), "still secret")
        .await
        .task_id();
    let running_run = gw.db.run_id(&running).await;
    let mut stream = slow.subscribe(&running).await;
    assert!(shows_content(&stream.next_result().await.unwrap()["task"]));
    let blocking_id = new_id();
    let waiting = {
        let slow = slow.clone();
        let blocking_id = blocking_id.clone();
        tokio::spawn(async move { slow.send_text(&blocking_id, "wait secret").await })
    };
    let blocking_task = loop {
        let id: Option<String> = gw
            .db
            .client()
            .await
            .query_opt(
                "SELECT task_id::text FROM a2a_tasks WHERE message_id = $1 AND run_id IS NOT NULL",
                &[&blocking_id],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        if let Some(id) = id {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    for run in [&run_id, &running_run, &gw.db.run_id(&blocking_task).await] {
        gw.upstream.grant_evidence(run, "p-alice", false).await;
    }
    within_revocation_bound("GetTask hides the content", async || {
        !shows_content(writer.get_task(&id).await.result())
    })
    .await;
    let listed = writer.list_tasks(json!({"includeArtifacts": true})).await;
    let entry = listed.result()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .cloned()
        .unwrap();
    assert!(!shows_content(&entry), "{entry}");
    assert!(!listed.body.to_string().contains("secret words"));

    // The stream goes on without content: nothing after the revocation carries Q's text or
    // the artifact, up to its end.
    let rest = stream.rest().await;
    assert!(!rest.is_empty());
    let text = serde_json::to_string(&rest).unwrap();
    assert!(!text.contains("artifactUpdate"), "{text}");
    assert!(!text.contains("You asked"), "{text}");

    // The blocking send answers without the content.
    let answer = waiting.await.unwrap();
    let task = answer.task();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        answer.body
    );
    assert!(!shows_content(&task), "{task}");
}

#[tokio::test]
async fn losing_the_workspace_ends_open_streams_and_hides_tasks_within_the_bound() {
    let gw = Gateway::start().await;
    let alice = gw.caller("tok-alice");
    let writer = alice.agent("ag-writer");
    let slow = alice.agent("ag-slow");
    let id = writer
        .send_text(&new_id(), "workspace words")
        .await
        .task_id();
    assert!(shows_content(writer.get_task(&id).await.result()));
    let running = slow
        .send_text_immediately(&new_id(), "slow words")
        .await
        .task_id();
    let mut stream = slow.subscribe(&running).await;
    assert!(stream.next_result().await.is_some());

    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", false)
        .await;
    within_revocation_bound("GetTask answers -32001", async || {
        writer.get_task(&id).await.error_code() == Some(-32001)
    })
    .await;
    let page = writer.list_tasks(json!({})).await;
    assert_eq!(page.result()["totalSize"], 0, "{}", page.body);
    // The open stream ends (the window is 110 s: only the revocation ends it this soon).
    let ended = tokio::time::timeout(Duration::from_secs(5), stream.rest()).await;
    let rest = ended.expect("the stream did not end after the workspace was revoked");
    assert!(!serde_json::to_string(&rest).unwrap().contains("You asked"));

    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", true)
        .await;
    within_revocation_bound("access restored", async || {
        writer.get_task(&id).await.is_result()
    })
    .await;
}

#[tokio::test]
async fn within_an_opted_in_outage_grace_reads_are_content_free_receipts_and_nothing_else_answers()
{
    let upstream = crate::support::Upstream::start().await;
    let mut proxy = TcpProxy::start(upstream.url.trim_start_matches("http://")).await;
    let via_proxy = format!("http://127.0.0.1:{}", proxy.port);
    let gw = Gateway::start_with_upstream(
        upstream,
        GatewayOptions::with_env(&[
            ("Q_A2A_UPSTREAM_URL", &via_proxy),
            ("Q_A2A_AUTH_OUTAGE_READ_GRACE_SECONDS", "60"),
        ]),
    )
    .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "outlive q").await.task_id();
    assert!(artifact_text(writer.get_task(&id).await.result()).contains("outlive q"));
    assert_eq!(writer.card().await.status, 200);

    proxy.stop();
    // Past the token cache and the access bounds: only the outage grace answers, and only
    // what carries no content.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let got = writer.get_task(&id).await;
    let receipt = got.result();
    assert_eq!(receipt["id"], id.as_str(), "{}", got.body);
    assert_eq!(receipt["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(
        receipt.get("artifacts").is_none() && receipt.get("history").is_none(),
        "content served during the outage grace: {}",
        got.body
    );
    assert!(!got.body.to_string().contains("outlive q"));
    let page = writer.list_tasks(json!({"includeArtifacts": true})).await;
    assert_eq!(
        page.result()["tasks"][0]["id"],
        id.as_str(),
        "{}",
        page.body
    );
    assert!(
        !page.body.to_string().contains("outlive q"),
        "{}",
        page.body
    );
    assert_eq!(writer.card().await.status, 503, "the card is not a receipt");
    let write = writer.send_text_immediately(&new_id(), "no q").await;
    assert_eq!(write.status, 503, "{}", write.body);
    let report = gw.wait_readyz(200, Duration::from_secs(5)).await;
    assert_eq!(report["degraded"], json!(["upstream"]), "{report}");
    assert_eq!(report["checks"]["upstream"]["ok"], false);
    assert_eq!(
        crate::support::metrics::metric(&gw.metrics().await, "a2a_upstream_down", &[]),
        Some(1.0)
    );

    proxy.restart().await;
    wait_until("writes work again", Duration::from_secs(10), async || {
        writer
            .send_text_immediately(&new_id(), "q is back")
            .await
            .is_result()
    })
    .await;
    assert!(artifact_text(writer.get_task(&id).await.result()).contains("outlive q"));
    wait_until(
        "Q no longer degrades readiness",
        Duration::from_secs(5),
        async || {
            let (status, report) = gw.readyz().await;
            status == 200 && report["degraded"] == json!([])
        },
    )
    .await;
}

#[tokio::test]
async fn without_an_outage_grace_reads_fail_closed_when_q_is_gone() {
    let upstream = crate::support::Upstream::start().await;
    let mut proxy = TcpProxy::start(upstream.url.trim_start_matches("http://")).await;
    let via_proxy = format!("http://127.0.0.1:{}", proxy.port);
    let gw = Gateway::start_with_upstream(
        upstream,
        // No outage grace: the default.
        GatewayOptions::with_env(&[("Q_A2A_UPSTREAM_URL", &via_proxy)]),
    )
    .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "closed").await.task_id();
    assert!(writer.get_task(&id).await.is_result());
    proxy.stop();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let got = writer.get_task(&id).await;
    assert_eq!(got.status, 503, "{}", got.body);
    gw.wait_readyz(503, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn after_q_resets_its_feeds_no_cached_grant_outlives_the_bound() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "before reset").await.task_id();
    assert!(shows_content(writer.get_task(&id).await.result()));
    // Some access history, so the follower's position is past the start of Q's access feed.
    for granted in [false, true] {
        gw.upstream
            .grant_workspace("ws-acme-main", "p-bob", granted)
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(shows_content(writer.get_task(&id).await.result()));
    // Q starts over: its runs are gone, so no grant on this task's run stands any more, and
    // its feeds restart below the followers' positions.
    gw.upstream
        .admin(reqwest::Method::POST, "/admin/reset", None)
        .await;
    within_revocation_bound("the cached grant is forgotten", async || {
        !shows_content(writer.get_task(&id).await.result())
    })
    .await;
    // The stored projection still answers the task itself.
    let got = writer.get_task(&id).await;
    assert_eq!(got.result()["status"]["state"], "TASK_STATE_COMPLETED");
}

#[tokio::test]
async fn an_open_stream_asks_q_nothing_after_its_snapshot_but_its_output_once() {
    let gw = Gateway::start().await;
    let slow = gw.caller("tok-alice").agent("ag-slow");
    let id = slow
        .send_text_immediately(&new_id(), "stream me")
        .await
        .task_id();
    let run_id = gw.db.run_id(&id).await;
    let mut stream = slow.subscribe(&id).await;
    let snapshot = stream.next_result().await.expect("a snapshot");
    assert_eq!(snapshot["task"]["id"], id.as_str());
    let from = gw.upstream.recent_calls().await.len();
    let opened = tokio::time::Instant::now();
    let rest = stream.rest().await;
    let last = rest.last().expect("events after the snapshot");
    assert_eq!(
        last["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert!(serde_json::to_string(&rest)
        .unwrap()
        .contains("artifactUpdate"));
    let open_for = opened.elapsed();
    let calls = calls_since(&gw, from).await;
    let output = format!("/internal/v1/runs/{run_id}/output");
    // Nothing is asked of Q while the stream is open but the output, read to be committed by
    // the stream and by the reconciler's leader when both see the completion before either
    // committed it (once per completed task, never per event or per poll), and the token,
    // checked again every half token bound (2.5 s) while the stream lasts.
    let (token, rest): (Vec<&String>, Vec<&String>) = calls
        .iter()
        .partition(|c| *c == "/internal/v1/identity/introspect");
    assert!(
        rest.iter().all(|c| **c == output) && rest.len() <= 2,
        "calls to Q while the stream was open: {calls:?}"
    );
    let rechecks = open_for.as_millis() as usize / 2500 + 1;
    assert!(
        token.len() <= rechecks,
        "{} introspections in {open_for:?}: {calls:?}",
        token.len()
    );
}

/// The reconciler's passes (dispatches, cancellations and deadlines, retention) run once per
/// interval, not once per answer of Q's run feed: a steady flow of run changes is followed as
/// it comes, while the passes keep their pace.
#[tokio::test]
async fn a_steady_flow_of_run_changes_does_not_repeat_the_reconcilers_passes() {
    const INTERVAL_MS: u64 = 200;
    let gw = Gateway::start_with(GatewayOptions::with_env(&[(
        "Q_A2A_RECONCILER_INTERVAL_MS",
        &INTERVAL_MS.to_string(),
    )]))
    .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let passes = async || {
        crate::support::metrics::metric(&gw.metrics().await, "a2a_reconciler_passes_total", &[])
            .unwrap_or(0.0)
    };
    let feed_reads = async || {
        gw.upstream.stats().await["requests"]["run_changes"]
            .as_f64()
            .unwrap_or(0.0)
    };
    // The leader has made its first pass.
    wait_until(
        "the reconciler's first pass",
        Duration::from_secs(10),
        async || passes().await >= 1.0,
    )
    .await;

    let (passes_before, reads_before) = (passes().await, feed_reads().await);
    let started = std::time::Instant::now();
    // Three changes a run (queued, running, succeeded) over its 300 ms, a run every 20 ms.
    for _ in 0..100 {
        let reply = writer.send_text_immediately(&new_id(), "steady").await;
        assert!(reply.is_result(), "{}", reply.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.db.wait_all_completed(Duration::from_secs(20)).await;
    let elapsed = started.elapsed();
    let passes = passes().await - passes_before;
    let reads = feed_reads().await - reads_before;

    // Every pass waits out the interval after the one before; two more for the edges.
    let bound = (elapsed.as_millis() as f64 / INTERVAL_MS as f64).ceil() + 2.0;
    // The feed moved far more often than the interval (both followers' long polls answered).
    assert!(
        reads > 3.0 * bound,
        "{reads} feed answers in {elapsed:?}: the flow was not steady enough to tell"
    );
    assert!(
        passes <= bound,
        "{passes} passes in {elapsed:?} at a {INTERVAL_MS} ms interval ({reads} feed answers)"
    );
}
