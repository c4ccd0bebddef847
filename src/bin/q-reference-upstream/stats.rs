//! What the reference upstream records about the requests it served, for `/admin/stats` and
//! `/admin/last-traceparent`.

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Stats {
    /// `POST /internal/v1/runs` requests that passed authentication.
    pub create_requests: u64,
    /// Runs actually created (idempotent replays excluded).
    pub runs_created: u64,
    /// `POST /internal/v1/identity/introspect` requests that passed authentication.
    pub introspect_requests: u64,
    /// Requests per contract route, by the gateway's name for the call (`get_run`,
    /// `agent_access`, ...): every request that passed authentication (all of them for
    /// `health`), also one a fault answered. Routes never called are absent.
    pub requests: BTreeMap<&'static str, u64>,
}

impl Stats {
    /// One more request of this route.
    pub fn count(&mut self, route: &'static str) {
        *self.requests.entry(route).or_default() += 1;
    }
}

/// One contract request as received: its `traceparent` header (or its absence), the workflow
/// id it names (a create's body, a lookup's path) and the status it was answered with.
#[derive(Debug, Clone, Serialize)]
pub struct SeenTraceparent {
    /// Arrival order, from 1.
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// `None` while the answer is not written yet (or the connection was dropped without one).
    pub status: Option<u16>,
    /// The `error` code of an error answer; `None` for a success or a body without one (an
    /// injected proxy answer), so Q's own `run_not_found` is told apart from a proxy's 404.
    pub error: Option<String>,
}

/// How many recent requests are kept.
pub const TRACEPARENTS_KEPT: usize = 4096;
