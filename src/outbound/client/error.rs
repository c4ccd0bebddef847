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
    /// Remote: a definite refusal (HTTP 4xx, or a JSON-RPC error carrying the request's id).
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
    let detail = format!("{shown}: {}", error_chain(e));
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
