//! The JSON-RPC error object, with `google.rpc.ErrorInfo` and `google.rpc.BadRequest` details
//! exactly as the official SDK emits them.

use a2a::error_code;
use serde_json::{json, Map, Value};

const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";
const DOMAIN: &str = "a2a-protocol.org";

/// A JSON-RPC error with its ErrorInfo metadata and field violations.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    pub metadata: Map<String, Value>,
    pub violations: Vec<(String, String)>,
    /// What went wrong inside, for the log written at the rescue point; never sent.
    pub cause: Option<Box<str>>,
}

impl RpcError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            metadata: Map::new(),
            violations: Vec::new(),
            cause: None,
        }
    }

    /// Attaches the internal cause the rescue point logs (never part of the answer).
    pub fn caused_by(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string().into_boxed_str());
        self
    }

    pub fn with_meta(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata
            .insert(key.to_string(), Value::String(value.into()));
        self
    }

    pub fn parse_error(detail: impl Into<String>) -> Self {
        RpcError::new(error_code::PARSE_ERROR, detail)
    }
    pub fn invalid_request(message: impl Into<String>) -> Self {
        RpcError::new(error_code::INVALID_REQUEST, message)
    }
    pub fn method_not_found() -> Self {
        RpcError::new(error_code::METHOD_NOT_FOUND, "Method not found")
    }
    /// -32602 for one field, named by its JSON (camelCase) path.
    pub fn invalid_field(field: &str, description: impl Into<String>) -> Self {
        let description = description.into();
        let mut e = RpcError::new(
            error_code::INVALID_PARAMS,
            format!("Invalid params: {field}: {description}"),
        );
        e.violations.push((field.to_string(), description));
        e
    }
    pub fn internal() -> Self {
        RpcError::new(error_code::INTERNAL_ERROR, "Internal error")
    }
    /// Q could not be reached or answered unexpectedly; the caller may retry the same request.
    pub fn upstream_unavailable() -> Self {
        RpcError::new(
            error_code::INTERNAL_ERROR,
            "Q is temporarily unavailable; retry the same request",
        )
        .with_meta("retryable", "true")
    }
    pub fn task_not_found() -> Self {
        RpcError::new(error_code::TASK_NOT_FOUND, "Task not found")
    }
    pub fn push_not_supported() -> Self {
        RpcError::new(
            error_code::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "Push Notification is not supported",
        )
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        RpcError::new(error_code::UNSUPPORTED_OPERATION, message)
    }
    pub fn content_type_not_supported(message: impl Into<String>) -> Self {
        RpcError::new(error_code::CONTENT_TYPE_NOT_SUPPORTED, message)
    }
    pub fn invalid_agent_response(message: impl Into<String>) -> Self {
        RpcError::new(error_code::INVALID_AGENT_RESPONSE, message)
    }
    pub fn version_not_supported(requested: &str) -> Self {
        RpcError::new(
            error_code::VERSION_NOT_SUPPORTED,
            format!(
                "A2A version '{requested}' is not supported by this agent. Supported version: '1.0'."
            ),
        )
        .with_meta("requestedVersion", requested)
        .with_meta("supportedVersions", "1.0")
    }

    /// The JSON-RPC `error` object.
    pub fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        // The SDK sends no data for parse errors and unknown methods; do the same.
        if self.code != error_code::PARSE_ERROR && self.code != error_code::METHOD_NOT_FOUND {
            let mut data = vec![json!({
                "@type": ERROR_INFO_TYPE,
                "reason": a2a::error_reason(self.code),
                "domain": DOMAIN,
                "metadata": self.metadata,
            })];
            if !self.violations.is_empty() {
                let violations: Vec<Value> = self
                    .violations
                    .iter()
                    .map(|(field, description)| json!({"field": field, "description": description}))
                    .collect();
                data.push(json!({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations}));
            }
            error.insert("data".into(), Value::Array(data));
        }
        Value::Object(error)
    }
}

#[cfg(test)]
mod tests;
