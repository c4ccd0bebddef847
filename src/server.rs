//! Assembles the gateway: shared state, the route table and the HTTP stack, and serves it with
//! graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::HeaderName;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::a2a::cursor::CursorCodec;
use crate::a2a::{card, rpc};
use crate::auth::Authenticator;
use crate::config::Config;
use crate::error::HttpError;
use crate::http::profile_gate;
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
            CursorCodec::new(config.cursor_key.as_bytes())
        };
        let outbound = Outbound::new(&config)?;
        Ok(AppState {
            outbound,
            config,
            store,
            upstream,
            auth,
            cursors,
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
        .route("/healthz", get(|| async { "ok" }))
        .fallback(|| async { HttpError::NotFound.into_response() });

    routes
        // Off by default: the profile's routes 404 until enabled; runs before any handler.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            profile_gate::gate,
        ))
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

/// Serves until `shutdown` resolves, then stops accepting and lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
