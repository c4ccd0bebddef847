//! The JSON-RPC error object, with `google.rpc.ErrorInfo` and `google.rpc.BadRequest` details
//! exactly as the official SDK emits them.

use a2a::error_code;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use std::borrow::Cow;

use serde_json::Value;

const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";
const DOMAIN: &str = "a2a-protocol.org";

/// A JSON-RPC error with its ErrorInfo metadata and field violations.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    /// ErrorInfo's metadata, in key order (as the answer writes it); keys are the code's own.
    pub metadata: Vec<(&'static str, Cow<'static, str>)>,
    pub violations: Vec<(String, String)>,
    /// What went wrong inside, for the log written at the rescue point; never sent.
    pub cause: Option<Box<str>>,
}

impl RpcError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            metadata: Vec::new(),
            violations: Vec::new(),
            cause: None,
        }
    }

    /// Attaches the internal cause the rescue point logs (never part of the answer).
    pub fn caused_by(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string().into_boxed_str());
        self
    }

    /// Sets one metadata entry (a key given twice keeps its last value).
    pub fn with_meta(mut self, key: &'static str, value: impl Into<Cow<'static, str>>) -> Self {
        let value = value.into();
        match self.metadata.binary_search_by(|(k, _)| (*k).cmp(key)) {
            Ok(at) => self.metadata[at].1 = value,
            Err(at) => self.metadata.insert(at, (key, value)),
        }
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
    /// The task store has no writable primary within reach right now (a failover, a
    /// restart): nothing the request asked for was done, or it was done exactly once and the
    /// same request (the same messageId) finds it.
    pub fn store_unavailable() -> Self {
        RpcError::new(
            error_code::INTERNAL_ERROR,
            "The task store is temporarily unavailable; retry the same request",
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
        .with_meta("requestedVersion", requested.to_owned())
        .with_meta("supportedVersions", "1.0")
    }

    /// The JSON-RPC `error` object as a value (the answer itself is written by serialising
    /// the error directly).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("an error object always serialises")
    }
}

/// The JSON-RPC `error` object, written straight to the answer's bytes (through a map of
/// values it cost about thirty allocations per refused request). Keys in sorted order at every
/// level, as they were when the object was a `serde_json::Map`. The cause is never written.
impl Serialize for RpcError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The SDK sends no data for parse errors and unknown methods; do the same.
        let with_data =
            self.code != error_code::PARSE_ERROR && self.code != error_code::METHOD_NOT_FOUND;
        let mut error = serializer.serialize_map(Some(2 + usize::from(with_data)))?;
        error.serialize_entry("code", &self.code)?;
        if with_data {
            error.serialize_entry("data", &Details(self))?;
        }
        error.serialize_entry("message", &self.message)?;
        error.end()
    }
}

/// `data`: the `google.rpc.ErrorInfo`, then a `google.rpc.BadRequest` with the field
/// violations if there are any.
struct Details<'a>(&'a RpcError);

impl Serialize for Details<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let violations = !e.violations.is_empty();
        let mut data = serializer.serialize_seq(Some(1 + usize::from(violations)))?;
        data.serialize_element(&ErrorInfo(e))?;
        if violations {
            data.serialize_element(&BadRequest(&e.violations))?;
        }
        data.end()
    }
}

struct ErrorInfo<'a>(&'a RpcError);

impl Serialize for ErrorInfo<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut info = serializer.serialize_map(Some(4))?;
        info.serialize_entry("@type", ERROR_INFO_TYPE)?;
        info.serialize_entry("domain", DOMAIN)?;
        info.serialize_entry("metadata", &Metadata(&self.0.metadata))?;
        info.serialize_entry("reason", a2a::error_reason(self.0.code))?;
        info.end()
    }
}

struct Metadata<'a>(&'a [(&'static str, Cow<'static, str>)]);

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

struct BadRequest<'a>(&'a [(String, String)]);

impl Serialize for BadRequest<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut detail = serializer.serialize_map(Some(2))?;
        detail.serialize_entry("@type", BAD_REQUEST_TYPE)?;
        detail.serialize_entry("fieldViolations", &Violations(self.0))?;
        detail.end()
    }
}

struct Violations<'a>(&'a [(String, String)]);

impl Serialize for Violations<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut list = serializer.serialize_seq(Some(self.0.len()))?;
        for (field, description) in self.0 {
            list.serialize_element(&Violation { description, field })?;
        }
        list.end()
    }
}

#[derive(Serialize)]
struct Violation<'a> {
    description: &'a str,
    field: &'a str,
}

#[cfg(test)]
mod tests;
