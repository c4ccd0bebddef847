//! What one tenant can make the gateway write and hold: a delegation's row is rewritten only
//! when it changed and its stored result is bounded; registrations stop at the quota; calls in
//! flight per tenant are capped before anything is written, and one principal holds at most
//! its share of them; old rows are removed by the
//! reconciler leader; and errors never show a query string or the address a name resolved to.

use std::time::Duration;

use futures_util::future::join_all;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::outbound::{id_of, OutboundGateway, ADMIN};
use crate::support::python::Remote;

/// Counts row writes (inserts and updates) and their bytes on the outbound tables, from now on.
async fn count_writes(gw: &OutboundGateway) {
    gw.db
        .client()
        .await
        .batch_execute(
            "CREATE TABLE test_writes (tbl text PRIMARY KEY, n bigint NOT NULL, bytes bigint NOT NULL);
             CREATE FUNCTION test_count_write() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               INSERT INTO test_writes VALUES (TG_TABLE_NAME, 1, pg_column_size(NEW))
               ON CONFLICT (tbl) DO UPDATE
                 SET n = test_writes.n + 1, bytes = test_writes.bytes + EXCLUDED.bytes;
               RETURN NULL;
             END $$;
             CREATE TRIGGER test_count_write AFTER INSERT OR UPDATE ON a2a_delegations
               FOR EACH ROW EXECUTE FUNCTION test_count_write();
             CREATE TRIGGER test_count_write AFTER INSERT OR UPDATE ON a2a_remote_agents
               FOR EACH ROW EXECUTE FUNCTION test_count_write();",
        )
        .await
        .unwrap();
}

/// Row writes and their bytes on `table` since [`count_writes`].
async fn writes(gw: &OutboundGateway, table: &str) -> (i64, i64) {
    let row = gw
        .db
        .client()
        .await
        .query_opt("SELECT n, bytes FROM test_writes WHERE tbl = $1", &[&table])
        .await
        .unwrap();
    row.map_or((0, 0), |r| (r.get(0), r.get(1)))
}

#[tokio::test]
async fn a_working_remote_task_is_polled_often_and_written_only_when_it_changes() {
    let gw = OutboundGateway::start(&[]).await;
    // The remote task stays WORKING for 3 s: a dozen reads at the 250 ms poll interval.
    let remote = Remote::start(&["--work", "3"]).await;
    let reg = id_of(&gw.register("W", &remote.rpc_url(), None).await);
    count_writes(&gw).await;

    let (status, v) = gw.delegate("slow-work-1", &reg, "Take your time").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    let polls = remote.count("GetTask").await;
    let (rows, bytes) = writes(&gw, "a2a_delegations").await;
    eprintln!("delegation: {polls} GetTask reads, {rows} row writes, {bytes} bytes");
    assert!(polls >= 8, "the task was read {polls} times");
    // The insert, the first answer, at most one change of state while working, the end.
    assert!(rows <= 4, "{rows} row writes for {polls} reads");
}

