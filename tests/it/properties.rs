//! Property tests of the message validator and the ListTasks page tokens, over the library's
//! public functions (no processes): what the profile refuses is refused whatever else the
//! message holds, what it accepts hashes stably, and page tokens round-trip and resist change.

use chrono::DateTime;
use proptest::prelude::*;
use q_a2a_gateway::a2a::cursor::{CursorCodec, CursorError};
use q_a2a_gateway::a2a::validate::{validate_send, ValidatedSend};
use q_a2a_gateway::config::LimitsConfig;
use q_a2a_gateway::error::RpcError;
use q_a2a_gateway::store::{ListFilter, ListPosition, Owner};
use serde_json::{json, Map, Value};

fn validate(message: Value) -> Result<ValidatedSend, RpcError> {
    let params: Map<String, Value> = json!({ "message": message }).as_object().unwrap().clone();
    validate_send(&params, &LimitsConfig::default())
}

fn message(id: &str, texts: &[String]) -> Value {
    let parts: Vec<Value> = texts.iter().map(|t| json!({ "text": t })).collect();
    json!({"messageId": id, "role": "ROLE_USER", "parts": parts})
}

/// Text with multi-byte and control characters, never blank.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[a-zA-Z0-9 é☃\u{1F600}\n\t]{{0,{max}}}x")).unwrap()
}

fn field_of(error: &RpcError) -> String {
    error
        .violations
        .first()
        .map(|(f, _)| f.clone())
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn more_than_16_parts_are_refused(texts in prop::collection::vec(text(20), 17..48)) {
        let error = validate(message("m", &texts)).unwrap_err();
        prop_assert_eq!(error.code, -32602);
        prop_assert_eq!(field_of(&error), "message.parts");
    }

    #[test]
    fn more_than_32000_characters_are_refused(
        parts in 1usize..=16,
        extra in 1usize..4_000,
        wide in any::<bool>(),
    ) {
        // Characters are counted, not bytes: 'é' is two bytes and counts once.
        let total = 32_000 + extra;
        let unit = if wide { "é" } else { "a" };
        let per_part = total.div_ceil(parts);
        let texts: Vec<String> = (0..parts).map(|_| unit.repeat(per_part)).collect();
        let error = validate(message("m", &texts)).unwrap_err();
        prop_assert_eq!(error.code, -32602);
        prop_assert_eq!(field_of(&error), "message.parts");
    }

    #[test]
    fn up_to_32000_characters_of_multibyte_text_are_accepted(parts in 1usize..=16) {
        let per_part = 32_000 / parts;
        let texts: Vec<String> = (0..parts).map(|_| "é".repeat(per_part)).collect();
        prop_assert!(validate(message("m", &texts)).is_ok());
    }

    #[test]
    fn accepted_content_hashes_stably(
        texts in prop::collection::vec(text(200), 1..=16),
        id in "[a-zA-Z0-9-]{1,256}",
        other_id in "[a-zA-Z0-9-]{1,256}",
    ) {
        let accepted = validate(message(&id, &texts)).unwrap();
        prop_assert_eq!(accepted.texts(), texts.clone());
        let again = validate(message(&id, &texts)).unwrap();
        prop_assert_eq!(accepted.content_sha256(), again.content_sha256());
        // The stored message is accepted again with the same hash (what a repeat compares).
        let reread = validate(accepted.stored_message()).unwrap();
        prop_assert_eq!(accepted.content_sha256(), reread.content_sha256());
        // The hash is over the content, not the messageId.
        let renamed = validate(message(&other_id, &texts)).unwrap();
        prop_assert_eq!(accepted.content_sha256(), renamed.content_sha256());
    }

    #[test]
    fn part_order_changes_the_content_hash(
        texts in prop::collection::vec(text(40), 2..=16),
    ) {
        let mut reversed = texts.clone();
        reversed.reverse();
        prop_assume!(reversed != texts);
        let a = validate(message("m", &texts)).unwrap();
        let b = validate(message("m", &reversed)).unwrap();
        prop_assert_ne!(a.content_sha256(), b.content_sha256());
    }

    #[test]
    fn refused_fields_are_refused_whatever_else_is_sent(
        texts in prop::collection::vec(text(40), 1..=16),
        field in prop::sample::select(vec!["taskId", "contextId", "referenceTaskIds", "extensions", "metadata"]),
        value in prop::sample::select(vec![json!("x"), json!(["x"]), json!({"k": 1}), json!(1)]),
    ) {
        let mut m = message("m", &texts);
        m[field] = value;
        let error = validate(m).unwrap_err();
        prop_assert_eq!(error.code, -32004);
    }

    #[test]
    fn page_tokens_round_trip(
        micros in -62_000_000_000_000_000i64..250_000_000_000_000_000,
        id in any::<[u8; 16]>(),
        principal in "[a-z-]{1,20}",
        key in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let codec = CursorCodec::new(&key);
        let owner = Owner { tenant_id: "t".into(), principal_id: principal, agent_id: "a".into() };
        let position = ListPosition {
            status_timestamp: DateTime::from_timestamp_micros(micros).unwrap(),
            task_id: uuid::Uuid::from_bytes(id),
        };
        let filter = ListFilter::default();
        let token = codec.encode(&owner, &filter, position);
        prop_assert_eq!(codec.decode(&token, &owner, &filter), Ok(position));
    }

    #[test]
    fn any_single_byte_change_to_a_page_token_is_refused(
        micros in 0i64..4_000_000_000_000_000,
        id in any::<[u8; 16]>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let codec = CursorCodec::new(b"property-key");
        let owner = Owner { tenant_id: "t".into(), principal_id: "p".into(), agent_id: "a".into() };
        let filter = ListFilter::default();
        let position = ListPosition {
            status_timestamp: DateTime::from_timestamp_micros(micros).unwrap(),
            task_id: uuid::Uuid::from_bytes(id),
        };
        let token = codec.encode(&owner, &filter, position);
        let mut bytes = token.into_bytes();
        let at = at.index(bytes.len());
        prop_assume!(bytes[at] != byte);
        bytes[at] = byte;
        let changed = String::from_utf8_lossy(&bytes).into_owned();
        let refused = codec.decode(&changed, &owner, &filter);
        prop_assert!(
            matches!(refused, Err(CursorError::Malformed | CursorError::BadSignature | CursorError::Foreign)),
            "byte {} changed and still decoded: {:?}", at, refused
        );
    }
}
