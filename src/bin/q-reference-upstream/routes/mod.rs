//! The contract routes (`/internal/v1/*`), serving exactly the types of `q-upstream-contract`,
//! one module per route family.

mod agents;
mod approvals;
mod changes;
mod grants;
mod identity;
mod runs;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::Notify;

use crate::contract::{Health, CONTRACT_VERSION, PREFIX};
use crate::error::ApiError;
use crate::faults::take;
use crate::state::AppState;

/// Longest long-poll a caller may ask for.
const MAX_WAIT_MS: u64 = 30_000;

/// Per-connection handle the server inserts into every request: `kill()` makes the server drop
/// the connection without writing a response (the "drop after commit" fault).
#[derive(Clone, Default)]
pub struct ConnKill(pub Arc<Notify>);

impl ConnKill {
    pub fn kill(&self) {
        self.0.notify_one();
    }
}

pub fn router(state: AppState) -> Router<AppState> {
    let protected = Router::new()
        .route("/identity/introspect", post(identity::introspect))
        .route(
            "/tenants/{tenant_id}/agents/{agent_id}/access",
            get(agents::agent_access),
        )
        .route("/runs", post(runs::create_run))
        .route(
            "/runs/by-workflow/{workflow_id}",
            get(runs::get_run_by_workflow),
        )
        .route("/runs/{run_id}", get(runs::get_run))
        .route("/runs/{run_id}/cancel", post(runs::cancel_run))
        .route("/runs/{run_id}/events", get(runs::run_events))
        .route("/runs/{run_id}/output", get(runs::run_output))
        .route("/runs/{run_id}/approvals", get(approvals::run_approvals))
        .route(
            "/runs/{run_id}/approvals/{approval_id}/approve",
            post(approvals::approve),
        )
        .route(
            "/runs/{run_id}/grants/{principal_id}",
            get(grants::run_grant),
        )
        .route("/evidence-grants/query", post(grants::evidence_query))
        .route("/changes/runs", get(changes::run_changes))
        .route_layer(middleware::from_fn_with_state(state, require_service_token));
    Router::new().nest(
        PREFIX,
        Router::new().route("/health", get(health)).merge(protected),
    )
}

async fn require_service_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    if presented != Some(st.fixtures.service_token.as_str()) {
        return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", None).into_response();
    }
    next.run(req).await
}

/// Consumes one `read_fail_500` fault, if any.
async fn read_fault(st: &AppState) -> Result<(), ApiError> {
    if take(&mut st.lock().await.faults.read_fail_500) {
        Err(ApiError::injected())
    } else {
        Ok(())
    }
}

async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        contract_version: CONTRACT_VERSION.to_owned(),
    })
}
