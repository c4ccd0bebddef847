//! Metrics after a known sequence of calls (exact counters), W3C trace context reaching Q,
//! and no credential in the gateway's logs.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::metrics::metric;
use crate::support::{new_id, repo_path, Gateway, NO_RECONCILER, SERVICE_TOKEN};

const RPC_ROUTE: &str = "/v1/a2a/agents/{agent_id}/rpc";

/// `a2a_http_requests_total` of the RPC route for one method, HTTP status and JSON-RPC outcome.
fn rpc_requests(text: &str, rpc_method: &str, status: &str, rpc_code: &str) -> Option<f64> {
    metric(
        text,
        "a2a_http_requests_total",
        &[
            ("route", RPC_ROUTE),
            ("rpc_method", rpc_method),
            ("status", status),
            ("rpc_code", rpc_code),
        ],
    )
}

#[tokio::test]
async fn metrics_count_a_known_sequence_exactly() {
    // No reconciler: its background calls to Q would add to the counts (and it would resolve
    // the unresolved task the backlog gauge is expected to show).
    let gw = Gateway::start_with_env(NO_RECONCILER).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // 1 SendMessage that completes.
    let done = writer.send_text(&new_id(), "count me").await;
    assert_eq!(
        done.result()["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // 2 GetTask for an unknown task: -32001.
    for _ in 0..2 {
        let reply = writer.get_task(&new_id()).await;
        assert_eq!(reply.error_code(), Some(-32001));
    }
    // 1 unknown method: -32601.
    let reply = writer.rpc("tasks/get", json!({})).await;
    assert_eq!(reply.error_code(), Some(-32601));
    // 1 call without a token: HTTP 401, no JSON-RPC outcome.
    let reply = gw
        .post_raw(
            "ag-writer",
            &[("a2a-version", "1.0")],
            br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#.to_vec(),
        )
        .await;
    assert_eq!(reply.status, 401);
    // 1 retired route.
    assert_eq!(gw.request(Method::GET, "/v1/a2a/cards").await.status(), 410);
    // 1 SendMessage whose run creation fails ambiguously (5xx): the task waits for the
    // reconciler, and Q's error is counted as ambiguous.
    gw.upstream
        .faults(json!({"create_fail_500_before_commit": 1}))
        .await;
    let ambiguous = writer.send_text_immediately(&new_id(), "uncertain").await;
    ambiguous.result();

    let text = gw.metrics().await;
    let requests = |rpc_method, status, rpc_code| rpc_requests(&text, rpc_method, status, rpc_code);
    assert_eq!(requests("SendMessage", "200", "ok"), Some(2.0), "{text}");
    assert_eq!(requests("GetTask", "200", "-32001"), Some(2.0), "{text}");
    assert_eq!(requests("unknown", "200", "-32601"), Some(1.0), "{text}");
    assert_eq!(requests("", "401", ""), Some(1.0), "{text}");
    assert_eq!(
        metric(
            &text,
            "a2a_http_requests_total",
            &[
                ("route", "/v1/a2a/cards"),
                ("rpc_method", ""),
                ("status", "410"),
                ("rpc_code", ""),
            ],
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "a2a_http_request_duration_seconds_count",
            &[("route", RPC_ROUTE), ("rpc_method", "SendMessage")],
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "a2a_upstream_errors_total",
            &[("op", "create_run"), ("kind", "ambiguous")],
        ),
        Some(1.0),
        "{text}"
    );
    // No other upstream error happened.
    let upstream_errors: usize = text
        .lines()
        .filter(|l| l.starts_with("a2a_upstream_errors_total{"))
        .count();
    assert_eq!(upstream_errors, 1, "{text}");
    // Every call to Q is timed with its outcome: the failed create among them.
    assert_eq!(
        metric(
            &text,
            "a2a_upstream_request_duration_seconds_count",
            &[("op", "create_run"), ("outcome", "ambiguous")],
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "a2a_upstream_request_duration_seconds_count",
            &[("op", "create_run"), ("outcome", "ok")],
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "a2a_observer_lease_limit", &[("scope", "global")]),
        Some(256.0),
        "{text}"
    );

    // The backlog gauge (refreshed every 2 s) reaches the one unresolved task.
    let mut backlog = None;
    for _ in 0..40 {
        backlog = metric(&gw.metrics().await, "a2a_reconciler_backlog", &[]);
        if backlog == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(backlog, Some(1.0));
    // That task's run creation may or may not have reached Q: dispatch unknown.
    assert_eq!(
        metric(&gw.metrics().await, "a2a_tasks_dispatch_unknown", &[]),
        Some(1.0)
    );
    // Metrics are not served on the A2A listener.
    assert_eq!(gw.request(Method::GET, "/metrics").await.status(), 404);
}

fn trace_id_of(traceparent: &str) -> &str {
    traceparent.split('-').nth(1).unwrap()
}

fn span_id_of(traceparent: &str) -> &str {
    traceparent.split('-').nth(2).unwrap()
}

/// Q's calls since `before`, the change feeds' long-polls excepted: those belong to the
/// replica's followers, with their own trace context, not to any request.
async fn seen_since(gw: &Gateway, before: usize) -> Vec<Value> {
    gw.upstream.recent_calls().await[before..]
        .iter()
        .filter(|c| {
            !c["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/internal/v1/changes/"))
        })
        .cloned()
        .collect()
}

/// Where Q's record of its calls stands (an index for [`seen_since`]).
async fn seen_count(gw: &Gateway) -> usize {
    gw.upstream.recent_calls().await.len()
}

#[tokio::test]
async fn traceparent_reaches_q_on_every_call_of_the_request() {
    // No reconciler: its background calls carry their own trace context.
    let gw = Gateway::start_with_env(NO_RECONCILER).await;
    let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "trace me"}]}}});
    let before = seen_count(&gw).await;
    let reply = gw
        .post_raw(
            "ag-writer",
            &[
                ("authorization", "Bearer tok-alice"),
                ("a2a-version", "1.0"),
                ("traceparent", incoming),
            ],
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    assert_eq!(
        reply.result()["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let seen = seen_since(&gw, before).await;
    let paths: Vec<&str> = seen.iter().map(|s| s["path"].as_str().unwrap()).collect();
    // Introspection, agent access, run creation (its answer carries the evidence grant) and
    // the run's output; events and run reads too when the run is slower than the feed.
    assert!(paths.len() >= 4, "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with("/output")), "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with("/identity/introspect")));
    assert!(paths.contains(&"/internal/v1/runs"));
    for s in &seen {
        let tp = s["traceparent"]
            .as_str()
            .unwrap_or_else(|| panic!("no traceparent: {s}"));
        assert_eq!(trace_id_of(tp), "4bf92f3577b34da6a3ce929d0e0e4736", "{s}");
        // The gateway's own span is the parent, not the caller's.
        assert_ne!(span_id_of(tp), "00f067aa0ba902b7", "{s}");
        assert!(tp.starts_with("00-") && tp.ends_with("-01"));
    }
    let last = gw
        .upstream
        .admin(Method::GET, "/admin/last-traceparent", None)
        .await;
    assert_eq!(
        trace_id_of(last["traceparent"].as_str().unwrap()),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );

    // Without (or with a malformed) traceparent, each request starts one new trace, used on
    // all of its calls.
    // Tokens not used before: their introspection reaches Q within the request (a warm
    // GetTask asks Q nothing).
    for (header, token) in [
        (None, "Bearer tok-alice-wild"),
        (Some("00-XYZ-not-a-trace"), "Bearer tok-alice-read"),
    ] {
        let before = seen_count(&gw).await;
        let mut headers = vec![("authorization", token), ("a2a-version", "1.0")];
        if let Some(h) = header {
            headers.push(("traceparent", h));
        }
        let body =
            json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": new_id()}});
        let reply = gw
            .post_raw("ag-writer", &headers, serde_json::to_vec(&body).unwrap())
            .await;
        assert_eq!(reply.error_code(), Some(-32001));
        let seen = seen_since(&gw, before).await;
        assert!(!seen.is_empty());
        let traces: std::collections::BTreeSet<&str> = seen
            .iter()
            .map(|s| trace_id_of(s["traceparent"].as_str().unwrap()))
            .collect();
        assert_eq!(traces.len(), 1, "{seen:?}");
        let trace = *traces.iter().next().unwrap();
        assert_eq!(trace.len(), 32);
        assert_ne!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    }
}

#[tokio::test]
async fn logs_never_contain_a_credential() {
    let gw = Gateway::start_with_env(&[("RUST_LOG", "debug")]).await;
    let fixtures: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path("config/q-fixtures.json")).unwrap(),
    )
    .unwrap();
    let mut secrets: Vec<String> = fixtures["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_str().unwrap().to_string())
        .collect();
    secrets.push(fixtures["service_token"].as_str().unwrap().to_string());
    assert!(secrets.contains(&SERVICE_TOKEN.to_string()));
    let unknown = "tok-never-issued-7f3a";
    secrets.push(unknown.to_string());

    // Every token on the card and the RPC route, successes and refusals alike.
    for token in secrets.iter().filter(|t| t.starts_with("tok-")) {
        for agent in ["ag-writer", "ag-legacy", "ag-private"] {
            let agent = gw.caller(token).agent(agent);
            agent.card().await;
            agent.send_text_immediately(&new_id(), "log scan").await;
            agent.get_task(&new_id()).await;
        }
    }
    // Failure paths log errors: identity service down, run creation ambiguous, reads failing.
    gw.upstream.faults(json!({"introspect_fail_500": 1})).await;
    gw.caller("tok-never-issued-2")
        .agent("ag-writer")
        .send_text_immediately(&new_id(), "x")
        .await;
    gw.upstream
        .faults(json!({"create_fail_500_after_commit": 1, "read_fail_500": 2}))
        .await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // The send may fail here (that is the point: its failure is logged); a read follows.
    let sent = writer.send_text_immediately(&new_id(), "x").await;
    let task_id: String = gw
        .db
        .one("SELECT task_id::text FROM a2a_tasks LIMIT 1")
        .await;
    writer.get_task(&task_id).await;
    assert!(sent.status == 200, "{}", sent.body);
    // The service token as a caller's bearer token.
    gw.caller(SERVICE_TOKEN)
        .agent("ag-writer")
        .send_text_immediately(&new_id(), "x")
        .await;
    secrets.push("tok-never-issued-2".into());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let logs = gw.log_text();
    assert!(logs.lines().count() > 50, "the scan needs logs to scan");
    assert!(logs.contains("\"request_id\""), "request spans are logged");
    // The fields the request span gets after it starts (the trace id, then tenant and
    // principal in one record, then the JSON-RPC method) are on the lines logged inside it.
    assert!(
        logs.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .any(|line| {
                let span = &line["span"];
                span["tenant"].is_string()
                    && span["principal"].is_string()
                    && span["trace_id"].as_str().is_some_and(|t| t.len() == 32)
                    && span["rpc_method"] == "SendMessage"
            }),
        "no line logged inside a SendMessage request carries its span's recorded fields"
    );
    for secret in &secrets {
        assert!(
            !logs.contains(secret.as_str()),
            "{secret} appears in the gateway's logs"
        );
    }
}

/// A refusal of the caller's own request is counted, not logged at the shipped level: a
/// client repeating a bad version or asking for unknown tasks neither fills the logs nor
/// costs a log line per request.
#[tokio::test]
async fn refusals_of_the_callers_own_requests_are_counted_not_logged() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let get = br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#;
    for _ in 0..20 {
        let reply = gw
            .post_raw(
                "ag-writer",
                &[
                    ("authorization", "Bearer tok-alice"),
                    ("a2a-version", "0.3"),
                ],
                get.to_vec(),
            )
            .await;
        assert_eq!(reply.error_code(), Some(-32009), "{}", reply.body);
        assert_eq!(writer.get_task(&new_id()).await.error_code(), Some(-32001));
    }
    let text = gw.metrics().await;
    let refused = |rpc_code| rpc_requests(&text, "GetTask", "200", rpc_code);
    assert_eq!(refused("-32001"), Some(20.0), "{text}");
    assert_eq!(refused("-32009"), Some(20.0), "{text}");
    let logs = gw.log_text();
    assert!(
        logs.contains("gateway listening"),
        "the scan needs the gateway's logs"
    );
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("rpc error")).collect();
    assert!(lines.is_empty(), "refusals logged: {lines:?}");
}
