//! Answer correlation, where cards are looked for, and the delivery meaning of outbound
//! errors.

use super::*;
use serde_json::json;

fn task(v: Value) -> Task {
    serde_json::from_value(v).unwrap()
}

#[test]
fn task_in_another_context_is_uncorrelated() {
    let t = task(
        json!({"id": "t1", "contextId": "other", "status": {"state": "TASK_STATE_COMPLETED"}}),
    );
    let e = correlate_send(&SendMessageResponse::Task(t), "ctx").unwrap_err();
    assert_eq!(e.reason(), "uncorrelated");
    assert_eq!(e.delivery(), Delivery::MaybeSent);
}

#[test]
fn history_of_another_task_is_uncorrelated() {
    let t = task(
        json!({"id": "t1", "contextId": "ctx", "status": {"state": "TASK_STATE_SUBMITTED"},
        "history": [{"messageId": "m", "role": "ROLE_USER", "taskId": "t2", "contextId": "ctx",
                      "parts": [{"text": "x"}]}]}),
    );
    assert!(correlate_send(&SendMessageResponse::Task(t), "ctx").is_err());
}

#[test]
fn own_task_and_agent_message_correlate() {
    let t = task(
        json!({"id": "t1", "contextId": "ctx", "status": {"state": "TASK_STATE_SUBMITTED"},
        "history": [{"messageId": "m", "role": "ROLE_USER", "taskId": "t1", "contextId": "ctx",
                      "parts": [{"text": "x"}]}]}),
    );
    assert!(correlate_send(&SendMessageResponse::Task(t), "ctx").is_ok());
    let m: Message = serde_json::from_value(
        json!({"messageId": "r", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}),
    )
    .unwrap();
    assert!(correlate_send(&SendMessageResponse::Message(m), "ctx").is_ok());
}

fn urls(endpoint: &str) -> Vec<(String, bool)> {
    card_urls(&Url::parse(endpoint).unwrap())
        .into_iter()
        .map(|(u, c)| (u.to_string(), c))
        .collect()
}

#[test]
fn cards_are_looked_for_under_the_agent_then_at_the_origin() {
    assert_eq!(
        urls("https://q.example/v1/a2a/agents/ag-writer/rpc"),
        vec![
            (
                "https://q.example/v1/a2a/agents/ag-writer/.well-known/agent-card.json".into(),
                true
            ),
            (
                "https://q.example/.well-known/agent-card.json".into(),
                false
            ),
        ]
    );
    assert_eq!(
        urls("https://remote.example:8443/a2a/rpc?x=1"),
        vec![
            (
                "https://remote.example:8443/a2a/.well-known/agent-card.json".into(),
                true
            ),
            (
                "https://remote.example:8443/.well-known/agent-card.json".into(),
                false
            ),
        ]
    );
    // No agent path to derive: only the origin's public card.
    for endpoint in [
        "https://remote.example/rpc",
        "https://remote.example/a2a/jsonrpc",
    ] {
        assert_eq!(
            urls(endpoint),
            vec![(
                "https://remote.example/.well-known/agent-card.json".into(),
                false
            )],
            "{endpoint}"
        );
    }
}

#[test]
fn only_certain_non_delivery_allows_another_send() {
    let refused = OutboundError::Policy(PolicyRefusal {
        reason: "loopback",
        target: "127.0.0.1".into(),
    });
    assert_eq!(refused.delivery(), Delivery::NotSent);
    assert_eq!(
        OutboundError::ambiguous("timeout", "x").delivery(),
        Delivery::MaybeSent
    );
    let remote = OutboundError::Refused {
        reason: "remote_rpc_error",
        http_status: 200,
        rpc_code: Some(-32602),
        message: "bad".into(),
    };
    assert_eq!(remote.delivery(), Delivery::MaybeSent);
    assert_eq!(remote.to_json()["rpcCode"], -32602);
}