#[tokio::test]
async fn a_large_result_is_stored_bounded_and_answered_whole_once() {
    let gw = OutboundGateway::start(&[("Q_A2A_OUTBOUND_MAX_STORED_RESULT_BYTES", "400")]).await;
    let remote = Remote::start(&[]).await;
    let reg = id_of(&gw.register("R", &remote.rpc_url(), None).await);
    let text = "x".repeat(2_000);

    let (status, v) = gw.delegate("big-1", &reg, &text).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert!(
        v["result"]["task"]["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains(&text),
        "the request that received the result answers with all of it"
    );

    let stored: i64 = gw
        .db
        .one("SELECT octet_length(result::text)::bigint FROM a2a_delegations WHERE task_id = 'big-1'")
        .await;
    assert!(stored <= 400, "stored {stored} bytes");
    let (_, again) = gw.delegate("big-1", &reg, &text).await;
    assert_eq!(again["status"], "completed", "{again}");
    let result = &again["result"];
    assert_eq!(result["task"]["id"], v["remoteTaskId"], "{again}");
    assert_eq!(result["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(result["truncated"]["limitBytes"], 400, "{again}");
    assert!(result["truncated"]["bytes"].as_u64().unwrap() > 2_000);
    assert_eq!(remote.count("SendMessage").await, 1);
}

#[tokio::test]
async fn registrations_stop_at_the_quota_even_when_created_at_once() {
    let gw = OutboundGateway::start(&[("Q_A2A_OUTBOUND_MAX_REGISTRATIONS", "3")]).await;
    let endpoint = "http://127.0.0.1:9/a2a/rpc";
    gw.register("one", endpoint, None).await;
    gw.register("two", endpoint, None).await;
    let answers =
        join_all((0..4).map(|n| {
            gw.post_registration(json!({"name": format!("more-{n}"), "endpoint": endpoint}))
        }))
        .await;
    let created = answers.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(created, 1, "{answers:?}");
    for (status, v) in answers.iter().filter(|(s, _)| *s != 201) {
        assert_eq!(*status, 409, "{v}");
        assert_eq!(v["error"], "registration_quota_exceeded", "{v}");
    }
    let rows = gw.db.count("SELECT count(*) FROM a2a_remote_agents").await;
    assert_eq!(rows, 3);
    let (_, list) = gw
        .call(Method::GET, "/v1/a2a/agents", Some(ADMIN), None)
        .await;
    assert_eq!(list["agents"].as_array().unwrap().len(), 3);
}

/// A POST as [`ADMIN`]: the status, the Retry-After header and the JSON body.
async fn post(
    gw: &OutboundGateway,
    path: &str,
    body: Option<Value>,
) -> (u16, Option<String>, Value) {
    post_as(gw, ADMIN, path, body).await
}

/// A POST as `token`: the status, the Retry-After header and the JSON body.
async fn post_as(
    gw: &OutboundGateway,
    token: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Option<String>, Value) {
    let mut request = gw.http(Method::POST, path).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, body)
}

#[tokio::test]
async fn a_tenant_flooding_delegations_and_discovery_is_capped_before_anything_is_written() {
    let gw = OutboundGateway::start(&[
        ("Q_A2A_OUTBOUND_TENANT_DELEGATIONS", "2"),
        ("Q_A2A_OUTBOUND_PRINCIPAL_DELEGATIONS", "2"),
        ("Q_A2A_OUTBOUND_TENANT_DISCOVERIES", "1"),
        ("Q_A2A_OUTBOUND_PRINCIPAL_DISCOVERIES", "1"),
    ])
    .await;
    let remote = Remote::start(&["--mode", "slow", "--delay", "3", "--card-delay", "2"]).await;
    let reg = id_of(&gw.register("S", &remote.rpc_url(), None).await);
    count_writes(&gw).await;

    let flood = 12;
    let answers = join_all((0..flood).map(|n| {
        let body = json!({"taskId": format!("flood-{n}"), "agentId": reg, "text": "hello"});
        post(&gw, "/v1/a2a/tasks", Some(body))
    }))
    .await;
    let served = answers.iter().filter(|(s, _, _)| *s == 200).count();
    assert_eq!(served, 2, "{answers:?}");
    for (status, retry_after, v) in answers.iter().filter(|(s, _, _)| *s != 200) {
        assert_eq!(*status, 429, "{v}");
        assert_eq!(v["error"], "tenant_concurrency_limit", "{v}");
        assert!(retry_after.is_some(), "429 without Retry-After");
    }
    let rows = gw.db.count("SELECT count(*) FROM a2a_delegations").await;
    assert_eq!(rows, 2, "refused delegations wrote nothing");
    assert_eq!(remote.count("SendMessage").await, 2);
    let (writes_d, bytes_d) = writes(&gw, "a2a_delegations").await;

    let discover = format!("/v1/a2a/agents/{reg}/discover");
    let discoveries = join_all((0..5).map(|_| post(&gw, &discover, None))).await;
    let discovered = discoveries.iter().filter(|(s, _, _)| *s == 200).count();
    assert_eq!(discovered, 1, "{discoveries:?}");
    for (status, retry_after, v) in discoveries.iter().filter(|(s, _, _)| *s != 200) {
        assert_eq!(*status, 429, "{v}");
        assert!(retry_after.is_some());
    }
    let (writes_r, bytes_r) = writes(&gw, "a2a_remote_agents").await;
    eprintln!(
        "flood of {flood} delegations: {rows} rows, {writes_d} row writes, {bytes_d} bytes; \
         5 discoveries: {writes_r} row writes, {bytes_r} bytes"
    );
    assert_eq!(writes_r, 1);

    // The places are given back: the next delegation goes through.
    let (status, v) = gw.delegate("after-flood", &reg, "hello").await;
    assert_eq!(status, 200, "{v}");
}

/// One principal of a tenant (Alice) saturating her share of its outbound places leaves the
/// rest to the tenant's others (Bob): her extra delegations and discoveries are refused with
/// 429 `principal_concurrency_limit` before anything is written, while Bob's go through.
#[tokio::test]
async fn one_principal_holds_at_most_its_share_of_its_tenants_outbound_calls() {
    let gw = OutboundGateway::start(&[
        ("Q_A2A_OUTBOUND_TENANT_DELEGATIONS", "4"),
        ("Q_A2A_OUTBOUND_PRINCIPAL_DELEGATIONS", "2"),
        ("Q_A2A_OUTBOUND_TENANT_DISCOVERIES", "2"),
        ("Q_A2A_OUTBOUND_PRINCIPAL_DISCOVERIES", "1"),
    ])
    .await;
    let remote = Remote::start(&["--mode", "slow", "--delay", "3", "--card-delay", "3"]).await;
    let reg = id_of(&gw.register("S", &remote.rpc_url(), None).await);
    count_writes(&gw).await;
    let delegation = |task: String| json!({"taskId": task, "agentId": reg, "text": "hello"});
    let tasks = "/v1/a2a/tasks";

    // Alice (p-alice, t-acme) sends six at once: two take her share and stay at the remote
    // for 3 s, the other four are refused at once.
    let alice = join_all((0..6).map(|n| post(&gw, tasks, Some(delegation(format!("alice-{n}"))))));
    let bob = async {
        crate::support::wait_until(
            "Alice's share of delegations to reach the remote",
            Duration::from_secs(5),
            async || remote.count("SendMessage").await >= 2,
        )
        .await;
        // While hers are in flight, Bob (p-bob, same tenant) gets the rest of the tenant's.
        join_all(
            (0..2).map(|n| post_as(&gw, "tok-bob", tasks, Some(delegation(format!("bob-{n}"))))),
        )
        .await
    };
    let (alice, bob) = tokio::join!(alice, bob);
    let served = alice.iter().filter(|(s, _, _)| *s == 200).count();
    assert_eq!(served, 2, "Alice holds at most her share: {alice:?}");
    for (status, retry_after, v) in alice.iter().filter(|(s, _, _)| *s != 200) {
        assert_eq!(*status, 429, "{v}");
        assert_eq!(v["error"], "principal_concurrency_limit", "{v}");
        assert!(retry_after.is_some(), "429 without Retry-After");
    }
    for (status, _, v) in &bob {
        assert_eq!(
            *status, 200,
            "Bob is not refused while Alice is saturated: {bob:?}"
        );
        assert_eq!(v["status"], "completed", "{v}");
    }
    let rows = |principal: &'static str| {
        let db = &gw.db;
        async move {
            db.count(&format!(
                "SELECT count(*) FROM a2a_delegations WHERE principal_id = '{principal}'"
            ))
            .await
        }
    };
    assert_eq!(
        rows("p-alice").await,
        2,
        "Alice's refused delegations wrote nothing"
    );
    assert_eq!(rows("p-bob").await, 2);
    assert_eq!(
        remote.count("SendMessage").await,
        4,
        "refused ones sent nothing"
    );

    // Discoveries: Alice's share is one; Bob's admin token discovers while hers is in flight.
    let discover = format!("/v1/a2a/agents/{reg}/discover");
    let alice = join_all((0..3).map(|_| post(&gw, &discover, None)));
    let bob = async {
        // Alice's three are answered or in flight once one of them holds her place.
        tokio::time::sleep(Duration::from_millis(500)).await;
        post_as(&gw, "tok-bob-admin", &discover, None).await
    };
    let (alice, bob) = tokio::join!(alice, bob);
    let discovered = alice.iter().filter(|(s, _, _)| *s == 200).count();
    assert_eq!(discovered, 1, "{alice:?}");
    for (status, retry_after, v) in alice.iter().filter(|(s, _, _)| *s != 200) {
        assert_eq!(*status, 429, "{v}");
        assert_eq!(v["error"], "principal_concurrency_limit", "{v}");
        assert!(retry_after.is_some());
    }
    assert_eq!(
        bob.0, 200,
        "Bob discovers while Alice is saturated: {bob:?}"
    );
    let (card_writes, _) = writes(&gw, "a2a_remote_agents").await;
    assert_eq!(card_writes, 2, "only the two discoveries served wrote");

    let metrics = gw.metrics().await;
    for calls in ["delegations", "discoveries"] {
        let line = format!("a2a_outbound_refusals_total{{calls=\"{calls}\",scope=\"principal\"}}");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(&line) && !l.ends_with(" 0")),
            "{line} counted: {metrics}"
        );
    }
}

