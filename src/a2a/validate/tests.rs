//! SendMessage validation against the interoperability profile.

use super::*;

fn limits() -> LimitsConfig {
    LimitsConfig::default()
}

fn params(message: Value) -> Map<String, Value> {
    json!({"message": message}).as_object().unwrap().clone()
}

fn ok_message() -> Value {
    json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]})
}

fn code_of(p: Map<String, Value>) -> i32 {
    validate_send(&p, &limits()).unwrap_err().code
}

fn with(field: &str, value: Value) -> Map<String, Value> {
    let mut m = ok_message();
    m[field] = value;
    params(m)
}

#[test]
fn accepts_minimal_text_message() {
    let v = validate_send(&params(ok_message()), &limits()).unwrap();
    assert_eq!(v.message_id, "m-1");
    assert_eq!(v.texts(), vec!["hello"]);
    assert!(!v.return_immediately);
}

#[test]
fn accepts_sdk_style_configuration() {
    let mut p = params(ok_message());
    p.insert(
        "configuration".into(),
        json!({"acceptedOutputModes": ["text/markdown", "text/plain"], "returnImmediately": true, "historyLength": 2}),
    );
    let v = validate_send(&p, &limits()).unwrap();
    assert!(v.return_immediately);
    assert_eq!(v.history_length, Some(2));
}

#[test]
fn required_fields() {
    assert_eq!(code_of(Map::new()), -32602);
    assert_eq!(code_of(with("messageId", json!(""))), -32602);
    assert_eq!(code_of(with("messageId", json!(5))), -32602);
    assert_eq!(code_of(with("messageId", json!("x".repeat(257)))), -32602);
    assert_eq!(code_of(with("role", json!("ROLE_AGENT"))), -32602);
    assert_eq!(code_of(with("role", json!("ROLE_UNSPECIFIED"))), -32602);
    assert_eq!(code_of(with("parts", json!([]))), -32602);
    assert_eq!(code_of(with("parts", json!([{"text": 3}]))), -32602);
    assert_eq!(code_of(with("parts", json!([{"text": "  "}]))), -32602);
}

#[test]
fn limits_on_parts_and_characters() {
    let sixteen: Vec<Value> = (0..16).map(|_| json!({"text": "a"})).collect();
    assert!(validate_send(&with("parts", json!(sixteen)), &limits()).is_ok());
    let seventeen: Vec<Value> = (0..17).map(|_| json!({"text": "a"})).collect();
    assert_eq!(code_of(with("parts", json!(seventeen))), -32602);
    // 32,000 characters (multi-byte ones count once) pass; one more fails.
    let exact = "é".repeat(32_000);
    assert!(validate_send(&with("parts", json!([{"text": exact}])), &limits()).is_ok());
    let split = vec![
        json!({"text": "a".repeat(16_000)}),
        json!({"text": "b".repeat(16_001)}),
    ];
    assert_eq!(code_of(with("parts", json!(split))), -32602);
}

#[test]
fn non_text_parts_are_content_type_errors() {
    assert_eq!(
        code_of(with("parts", json!([{"url": "https://x/y.pdf"}]))),
        -32005
    );
    assert_eq!(code_of(with("parts", json!([{"raw": "aGk="}]))), -32005);
    assert_eq!(code_of(with("parts", json!([{"data": {"a": 1}}]))), -32005);
    assert_eq!(
        code_of(with("parts", json!([{"text": "x", "url": "https://x"}]))),
        -32005
    );
    assert_eq!(
        code_of(with(
            "parts",
            json!([{"text": "x", "mediaType": "image/png"}])
        )),
        -32005
    );
    assert!(validate_send(
        &with(
            "parts",
            json!([{"text": "x", "mediaType": "text/markdown"}])
        ),
        &limits()
    )
    .is_ok());
}

#[test]
fn unsupported_fields() {
    assert_eq!(code_of(with("taskId", json!("t-1"))), -32004);
    assert_eq!(code_of(with("contextId", json!("c-1"))), -32004);
    assert_eq!(code_of(with("referenceTaskIds", json!(["t-0"]))), -32004);
    assert_eq!(code_of(with("extensions", json!(["https://ext"]))), -32004);
    assert_eq!(code_of(with("metadata", json!({"k": "v"}))), -32004);
    assert_eq!(
        code_of(with("parts", json!([{"text": "x", "metadata": {"k": 1}}]))),
        -32004
    );
    let mut p = params(ok_message());
    p.insert("tenant".into(), json!("t-other"));
    assert_eq!(code_of(p), -32004);
    let mut p = params(ok_message());
    p.insert("metadata".into(), json!({"k": "v"}));
    assert_eq!(code_of(p), -32004);
}

#[test]
fn default_valued_fields_are_absent() {
    let mut m = ok_message();
    m["taskId"] = json!("");
    m["extensions"] = json!([]);
    m["metadata"] = json!({});
    let mut p = params(m);
    p.insert("tenant".into(), json!(""));
    p.insert("metadata".into(), json!({}));
    assert!(validate_send(&p, &limits()).is_ok());
}

#[test]
fn push_config_is_refused() {
    let mut p = params(ok_message());
    p.insert(
        "configuration".into(),
        json!({"taskPushNotificationConfig": {"url": "https://hook"}}),
    );
    assert_eq!(code_of(p), -32003);
}

#[test]
fn output_modes_must_allow_markdown() {
    let mut p = params(ok_message());
    p.insert(
        "configuration".into(),
        json!({"acceptedOutputModes": ["image/png"]}),
    );
    assert_eq!(code_of(p), -32005);
    let mut p = params(ok_message());
    p.insert("configuration".into(), json!({"historyLength": -1}));
    assert_eq!(code_of(p), -32602);
}

#[test]
fn content_hash_depends_on_content_not_id() {
    let a = validate_send(&params(ok_message()), &limits()).unwrap();
    let mut other_id = ok_message();
    other_id["messageId"] = json!("m-2");
    let b = validate_send(&params(other_id), &limits()).unwrap();
    assert_eq!(a.content_sha256(), b.content_sha256());
    let c = validate_send(&with("parts", json!([{"text": "hello!"}])), &limits()).unwrap();
    assert_ne!(a.content_sha256(), c.content_sha256());
}
