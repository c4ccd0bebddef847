//! JSON-RPC 2.0 envelope decoding for the A2A binding: the request's media type (-32005), then
//! in the official SDK's order JSON parse (-32700), envelope shape (-32600), then the method is
//! dispatched.

use a2a::JsonRpcId;
use axum::http::{header, HeaderMap};
use serde_json::{Map, Value};

use crate::error::RpcError;

/// The binding's requests are `application/json` (spec §9.1). A body declared as something else
/// is refused with ContentTypeNotSupportedError (-32005, the answer the A2A TCK expects) before
/// it is read as JSON. `application/*+json` is JSON too; a request without `Content-Type` is
/// read as JSON, since it declares nothing else.
pub fn check_media_type(headers: &HeaderMap) -> Result<(), RpcError> {
    let values: Vec<_> = headers.get_all(header::CONTENT_TYPE).iter().collect();
    let declared = match values.as_slice() {
        [] => return Ok(()),
        [one] => one.to_str().unwrap_or(""),
        // Two declarations of one body are ambiguous: refuse rather than pick one.
        _ => "(several values)",
    };
    let essence = declared
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let is_json = essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"));
    if is_json {
        return Ok(());
    }
    Err(
        RpcError::content_type_not_supported("Content-Type must be application/json")
            .with_meta("contentType", declared.chars().take(64).collect::<String>()),
    )
}

/// A decoded request envelope. `params` is kept as raw JSON: each method validates its own.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub id: JsonRpcId,
    pub method: String,
    pub params: Map<String, Value>,
}

/// Decodes the body; on failure returns the id to answer with (null when unknown) and the error.
pub fn decode(body: &[u8]) -> Result<Envelope, (JsonRpcId, RpcError)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        (
            JsonRpcId::Null,
            RpcError::parse_error(format!("Parse error: {e}")),
        )
    })?;
    let mut object = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err((
                JsonRpcId::Null,
                RpcError::invalid_request("Batch requests are not supported"),
            ))
        }
        _ => {
            return Err((
                JsonRpcId::Null,
                RpcError::invalid_request("Invalid Request: expected a JSON object"),
            ))
        }
    };
    let id = match object.remove("id") {
        None | Some(Value::Null) => JsonRpcId::Null,
        Some(Value::String(s)) if s.len() <= 256 => JsonRpcId::String(s),
        Some(Value::Number(n)) if n.is_i64() => JsonRpcId::Number(n.as_i64().unwrap_or_default()),
        Some(_) => {
            return Err((
                JsonRpcId::Null,
                RpcError::invalid_request(
                    "Invalid Request: id must be a string of at most 256 characters or an integer",
                ),
            ))
        }
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((
            id,
            RpcError::invalid_request("Invalid Request: jsonrpc must be \"2.0\""),
        ));
    }
    let method = match object.remove("method") {
        Some(Value::String(m)) => m,
        _ => {
            return Err((
                id,
                RpcError::invalid_request("Invalid Request: method must be a string"),
            ))
        }
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => return Err((id, RpcError::invalid_field("params", "must be an object"))),
    };
    Ok(Envelope { id, method, params })
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
        assert_eq!(e.params["id"], "x");
        let e = decode(br#"{"jsonrpc":"2.0","id":7,"method":"GetTask"}"#).unwrap();
        assert_eq!(e.id, JsonRpcId::Number(7));
        assert!(e.params.is_empty());
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
        for refused in [
            &["text/plain"][..],
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
