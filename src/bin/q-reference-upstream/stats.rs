//! What the reference upstream records about the requests it served, for `/admin/stats` and
//! `/admin/last-traceparent`.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Stats {
    /// `POST /internal/v1/runs` requests that passed authentication.
    pub create_requests: u64,
    /// Runs actually created (idempotent replays excluded).
    pub runs_created: u64,
    /// `POST /internal/v1/identity/introspect` requests that passed authentication.
    pub introspect_requests: u64,
}

/// A `traceparent` header (or its absence) on one contract request.
#[derive(Debug, Clone, Serialize)]
pub struct SeenTraceparent {
    pub method: String,
    pub path: String,
    pub traceparent: Option<String>,
}

/// How many recent `traceparent`s are kept.
pub const TRACEPARENTS_KEPT: usize = 256;
