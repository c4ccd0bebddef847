//! `POST /internal/v1/identity/introspect`.

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::contract::{IntrospectRequest, Introspection};
use crate::error::ApiError;
use crate::faults::consume;
use crate::state::AppState;

pub(super) async fn introspect(
    State(st): State<AppState>,
    body: Result<Json<IntrospectRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let inactive = || Json(json!({ "active": false })).into_response();
    let delay = {
        let mut inner = st.lock().await;
        inner.stats.introspect_requests += 1;
        inner.faults.take_introspect_delay()
    };
    if let Some(delay) = delay {
        tracing::info!(?delay, "fault: delaying introspection");
        tokio::time::sleep(delay).await;
    }
    let req = {
        let mut inner = st.lock().await;
        if consume!(inner.faults, introspect_fail_500) {
            return Err(ApiError::injected());
        }
        let Json(req) = body?;
        if inner.revoked_tokens.contains(&req.token) {
            return Ok(inactive());
        }
        req
    };
    let found = st
        .fixtures
        .token(&req.token)
        .filter(|t| !t.expired)
        .and_then(|t| Some((t, st.fixtures.principal(&t.principal)?)));
    let Some((token, principal)) = found else {
        // Exactly `{"active": false}`: the other fields are absent.
        return Ok(inactive());
    };
    let features = st
        .fixtures
        .tenant(&principal.tenant)
        .map(|t| t.features.clone())
        .unwrap_or_default();
    Ok(Json(Introspection {
        active: true,
        tenant_id: Some(principal.tenant.clone()),
        principal_id: Some(principal.id.clone()),
        scopes: token.scopes.clone(),
        tenant_features: features,
    })
    .into_response())
}
