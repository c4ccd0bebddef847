//! JSON-RPC 2.0 envelope decoding for the A2A binding: the request's media type (-32005), then
//! in the official SDK's order JSON parse (-32700), envelope shape (-32600), then the method is
//! dispatched.

use a2a::JsonRpcId;
use axum::http::{header, HeaderMap};
use std::borrow::Cow;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::RpcError;

/// The binding's requests are `application/json` (spec §9.1). A body declared as something else
/// is refused with ContentTypeNotSupportedError (-32005, the answer the A2A TCK expects) before
/// it is read as JSON. `application/*+json` is JSON too; a request without `Content-Type` is
/// read as JSON, since it declares nothing else.
pub fn check_media_type(headers: &HeaderMap) -> Result<(), RpcError> {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let declared = match (values.next(), values.next()) {
        (None, _) => return Ok(()),
        (Some(one), None) => one.to_str().unwrap_or(""),
        // Two declarations of one body are ambiguous: refuse rather than pick one.
        _ => "(several values)",
    };
    // Compared without case, in place: this runs on every JSON-RPC request.
    let essence = declared.split(';').next().unwrap_or("").trim().as_bytes();
    const TYPE: &[u8] = b"application/";
    const SUFFIX: &[u8] = b"+json";
    let is_json = essence.eq_ignore_ascii_case(b"application/json")
        || (essence.len() >= TYPE.len() + SUFFIX.len()
            && essence[..TYPE.len()].eq_ignore_ascii_case(TYPE)
            && essence[essence.len() - SUFFIX.len()..].eq_ignore_ascii_case(SUFFIX));
    if is_json {
        return Ok(());
    }
    Err(
        RpcError::content_type_not_supported("Content-Type must be application/json")
            .with_meta("contentType", declared.chars().take(64).collect::<String>()),
    )
}

/// A decoded request envelope, borrowing from the body. `params` stays raw JSON until the
/// checks that need only the envelope (version, rate limit, method) have passed: a refused
/// request never builds its parameters, and each method validates its own.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub id: JsonRpcId,
    pub method: Cow<'a, str>,
    params: Option<&'a RawValue>,
}

impl Envelope<'_> {
    /// The parameters as a JSON object (empty when absent or null). The envelope's decoding
    /// has read them as JSON and checked that they are an object: this fails only if a read
    /// into values refuses what that read accepted (a parse error, as it would have been).
    pub fn params(&self) -> Result<Map<String, Value>, RpcError> {
        match self.params {
            None => Ok(Map::new()),
            Some(raw) => serde_json::from_str(raw.get())
                .map_err(|e| RpcError::parse_error(format!("Parse error: {e}"))),
        }
    }
}

/// The request's members this binding reads; any other member is skipped unread. A member
/// given twice counts once, the last one, as in a JSON object read whole.
#[derive(Default)]
struct Members<'a> {
    jsonrpc: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MembersVisitor)
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Members::default();
        while let Some(key) = map.next_key::<Member>()? {
            let slot = match key {
                Member::Jsonrpc => &mut members.jsonrpc,
                Member::Id => &mut members.id,
                Member::Method => &mut members.method,
                Member::Params => &mut members.params,
                Member::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        Ok(members)
    }
}

/// Any JSON value, read in full and kept nowhere: strings decoded into serde_json's scratch
/// space, containers within its depth limit.
struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValidVisitor)
    }
}

struct ValidVisitor;

impl<'de> Visitor<'de> for ValidVisitor {
    type Value = Valid;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Valid, A::Error> {
        while map.next_key::<Valid>()?.is_some() {
            map.next_value::<Valid>()?;
        }
        Ok(Valid)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Valid, A::Error> {
        while seq.next_element::<Valid>()?.is_some() {}
        Ok(Valid)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_str<E>(self, _: &str) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_unit<E>(self) -> Result<Valid, E> {
        Ok(Valid)
    }
}

/// A member's name, compared without keeping it.
enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    Other,
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(MemberVisitor)
    }
}

struct MemberVisitor;

impl Visitor<'_> for MemberVisitor {
    type Value = Member;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Member, E> {
        Ok(match name {
            "jsonrpc" => Member::Jsonrpc,
            "id" => Member::Id,
            "method" => Member::Method,
            "params" => Member::Params,
            _ => Member::Other,
        })
    }
}

