//! The contract routes (`/internal/v1/*`), serving exactly the types of `q-upstream-contract`,
//! one module per route family.

mod agents;
mod approvals;
mod changes;
mod grants;
mod identity;
mod runs;

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
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
        // Innermost first: the answer quirks rewrite what the route answered, a status fault
        // answers instead of the route, and both only once the service token was accepted.
        .route_layer(middleware::from_fn_with_state(state.clone(), answer_quirks))
        .route_layer(middleware::from_fn_with_state(state.clone(), status_fault))
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

/// The name status faults use for the contract route a request matched.
fn route_name(method: &Method, matched: &str) -> Option<&'static str> {
    let route = matched.strip_prefix(PREFIX).unwrap_or(matched);
    Some(match (method.as_str(), route) {
        ("POST", "/identity/introspect") => "introspect",
        ("GET", "/tenants/{tenant_id}/agents/{agent_id}/access") => "agent_access",
        ("POST", "/runs") => "create_run",
        ("GET", "/runs/by-workflow/{workflow_id}") => "run_by_workflow",
        ("GET", "/runs/{run_id}") => "get_run",
        ("POST", "/runs/{run_id}/cancel") => "cancel_run",
        ("GET", "/runs/{run_id}/events") => "run_events",
        ("GET", "/runs/{run_id}/output") => "run_output",
        ("GET", "/runs/{run_id}/approvals") => "approvals",
        ("POST", "/runs/{run_id}/approvals/{approval_id}/approve") => "approve",
        ("GET", "/runs/{run_id}/grants/{principal_id}") => "run_grant",
        ("POST", "/evidence-grants/query") => "evidence_grants",
        ("GET", "/changes/runs") => "run_changes",
        _ => return None,
    })
}

/// Answers with an armed status fault of the route instead of the route (nothing happens).
async fn status_fault(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|m| route_name(req.method(), m.as_str()));
    let fault = match route {
        Some(route) => st.lock().await.faults.take_status(route),
        None => None,
    };
    let Some(fault) = fault else {
        return next.run(req).await;
    };
    tracing::info!(route, status = fault.status, code = ?fault.code, "fault: status answer");
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match fault.code {
        Some(code) => ApiError::new(status, &code, Some("injected".to_owned())).into_response(),
        None if status == StatusCode::UNAUTHORIZED => {
            ApiError::new(status, "unauthorized", None).into_response()
        }
        // What a proxy in front of Q answers: plain text, no contract error code.
        None => (
            status,
            [(header::CONTENT_TYPE, "text/plain")],
            format!(
                "{} {}\n",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            ),
        )
            .into_response(),
    }
}

/// A field no contract revision defines, added to answers under `extra_fields`.
const EXTRA_FIELD: &str = "x_reference_extension";

/// Rewrites successful JSON answers as a newer Q could write them: extra fields, and enum
/// values this contract revision does not define.
async fn answer_quirks(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let (extra, unknown) = {
        let inner = st.lock().await;
        (inner.faults.extra_fields, inner.faults.unknown_enum_values)
    };
    let response = next.run(req).await;
    if !(extra || unknown) || !response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return (parts, axum::body::Body::from(bytes)).into_response();
    };
    rewrite(&mut value, extra, unknown);
    parts.headers.remove(header::CONTENT_LENGTH);
    (parts, Json(value)).into_response()
}

/// Adds the extra field to every object and replaces every enum value of the contract's
/// answers (`status`, `kind`, `evidence`) by one it does not define. Strings that are not
/// enums (`health.status` is not served here) are left alone.
fn rewrite(value: &mut serde_json::Value, extra: bool, unknown: bool) {
    match value {
        serde_json::Value::Object(map) => {
            for v in map.values_mut() {
                rewrite(v, extra, unknown);
            }
            if unknown {
                for (field, replacement) in [
                    ("status", "paused_for_review"),
                    ("kind", "video_call"),
                    ("evidence", "partial"),
                ] {
                    if map.get(field).is_some_and(|v| v.is_string()) {
                        map.insert(field.to_owned(), replacement.into());
                    }
                }
            }
            if extra {
                map.insert(
                    EXTRA_FIELD.to_owned(),
                    serde_json::json!({"added_in": "a later contract revision", "level": 3}),
                );
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                rewrite(v, extra, unknown);
            }
        }
        _ => {}
    }
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
