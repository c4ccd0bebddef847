//! Prometheus metrics, served on their own listener (`metrics_listen`), never through the
//! proxied A2A listener.
//!
//! - `a2a_http_requests_total{route, rpc_method, status, rpc_code}`: every request, by matched
//!   route (`unmatched` otherwise), JSON-RPC method (`""` off the RPC route, `unknown` for a
//!   method the gateway does not know), HTTP status and JSON-RPC outcome (`ok`, the error code,
//!   or `""` when no JSON-RPC answer was produced).
//! - `a2a_http_request_duration_seconds{route, rpc_method}`: latency histogram.
//! - `a2a_upstream_errors_total{op, kind}`: failed calls to Q by operation and
//!   `UpstreamError::kind()` (`refused`, `unreachable`, `ambiguous`).
//! - `a2a_reconciler_backlog`: tasks whose dispatch is `pending` or `unknown`, refreshed every
//!   few seconds from the store.
//! - `a2a_observer_leases{scope="global"}`: observer leases live in Redis across all replicas,
//!   refreshed with the backlog; tenant and principal counts are not exported (one series per
//!   tenant or principal would be unbounded).
//! - `a2a_observer_leases_held`: leases held by this replica's streams, subscriptions and
//!   blocking sends right now.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

pub const REQUESTS: &str = "a2a_http_requests_total";
pub const DURATION: &str = "a2a_http_request_duration_seconds";
pub const UPSTREAM_ERRORS: &str = "a2a_upstream_errors_total";
pub const RECONCILER_BACKLOG: &str = "a2a_reconciler_backlog";
pub const LEASES: &str = "a2a_observer_leases";
pub const LEASES_HELD: &str = "a2a_observer_leases_held";
pub const RETIRED_HITS: &str = "a2a_retired_route_hits_total";

/// How often the backlog gauge is refreshed.
pub const BACKLOG_REFRESH: Duration = Duration::from_secs(2);

/// Latency buckets (seconds): fast refusals up to the 110 s observation window.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// What the RPC route tells the metrics layer about its answer (a response extension).
#[derive(Debug, Clone, Copy, Default)]
pub struct RpcOutcome {
    /// The method, when the envelope named one (`unknown` for a name the gateway lacks).
    pub method: Option<&'static str>,
    /// `None`: success, `Some(code)`: a JSON-RPC error. Absent extension: HTTP refusal.
    pub error_code: Option<i32>,
}

/// Installs the process-wide recorder; call once, before serving.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let recorder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| anyhow::anyhow!("metrics buckets: {e}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))?;
    metrics::describe_counter!(
        REQUESTS,
        "HTTP requests by route, JSON-RPC method and outcome"
    );
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "HTTP request latency by route and JSON-RPC method"
    );
    metrics::describe_counter!(UPSTREAM_ERRORS, "Failed calls to Q by operation and kind");
    metrics::describe_gauge!(
        RECONCILER_BACKLOG,
        "Tasks whose dispatch to Q is pending or unknown"
    );
    metrics::describe_gauge!(LEASES, "Observer leases live in Redis, by scope");
    metrics::describe_gauge!(LEASES_HELD, "Observer leases held by this replica");
    Ok(handle)
}

/// Middleware: counts and times every request.
pub async fn record(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        // The RPC route's trailing-slash alias counts as the route itself.
        .map(|p| p.as_str().trim_end_matches('/').to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let response = next.run(request).await;
    let outcome = response.extensions().get::<RpcOutcome>().copied();
    let rpc_method = outcome.and_then(|o| o.method).unwrap_or("");
    let rpc_code = match outcome {
        None => String::new(),
        Some(RpcOutcome {
            error_code: None, ..
        }) => "ok".to_owned(),
        Some(RpcOutcome {
            error_code: Some(code),
            ..
        }) => code.to_string(),
    };
    metrics::counter!(
        REQUESTS,
        "route" => route.clone(),
        "rpc_method" => rpc_method,
        "status" => response.status().as_u16().to_string(),
        "rpc_code" => rpc_code,
    )
    .increment(1);
    metrics::histogram!(DURATION, "route" => route, "rpc_method" => rpc_method)
        .record(started.elapsed().as_secs_f64());
    response
}

pub fn upstream_error(op: &'static str, kind: &'static str) {
    metrics::counter!(UPSTREAM_ERRORS, "op" => op, "kind" => kind).increment(1);
}

/// Serves `GET /metrics` on its own listener until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = Arc::new(handle);
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                handle.run_upkeep();
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    handle.render(),
                )
                    .into_response()
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the metrics listener (port 0 picks a free port).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the metrics listener {addr}: {e}"))
}
