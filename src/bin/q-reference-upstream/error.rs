//! The contract's error answers: a status code plus `ErrorBody`.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::contract::{ErrorBody, RunStatus};

/// A contract error: status code plus `ErrorBody`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: Option<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                error: code.to_owned(),
                message,
            },
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            Some(message.into()),
        )
    }

    pub fn run_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "run_not_found", None)
    }

    pub fn agent_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "agent_not_found", None)
    }

    pub fn injected() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            Some("injected fault".to_owned()),
        )
    }

    pub fn run_terminal(status: RunStatus) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "run_terminal",
            Some(format!("run is already {}", status_name(status))),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::invalid(r.body_text())
    }
}

/// The status as it reads on the wire (`awaiting_approval`).
pub fn status_name(status: RunStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
