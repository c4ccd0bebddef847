//! W3C Trace Context: the `traceparent` of each request, carried to Q.
//!
//! The caller's `traceparent`, when valid, keeps its trace id; the gateway's own span for the
//! request gets a new span id and becomes the parent of every call to Q made while serving it.
//! Without a valid header the request starts a new trace. The context lives in a task-local for
//! the duration of the request (set by `crate::http::trace_context`); the upstream client reads
//! it for every call.
//! Calls made outside a request (readiness checks, background work) start a fresh trace each.
//! A task spawned from a handler does not inherit it; none is spawned today.
//!
//! With OpenTelemetry export on (`crate::telemetry`), the spans are real: the request span takes
//! the caller's context as its parent ([`remote_parent`]), and what is sent to Q is the current
//! span's own context ([`from_current_span`]: a `q.call` span), so Q's spans join the trace
//! under the call that caused them.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub const TRACEPARENT: &str = "traceparent";

tokio::task_local! {
    static CURRENT: TraceContext;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

impl TraceContext {
    /// Parses a `traceparent` header (version 00, or a later version read as 00 allows).
    pub fn parse(header: &str) -> Option<TraceContext> {
        let header = header.trim();
        let version = header.get(0..2)?;
        if version == "ff" || !is_lower_hex(version) {
            return None;
        }
        // Version 00 is exactly 55 characters; later versions may append `-...` fields.
        if version == "00" && header.len() != 55 {
            return None;
        }
        if header.len() < 55 || (header.len() > 55 && header.as_bytes()[55] != b'-') {
            return None;
        }
        let fields: Vec<&str> = header[..55].split('-').collect();
        let [_, trace, span, flags] = fields.as_slice() else {
            return None;
        };
        let trace_id: [u8; 16] = decode_hex(trace)?;
        let span_id: [u8; 8] = decode_hex(span)?;
        let [flags]: [u8; 1] = decode_hex(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags,
        })
    }

    /// A new trace, sampled.
    pub fn new_root() -> TraceContext {
        TraceContext {
            trace_id: *uuid::Uuid::new_v4().as_bytes(),
            span_id: new_span_id(),
            flags: 0x01,
        }
    }

    /// The same trace under a new span (this hop).
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: new_span_id(),
            ..*self
        }
    }

    /// The trace id in lower-case hex, written into `out`.
    pub fn trace_id_into<'a>(&self, out: &'a mut [u8; 32]) -> &'a str {
        hex::encode_to_slice(self.trace_id, out).expect("32 hex digits for 16 bytes");
        std::str::from_utf8(out).expect("hex digits are ASCII")
    }

    pub fn header_value(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            self.flags
        )
    }
}

/// The current span's context when OpenTelemetry records it, else the context of the request
/// being served, or a fresh trace outside any request.
pub fn current_or_new() -> TraceContext {
    from_current_span().unwrap_or_else(|| {
        CURRENT
            .try_with(|c| *c)
            .unwrap_or_else(|_| TraceContext::new_root())
    })
}

/// Whether spans are exported: set by `crate::telemetry::init` when it installs the
/// OpenTelemetry layer. Without that layer no span has an OpenTelemetry context, and asking
/// a span for one costs a lookup of the current span, a clone of it and its release (the
/// span registry's shared slab, three times) on every request for nothing.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Says that spans are exported from now on (`crate::telemetry::init`).
pub fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// The OpenTelemetry context of the current `tracing` span, if export is on and the span has
/// one.
pub fn from_current_span() -> Option<TraceContext> {
    if !EXPORTING.load(Ordering::Relaxed) {
        return None;
    }
    from_span(&tracing::Span::current())
}

/// The OpenTelemetry context of `span`, if export is on and the span has one.
pub fn from_span(span: &tracing::Span) -> Option<TraceContext> {
    if !EXPORTING.load(Ordering::Relaxed) {
        return None;
    }
    let context = span.context();
    let span = context.span();
    let sc = span.span_context();
    sc.is_valid().then(|| TraceContext {
        trace_id: sc.trace_id().to_bytes(),
        span_id: sc.span_id().to_bytes(),
        flags: sc.trace_flags().to_u8(),
    })
}

/// The caller's `traceparent` as an OpenTelemetry parent context.
pub fn remote_parent(header: &str) -> Option<opentelemetry::Context> {
    let incoming = TraceContext::parse(header)?;
    let sc = SpanContext::new(
        TraceId::from_bytes(incoming.trace_id),
        SpanId::from_bytes(incoming.span_id),
        TraceFlags::new(incoming.flags & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    );
    Some(opentelemetry::Context::new().with_remote_span_context(sc))
}

/// `future`, run with `context` as the current request's trace context.
pub fn scope<F: std::future::Future>(
    context: TraceContext,
    future: F,
) -> tokio::task::futures::TaskLocalFuture<TraceContext, F> {
    CURRENT.scope(context, future)
}

fn new_span_id() -> [u8; 8] {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut id = [0u8; 8];
    id.copy_from_slice(&bytes[8..]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn decode_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2 || !is_lower_hex(s) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_the_spec_example_and_keeps_the_trace_id_in_a_child() {
        let c = TraceContext::parse(VALID).unwrap();
        assert_eq!(c.header_value(), VALID);
        let child = c.child();
        assert_eq!(
            child.trace_id_into(&mut [0; 32]),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_ne!(child.header_value(), VALID);
        assert!(child.header_value().ends_with("-01"));
    }

    #[test]
    fn refuses_malformed_headers() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad:?}");
        }
        // A later version may carry more fields.
        assert!(TraceContext::parse(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"
        )
        .is_some());
    }

    #[test]
    fn new_roots_are_valid_and_distinct() {
        let a = TraceContext::new_root();
        let b = TraceContext::new_root();
        assert_ne!(a.trace_id_into(&mut [0; 32]), b.trace_id_into(&mut [0; 32]));
        assert_eq!(TraceContext::parse(&a.header_value()), Some(a));
    }
}
