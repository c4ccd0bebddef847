//! Validation of `SendMessage` params against the interoperability profile.
//!
//! It works on the raw JSON rather than on `a2a::SendMessageRequest`: the official types parse
//! leniently (a part carrying both `text` and `url` becomes a text part; unknown roles fail as a
//! generic parse error), while the profile needs to know exactly what the client sent in order
//! to refuse it with the right, documented error. Nothing is written before this passes.
//!
//! | Input | Error |
//! |---|---|
//! | `message` missing or not an object, `messageId` missing/empty/over 256 chars, `role` not `ROLE_USER`, no parts, more than 16 parts, over 32,000 characters, empty text, wrong JSON types | -32602 |
//! | a `raw`, `url` or `data` part, a non-text `mediaType`, `acceptedOutputModes` without a text type | -32005 |
//! | `taskId`, `contextId`, `referenceTaskIds`, `extensions`, message or part `metadata`, request `metadata`, `params.tenant` | -32004 |
//! | `configuration.taskPushNotificationConfig` | -32003 |

use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::config::LimitsConfig;
use crate::error::RpcError;

/// Longest accepted `messageId`.
pub const MAX_MESSAGE_ID_CHARS: usize = 256;

/// A message the profile accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedSend {
    pub message_id: String,
    pub parts: Vec<TextPart>,
    pub return_immediately: bool,
    pub history_length: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextPart {
    pub text: String,
    #[serde(rename = "mediaType", skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl ValidatedSend {
    /// The message as stored and shown in history (ids are added when rendered).
    pub fn stored_message(&self) -> Value {
        json!({
            "messageId": self.message_id,
            "role": "ROLE_USER",
            "parts": self.parts,
        })
    }

    /// sha256 (hex) of the content that a repeat under the same messageId must match.
    pub fn content_sha256(&self) -> String {
        let canonical = serde_json::to_vec(&json!({"role": "ROLE_USER", "parts": self.parts}))
            .expect("parts serialize");
        hex::encode(Sha256::digest(canonical))
    }

    pub fn texts(&self) -> Vec<String> {
        self.parts.iter().map(|p| p.text.clone()).collect()
    }
}

/// A value that carries something: not absent, null, "", [], {} or false.
fn is_set(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(_)) => true,
    }
}

/// Refuses the request-level fields the profile does not support; shared by every method.
pub fn refuse_tenant(params: &Map<String, Value>) -> Result<(), RpcError> {
    if is_set(params.get("tenant")) {
        return Err(RpcError::unsupported(
            "params.tenant is not supported: the tenant comes from the credential",
        )
        .with_meta("field", "tenant"));
    }
    Ok(())
}

/// Optional non-negative `historyLength` at `field`.
pub fn history_length(value: Option<&Value>, field: &str) -> Result<Option<usize>, RpcError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v >= 0 => Ok(Some(v.min(i32::MAX as i64) as usize)),
            Some(_) => Err(RpcError::invalid_field(field, "must be non-negative")),
            None => Err(RpcError::invalid_field(field, "must be an integer")),
        },
        Some(_) => Err(RpcError::invalid_field(field, "must be an integer")),
    }
}

fn unsupported_field(field: &str, why: &str) -> RpcError {
    RpcError::unsupported(format!("{field} is not supported by this agent: {why}"))
        .with_meta("field", field.to_owned())
}

