//! `q-a2a-gateway tenant export` and `tenant delete`: one tenant's tasks (with messages and
//! artifacts), registrations (without their credential), delegations and retired-route counters
//! are exported as JSON lines, resumably; then deleted in batches, leaving no row of that
//! tenant in any table and every row of the others as it was.

use std::process::Output;

use serde_json::Value;

use crate::support::gateway::run_command;
use crate::support::outbound::{id_of, OutboundGateway};
use crate::support::python::Remote;
use crate::support::{new_id, TestDb};

const GONE: &str = "t-acme";
const REMOTE_SECRET: &str = "remote-bearer-s3cret-4711";

async fn gateway_cmd(gw: &OutboundGateway, args: &[&str]) -> Output {
    let out = run_command(&gw.db, &gw.upstream.url, &[], args).await;
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every table with a `tenant_id` column, from the catalog (tables added later are covered).
async fn tenant_tables(db: &TestDb) -> Vec<String> {
    db.client()
        .await
        .query(
            "SELECT table_name::text FROM information_schema.columns
              WHERE column_name = 'tenant_id' AND table_schema = 'public' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Per table: how many rows `tenant` holds, and a digest of every other tenant's rows.
async fn census(db: &TestDb, tenant: &str) -> Vec<(String, i64, String)> {
    let client = db.client().await;
    let mut out = Vec::new();
    for table in tenant_tables(db).await {
        let row = client
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE tenant_id = $1),
                            coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)
                                         FILTER (WHERE tenant_id <> $1)), '')
                       FROM {table} t"
                ),
                &[&tenant],
            )
            .await
            .unwrap();
        out.push((table, row.get(0), row.get(1)));
    }
    out
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn export_then_delete_removes_one_tenant_whole_and_nothing_else() {
    let gw = OutboundGateway::start_with_profile(&[]).await;
    let remote = Remote::start(&["--require-token", REMOTE_SECRET]).await;
    // The tenant that goes: tasks of two principals, a registration with a credential, two
    // delegations, a retired-route counter. And another tenant with the same kinds of rows.
    let writer = gw.caller("tok-alice").agent("ag-writer");
    for text in ["first", "second", "third"] {
        let reply = writer.send_text(&new_id(), text).await;
        assert_eq!(reply.task()["status"]["state"], "TASK_STATE_COMPLETED");
    }
    gw.caller("tok-bob")
        .agent("ag-writer")
        .new_task("bob's")
        .await;
    let reg = id_of(
        &gw.register("R", &remote.rpc_url(), Some(REMOTE_SECRET))
            .await,
    );
    for task in ["d-1", "d-2"] {
        let (status, v) = gw.delegate(task, &reg, "hi").await;
        assert_eq!(
            (status, v["status"].as_str()),
            (200, Some("completed")),
            "{v}"
        );
    }
    let globex = gw.caller("tok-carol").agent("ag-globex");
    for text in ["g1", "g2"] {
        globex.send_text(&new_id(), text).await.task_id();
    }
    let (status, v) = gw
        .call(
            reqwest::Method::POST,
            "/v1/a2a/agents",
            Some("tok-carol-admin"),
            Some(
                serde_json::json!({"name": "G", "endpoint": remote.rpc_url(),
                                    "bearerToken": REMOTE_SECRET}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let (status, v) = gw.delegate_as("tok-carol", "g-d-1", &id_of(&v), "hi").await;
    assert_eq!(status, 200, "{v}");
    gw.db
        .client()
        .await
        .batch_execute(
            "INSERT INTO a2a_retired_route_hits (tenant_id, route, day, hits, last_seen) VALUES
               ('t-acme', '/v1/answer', current_date, 3, now()),
               ('t-globex', '/v1/answer', current_date, 5, now())",
        )
        .await
        .unwrap();
    let before = census(&gw.db, GONE).await;
    assert!(before.iter().all(|(_, n, _)| *n > 0), "{before:?}");

    let dir = tempdir();
    let path = dir.join("acme.jsonl");
    let out = path.to_str().unwrap();
    let dry = gateway_cmd(
        &gw,
        &[
            "tenant",
            "export",
            "--tenant",
            GONE,
            "--out",
            out,
            "--dry-run",
        ],
    )
    .await;
    assert!(String::from_utf8_lossy(&dry.stdout).contains("would export task: 4"));
    assert!(!path.exists(), "a dry run writes nothing");

    let export = [
        "tenant",
        "export",
        "--tenant",
        GONE,
        "--out",
        out,
        "--batch-size",
        "2",
    ];
    gateway_cmd(&gw, &export).await;
    let whole = std::fs::read_to_string(&path).unwrap();
    let records = lines(&path);
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "export",
            "task",
            "task",
            "task",
            "task",
            "registration",
            "delegation",
            "delegation",
            "retired_route_hits",
            "end"
        ]
    );
    let tasks: Vec<&Value> = records.iter().filter(|r| r["kind"] == "task").collect();
    let completed: Vec<&&Value> = tasks
        .iter()
        .filter(|t| t["task"]["status"]["state"] == "TASK_STATE_COMPLETED")
        .collect();
    assert!(completed.len() >= 3);
    for t in &tasks {
        assert_eq!(t["task"]["history"][0]["role"], "ROLE_USER", "{t}");
    }
    for t in completed {
        assert!(
            t["task"]["artifacts"][0]["parts"][0]["text"].is_string(),
            "a completed task carries its verified artifact: {t}"
        );
    }
    let registration = records
        .iter()
        .find(|r| r["kind"] == "registration")
        .unwrap();
    assert_eq!(registration["hasCredential"], true);
    assert_eq!(registration["credentialKeyId"], "k1");
    let sealed: Vec<u8> = gw
        .db
        .one("SELECT credential_ciphertext FROM a2a_remote_agents WHERE tenant_id = 't-acme'")
        .await;
    assert!(
        !whole.contains(REMOTE_SECRET),
        "no credential in the export"
    );
    assert!(!whole.contains(&hex::encode(&sealed)) && !whole.contains("ciphertext"));
    assert!(!whole.contains("t-globex") && !whole.contains("p-carol"));

    // Interrupted in the middle of a line: running it again finishes the same file.
    let cut = whole.match_indices('\n').nth(3).unwrap().0 + 20;
    std::fs::write(&path, &whole[..cut]).unwrap();
    gateway_cmd(&gw, &export).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
    let again = gateway_cmd(&gw, &export).await;
    assert!(String::from_utf8_lossy(&again.stdout).contains("already complete"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);

    let delete = ["tenant", "delete", "--tenant", GONE, "--batch-size", "2"];
    let dry = gateway_cmd(&gw, &[&delete[..], &["--dry-run"][..]].concat()).await;
    assert!(String::from_utf8_lossy(&dry.stdout).contains("would delete delegation: 2"));
    assert_eq!(
        census(&gw.db, GONE).await,
        before,
        "a dry run deletes nothing"
    );
    let deleted = gateway_cmd(&gw, &delete).await;
    assert!(String::from_utf8_lossy(&deleted.stdout).contains("deleted task: 4"));
    let after = census(&gw.db, GONE).await;
    for ((table, n, others), (_, _, others_before)) in after.iter().zip(&before) {
        assert_eq!(*n, 0, "{table} still holds rows of {GONE}");
        assert_eq!(
            others, others_before,
            "{table}: another tenant's rows changed"
        );
    }
    let rerun = gateway_cmd(&gw, &delete).await;
    assert!(String::from_utf8_lossy(&rerun.stdout).contains("deleted task: 0"));

    let gone_task = tasks[0]["key"][0].as_str().unwrap();
    let reply = gw
        .caller("tok-alice")
        .agent("ag-writer")
        .get_task(gone_task)
        .await;
    assert_eq!(reply.error_code(), Some(-32001), "{}", reply.body);
    let (status, v) = gw.registration(&reg).await;
    assert_eq!(status, 404, "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("q-a2a-tenant-{}", new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
