//! Answer correlation and the delivery meaning of outbound errors.

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