pub fn validate_send(
    params: &Map<String, Value>,
    limits: &LimitsConfig,
) -> Result<ValidatedSend, RpcError> {
    refuse_tenant(params)?;
    if is_set(params.get("metadata")) {
        return Err(unsupported_field(
            "metadata",
            "request metadata is not accepted",
        ));
    }

    let configuration = match params.get("configuration") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(c)) => c.clone(),
        Some(_) => {
            return Err(RpcError::invalid_field(
                "configuration",
                "must be an object",
            ))
        }
    };
    if is_set(configuration.get("taskPushNotificationConfig"))
        || is_set(configuration.get("pushNotificationConfig"))
    {
        return Err(RpcError::push_not_supported()
            .with_meta("field", "configuration.taskPushNotificationConfig"));
    }
    let return_immediately = match configuration.get("returnImmediately") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(RpcError::invalid_field(
                "configuration.returnImmediately",
                "must be a boolean",
            ))
        }
    };
    let history_length = history_length(
        configuration.get("historyLength"),
        "configuration.historyLength",
    )?;
    match configuration.get("acceptedOutputModes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(modes)) => {
            let modes: Option<Vec<&str>> = modes.iter().map(Value::as_str).collect();
            let modes = modes.ok_or_else(|| {
                RpcError::invalid_field(
                    "configuration.acceptedOutputModes",
                    "must be an array of strings",
                )
            })?;
            let accepts_markdown = modes.is_empty()
                || modes.iter().any(|m| {
                    let m = m
                        .split(';')
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_ascii_lowercase();
                    matches!(
                        m.as_str(),
                        "text/markdown" | "text/plain" | "text/*" | "*/*"
                    )
                });
            if !accepts_markdown {
                return Err(RpcError::content_type_not_supported(
                    "this agent answers with text/markdown; acceptedOutputModes allows none of text/markdown, text/plain, text/*, */*",
                ));
            }
        }
        Some(_) => {
            return Err(RpcError::invalid_field(
                "configuration.acceptedOutputModes",
                "must be an array of strings",
            ))
        }
    }

    let message = match params.get("message") {
        None | Some(Value::Null) => {
            return Err(RpcError::invalid_field("message", "Field is required."))
        }
        Some(Value::Object(m)) => m,
        Some(_) => return Err(RpcError::invalid_field("message", "must be an object")),
    };

    let message_id = match message.get("messageId") {
        None | Some(Value::Null) => {
            return Err(RpcError::invalid_field(
                "message.messageId",
                "Field is required.",
            ))
        }
        Some(Value::String(s)) if s.is_empty() => {
            return Err(RpcError::invalid_field(
                "message.messageId",
                "Field is required.",
            ))
        }
        Some(Value::String(s)) if s.chars().count() > MAX_MESSAGE_ID_CHARS => {
            return Err(RpcError::invalid_field(
                "message.messageId",
                format!("must be at most {MAX_MESSAGE_ID_CHARS} characters"),
            ))
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(RpcError::invalid_field(
                "message.messageId",
                "must be a string",
            ))
        }
    };

    match message.get("role") {
        None | Some(Value::Null) => {
            return Err(RpcError::invalid_field(
                "message.role",
                "Field is required.",
            ))
        }
        Some(Value::String(r)) if r == "ROLE_USER" => {}
        Some(Value::String(r)) if r.is_empty() || r == "ROLE_UNSPECIFIED" => {
            return Err(RpcError::invalid_field(
                "message.role",
                "Field is required.",
            ))
        }
        Some(_) => return Err(RpcError::invalid_field("message.role", "must be ROLE_USER")),
    }

    // Continuation, references and extensions are outside the profile. A message naming a task
    // can never approve, resume or steer it: that happens only through Q's approval API.
    if is_set(message.get("taskId")) {
        return Err(unsupported_field(
            "message.taskId",
            "a message cannot continue, approve or resume a task; send a new message without taskId, and use Q's approval API to resume",
        ));
    }
    if is_set(message.get("contextId")) {
        return Err(unsupported_field(
            "message.contextId",
            "context ids are assigned by the server",
        ));
    }
    if is_set(message.get("referenceTaskIds")) {
        return Err(unsupported_field(
            "message.referenceTaskIds",
            "task references are not accepted",
        ));
    }
    if is_set(message.get("extensions")) {
        return Err(unsupported_field(
            "message.extensions",
            "no extensions are supported",
        ));
    }
    if is_set(message.get("metadata")) {
        return Err(unsupported_field(
            "message.metadata",
            "message metadata is not accepted",
        ));
    }

    let raw_parts = match message.get("parts") {
        None | Some(Value::Null) => {
            return Err(RpcError::invalid_field(
                "message.parts",
                "Field is required.",
            ))
        }
        Some(Value::Array(p)) if p.is_empty() => {
            return Err(RpcError::invalid_field(
                "message.parts",
                "must contain at least one part",
            ))
        }
        Some(Value::Array(p)) => p,
        Some(_) => return Err(RpcError::invalid_field("message.parts", "must be an array")),
    };
    if raw_parts.len() > limits.max_parts {
        return Err(RpcError::invalid_field(
            "message.parts",
            format!(
                "at most {} parts are accepted, got {}",
                limits.max_parts,
                raw_parts.len()
            ),
        ));
    }

    let mut parts = Vec::with_capacity(raw_parts.len());
    let mut chars = 0usize;
    for (i, raw) in raw_parts.iter().enumerate() {
        let field = format!("message.parts[{i}]");
        let part = raw
            .as_object()
            .ok_or_else(|| RpcError::invalid_field(&field, "must be an object"))?;
        for kind in ["raw", "url", "data", "file"] {
            if part.contains_key(kind) {
                return Err(RpcError::content_type_not_supported(format!(
                    "{field}: only text parts are accepted; {kind:?} parts (binary files, file URLs, data) are not part of this profile"
                ))
                .with_meta("field", field));
            }
        }
        let text = match part.get("text") {
            Some(Value::String(t)) => t.clone(),
            None | Some(Value::Null) => {
                return Err(RpcError::invalid_field(
                    &format!("{field}.text"),
                    "Field is required.",
                ))
            }
            Some(_) => {
                return Err(RpcError::invalid_field(
                    &format!("{field}.text"),
                    "must be a string",
                ))
            }
        };
        let media_type = match part.get("mediaType") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) if m.is_empty() => None,
            Some(Value::String(m)) => {
                let base = m
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase();
                if base != "text/plain" && base != "text/markdown" {
                    return Err(RpcError::content_type_not_supported(format!(
                        "{field}.mediaType {m:?} is not accepted; use text/plain or text/markdown"
                    ))
                    .with_meta("field", format!("{field}.mediaType")));
                }
                Some(m.clone())
            }
            Some(_) => {
                return Err(RpcError::invalid_field(
                    &format!("{field}.mediaType"),
                    "must be a string",
                ))
            }
        };
        if is_set(part.get("metadata")) {
            return Err(unsupported_field(
                &format!("{field}.metadata"),
                "part metadata is not accepted",
            ));
        }
        chars += text.chars().count();
        parts.push(TextPart { text, media_type });
    }
    if chars > limits.max_text_chars {
        return Err(RpcError::invalid_field(
            "message.parts",
            format!(
                "text is limited to {} characters, got {chars}",
                limits.max_text_chars
            ),
        ));
    }
    if parts.iter().all(|p| p.text.trim().is_empty()) {
        return Err(RpcError::invalid_field(
            "message.parts",
            "text must not be empty",
        ));
    }

    Ok(ValidatedSend {
        message_id,
        parts,
        return_immediately,
        history_length,
    })
}

#[cfg(test)]
mod tests;
