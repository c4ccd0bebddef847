//! Retention of terminal tasks (`retention.tasks_seconds`): the reconciler leader deletes
//! exactly the tasks that ended longer ago than the window, whole (rows keyed on them cascade),
//! never a task that is still running however old, while GetTask and ListTasks keep
//! answering; an expired task answers like an unknown one. And the schema rule that makes
//! "whole" hold: every table referencing a task cascades and is indexed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::gateway::migrate;
use crate::support::{new_id, Agent, Gateway, TestDb};

const DAY: &str = "86400";

/// Moves tasks' status timestamps back by `age` (an SQL interval). The trigger that stamps
/// them is bypassed for this session only (it fires for every ordinary writer).
async fn age_tasks(gw: &Gateway, ids: &[String], age: &str) {
    let client = gw.db.client().await;
    client
        .batch_execute("SET session_replication_role = replica")
        .await
        .unwrap();
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.parse().unwrap()).collect();
    let n = client
        .execute(
            &format!(
                "UPDATE a2a_tasks SET status_timestamp = now() - interval '{age}'
                  WHERE task_id = ANY($1)"
            ),
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(n as usize, ids.len());
}

/// Ids of the tasks still stored, as text.
async fn stored(gw: &Gateway) -> BTreeSet<String> {
    gw.db
        .client()
        .await
        .query("SELECT task_id::text FROM a2a_tasks", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Reads one agent's tasks in a loop until `stop`: each GetTask must be the task or, for a task
/// that may expire, -32001; each ListTasks page must hold every task that is kept. Returns how
/// many reads were made.
async fn read_until(
    agent: Agent,
    kept: Vec<String>,
    expiring: Vec<String>,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut reads = 0;
    while !stop.load(Ordering::Relaxed) {
        for id in kept.iter().chain(&expiring) {
            let reply = agent.get_task(id).await;
            reads += 1;
            if reply.is_result() {
                continue;
            }
            assert!(
                expiring.contains(id) && reply.error_code() == Some(-32001),
                "GetTask {id}: {}",
                reply.body
            );
        }
        let page = agent.list_tasks(json!({"pageSize": 100})).await;
        reads += 1;
        assert!(page.is_result(), "ListTasks: {}", page.body);
        let listed: BTreeSet<&str> = page.result()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        for id in &kept {
            assert!(listed.contains(id.as_str()), "ListTasks lost {id}");
        }
    }
    reads
}

#[tokio::test]
async fn expired_terminal_tasks_go_whole_and_running_ones_stay_while_reads_answer() {
    // Small batches: the expired tasks take several statements, with reads in between. The
    // test moves finished tasks' terminal times behind the gateway's back, which nothing else
    // does: a task the readers kept answers until the kept entry's TTL (500 ms here), which
    // ends before the reads below.
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_RETENTION_TASKS_SECONDS", DAY),
        ("Q_A2A_RETENTION_BATCH_SIZE", "2"),
        ("Q_A2A_TASK_CACHE_TTL_MS", "500"),
    ])
    .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let approver = gw.caller("tok-alice").agent("ag-approver");

    let mut expiring = Vec::new();
    let mut young = Vec::new();
    for i in 0..12 {
        let reply = writer.send_text(&new_id(), "hello").await;
        assert_eq!(reply.task()["status"]["state"], "TASK_STATE_COMPLETED");
        if i < 9 {
            expiring.push(reply.task_id());
        } else {
            young.push(reply.task_id());
        }
    }
    // Waiting for approval (not terminal), and one of them cancelled (terminal).
    let mut running = Vec::new();
    for _ in 0..3 {
        let id = approver.new_task("needs approval").await;
        approver
            .wait_for_state(&id, "TASK_STATE_INPUT_REQUIRED", Duration::from_secs(15))
            .await;
        running.push(id);
    }
    let canceled = running.pop().unwrap();
    assert!(approver.cancel(&canceled).await.is_result());
    approver
        .wait_for_state(&canceled, "TASK_STATE_CANCELED", Duration::from_secs(15))
        .await;

    // Rows keyed on a task, as a child table of a2a_tasks must be declared.
    gw.db
        .client()
        .await
        .batch_execute(
            "CREATE TABLE test_task_notes (
                 task_id uuid NOT NULL REFERENCES a2a_tasks ON DELETE CASCADE,
                 note text NOT NULL);
             CREATE INDEX ON test_task_notes (task_id);
             INSERT INTO test_task_notes SELECT task_id, 'n1' FROM a2a_tasks;
             INSERT INTO test_task_notes SELECT task_id, 'n2' FROM a2a_tasks;",
        )
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let readers = [
        (writer.clone(), young.clone(), expiring.clone()),
        (approver.clone(), running.clone(), vec![canceled.clone()]),
    ]
    .map(|(agent, kept, expiring)| tokio::spawn(read_until(agent, kept, expiring, stop.clone())));

    // The running tasks are older than any window: age is not what keeps them.
    age_tasks(&gw, &expiring, "2 days").await;
    age_tasks(&gw, std::slice::from_ref(&canceled), "2 days").await;
    expiring.push(canceled);
    age_tasks(&gw, &running, "40 days").await;
    age_tasks(&gw, &young, "23 hours").await;

    let aged = std::time::Instant::now();
    gw.db
        .wait_count(
            "expired tasks deleted",
            "SELECT count(*) FROM a2a_tasks WHERE status_timestamp < now() - interval '1 day'
               AND state <> 'TASK_STATE_INPUT_REQUIRED'",
            0,
            Duration::from_secs(20),
        )
        .await;
    // Retention's idle wait (5 s) + the tombstones' settle (statement timeout + 5 s) + passes:
    // docs/operations.md, "Store statements in the background".
    eprintln!(
        "expired tasks deleted {:?} after they expired",
        aged.elapsed()
    );
    // A few more passes, which must change nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for reader in readers {
        reads += reader.await.expect("every read answered as it should");
    }

    let left = stored(&gw).await;
    let expected: BTreeSet<String> = young.iter().chain(&running).cloned().collect();
    assert_eq!(left, expected, "exactly the expired terminal tasks went");
    assert_eq!(
        gw.db
            .count("SELECT count(*) FROM test_task_notes WHERE task_id NOT IN (SELECT task_id FROM a2a_tasks)")
            .await,
        0
    );
    assert_eq!(
        gw.db.count("SELECT count(*) FROM test_task_notes").await,
        2 * expected.len() as i64,
        "the kept tasks' rows stay"
    );
    for id in &expiring {
        let agent = if id == expiring.last().unwrap() {
            &approver
        } else {
            &writer
        };
        let reply = agent.get_task(id).await;
        assert_eq!(reply.error_code(), Some(-32001), "{}", reply.body);
    }
    for id in &running {
        let task = approver.get_task(id).await;
        assert_eq!(
            task.result()["status"]["state"],
            "TASK_STATE_INPUT_REQUIRED"
        );
    }
    let listed = writer.list_tasks(json!({"pageSize": 100})).await;
    assert_eq!(listed.result()["totalSize"], young.len());
    eprintln!(
        "{reads} reads answered while {} tasks expired",
        expiring.len()
    );
    assert!(gw.metrics().await.contains(&format!(
        "a2a_retention_removed_total{{kind=\"tasks\"}} {}",
        expiring.len()
    )));
}

