//! Fuzz target bodies for the gateway's parsers and validators.
//!
//! Each function takes arbitrary bytes, feeds them to one public parser of the gateway and
//! checks what must hold whatever the input: no panic, only the documented error codes, and
//! the invariants of anything accepted. The cargo-fuzz targets (`fuzz_targets/*.rs`) call
//! them under libFuzzer; `tests/it/fuzz_stable.rs` compiles this same file and runs it on stable
//! Rust with a seeded mutation driver, so both fuzz exactly the same checks.

use a2a::JsonRpcId;
use axum::http::{HeaderMap, HeaderValue};
use chrono::DateTime;
use q_a2a_gateway::a2a::cursor::{CursorCodec, CursorError};
use q_a2a_gateway::a2a::{envelope, sse, validate, version};
use q_a2a_gateway::config::LimitsConfig;
use q_a2a_gateway::error::RpcError;
use q_a2a_gateway::store::{ListFilter, ListPosition, Owner};
use serde_json::{json, Map, Value};

/// A target body: checks one input, panics on a finding.
pub type Target = fn(&[u8]);

/// Every target, by name (the names of `fuzz_targets/*.rs` and `fuzz/seeds/*`).
pub const TARGETS: &[(&str, Target)] = &[
    ("envelope", envelope),
    ("send_params", send_params),
    ("version", version),
    ("cursor", cursor),
    ("sse", sse),
];

/// The JSON-RPC envelope, then the method params it carries.
pub fn envelope(data: &[u8]) {
    match envelope::decode(data) {
        Ok(envelope) => {
            let value: Value = serde_json::from_slice(data).expect("a decoded body is JSON");
            assert_eq!(value["jsonrpc"], "2.0");
            assert_eq!(value["method"].as_str(), Some(&*envelope.method));
            let params = envelope.params().expect("a decoded envelope's params read");
            // The same parameters as a whole read of the body, the last of a repeated member.
            let expected = match value.get("params") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(p)) => p.clone(),
                Some(other) => panic!("decoded parameters that are not an object: {other}"),
            };
            assert_eq!(params, expected);
            check_send(&params);
            let _ = validate::refuse_tenant(&params);
            let _ = validate::history_length(params.get("historyLength"), "historyLength");
        }
        Err((id, error)) => {
            assert!(
                matches!(error.code, -32700 | -32600 | -32602),
                "undocumented envelope error {}",
                error.code
            );
            if serde_json::from_slice::<Value>(data).is_err() {
                assert_eq!(error.code, -32700);
                assert_eq!(id, JsonRpcId::Null);
            }
            serde_json::to_vec(&error.to_json()).expect("errors render");
        }
    }
}

/// SendMessage params: JSON objects as they are; anything else as the text of a message.
pub fn send_params(data: &[u8]) {
    let params = match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(params)) => params,
        _ => {
            let text = String::from_utf8_lossy(data);
            let id: String = text.chars().take(300).collect();
            let value = json!({"message": {"messageId": id, "role": "ROLE_USER",
                                           "parts": [{"text": text}]}});
            value.as_object().cloned().unwrap_or_default()
        }
    };
    check_send(&params);
}

/// A value that carries something (the profile treats `""`, `[]`, `{}`, null, false as absent).
fn is_set(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

fn check_send(params: &Map<String, Value>) {
    let limits = LimitsConfig::default();
    match validate::validate_send(params, &limits) {
        Ok(accepted) => {
            assert!(!accepted.parts.is_empty() && accepted.parts.len() <= limits.max_parts);
            let chars: usize = accepted.parts.iter().map(|p| p.text.chars().count()).sum();
            assert!(
                chars <= limits.max_text_chars,
                "{chars} characters accepted"
            );
            assert!(!accepted.message_id.is_empty());
            assert!(accepted.message_id.chars().count() <= validate::MAX_MESSAGE_ID_CHARS);
            // Nothing the profile refuses got through.
            let message = params["message"].as_object().expect("message is an object");
            for field in [
                "taskId",
                "contextId",
                "referenceTaskIds",
                "extensions",
                "metadata",
            ] {
                assert!(!is_set(message.get(field)), "message.{field} accepted");
            }
            for field in ["tenant", "metadata"] {
                assert!(!is_set(params.get(field)), "params.{field} accepted");
            }
            assert_eq!(message["role"], "ROLE_USER");
            // The content hash is stable, and the stored message validates to the same content.
            let again = validate::validate_send(params, &limits).expect("accepted twice");
            assert_eq!(accepted.content_sha256(), again.content_sha256());
            let stored = json!({"message": accepted.stored_message()});
            let reread = validate::validate_send(stored.as_object().unwrap(), &limits)
                .expect("the stored message is acceptable");
            assert_eq!(accepted.content_sha256(), reread.content_sha256());
        }
        Err(error) => assert!(
            matches!(error.code, -32602 | -32005 | -32004 | -32003),
            "undocumented validation error {}",
            error.code
        ),
    }
}

/// The `A2A-Version` header: only `1.0` and `1.0.<digits>` pass, and never two values.
pub fn version(data: &[u8]) {
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(version::HEADER, value.clone());
    if version::negotiate(&headers).is_ok() {
        let text = value.to_str().expect("an accepted version is text").trim();
        let patch_ok = text.strip_prefix("1.0.").is_some_and(|p| {
            !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit())
        });
        assert!(text == "1.0" || patch_ok, "accepted {text:?}");
    }
    headers.append(version::HEADER, value);
    assert!(version::negotiate(&headers).is_err(), "two values accepted");
}

