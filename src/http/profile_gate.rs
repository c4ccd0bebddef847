//! The profile gate: while `A2A_SERVER_PROFILE_ENABLED` is false, the hosted profile's routes
//! (per-agent card and RPC) answer 404 exactly like a path that does not exist, for every
//! method, and nothing behind them runs. Other routes are unaffected.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::HttpError;
use crate::server::AppState;

/// Whether `path` belongs to the hosted profile: `/v1/a2a/agents/{id}/rpc` or
/// `/v1/a2a/agents/{id}/.well-known/agent-card.json`.
pub fn is_profile_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/v1/a2a/agents/") else {
        return false;
    };
    match rest.split_once('/') {
        Some((id, tail)) => {
            !id.is_empty() && (tail == "rpc" || tail == ".well-known/agent-card.json")
        }
        None => false,
    }
}

pub async fn gate(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if !state.config.profile_enabled && is_profile_path(request.uri().path()) {
        return HttpError::NotFound.into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::is_profile_path;

    #[test]
    fn recognises_only_profile_routes() {
        assert!(is_profile_path("/v1/a2a/agents/ag-1/rpc"));
        assert!(is_profile_path(
            "/v1/a2a/agents/ag-1/.well-known/agent-card.json"
        ));
        assert!(!is_profile_path("/v1/a2a/agents"));
        assert!(!is_profile_path("/v1/a2a/agents/ag-1"));
        assert!(!is_profile_path("/v1/a2a/agents//rpc"));
        assert!(!is_profile_path("/v1/a2a/tasks"));
        assert!(!is_profile_path("/healthz"));
    }
}
