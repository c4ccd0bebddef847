//! How a call to Q fails: whether it may have been acted on ([`Delivery`]), and which answers
//! are definite refusals under the contract (a code the call defines, under its status).

use reqwest::StatusCode;

use super::contract::*;

/// Whether a failed request may have been processed by Q.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The connection was never established: Q certainly did not see the request.
    NotSent,
    /// The request may have been received and acted on (timeout, reset, 5xx, unreadable answer).
    MaybeSent,
}

/// Why Q gave no definite answer: only the first two say anything about Q being down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No answer: the connection failed or was reset, or no answer came within the deadline.
    Transport,
    /// Q (or what stands in front of it) answered 5xx.
    ServerError,
    /// Q sheds load (429): it is up.
    Throttled,
    /// Q refused the gateway's own service credential (401/403): a configuration fault, not
    /// an outage.
    CredentialRejected,
    /// An answer the contract does not define for this call: a 4xx without the call's code,
    /// another status, an unreadable or off-contract body.
    Unexpected,
}

impl Cause {
    /// Whether this failure counts towards Q being down (`super::Reachability`).
    pub fn is_outage(self) -> bool {
        matches!(self, Cause::Transport | Cause::ServerError)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Q answered with a definite refusal: an error code the contract defines for this call,
    /// with the HTTP status the contract pairs it with.
    #[error("Q refused {op}: HTTP {status} {}", code.as_str())]
    Refused {
        op: &'static str,
        status: u16,
        code: ErrorCode,
        message: Option<String>,
    },
    /// No definite answer: no answer at all, a 5xx, or an answer that is not one of the
    /// contract's refusals for this call (401/403 of the service credential, 408, 429, a
    /// proxy's 404 without the contract's code, an unknown code, an unreadable body).
    #[error("Q call {op} failed ({delivery:?}, {cause:?}): {reason}")]
    Failed {
        op: &'static str,
        delivery: Delivery,
        cause: Cause,
        reason: String,
    },
}

impl UpstreamError {
    /// Whether Q definitely answered with this contract error code.
    pub fn is(&self, expected: ErrorCode) -> bool {
        matches!(self, UpstreamError::Refused { code, .. } if *code == expected)
    }

    /// Whether this failure counts towards Q being down (a definite refusal never does).
    pub fn is_outage(&self) -> bool {
        matches!(self, UpstreamError::Failed { cause, .. } if cause.is_outage())
    }

    /// Short label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Refused { .. } => "refused",
            UpstreamError::Failed {
                delivery: Delivery::NotSent,
                ..
            } => "unreachable",
            UpstreamError::Failed {
                delivery: Delivery::MaybeSent,
                ..
            } => "ambiguous",
        }
    }
}

/// The contract's definite refusals of each call (`docs/upstream-api.md`, each route's
/// "Status codes"). A code outside its call's list says nothing definite about that call.
pub mod definite {
    use super::ErrorCode::{self, *};

    pub const INTROSPECT: &[ErrorCode] = &[Invalid];
    pub const AGENT_ACCESS: &[ErrorCode] = &[AgentNotFound, Invalid];
    pub const CREATE_RUN: &[ErrorCode] = &[
        WorkspaceAccessDenied,
        AgentNotFound,
        WorkflowIdConflict,
        Invalid,
    ];
    pub const RUN_READ: &[ErrorCode] = &[RunNotFound];
    pub const RUN_OUTPUT: &[ErrorCode] = &[RunNotFound, OutputNotReady];
    pub const CANCEL_RUN: &[ErrorCode] = &[RunNotFound, RunTerminal, Invalid];
    pub const RUN_EVENTS: &[ErrorCode] = &[RunNotFound, Invalid];
    pub const QUERY: &[ErrorCode] = &[Invalid];
    pub const NONE: &[ErrorCode] = &[];
}

/// Classifies a non-2xx answer of Q: a refusal only when its body carries one of the call's
/// definite codes under the status the contract gives that code; anything else may have been
/// acted on (or will be, once the cause clears) and is retried, never taken as final.
pub(super) fn classify_error(
    op: &'static str,
    definite: &[ErrorCode],
    status: StatusCode,
    bytes: &[u8],
) -> UpstreamError {
    let body: Option<ErrorBody> = serde_json::from_slice(bytes).ok();
    let code = body
        .as_ref()
        .map_or(ErrorCode::Unknown, |b| ErrorCode::parse(&b.error));
    if definite.contains(&code) && code.status() == Some(status.as_u16()) {
        return UpstreamError::Refused {
            op,
            status: status.as_u16(),
            code,
            message: body.and_then(|b| b.message),
        };
    }
    let reason = match &body {
        Some(b) => format!(
            "HTTP {status} with code {:?}, not a definite answer",
            b.error
        ),
        None => format!("HTTP {status} without a contract error body"),
    };
    let cause = match status.as_u16() {
        401 | 403 => Cause::CredentialRejected,
        429 => Cause::Throttled,
        _ => Cause::Unexpected,
    };
    UpstreamError::Failed {
        op,
        delivery: Delivery::MaybeSent,
        cause,
        reason,
    }
}

/// A value of a newer contract revision in Q's answer: tolerated and logged, and never read
/// as final (the types map it to their `Unknown` variant).
pub(super) fn note_unknown(op: &'static str, field: &'static str, unknown: bool) {
    if unknown {
        tracing::warn!(
            op,
            field,
            "Q answered a value this contract revision does not define; not taken as final"
        );
    }
}

pub(super) fn failed(
    op: &'static str,
    delivery: Delivery,
    cause: Cause,
    reason: String,
) -> UpstreamError {
    UpstreamError::Failed {
        op,
        delivery,
        cause,
        reason,
    }
}

/// The error and its sources in one line (reqwest hides the useful part in `source()`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
