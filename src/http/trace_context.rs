//! Middleware: continues the caller's W3C trace (or starts one) for the rest of the request
//! (`crate::trace_context` holds the context and its parsing).

use std::task::{Context, Poll};

use axum::extract::Request;
use tokio::task::futures::TaskLocalFuture;
use tower::{Layer, Service};

use crate::trace_context::{from_span, scope, TraceContext, TRACEPARENT};

/// Middleware: continues the caller's trace (or starts one) for the rest of the request and
/// records its trace id in the request span. The rest of the stack runs inside the trace
/// context's task-local scope, its own future unboxed (`crate::http::around` says why).
#[derive(Clone, Copy, Default)]
pub struct PropagateLayer;

impl<S> Layer<S> for PropagateLayer {
    type Service = Propagate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Propagate { inner }
    }
}

#[derive(Clone)]
pub struct Propagate<S> {
    inner: S,
}

impl<S: Service<Request>> Service<Request> for Propagate<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = TaskLocalFuture<TraceContext, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The request span (`app::request_span`, entered around this call).
        let span = tracing::Span::current();
        // With OpenTelemetry on, the request span is the hop (already joined to the caller's).
        let context = from_span(&span).unwrap_or_else(|| {
            request
                .headers()
                .get(TRACEPARENT)
                .and_then(|v| v.to_str().ok())
                .and_then(TraceContext::parse)
                .map(|incoming| incoming.child())
                .unwrap_or_else(TraceContext::new_root)
        });
        let mut trace_id = [0; 32];
        span.record("trace_id", context.trace_id_into(&mut trace_id));
        scope(context, self.inner.call(request))
    }
}
