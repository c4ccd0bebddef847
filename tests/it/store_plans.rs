//! The store's hot statements are planned on the index they were written for whatever the
//! table's statistics say: a table loaded in one go and never analysed (autovacuum off, as on
//! this machine's PostgreSQL, or not yet run) must not turn the lookup of a repeated messageId
//! into a scan of every task of the principal.

use serde_json::Value;

use crate::support::TestDb;

const TASKS: i64 = 20_000;

/// The index each statement's plan reads, from `EXPLAIN (FORMAT JSON)`.
async fn indexes_read(client: &tokio_postgres::Client, sql: &str, params: usize) -> Vec<String> {
    let args = ["t-plan", "p-plan", "ag-plan", "m-777"];
    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        args[..params].iter().map(|a| a as _).collect();
    let row = client
        .query_one(&format!("EXPLAIN (FORMAT JSON) {sql}"), &refs)
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
    let [lookup, page, count] = q_a2a_gateway::store::statements_for_plan_checks(50);
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
            indexes_read(&client, &lookup, 4).await,
            ["a2a_tasks_message_identity"],
            "identity lookup (analysed: {analysed})"
        );
        assert_eq!(
            indexes_read(&client, &page, 3).await,
            ["a2a_tasks_listing"],
            "ListTasks page (analysed: {analysed})"
        );
    }
    // The count is left to the planner (with statistics, counting a table that is all this
    // principal's is a sequential scan); it and the lookup answer what they should.
    let found = client
        .query(&lookup, &[&"t-plan", &"p-plan", &"ag-plan", &"m-777"])
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    let counted: i64 = client
        .query_one(&count, &[&"t-plan", &"p-plan", &"ag-plan"])
        .await
        .unwrap()
        .get(0);
    assert_eq!(counted, TASKS);
}