/// Decodes the body; on failure returns the id to answer with (null when unknown) and the error.
///
/// Two passes over the body, neither building values: the first reads all of it as JSON
/// ([`Valid`]: escapes, numbers, nesting depth, as a read into values checks them), the second
/// takes the members the binding reads. Their raw reads and the skipping of the other members
/// check less than that on their own (serde_json skips a string without decoding its escapes,
/// and nested values without its depth limit).
pub fn decode(body: &[u8]) -> Result<Envelope<'_>, (JsonRpcId, RpcError)> {
    let parse_error = |e: serde_json::Error| {
        (
            JsonRpcId::Null,
            RpcError::parse_error(format!("Parse error: {e}")),
        )
    };
    serde_json::from_slice::<Valid>(body).map_err(parse_error)?;
    // Valid JSON: its first character says what it is at its top level.
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    let refused = match first {
        Some(b'{') => None,
        Some(b'[') => Some("Batch requests are not supported"),
        _ => Some("Invalid Request: expected a JSON object"),
    };
    if let Some(message) = refused {
        return Err((JsonRpcId::Null, RpcError::invalid_request(message)));
    }
    let members = serde_json::from_slice::<Members>(body).map_err(parse_error)?;
    let id =
        match members.id.map(read_id) {
            None => JsonRpcId::Null,
            Some(Some(id)) => id,
            Some(None) => return Err((
                JsonRpcId::Null,
                RpcError::invalid_request(
                    "Invalid Request: id must be a string of at most 256 characters or an integer",
                ),
            )),
        };
    if members.jsonrpc.and_then(read_str).as_deref() != Some("2.0") {
        return Err((
            id,
            RpcError::invalid_request("Invalid Request: jsonrpc must be \"2.0\""),
        ));
    }
    let method = match members.method.and_then(read_str) {
        Some(method) => method,
        None => {
            return Err((
                id,
                RpcError::invalid_request("Invalid Request: method must be a string"),
            ))
        }
    };
    let params = match members.params {
        Some(raw) if raw.get() == "null" => None,
        Some(raw) if raw.get().starts_with('{') => Some(raw),
        None => None,
        Some(_) => return Err((id, RpcError::invalid_field("params", "must be an object"))),
    };
    Ok(Envelope { id, method, params })
}

/// A JSON string, borrowed unless it has escapes; `None` for any other value.
fn read_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(borrowed) => Some(Cow::Borrowed(borrowed)),
        Err(_) => serde_json::from_str::<String>(raw.get())
            .ok()
            .map(Cow::Owned),
    }
}

