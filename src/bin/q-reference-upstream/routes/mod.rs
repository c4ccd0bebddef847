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

use crate::breaks::Break;
use crate::contract::{Health, CONTRACT_VERSION, PREFIX};
use crate::error::ApiError;
use crate::faults::consume;
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
        .route("/changes/access", get(changes::access_changes))
        // Innermost first: the answer quirks rewrite what the route answered, a status fault
        // answers instead of the route (once the request is counted), and all of it only once
        // the service token was accepted.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            broken_statuses,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), answer_quirks))
        .route_layer(middleware::from_fn_with_state(state.clone(), hold_answer))
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

/// Every contract route: method, path under the prefix, and the name the gateway gives its
/// call (`src/upstream/mod.rs`), which status faults and `/admin/stats` `requests` use.
pub const CONTRACT_ROUTES: &[(&str, &str, &str)] = &[
    ("GET", "/health", "health"),
    ("POST", "/identity/introspect", "introspect"),
    (
        "GET",
        "/tenants/{tenant_id}/agents/{agent_id}/access",
        "agent_access",
    ),
    ("POST", "/runs", "create_run"),
    ("GET", "/runs/by-workflow/{workflow_id}", "run_by_workflow"),
    ("GET", "/runs/{run_id}", "get_run"),
    ("POST", "/runs/{run_id}/cancel", "cancel_run"),
    ("GET", "/runs/{run_id}/events", "run_events"),
    ("GET", "/runs/{run_id}/output", "run_output"),
    ("GET", "/runs/{run_id}/approvals", "approvals"),
    (
        "POST",
        "/runs/{run_id}/approvals/{approval_id}/approve",
        "approve",
    ),
    ("GET", "/runs/{run_id}/grants/{principal_id}", "run_grant"),
    ("POST", "/evidence-grants/query", "evidence_grants"),
    ("GET", "/changes/runs", "run_changes"),
    ("GET", "/changes/access", "access_changes"),
];

/// The name of the contract route a request matched.
fn route_name(method: &Method, matched: &str) -> Option<&'static str> {
    let route = matched.strip_prefix(PREFIX).unwrap_or(matched);
    CONTRACT_ROUTES
        .iter()
        .find(|(m, path, _)| *m == method.as_str() && *path == route)
        .map(|(_, _, name)| *name)
}

/// Counts the request under its route (`/admin/stats`), then answers with an armed status
/// fault of the route instead of the route (nothing happens). Both under one lock, since
/// every authenticated request passes here.
async fn status_fault(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|m| route_name(req.method(), m.as_str()));
    let fault = match route {
        Some(route) => {
            let mut inner = st.lock().await;
            inner.stats.count(route);
            inner.faults.take_status(route)
        }
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

/// Longest an answer is held by the `hold` fault before it goes out anyway.
const HOLD_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// The `hold` fault: the route computes its answer (reading Q's state as of now), then the
/// answer waits for `POST /admin/barrier/release` before it is sent.
async fn hold_answer(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|m| route_name(req.method(), m.as_str()));
    let held = match route {
        Some(route) => st.lock().await.faults.take_hold(route),
        None => false,
    };
    if !held {
        return next.run(req).await;
    }
    let mut released = st.barrier.subscribe();
    let response = next.run(req).await;
    // Buffered now, so nothing of the answer is read after the barrier.
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    st.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    tracing::info!(route, "fault: answer held until the barrier is released");
    let _ = tokio::time::timeout(HOLD_MAX, released.changed()).await;
    st.held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    (parts, axum::body::Body::from(bytes)).into_response()
}