/// Child tables of a2a_tasks that would leave half a task behind, or make each cascaded delete
/// scan the child: `(table, cascades, indexed)`.
async fn task_children(client: &tokio_postgres::Client) -> Vec<(String, bool, bool)> {
    client
        .query(
            "SELECT c.conrelid::regclass::text,
                    c.confdeltype = 'c',
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.conrelid
                             AND (string_to_array(i.indkey::text, ' ')::int2[])
                                 [1:cardinality(c.conkey)] = c.conkey)
               FROM pg_constraint c
              WHERE c.contype = 'f' AND c.confrelid = 'a2a_tasks'::regclass
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[tokio::test]
async fn every_table_referencing_tasks_cascades_and_is_indexed() {
    let db = TestDb::create().await;
    let out = migrate(&db, "http://127.0.0.1:9").await;
    assert!(out.status.success(), "{out:?}");
    let client = db.client().await;
    for (table, cascades, indexed) in task_children(&client).await {
        assert!(
            cascades && indexed,
            "{table} references a2a_tasks without ON DELETE CASCADE ({cascades}) or an index \
             leading with the reference ({indexed}): retention and offboarding delete tasks"
        );
    }
    // The check itself sees a table that breaks the rule.
    client
        .batch_execute(
            "CREATE TABLE test_loose_child (note text, task_id uuid REFERENCES a2a_tasks)",
        )
        .await
        .unwrap();
    assert!(task_children(&client)
        .await
        .contains(&("test_loose_child".into(), false, false)));
}

/// Identity outlives content: once retention removed a task, a repeat of its messageId (same
/// text) answers the same task id from its tombstone, content-free, and Q receives no create;
/// other text under that messageId is still refused; GetTask of the task is -32001.
#[tokio::test]
async fn a_repeat_after_retention_answers_the_same_task_and_starts_no_run() {
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_RETENTION_TASKS_SECONDS", DAY),
        // Tombstones stand 1 s + 5 s before their task goes.
        ("Q_A2A_DATABASE_STATEMENT_TIMEOUT_MS", "1000"),
    ])
    .await;
    gw.upstream.workflow_dedup(false).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let message_id = new_id();
    let first = writer.send_text(&message_id, "kept identity").await.task();
    let id = first["id"].as_str().unwrap().to_string();
    assert_eq!(first["status"]["state"], "TASK_STATE_COMPLETED");
    age_tasks(&gw, std::slice::from_ref(&id), "2 days").await;
    gw.db
        .wait_count(
            "the task's tombstone",
            "SELECT count(*) FROM a2a_task_tombstones",
            1,
            Duration::from_secs(10),
        )
        .await;
    // While the tombstone settles the task itself still answers a repeat, with content.
    let during = writer
        .send_text_immediately(&message_id, "kept identity")
        .await
        .task();
    assert_eq!(during["id"], first["id"]);
    gw.db
        .wait_count(
            "the task deleted",
            "SELECT count(*) FROM a2a_tasks",
            0,
            Duration::from_secs(20),
        )
        .await;
    let creates = gw.upstream.stats().await["create_requests"].clone();
    assert_eq!(creates, 1);

    for repeat in [
        writer.send_text(&message_id, "kept identity").await,
        writer
            .send_text_immediately(&message_id, "kept identity")
            .await,
    ] {
        let task = repeat.task();
        assert_eq!(task["id"], first["id"], "{}", repeat.body);
        assert_eq!(task["contextId"], first["contextId"]);
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
        assert!(
            task.get("history").is_none() && task.get("artifacts").is_none(),
            "{task}"
        );
    }
    let mut stream = writer.stream_text(&message_id, "kept identity").await;
    let events = stream.rest().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["task"]["id"], first["id"]);
    let changed = writer.send_text(&message_id, "other words").await;
    assert_eq!(changed.error_code(), Some(-32602), "{}", changed.body);
    assert_eq!(writer.get_task(&id).await.error_code(), Some(-32001));
    assert_eq!(
        gw.upstream.stats().await["create_requests"],
        creates,
        "a repeat after retention sent a create"
    );
    assert_eq!(gw.db.task_count().await, 0, "a repeat recreated the task");
}