/// The request's id: null, a string of at most 256 characters or an integer; `None` for
/// anything else.
fn read_id(raw: &RawValue) -> Option<JsonRpcId> {
    match serde_json::from_str::<Value>(raw.get()).ok()? {
        Value::Null => Some(JsonRpcId::Null),
        Value::String(s) if s.len() <= 256 => Some(JsonRpcId::String(s)),
        Value::Number(n) => n.as_i64().map(JsonRpcId::Number),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> (JsonRpcId, i32) {
        let (id, e) = decode(body.as_bytes()).unwrap_err();
        (id, e.code)
    }

    #[test]
    fn decodes_string_and_integer_ids() {
        let e = decode(br#"{"jsonrpc":"2.0","id":"a","method":"GetTask","params":{"id":"x"}}"#)
            .unwrap();
        assert_eq!(e.id, JsonRpcId::String("a".into()));
        assert_eq!(e.params().unwrap()["id"], "x");
        let e = decode(br#"{"jsonrpc":"2.0","id":7,"method":"GetTask"}"#).unwrap();
        assert_eq!(e.id, JsonRpcId::Number(7));
        assert!(e.params().unwrap().is_empty());
        let e = decode(br#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":null}"#).unwrap();
        assert!(e.params().unwrap().is_empty());
    }

    #[test]
    fn reads_members_as_a_whole_object_read_would() {
        // Escapes in names and values, members in any order, unknown members skipped, and a
        // member given twice counting once, the last.
        let e = decode(
            br#" { "params" : {"id":"x","n":[1,{"a":null}]}, "extra": {"deep": [[[]]]},
                  "me\u0074hod":"Get\u0054ask", "id":1, "id":"b", "jsonrpc":"2\u002e0" } "#,
        )
        .unwrap();
        assert_eq!(e.id, JsonRpcId::String("b".into()));
        assert_eq!(e.method, "GetTask");
        assert_eq!(
            Value::Object(e.params().unwrap()),
            serde_json::json!({"id": "x", "n": [1, {"a": null}]})
        );
        // Without escapes the method is borrowed from the body.
        let e = decode(br#"{"jsonrpc":"2.0","method":"GetTask"}"#).unwrap();
        assert!(matches!(e.method, Cow::Borrowed("GetTask")));
    }

    #[test]
    fn broken_json_is_a_parse_error_whatever_it_starts_with() {
        for body in [
            "[1,",
            "[1,2]x",
            "\"abc",
            "{\"jsonrpc\":\"2.0\",\"x\":[}",
            "",
            "nul",
        ] {
            assert_eq!(err(body), (JsonRpcId::Null, -32700), "{body}");
        }
        assert_eq!(err(r#""abc""#), (JsonRpcId::Null, -32600));
        assert_eq!(err("null"), (JsonRpcId::Null, -32600));
        assert_eq!(err("[1,2]"), (JsonRpcId::Null, -32600));
    }

    #[test]
    fn what_a_read_into_values_refuses_is_a_parse_error_wherever_it_is() {
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        for body in [
            // Nesting past serde_json's depth limit, in the parameters, in a member the
            // envelope skips, and as a batch.
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{{"a":{}}}}}"#,
                deep(200)
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"GetTask","x":{}}}"#,
                deep(200)
            ),
            deep(10_000),
            // A bad escape where the envelope reads raw JSON and where it skips.
            r#"{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"a":"\u12"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":3,"method":"GetTask","x":"\u12"}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":"\u12","method":"GetTask"}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"\u12":1}}"#.to_owned(),
            // A number out of range.
            r#"{"jsonrpc":"2.0","id":3,"method":"GetTask","x":1e999}"#.to_owned(),
        ] {
            assert!(serde_json::from_str::<Value>(&body).is_err());
            assert_eq!(err(&body), (JsonRpcId::Null, -32700), "{body:.80}");
        }
    }

    #[test]
    fn notification_gets_null_id() {
        let e = decode(br#"{"jsonrpc":"2.0","method":"GetTask","params":{}}"#).unwrap();
        assert_eq!(e.id, JsonRpcId::Null);
    }

    #[test]
    fn envelope_errors() {
        assert_eq!(err("{\"jsonrpc\":"), (JsonRpcId::Null, -32700));
        assert_eq!(err("[]"), (JsonRpcId::Null, -32600));
        assert_eq!(err("3"), (JsonRpcId::Null, -32600));
        assert_eq!(
            err(r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#),
            (JsonRpcId::Number(1), -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1.5,"method":"GetTask"}"#),
            (JsonRpcId::Null, -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#),
            (JsonRpcId::Null, -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1}"#),
            (JsonRpcId::Number(1), -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#),
            (JsonRpcId::Number(1), -32602)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":"x"}"#),
            (JsonRpcId::Number(1), -32602)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            (JsonRpcId::Number(1), -32600)
        );
        assert_eq!(
            err(r#"{"id":1,"method":"GetTask"}"#),
            (JsonRpcId::Number(1), -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"GetTask"}"#),
            (JsonRpcId::Null, -32600)
        );
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"GetTask"}}"#,
            "x".repeat(257)
        );
        assert_eq!(err(&long), (JsonRpcId::Null, -32600));
    }

    #[test]
    fn media_type_must_be_json_when_declared() {
        let check = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(header::CONTENT_TYPE, v.parse().unwrap());
            }
            check_media_type(&headers).map_err(|e| e.code)
        };
        assert_eq!(check(&[]), Ok(()));
        assert_eq!(check(&["application/json"]), Ok(()));
        assert_eq!(check(&["Application/JSON; charset=utf-8"]), Ok(()));
        assert_eq!(check(&["application/a2a+json"]), Ok(()));
        assert_eq!(check(&[" APPLICATION/VND.A2A+JSON ;q=1"]), Ok(()));
        assert_eq!(check(&["application/+json"]), Ok(()));
        for refused in [
            &["text/plain"][..],
            &["application/json+"],
            &["+json"],
            &["application+json"],
            &["applicatión/a2a+json"],
            &["text/a2a+json"],
            &["application/x-www-form-urlencoded"],
            &["text/json"],
            &["application/jsonp"],
            &[""],
            &["application/json", "text/plain"],
        ] {
            assert_eq!(check(refused), Err(-32005), "{refused:?}");
        }
    }
}
