//! Assembles the gateway: shared state, the route table and the HTTP stack, and serves it
//! (plain TCP or TLS) with graceful shutdown bounded by `shutdown_grace_seconds`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderName;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::a2a::cursor::CursorCodec;
use crate::a2a::{card, rpc};
use crate::auth::Authenticator;
use crate::config::Config;
use crate::error::HttpError;
use crate::health::{self, Readiness};
use crate::http::first_bytes::FirstBytesDeadline;
use crate::http::rate_limit::PrincipalRateLimit;
use crate::http::{profile_gate, retired, trace_context};
use crate::lease::ObserverLeases;
use crate::outbound::{delegation, registrations, Outbound};
use crate::store::migrate::STATUS_MIGRATION;
use crate::store::PgTaskStore;
use crate::upstream::UpstreamRunApi;

/// Everything a request handler may use.
pub struct AppState {
    pub config: Config,
    pub store: PgTaskStore,
    pub upstream: UpstreamRunApi,
    pub auth: Authenticator,
    pub cursors: CursorCodec,
    pub leases: ObserverLeases,
    pub rate_limit: PrincipalRateLimit,
    /// Turns true when the gateway drains for shutdown: open streams end cleanly.
    pub drain: tokio::sync::watch::Sender<bool>,
    pub readiness: Readiness,
    /// Remote agents: policy-enforcing client and credential keys.
    pub outbound: Outbound,
}

impl AppState {
    pub fn new(config: Config) -> anyhow::Result<Self> {
        let store = PgTaskStore::connect(&config.database)?;
        let upstream = UpstreamRunApi::new(&config.upstream)?;
        let auth = Authenticator::new(
            upstream.clone(),
            Duration::from_millis(config.auth.cache_ttl_ms),
            config.auth.cache_capacity,
        );
        let cursors = if config.cursor_key.is_empty() {
            tracing::warn!("no cursor_key configured: ListTasks page tokens are signed with a per-process key and do not survive a restart or move between replicas");
            let random: Vec<u8> = (0..4)
                .flat_map(|_| *uuid::Uuid::new_v4().as_bytes())
                .collect();
            CursorCodec::new(&random)
        } else {
            CursorCodec::new(config.cursor_key.expose().as_bytes())
        };
        let leases = ObserverLeases::new(&config.redis, config.observers.clone())?;
        let rate_limit = PrincipalRateLimit::new(&config.rate_limit);
        let outbound = Outbound::new(&config)?;
        Ok(AppState {
            outbound,
            config,
            store,
            upstream,
            auth,
            cursors,
            leases,
            rate_limit,
            drain: tokio::sync::watch::channel(false).0,
            readiness: Readiness::default(),
        })
    }
}

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The route table and stack, outermost layer first.
pub fn router(state: Arc<AppState>) -> Router {
    let routes = Router::new()
        .route(
            "/v1/a2a/agents/{agent_id}/.well-known/agent-card.json",
            get(card::serve),
        )
        .route("/v1/a2a/agents/{agent_id}/rpc", post(rpc::serve))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(retired::router())
        // Outbound management and delegation: their own auth and validation, not behind the
        // profile gate (docs/outbound.md).
        .route(
            "/v1/a2a/agents",
            get(registrations::list).post(registrations::create),
        )
        .route(
            "/v1/a2a/agents/{agent_id}",
            get(registrations::get)
                .patch(registrations::update)
                .delete(registrations::delete),
        )
        .route(
            "/v1/a2a/agents/{agent_id}/discover",
            post(registrations::discover),
        )
        .route("/v1/a2a/tasks", post(delegation::delegate))
        .fallback(|| async { HttpError::NotFound.into_response() });

    routes
        // Off by default: the profile's routes 404 until enabled; runs before any handler.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            profile_gate::gate,
        ))
        // Continues the caller's W3C trace (or starts one) into every call to Q.
        .layer(axum::middleware::from_fn(trace_context::propagate))
        // Counts and times every answer, the gate's 404s and the retired routes' 410s included.
        .layer(axum::middleware::from_fn(crate::metrics::record))
        .layer(
            ServiceBuilder::new()
                // Every request gets an id (or keeps the proxy's), echoed on the response.
                .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuid))
                // One span per request: id, method, path; RPC stages add tenant, principal,
                // rpc_method. Never headers: they carry credentials.
                .layer(
                    TraceLayer::new_for_http().make_span_with(|request: &Request| {
                        let request_id = request
                            .headers()
                            .get(&REQUEST_ID)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-");
                        tracing::info_span!(
                            "request",
                            request_id,
                            http_method = %request.method(),
                            path = %request.uri().path(),
                            trace_id = tracing::field::Empty,
                            tenant = tracing::field::Empty,
                            principal = tracing::field::Empty,
                            rpc_method = tracing::field::Empty,
                        )
                    }),
                )
                .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone())),
        )
        .with_state(state)
}

/// Refuses to serve an enabled profile on a database without the status migration.
pub async fn check_rollout(state: &AppState) -> anyhow::Result<()> {
    if !state.config.profile_enabled {
        return Ok(());
    }
    let applied = state
        .store
        .migration_applied(STATUS_MIGRATION)
        .await
        .map_err(|e| anyhow::anyhow!("cannot check migrations: {e}"))?;
    if !applied {
        anyhow::bail!(
            "A2A_SERVER_PROFILE_ENABLED=true but migration {STATUS_MIGRATION} is not applied; run `q-a2a-gateway migrate` first"
        );
    }
    Ok(())
}

/// Serves until `shutdown` resolves, then stops accepting (new connections are refused), lets
/// in-flight requests finish for at most `grace`, and returns; whatever is still running then
/// is abandoned. With `tls`, every connection is a TLS connection (HTTP/2 or HTTP/1.1 by ALPN).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    tls: Option<TlsAcceptor>,
    grace: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    // Slow or silent clients must not hold connections: a deadline on the bytes that decide the
    // protocol, then hyper's HTTP/1 header read timeout (which needs a timer to run at all).
    let header_timeout = Duration::from_secs(state.config.limits.header_read_timeout_seconds);
    let app = router(state);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(connection) => connection,
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            app.clone().oneshot(request.map(Body::new))
        });
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let result = match tls {
                None => {
                    let stream = FirstBytesDeadline::new(stream, header_timeout);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    let stream = FirstBytesDeadline::new(stream, header_timeout);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(
        grace_seconds = grace.as_secs(),
        "shutdown requested: no new connections; finishing in-flight requests"
    );
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace elapsed; abandoning the requests still in flight");
    }
}

/// Longest a client may take to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