#[tokio::test]
async fn old_delegations_and_cards_are_removed_and_younger_ones_kept() {
    let gw = OutboundGateway::start(&[
        ("Q_A2A_RECONCILER_ENABLED", "true"),
        ("Q_A2A_RECONCILER_INTERVAL_MS", "200"),
        ("Q_A2A_RETENTION_DELEGATIONS_SECONDS", "86400"),
        ("Q_A2A_RETENTION_DISCOVERED_CARDS_SECONDS", "86400"),
    ])
    .await;
    let remote = Remote::start(&[]).await;
    let reg = id_of(&gw.register("R", &remote.rpc_url(), None).await);
    for task in ["old-done", "old-sending", "young-unknown", "young-sending"] {
        let (status, v) = gw.delegate(task, &reg, "hi").await;
        assert_eq!(status, 200, "{v}");
    }
    let (status, _) = gw.discover(&reg).await;
    assert_eq!(status, 200);
    // Aged and put in the states a crash or an ambiguous send leaves.
    gw.db
        .client()
        .await
        .batch_execute(
            "UPDATE a2a_delegations SET updated_at = now() - interval '2 days'
               WHERE task_id = 'old-done';
             UPDATE a2a_delegations SET outcome = 'sending', updated_at = now() - interval '2 days'
               WHERE task_id = 'old-sending';
             UPDATE a2a_delegations SET outcome = 'unknown', status = 'unknown',
               updated_at = now() - interval '23 hours' WHERE task_id = 'young-unknown';
             UPDATE a2a_delegations SET outcome = 'sending', updated_at = now() - interval '23 hours'
               WHERE task_id = 'young-sending';
             UPDATE a2a_remote_agents SET discovered_at = now() - interval '2 days';",
        )
        .await
        .unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let old = gw
            .db
            .count("SELECT count(*) FROM a2a_delegations WHERE task_id LIKE 'old-%'")
            .await;
        let cards = gw
            .db
            .count("SELECT count(*) FROM a2a_remote_agents WHERE discovered_card IS NOT NULL")
            .await;
        if old == 0 && cards == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{old} old rows, {cards} cards left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let young = gw
        .db
        .count("SELECT count(*) FROM a2a_delegations WHERE task_id LIKE 'young-%'")
        .await;
    assert_eq!(
        young, 2,
        "rows younger than the window stay, whatever their outcome"
    );
    let (status, v) = gw.registration(&reg).await;
    assert_eq!(status, 200, "the registration stays");
    assert_eq!(v["discoveredCard"], Value::Null);
}

