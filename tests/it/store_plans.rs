//! The store's hot statements are planned on the index they were written for whatever the
//! table's statistics say: a table loaded in one go and never analysed (autovacuum off, as on
//! this machine's PostgreSQL, or not yet run) must not turn the lookup of a repeated messageId
//! into a scan of every task of the principal.

use serde_json::Value;

use crate::support::TestDb;

const TASKS: i64 = 20_000;

type Param = dyn tokio_postgres::types::ToSql + Sync;

/// The index each statement's plan reads, from `EXPLAIN (FORMAT JSON)`.
async fn indexes_read(client: &tokio_postgres::Client, sql: &str, refs: &[&Param]) -> Vec<String> {
    let row = client
        .query_one(&format!("EXPLAIN (FORMAT JSON) {sql}"), refs)
        .await
        .unwrap();
    let plan: Value = row.get(0);
    let mut found = Vec::new();
    collect_indexes(&plan, &mut found);
    found
}

fn collect_indexes(node: &Value, found: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(name)) = map.get("Index Name") {
                found.push(name.clone());
            }
            map.values().for_each(|v| collect_indexes(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_indexes(v, found)),
        _ => {}
    }
}

/// The admission's parameters (`PgTaskStore::admit_as`) for a repeat of `m-777`.
fn admission_params() -> Vec<Box<Param>> {
    vec![
        Box::new(uuid::Uuid::new_v4()),
        Box::new("t-plan"),
        Box::new("p-plan"),
        Box::new("ag-plan"),
        Box::new("m-777"),
        Box::new("sha"),
        Box::new(uuid::Uuid::new_v4()),
        Box::new("wf-plan-new"),
        Box::new(serde_json::json!({})),
        Box::new(15.0f64),
        Box::new(3600.0f64),
    ]
}

#[tokio::test]
async fn identity_lookup_and_listing_use_their_own_indexes_without_statistics() {
    let db = TestDb::create().await;
    let mut client = db.client().await;
    q_a2a_gateway::store::migrate::run(&mut client)
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO a2a_tasks (task_id, tenant_id, principal_id, agent_id, message_id,
                                    content_sha256, context_id, workflow_id, message)
             SELECT gen_random_uuid(), 't-plan', 'p-plan', 'ag-plan', 'm-' || i, 'sha',
                    gen_random_uuid(), 'wf-plan-' || i, '{{}}'::jsonb
               FROM generate_series(1, {TASKS}) AS i"
        ))
        .await
        .unwrap();
    let [lookup, admit, page] = q_a2a_gateway::store::statements_for_plan_checks();
    let identity: [&Param; 4] = [&"t-plan", &"p-plan", &"ag-plan", &"m-777"];
    let admission = admission_params();
    let admission: Vec<&Param> = admission.iter().map(|p| p.as_ref()).collect();
    let listing: [&Param; 4] = [&"t-plan", &"p-plan", &"ag-plan", &51i64];
    for analysed in [false, true] {
        if analysed {
            client.batch_execute("ANALYZE a2a_tasks").await.unwrap();
        } else {
            let stats = db
                .count("SELECT count(*) FROM pg_stats WHERE tablename = 'a2a_tasks'")
                .await;
            assert_eq!(stats, 0, "the table must not have statistics yet");
        }
        assert_eq!(
            indexes_read(&client, &lookup, &identity).await,
            ["a2a_tasks_message_identity"],
            "identity lookup (analysed: {analysed})"
        );
        // The admission of a repeat finds the task through the identity's index only (and the
        // tombstone through its key), never through the listing index.
        let admitting = indexes_read(&client, &admit, &admission).await;
        assert!(
            admitting.contains(&"a2a_tasks_message_identity".to_string())
                && !admitting.contains(&"a2a_tasks_listing".to_string()),
            "admission (analysed: {analysed}): {admitting:?}"
        );
        // The page reads the listing index; its count is left to the planner (with
        // statistics, counting a table that is all this principal's is a sequential scan),
        // and reads no other index.
        let listing_read = indexes_read(&client, &page, &listing).await;
        assert!(
            listing_read.contains(&"a2a_tasks_listing".to_string())
                && listing_read.iter().all(|i| i == "a2a_tasks_listing"),
            "ListTasks page (analysed: {analysed}): {listing_read:?}"
        );
    }
    // They answer what they should: the lookup its task, the admission of a repeat the task
    // that holds the identity, the page 51 tasks each with the count of all of them.
    let found = client.query(&lookup, &identity).await.unwrap();
    assert_eq!(found.len(), 1);
    let admitted = client.query(&admit, &admission).await.unwrap();
    assert_eq!(admitted.len(), 1);
    assert_eq!(admitted[0].get::<_, &str>("admitted"), "existing");
    assert_eq!(admitted[0].get::<_, &str>("message_id"), "m-777");
    let rows = client.query(&page, &listing).await.unwrap();
    assert_eq!(rows.len(), 51);
    assert!(rows.iter().all(|r| r.get::<_, i64>("total") == TASKS));
}
