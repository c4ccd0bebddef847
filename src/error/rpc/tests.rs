//! The JSON-RPC error objects' shape.

use super::*;
use serde_json::json;

#[test]
fn task_not_found_matches_sdk_shape() {
    let v = RpcError::task_not_found().to_json();
    assert_eq!(v["code"], -32001);
    assert_eq!(v["message"], "Task not found");
    assert_eq!(v["data"][0]["@type"], ERROR_INFO_TYPE);
    assert_eq!(v["data"][0]["reason"], "TASK_NOT_FOUND");
    assert_eq!(v["data"][0]["domain"], "a2a-protocol.org");
    assert_eq!(v["data"][0]["metadata"], json!({}));
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
}

#[test]
fn violations_add_bad_request_detail() {
    let v = RpcError::invalid_field("message.parts", "too many").to_json();
    assert_eq!(v["code"], -32602);
    assert_eq!(v["data"][0]["reason"], "INVALID_PARAMS");
    assert_eq!(v["data"][1]["@type"], BAD_REQUEST_TYPE);
    assert_eq!(v["data"][1]["fieldViolations"][0]["field"], "message.parts");
}

#[test]
fn parse_error_and_method_not_found_carry_no_data() {
    assert!(RpcError::parse_error("x").to_json().get("data").is_none());
    assert!(RpcError::method_not_found().to_json().get("data").is_none());
}