#[tokio::test]
async fn errors_show_neither_the_query_string_nor_the_address_a_name_resolved_to() {
    // Only 127.0.0.2 is allowed: `localhost` resolves to refused loopback addresses, and
    // 127.0.0.2 refuses the connection.
    let gw = OutboundGateway::start(&[("Q_A2A_OUTBOUND_ALLOW_CIDRS", "127.0.0.2/32")]).await;
    let secret = "secret-in-query";
    let mut shown = Vec::new();

    let (status, v) = gw
        .post_registration(
            json!({"name": "P", "endpoint": format!("http://10.1.2.3/rpc?token={secret}")}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    shown.push(v);

    let named = id_of(
        &gw.register(
            "N",
            &format!("http://localhost:9/a2a/rpc?token={secret}"),
            None,
        )
        .await,
    );
    let (status, v) = gw.delegate("named-1", &named, "hi").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["error"]["reason"], "loopback", "{v}");
    shown.push(v);
    let (status, v) = gw.discover(&named).await;
    assert_eq!(status, 502, "{v}");
    shown.push(v);

    let closed = id_of(
        &gw.register(
            "C",
            &format!("http://127.0.0.2:9/a2a/rpc?token={secret}"),
            None,
        )
        .await,
    );
    let (status, v) = gw.delegate("closed-1", &closed, "hi").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["error"]["reason"], "connect", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.2:9/a2a/rpc"),
        "{v}"
    );
    shown.push(v);
    let (_, v) = gw.discover(&closed).await;
    shown.push(v);

    let stored: String = gw
        .db
        .one("SELECT coalesce(string_agg(error::text, ' '), '') FROM a2a_delegations")
        .await;
    for v in shown.iter().map(Value::to_string).chain([stored]) {
        assert!(!v.contains(secret), "a query string is shown: {v}");
        assert!(
            !v.contains("127.0.0.1") && !v.contains("::1"),
            "a resolved address is shown: {v}"
        );
    }
}

