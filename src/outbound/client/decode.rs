//! What a remote's answer becomes. Its bytes are checked against a bound set
//! ([`crate::json_bounds`]: [`CARD`] for cards, [`ANSWER`] for JSON-RPC answers) before they
//! are parsed, so a body within the byte cap cannot become many times its size in memory; one
//! past a bound fails the call with `response_too_complex`, and nothing of it is parsed, used
//! or stored. These are the steps the client takes, in its order, public so that
//! `tests/json_memory.rs` measures the gateway's own parsing.

use a2a::{JsonRpcResponse, SendMessageResponse, Task};
use serde_json::Value;

use super::sanitize::without_nul;
use super::OutboundError;
use crate::json_bounds::{self, JsonBounds, ANSWER, CARD};

/// `bytes` within `bounds`, or `response_too_complex`: the remote answered (so the request
/// reached it), with something the gateway does not parse.
fn within(what: &str, bytes: &[u8], bounds: &JsonBounds) -> Result<(), OutboundError> {
    json_bounds::check(bytes, bounds).map_err(|exceeded| {
        OutboundError::ambiguous(
            "response_too_complex",
            format!("{what} is too complex to parse: {exceeded}"),
        )
    })
}

/// A card: a JSON object within [`CARD`], NULs replaced.
pub fn card(bytes: &[u8]) -> Result<Value, OutboundError> {
    within("card", bytes, &CARD)?;
    let card: Value = serde_json::from_slice(bytes)
        .map_err(|e| OutboundError::ambiguous("unparseable", format!("card: {e}")))?;
    if !card.is_object() {
        return Err(OutboundError::ambiguous(
            "unparseable",
            "card is not a JSON object",
        ));
    }
    Ok(without_nul(card))
}

/// A JSON-RPC answer to `method` within [`ANSWER`], NULs replaced in its result.
pub fn rpc_answer(method: &str, bytes: &[u8]) -> Result<JsonRpcResponse, OutboundError> {
    within(&format!("{method} answer"), bytes, &ANSWER)?;
    let mut answer: JsonRpcResponse = serde_json::from_slice(bytes).map_err(|e| {
        OutboundError::ambiguous(
            "unparseable",
            format!("{method}: not a JSON-RPC answer: {e}"),
        )
    })?;
    answer.result = answer.result.map(without_nul);
    Ok(answer)
}

/// The JSON-RPC error a refusal's body carries, if it is one within [`ANSWER`]; anything else
/// (no JSON, too complex, no error) carries none, and the HTTP status decides.
pub fn rpc_refusal(bytes: &[u8]) -> Option<a2a::JsonRpcError> {
    json_bounds::check(bytes, &ANSWER).ok()?;
    serde_json::from_slice::<JsonRpcResponse>(bytes)
        .ok()
        .and_then(|a| a.error)
}

/// SendMessage's result as the official type, read as that type's `Deserialize` reads it (a
/// `task`, else a `message`) but without the copy of the whole task it makes on the way.
pub fn send_result(result: Value) -> Result<SendMessageResponse, OutboundError> {
    let unparseable =
        |e: String| OutboundError::ambiguous("unparseable", format!("SendMessage result: {e}"));
    let Value::Object(mut result) = result else {
        return Err(unparseable("not a JSON object".into()));
    };
    if let Some(task) = result.remove("task") {
        let task: Task = serde_json::from_value(task).map_err(|e| unparseable(e.to_string()))?;
        Ok(SendMessageResponse::Task(task))
    } else if let Some(message) = result.remove("message") {
        let message = serde_json::from_value(message).map_err(|e| unparseable(e.to_string()))?;
        Ok(SendMessageResponse::Message(message))
    } else {
        Err(unparseable("neither a task nor a message".into()))
    }
}

/// GetTask's result as the official type.
pub fn task_result(result: Value) -> Result<Task, OutboundError> {
    serde_json::from_value(result)
        .map_err(|e| OutboundError::ambiguous("unparseable", format!("GetTask result: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Delivery;
    use serde_json::json;

    #[test]
    fn a_card_past_its_bounds_is_too_complex_and_not_parsed() {
        let dense = format!(
            r#"{{"name":"Dense","skills":[{}]}}"#,
            vec![r#"{"":0}"#; 8_000].join(",")
        );
        let e = card(dense.as_bytes()).unwrap_err();
        assert_eq!(e.reason(), "response_too_complex", "{e}");
        assert_eq!(e.delivery(), Delivery::MaybeSent);
        let objects = format!("more than {} objects", CARD.objects);
        assert!(e.to_string().contains(&objects), "{e}");
        assert_eq!(card(br#"{"name":"Plain"}"#).unwrap()["name"], "Plain");
        // Not JSON at all is still the parser's verdict.
        assert_eq!(card(b"{").unwrap_err().reason(), "unparseable");
    }

    #[test]
    fn a_send_result_reads_as_the_official_type_does() {
        for result in [
            json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}),
            json!({"message": {"messageId": "r", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}),
            // Both: the task wins, as it does for the official type.
            json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}},
                   "message": {"messageId": "r", "role": "ROLE_AGENT", "parts": []}}),
        ] {
            let official: SendMessageResponse = serde_json::from_value(result.clone()).unwrap();
            assert_eq!(send_result(result).unwrap(), official);
        }
        for result in [
            json!({"neither": {}}),
            json!([]),
            json!("task"),
            json!({"task": {"id": 1}}),
            json!({"message": {"role": "ROLE_AGENT"}}),
        ] {
            assert!(serde_json::from_value::<SendMessageResponse>(result.clone()).is_err());
            assert_eq!(send_result(result).unwrap_err().reason(), "unparseable");
        }
    }

    #[test]
    fn an_answer_past_its_bounds_is_too_complex_and_a_refusal_body_is_ignored() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"1","result":{}0{}}}"#,
            "[".repeat(70),
            "]".repeat(70)
        );
        let e = rpc_answer("SendMessage", deep.as_bytes()).unwrap_err();
        assert_eq!(e.reason(), "response_too_complex", "{e}");
        assert!(e.to_string().contains("SendMessage answer"), "{e}");
        let refusal = br#"{"jsonrpc":"2.0","id":"1","error":{"code":-32602,"message":"no"}}"#;
        assert_eq!(rpc_refusal(refusal).map(|e| e.code), Some(-32602));
        let buried = format!(
            r#"{{"jsonrpc":"2.0","id":"1","error":{{"code":-32602,"message":"no","data":{}0{}}}}}"#,
            "[".repeat(70),
            "]".repeat(70)
        );
        assert!(rpc_refusal(buried.as_bytes()).is_none());
    }
}
