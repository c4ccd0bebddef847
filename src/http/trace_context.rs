//! Middleware: continues the caller's W3C trace (or starts one) for the rest of the request
//! (`crate::trace_context` holds the context and its parsing).

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::trace_context::{from_current_span, scope, TraceContext, TRACEPARENT};

/// Middleware: continues the caller's trace (or starts one) for the rest of the request and
/// records its trace id in the request span.
pub async fn propagate(request: Request, next: Next) -> Response {
    // With OpenTelemetry on, the request span is the hop (already joined to the caller's).
    let context = from_current_span().unwrap_or_else(|| {
        request
            .headers()
            .get(TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .and_then(TraceContext::parse)
            .map(|incoming| incoming.child())
            .unwrap_or_else(TraceContext::new_root)
    });
    tracing::Span::current().record("trace_id", context.trace_id().as_str());
    scope(context, next.run(request)).await
}