/// The per-tenant caps hold for the deployment: a delegation in flight on one replica takes
/// the tenant's only place on the other too, and gives it back when it ends.
#[tokio::test]
async fn the_tenant_cap_holds_across_replicas() {
    let cap = [
        ("Q_A2A_OUTBOUND_TENANT_DELEGATIONS", "1"),
        ("Q_A2A_OUTBOUND_PRINCIPAL_DELEGATIONS", "1"),
    ];
    let gw = OutboundGateway::start(&cap).await;
    let replica = gw.start_outbound_replica(&cap).await;
    let remote = Remote::start(&["--mode", "slow", "--delay", "3"]).await;
    let reg = id_of(&gw.register("S", &remote.rpc_url(), None).await);

    let first = {
        let body = json!({"taskId": "across-1", "agentId": reg, "text": "hello"});
        let gw_url = gw.url.clone();
        tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(format!("{gw_url}/v1/a2a/tasks"))
                .bearer_auth(ADMIN)
                .json(&body)
                .send()
                .await
                .unwrap();
            response.status().as_u16()
        })
    };
    // Once the first is in flight, the replica refuses the tenant's second before writing it.
    crate::support::wait_until(
        "the first delegation to reach the remote",
        Duration::from_secs(5),
        async || remote.count("SendMessage").await == 1,
    )
    .await;
    let on_replica = |task: &'static str| {
        let body = json!({"taskId": task, "agentId": reg, "text": "hello"});
        reqwest::Client::new()
            .post(format!("{}/v1/a2a/tasks", replica.url))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
    };
    let refused = on_replica("across-2").await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().get("retry-after").is_some());
    let v: Value = refused.json().await.unwrap();
    assert_eq!(v["error"], "tenant_concurrency_limit", "{v}");
    assert_eq!(
        gw.db
            .count("SELECT count(*) FROM a2a_delegations WHERE task_id = 'across-2'")
            .await,
        0,
        "the refused delegation wrote nothing"
    );

    assert_eq!(first.await.unwrap(), 200);
    // The place is given back across replicas once the first ended.
    let mut status = 0;
    for _ in 0..20 {
        status = on_replica("across-3").await.unwrap().status().as_u16();
        if status != 429 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200);
}
