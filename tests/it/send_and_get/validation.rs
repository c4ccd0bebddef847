//! Every SendMessage the profile refuses gets its documented code and writes nothing.

use serde_json::{json, Value};

use crate::support::{new_id, Gateway};

/// Every rejection in the profile, each with its documented code, and not one row written.
#[tokio::test]
async fn refused_messages_write_nothing() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let base = || json!({"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "hello"}]});
    let with = |key: &str, value: Value| {
        let mut m = base();
        m[key] = value;
        json!({"message": m})
    };
    let many: Vec<Value> = (0..17).map(|_| json!({"text": "p"})).collect();
    let cases: Vec<(&str, Value, i64)> = vec![
        ("no message", json!({}), -32602),
        ("message not object", json!({"message": "hi"}), -32602),
        (
            "no messageId",
            json!({"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}),
            -32602,
        ),
        (
            "no role",
            json!({"message": {"messageId": new_id(), "parts": [{"text": "x"}]}}),
            -32602,
        ),
        ("agent role", with("role", json!("ROLE_AGENT")), -32602),
        ("no parts", with("parts", json!([])), -32602),
        ("17 parts", with("parts", json!(many)), -32602),
        (
            "32,001 characters",
            with(
                "parts",
                json!([{"text": "a".repeat(16_000)}, {"text": "b".repeat(16_001)}]),
            ),
            -32602,
        ),
        (
            "url part",
            with("parts", json!([{"url": "https://files.example/x.pdf"}])),
            -32005,
        ),
        (
            "raw part",
            with(
                "parts",
                json!([{"raw": "aGVsbG8=", "mediaType": "application/octet-stream"}]),
            ),
            -32005,
        ),
        (
            "data part",
            with("parts", json!([{"data": {"k": 1}}])),
            -32005,
        ),
        (
            "image media type",
            with("parts", json!([{"text": "x", "mediaType": "image/png"}])),
            -32005,
        ),
        (
            "taskId",
            with("taskId", json!("6f1c0000-0000-0000-0000-000000000000")),
            -32004,
        ),
        ("contextId", with("contextId", json!("ctx-1")), -32004),
        (
            "referenceTaskIds",
            with("referenceTaskIds", json!(["t-0"])),
            -32004,
        ),
        (
            "extensions",
            with("extensions", json!(["https://ext.example/v1"])),
            -32004,
        ),
        (
            "message metadata",
            with("metadata", json!({"source": "cli"})),
            -32004,
        ),
        (
            "tenant",
            json!({"message": base(), "tenant": "t-globex"}),
            -32004,
        ),
        (
            "push config",
            json!({"message": base(), "configuration": {"taskPushNotificationConfig": {"url": "https://client.example/hook"}}}),
            -32003,
        ),
        (
            "output modes",
            json!({"message": base(), "configuration": {"acceptedOutputModes": ["image/png"]}}),
            -32005,
        ),
        (
            "returnImmediately type",
            json!({"message": base(), "configuration": {"returnImmediately": "yes"}}),
            -32602,
        ),
    ];
    for (name, params, code) in cases {
        let reply = writer.send(params).await;
        assert_eq!(reply.status, 200, "{name}");
        assert_eq!(reply.error_code(), Some(code), "{name}: {}", reply.body);
        let data = &reply.body["error"]["data"];
        assert_eq!(
            data[0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{name}"
        );
        assert_eq!(data[0]["domain"], "a2a-protocol.org", "{name}");
        if code == -32602 {
            assert_eq!(
                data[1]["@type"], "type.googleapis.com/google.rpc.BadRequest",
                "{name}"
            );
        }
    }
    assert_eq!(gw.db.task_count().await, 0);
    assert!(gw.upstream.runs(None).await.is_empty(), "no run reached Q");
}
