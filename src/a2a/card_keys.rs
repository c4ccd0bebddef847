//! `GET /v1/a2a/.well-known/jwks.json`: the public keys that verify this gateway's cards, as a
//! JWK Set, when `card_signing.publish_keys` is on (the route does not exist otherwise).
//!
//! Unauthenticated by design: public keys are meant to be handed out, and a partner's verifier
//! may fetch them without a Q credential. Only the public halves are ever written. Cached by
//! clients for at most five minutes: keys change only with a restart, and a rotation
//! publishes the next key well before it signs (docs/rollout.md).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::a2a::ProfileRoutes;
use crate::error::HttpError;

/// Route of the published keys.
pub const JWKS_PATH: &str = "/v1/a2a/.well-known/jwks.json";

pub async fn serve(State(routes): State<Arc<ProfileRoutes>>) -> Response {
    let Some(keys) = routes.card_signer.keys() else {
        return HttpError::NotFound.into_response();
    };
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/jwk-set+json"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            ),
        ],
        keys.jwks().to_string(),
    )
        .into_response()
}
