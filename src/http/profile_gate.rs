//! The profile gate: while `A2A_SERVER_PROFILE_ENABLED` is false, the hosted profile's routes
//! (per-agent card, and RPC with or without a trailing slash) answer 404 exactly like a path that
//! does not exist, for every method, and nothing behind them runs. The router attaches this layer
//! to those routes only, so no other route can be affected by it, and only while the profile is
//! off (the setting is fixed at start-up): with it on, the routes have no gate to pass.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::HttpError;

/// Whether the hosted profile is enabled (fixed at start-up).
#[derive(Debug, Clone, Copy)]
pub struct ProfileEnabled(pub bool);

pub async fn gate(
    State(ProfileEnabled(enabled)): State<ProfileEnabled>,
    request: Request,
    next: Next,
) -> Response {
    if !enabled {
        return HttpError::NotFound.into_response();
    }
    next.run(request).await
}
