//! Why an outbound call has no usable answer, and whether its request may have reached the
//! remote.

use serde_json::Value;

use crate::outbound::policy::{PolicyRefusal, ResolveFailure};
use crate::upstream::{error_chain, Delivery};

/// Why an outbound call has no usable answer. Each variant says where it came from and,
/// through [`OutboundError::delivery`], whether the request may have reached the remote,
/// which decides whether it may ever be sent again.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OutboundError {
    /// Local: the policy refused the URL or every address; nothing left the gateway.
    #[error(transparent)]
    Policy(#[from] PolicyRefusal),
    /// Network or remote, without a definite answer (timeout, reset, 5xx, 3xx, oversized,
    /// unparseable or uncorrelated answer), or a connection that was never made.
    #[error("remote call failed ({delivery:?}, {reason}): {detail}")]
    Transport {
        delivery: Delivery,
        reason: &'static str,
        detail: String,
    },
    /// Remote: a definite refusal ([`refuses_definitely`], [`rpc_refuses_definitely`]).
    #[error("remote refused ({reason}): {message}")]
    Refused {
        reason: &'static str,
        http_status: u16,
        rpc_code: Option<i64>,
        message: String,
    },
}

impl OutboundError {
    /// `NotSent` only when the request certainly never reached the remote.
    pub fn delivery(&self) -> Delivery {
        match self {
            OutboundError::Policy(_) => Delivery::NotSent,
            OutboundError::Transport { delivery, .. } => *delivery,
            // The remote saw the request and said no.
            OutboundError::Refused { .. } => Delivery::MaybeSent,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            OutboundError::Policy(r) => r.reason,
            OutboundError::Transport { reason, .. } | OutboundError::Refused { reason, .. } => {
                reason
            }
        }
    }

    pub(super) fn transport(
        delivery: Delivery,
        reason: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        OutboundError::Transport {
            delivery,
            reason,
            detail: detail.into(),
        }
    }

    pub(super) fn ambiguous(reason: &'static str, detail: impl Into<String>) -> Self {
        Self::transport(Delivery::MaybeSent, reason, detail)
    }

    /// The error as the JSON the management and delegation APIs show.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::json!({
            "reason": self.reason(),
            "message": self.to_string(),
            "mayHaveReachedRemote": self.delivery() == Delivery::MaybeSent,
        });
        if let OutboundError::Refused {
            http_status,
            rpc_code,
            ..
        } = self
        {
            v["httpStatus"] = (*http_status).into();
            if let Some(code) = rpc_code {
                v["rpcCode"] = (*code).into();
            }
        }
        v
    }
}

/// Whether an HTTP status of the remote's endpoint refuses the request for good: a 4xx, except
/// 408 (timeout), 425 (too early) and 429 (rate limit), which say "not now" and leave the
/// outcome open. 5xx answers never get here (they are ambiguous before the body is read).
pub fn refuses_definitely(status: u16) -> bool {
    (400..500).contains(&status) && !matches!(status, 408 | 425 | 429)
}

/// Whether a JSON-RPC error code refuses the request for good: the protocol's own refusals of
/// a request it understood (parse, invalid request, unknown method, invalid params) and the
/// A2A errors that name what the remote does not have or support. -32603 (internal), -32006
/// (the agent's own answer was invalid) and codes neither defines (e.g. a server's -32000
/// "busy") are no evidence that the remote did not act: the outcome is unknown.
pub fn rpc_refuses_definitely(code: i64) -> bool {
    use a2a::error_code::*;
    [
        PARSE_ERROR,
        INVALID_REQUEST,
        METHOD_NOT_FOUND,
        INVALID_PARAMS,
        TASK_NOT_FOUND,
        TASK_NOT_CANCELABLE,
        PUSH_NOTIFICATION_NOT_SUPPORTED,
        UNSUPPORTED_OPERATION,
        CONTENT_TYPE_NOT_SUPPORTED,
        EXTENDED_CARD_NOT_CONFIGURED,
        EXTENSION_SUPPORT_REQUIRED,
        VERSION_NOT_SUPPORTED,
    ]
    .iter()
    .any(|c| i64::from(*c) == code)
}

/// The error's text with the full request URL (query string included, which may carry a
/// secret) replaced by `shown`, `scheme://host:port/path`.
pub(super) fn chain_without_url(e: &reqwest::Error, shown: &str) -> String {
    let text = error_chain(e);
    match e.url() {
        Some(url) => text.replace(url.as_str(), shown),
        None => text,
    }
}

pub(super) fn classify_send(e: &reqwest::Error, shown: &str) -> OutboundError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(refusal) = err.downcast_ref::<PolicyRefusal>() {
            return OutboundError::Policy(refusal.clone());
        }
        if let Some(failure) = err.downcast_ref::<ResolveFailure>() {
            // No address, so no connection: certainly not sent.
            return OutboundError::transport(
                Delivery::NotSent,
                failure.reason,
                format!("{shown}: {failure}"),
            );
        }
        source = err.source();
    }
    let detail = format!("{shown}: {}", chain_without_url(e, shown));
    if e.is_connect() {
        let reason = if e.is_timeout() {
            "connect_timeout"
        } else {
            "connect"
        };
        OutboundError::transport(Delivery::NotSent, reason, detail)
    } else if e.is_timeout() {
        OutboundError::ambiguous("timeout", detail)
    } else {
        OutboundError::ambiguous("connection", detail)
    }
}