/// The space a tombstone takes (docs/operations.md, "Retention"): about 330 bytes, table and
/// indexes together, i.e. about 330 MB per million removed tasks; asserted within 25 %.
#[tokio::test]
async fn tombstones_take_the_documented_space() {
    const DOCUMENTED_BYTES: f64 = 330.0;
    let db = TestDb::create().await;
    let upstream = crate::support::Upstream::start().await;
    assert!(migrate(&db, &upstream.url).await.status.success());
    let client = db.client().await;
    client
        .batch_execute(
            "INSERT INTO a2a_task_tombstones
                    (identity, tenant_id, task_id, context_id, content_sha256, state,
                     status_timestamp)
             SELECT a2a_message_identity('t-acme', 'p-' || (i % 100), 'ag-writer',
                                         gen_random_uuid()::text),
                    't-acme', gen_random_uuid(), gen_random_uuid(),
                    sha256(i::text::bytea), 'TASK_STATE_COMPLETED', now()
               FROM generate_series(1, 20000) i",
        )
        .await
        .unwrap();
    client
        .batch_execute("VACUUM ANALYZE a2a_task_tombstones")
        .await
        .unwrap();
    let bytes: i64 = db
        .one("SELECT pg_total_relation_size('a2a_task_tombstones')")
        .await;
    let per_row = bytes as f64 / 20000.0;
    eprintln!(
        "tombstones: {per_row:.0} bytes each ({:.0} MB per million)",
        per_row
    );
    assert!(
        (per_row - DOCUMENTED_BYTES).abs() <= DOCUMENTED_BYTES * 0.25,
        "{per_row:.0} bytes per tombstone, documented {DOCUMENTED_BYTES}"
    );
}