fn owner(principal: &str) -> Owner {
    Owner {
        tenant_id: "t-acme".into(),
        principal_id: principal.into(),
        agent_id: "ag-writer".into(),
    }
}

/// ListTasks page tokens: arbitrary strings never decode unless they are exactly what the
/// codec issued; issued tokens round-trip; any single-byte change is refused; another caller's
/// token is foreign.
pub fn cursor(data: &[u8]) {
    let codec = CursorCodec::new(b"fuzz-cursor-key");
    let filter = ListFilter::default();
    let alice = owner("p-alice");
    let token = String::from_utf8_lossy(data);
    if let Ok(position) = codec.decode(&token, &alice, &filter) {
        assert_eq!(
            codec.encode(&alice, &filter, position),
            token,
            "non-canonical token"
        );
    }
    // Structure-aware half: a position from the bytes.
    if data.len() < 26 {
        return;
    }
    let micros = i64::from_le_bytes(data[0..8].try_into().unwrap()) % 8_000_000_000_000_000;
    let Some(status_timestamp) = DateTime::from_timestamp_micros(micros) else {
        return;
    };
    let position = ListPosition {
        status_timestamp,
        task_id: uuid::Uuid::from_bytes(data[8..24].try_into().unwrap()),
    };
    let issued = codec.encode(&alice, &filter, position);
    assert_eq!(codec.decode(&issued, &alice, &filter), Ok(position));
    assert_eq!(
        codec.decode(&issued, &owner("p-bob"), &filter),
        Err(CursorError::Foreign)
    );
    let mut mutated = issued.clone().into_bytes();
    let at = data[24] as usize % mutated.len();
    if mutated[at] != data[25] {
        mutated[at] = data[25];
        let mutated = String::from_utf8_lossy(&mutated);
        assert!(
            codec.decode(&mutated, &alice, &filter).is_err(),
            "a token with byte {at} changed was accepted"
        );
    }
}

/// SSE frames: one `data:` line holding one JSON-RPC response, whatever the payload holds
/// (newlines, `\r`, "\n\ndata:" look-alikes), and it parses back to the same value.
pub fn sse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let result = serde_json::from_slice::<Value>(data).unwrap_or_else(|_| json!(text));
    let id = if data.first().is_some_and(|b| b % 2 == 0) {
        JsonRpcId::String(text.chars().take(64).collect())
    } else {
        JsonRpcId::Number(data.len() as i64)
    };
    let frame = sse::result_frame(&id, &result);
    let parsed = single_data_line(&frame, "data: ");
    // serde_json's default float parsing may move a float by one ulp on a re-parse; compare
    // with the payload as the same parser reads it back.
    let reread: Value = serde_json::from_str(&result.to_string()).unwrap();
    assert_eq!(parsed["result"], reread);
    assert_eq!(parsed["id"], json!(id));

    let error = RpcError::invalid_field(&text, text.to_string());
    let frame = sse::error_frame(&id, &error);
    let parsed = single_data_line(&frame, "event: error\ndata: ");
    assert_eq!(parsed["error"], error.to_json());
}

fn single_data_line(frame: &[u8], prefix: &str) -> Value {
    let frame = std::str::from_utf8(frame).expect("frames are UTF-8");
    let body = frame
        .strip_prefix(prefix)
        .and_then(|f| f.strip_suffix("\n\n"))
        .expect("one frame");
    assert!(
        !body.contains('\n') && !body.contains('\r'),
        "a line break inside a frame"
    );
    serde_json::from_str(body).expect("the data line is JSON")
}
