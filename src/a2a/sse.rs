//! Server-sent events framing for the JSON-RPC binding, written once.
//!
//! Every `data:` frame is one complete JSON-RPC response echoing the request id; an error after
//! the stream started is an `event: error` frame; keep-alive frames are SSE comments, which
//! clients and proxies see as traffic but parsers ignore.

use a2a::JsonRpcId;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{result_too_large, serialization_failed, ErrorAnswer, RpcError};

/// `data: {"id":…,"jsonrpc":"2.0","result":…}` + blank line.
pub fn result_frame(id: &JsonRpcId, result: &Value) -> Bytes {
    data_frame(id, &result.to_string())
}

/// [`result_frame`] for a result that must keep to the result bound, like a non-streaming
/// answer: serialised once, measured, and refused (-32006) past `max_result_bytes` rather
/// than streamed.
pub fn bounded_result_frame<T: Serialize>(
    id: &JsonRpcId,
    result: &T,
    max_result_bytes: usize,
) -> Result<Bytes, RpcError> {
    let result = serde_json::to_string(result).map_err(serialization_failed)?;
    if result.len() > max_result_bytes {
        return Err(result_too_large(max_result_bytes));
    }
    Ok(data_frame(id, &result))
}

/// One `data:` line; serde_json never writes a raw newline, so a frame cannot be split.
fn data_frame(id: &JsonRpcId, result: &str) -> Bytes {
    let id = json!(id);
    Bytes::from(format!(
        "data: {{\"id\":{id},\"jsonrpc\":\"2.0\",\"result\":{result}}}\n\n"
    ))
}

/// `event: error` + `data: {"jsonrpc":"2.0","id":…,"error":…}` + blank line.
pub fn error_frame(id: &JsonRpcId, error: &RpcError) -> Bytes {
    let body = serde_json::to_string(&ErrorAnswer::new(id, error))
        .expect("an error answer always serialises");
    Bytes::from(format!("event: error\ndata: {body}\n\n"))
}

/// A comment line: keeps idle connections and read timeouts alive.
pub fn keepalive_frame() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}

/// An SSE response around a stream of frames. The headers stop proxy buffering and caching.
pub fn response<S>(frames: S) -> Response
where
    S: futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
{
    let mut response = axum::body::Body::from_stream(frames).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-store"),
    );
    // nginx and compatible proxies: pass each frame through at once.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_single_json_rpc_responses() {
        let frame = result_frame(
            &JsonRpcId::String("s1".into()),
            &json!({"task": {"id": "t"}}),
        );
        let text = std::str::from_utf8(&frame).unwrap();
        assert!(text.starts_with("data: {") && text.ends_with("}\n\n"));
        let v: Value = serde_json::from_str(text.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(v["id"], "s1");
        assert_eq!(v["result"]["task"]["id"], "t");
        assert_eq!(text.matches('\n').count(), 2, "one data line");

        let err = error_frame(&JsonRpcId::Number(3), &RpcError::task_not_found());
        let text = std::str::from_utf8(&err).unwrap();
        assert!(text.starts_with("event: error\ndata: "));
        assert!(text.contains("\"code\":-32001"));
        // The same bytes as the HTTP answer's body, sorted keys included.
        assert!(text.contains(r#"data: {"error":{"code":-32001,"data":[{"@type":"#));
        assert!(text.ends_with(
            r#""id":3,"jsonrpc":"2.0"}

"#
        ));
        assert!(keepalive_frame().starts_with(b":"));
    }

    #[test]
    fn bounded_frames_are_result_frames_within_the_bound() {
        let id = JsonRpcId::String("s\"1".into());
        let result = json!({"task": {"id": "t", "text": "a\nb"}});
        let len = result.to_string().len();
        assert_eq!(
            bounded_result_frame(&id, &result, len).unwrap(),
            result_frame(&id, &result)
        );
        let refused = bounded_result_frame(&id, &result, len - 1).unwrap_err();
        assert_eq!(refused.code, a2a::error_code::INVALID_AGENT_RESPONSE);
        let text = String::from_utf8(result_frame(&id, &result).to_vec()).unwrap();
        let v: Value = serde_json::from_str(text.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(
            (&v["id"], &v["jsonrpc"], &v["result"]),
            (&json!(id), &json!("2.0"), &result)
        );
    }
}
