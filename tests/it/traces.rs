//! OpenTelemetry traces exported over OTLP to a receiver written for the test: the inbound
//! request span continues the caller's `traceparent`, the calls to Q and the task store's
//! queries are its children, Q receives the context of the call span that made each request,
//! and no attribute carries a token or the message text.

use std::time::Duration;

use serde_json::json;

use crate::support::otlp::{OtlpReceiver, ReceivedSpan};
use crate::support::{new_id, wait_until, Gateway, CURSOR_KEY, SERVICE_TOKEN};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const TEXT: &str = "confidential-prompt-6a1f";

#[tokio::test]
async fn spans_join_the_callers_trace_and_reach_q_without_secrets() {
    let receiver = OtlpReceiver::start().await;
    let gw = Gateway::start_with_env(&[
        ("Q_A2A_TRACES_OTLP_ENDPOINT", &receiver.url),
        ("Q_A2A_TRACES_SERVICE_NAME", "gateway-under-test"),
        // The SDK's batch delay, short so the test need not wait 5 s.
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ])
    .await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": TEXT}]}}});
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/a2a/agents/ag-writer/rpc", gw.url))
        .bearer_auth("tok-alice")
        .header("A2A-Version", "1.0")
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer: serde_json::Value = answer.json().await.unwrap();
    assert!(answer["result"]["task"].is_object(), "{answer}");

    let of_trace = || -> Vec<ReceivedSpan> {
        receiver
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == TRACE_ID)
            .collect()
    };
    wait_until(
        "the request, Q call and query spans exported",
        Duration::from_secs(15),
        async || {
            let spans = of_trace();
            ["request", "q.call", "db.admit"]
                .iter()
                .all(|name| spans.iter().any(|s| s.name == *name))
        },
    )
    .await;
    let spans = of_trace();
    let request: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "request").collect();
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request.parent_span_id, CALLER_SPAN, "joined to the caller");
    assert_eq!(request.service, "gateway-under-test");
    for span in spans.iter().filter(|s| s.name != "request") {
        assert_eq!(
            span.parent_span_id, request.span_id,
            "{} is a child of the request span",
            span.name
        );
    }
    let q_calls: Vec<&str> = spans
        .iter()
        .filter(|s| s.name == "q.call")
        .map(|s| s.span_id.as_str())
        .collect();
    assert!(spans.iter().any(|s| s.name == "q.call"
        && s.attributes
            .iter()
            .any(|(k, v)| k == "op" && v == "create_run")));

    // Q received each call's own context: the trace, and the q.call span as parent.
    let seen = gw.upstream.recent_calls().await;
    let ours: Vec<String> = seen
        .iter()
        .filter_map(|c| c["traceparent"].as_str())
        .filter(|t| t.contains(TRACE_ID))
        .map(str::to_owned)
        .collect();
    assert!(!ours.is_empty(), "{seen:?}");
    for traceparent in &ours {
        let parent = traceparent.split('-').nth(2).unwrap();
        assert!(
            q_calls.contains(&parent),
            "{traceparent} names no q.call span"
        );
    }

    // Nothing secret in any exported span.
    let exported = format!("{:?}", receiver.spans());
    for secret in ["tok-alice", SERVICE_TOKEN, CURSOR_KEY, TEXT] {
        assert!(!exported.contains(secret), "{secret} in an exported span");
    }
}