/// `--break error-statuses`: every `422 invalid` goes out under 400 (a framework's default).
async fn broken_statuses(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    if st.breaks.has(Break::ErrorStatuses) && response.status() == StatusCode::UNPROCESSABLE_ENTITY
    {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
}

/// A field no contract revision defines, added to answers under `extra_fields`.
const EXTRA_FIELD: &str = "x_reference_extension";

/// Rewrites successful JSON answers as a newer Q could write them: extra fields, and enum
/// values this contract revision does not define.
async fn answer_quirks(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|m| route_name(req.method(), m.as_str()));
    let (extra, unknown, pad) = {
        let inner = st.lock().await;
        let pad = route.and_then(|r| inner.faults.pad_answers.get(r).copied());
        (
            inner.faults.extra_fields,
            inner.faults.unknown_enum_values,
            pad,
        )
    };
    let response = next.run(req).await;
    if !(extra || unknown || pad.is_some()) || !response.status().is_success() {
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
    if let (Some(bytes), Some(object)) = (pad, value.as_object_mut()) {
        object.insert(
            "x_padding".to_owned(),
            serde_json::Value::String("x".repeat(bytes as usize)),
        );
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    (parts, Json(value)).into_response()
}

/// Adds the extra field to every object and replaces every enum value of the contract's
/// answers (`status`, `kind`, `evidence`, `principal_evidence`) by one it does not define.
/// Strings that are not enums (`health.status` is not served here) are left alone.
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
                    ("principal_evidence", "partial"),
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
    if consume!(st.lock().await.faults, read_fail_500) {
        Err(ApiError::injected())
    } else {
        Ok(())
    }
}

/// No service token needed, so it is counted here rather than in `status_fault`.
async fn health(State(st): State<AppState>) -> Json<Health> {
    st.lock().await.stats.count("health");
    Json(Health {
        status: "ok".to_owned(),
        contract_version: CONTRACT_VERSION.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    fn doc(relative: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// `(METHOD, path)` of every operation under `paths:` of the OpenAPI file.
    fn openapi_operations(yaml: &str) -> BTreeSet<(String, String)> {
        let mut operations = BTreeSet::new();
        let mut path = None;
        for line in yaml.lines() {
            if line.starts_with("components:") {
                break;
            }
            if let Some(p) = line.strip_prefix("  /").and_then(|l| l.strip_suffix(':')) {
                path = Some(format!("/{p}"));
            } else if let (Some(p), Some(method)) = (
                &path,
                line.strip_prefix("    ").and_then(|l| l.strip_suffix(':')),
            ) {
                if ["get", "post", "put", "delete", "patch"].contains(&method) {
                    operations.insert((method.to_uppercase(), p.clone()));
                }
            }
        }
        operations
    }

    #[test]
    fn every_route_is_served_named_and_documented() {
        let served: BTreeSet<(String, String)> = CONTRACT_ROUTES
            .iter()
            .map(|(m, p, _)| ((*m).to_owned(), format!("{PREFIX}{p}")))
            .collect();
        assert_eq!(served.len(), CONTRACT_ROUTES.len(), "no route twice");
        assert_eq!(
            openapi_operations(&doc("docs/upstream-openapi.yaml")),
            served,
            "docs/upstream-openapi.yaml documents exactly the served routes"
        );
        let prose = doc("docs/upstream-api.md");
        for (method, path) in &served {
            let row = format!("| {method:<4} | `{path}` |");
            assert!(prose.contains(&row), "summary row {row:?}");
            let heading = format!("### `{method} {path}");
            assert!(
                prose.contains(&format!("{heading}`")) || prose.contains(&format!("{heading}?")),
                "section {heading:?}"
            );
        }
        // Status faults apply to every route the service token guards, by the same names.
        let names: BTreeSet<&str> = CONTRACT_ROUTES
            .iter()
            .map(|(_, _, n)| *n)
            .filter(|n| *n != "health")
            .collect();
        let faultable: BTreeSet<&str> = crate::faults::ROUTES.iter().copied().collect();
        assert_eq!(names, faultable);
    }

    #[test]
    fn route_names_follow_the_matched_template() {
        let get = Method::GET;
        assert_eq!(
            route_name(&get, &format!("{PREFIX}/changes/access")),
            Some("access_changes")
        );
        assert_eq!(
            route_name(&get, &format!("{PREFIX}/runs/{{run_id}}")),
            Some("get_run")
        );
        assert_eq!(
            route_name(&Method::POST, &format!("{PREFIX}/runs/{{run_id}}")),
            None
        );
    }
}
