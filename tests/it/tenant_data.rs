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
               ('t-globex', '/v1/answer', current_date, 5, now());
             INSERT INTO a2a_task_tombstones (identity, tenant_id, task_id, context_id,
                                              content_sha256, state, status_timestamp)
             SELECT a2a_message_identity(t, 'p-x', 'ag-writer', 'm-old'), t,
                    gen_random_uuid(), gen_random_uuid(), sha256('x'::bytea),
                    'TASK_STATE_COMPLETED', now() - interval '40 days'
               FROM unnest(ARRAY['t-acme', 't-globex']) AS t",
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
            "task_tombstone",
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

/// The export follows the freshness rule: a task whose evidence grant was revoked is exported
/// as a content-free receipt (no message, no artifact, no status text), saying why. The file is
/// readable by its owner only, and a symbolic link at its path is refused, not followed.
#[tokio::test]
async fn the_export_withholds_revoked_content_and_keeps_its_file_private() {
    use std::os::unix::fs::PermissionsExt;

    use crate::support::InProcessGateway;

    let gw = InProcessGateway::start_with(Default::default()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let kept = writer.send_text(&new_id(), "kept words").await.task_id();
    let revoked = writer.send_text(&new_id(), "revoked words").await.task_id();
    let run = gw.db.run_id(&revoked).await;
    gw.upstream.grant_evidence(&run, "p-alice", false).await;

    let dir = tempdir();
    let path = dir.join("acme.jsonl");
    let out = path.to_str().unwrap();
    let export = ["tenant", "export", "--tenant", GONE, "--out", out];
    let done = run_command(&gw.db, &gw.upstream.url, &[], &export).await;
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let tasks: Vec<Value> = lines(&path)
        .into_iter()
        .filter(|r| r["kind"] == "task")
        .collect();
    let record = |id: &str| tasks.iter().find(|r| r["key"][0] == id).unwrap().clone();
    let kept = record(&kept);
    assert!(kept["task"]["artifacts"].is_array(), "{kept}");
    assert!(kept.get("contentWithheld").is_none());
    let withheld = record(&revoked);
    assert_eq!(withheld["contentWithheld"], "not_granted", "{withheld}");
    assert_eq!(withheld["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(
        !withheld.to_string().contains("revoked words"),
        "{withheld}"
    );
    assert!(
        withheld["task"].get("artifacts").is_none() && withheld["task"].get("history").is_none()
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the export file is {mode:o}");

    // Without Q every task is a receipt: nothing can confirm its content is still granted.
    let receipts = dir.join("receipts.jsonl");
    let receipts_out = receipts.to_str().unwrap();
    let no_q = [
        "tenant",
        "export",
        "--tenant",
        GONE,
        "--out",
        receipts_out,
        "--receipts-only",
    ];
    let done = run_command(&gw.db, &gw.upstream.url, &[], &no_q).await;
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    for task in lines(&receipts).iter().filter(|r| r["kind"] == "task") {
        assert_eq!(task["contentWithheld"], "unconfirmed", "{task}");
        assert!(!task.to_string().contains("words"), "{task}");
    }

    // A symbolic link planted where the file goes is refused, and its target left alone.
    let target = dir.join("elsewhere.txt");
    std::fs::write(&target, "untouched").unwrap();
    let link = dir.join("link.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let via_link = [
        "tenant",
        "export",
        "--tenant",
        GONE,
        "--out",
        link.to_str().unwrap(),
    ];
    let refused = run_command(&gw.db, &gw.upstream.url, &[], &via_link).await;
    assert!(
        !refused.status.success(),
        "an export through a symbolic link ran"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("symbolic link"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
}
