//! `a2a_http_requests_total` and `a2a_http_request_duration_seconds`: every request counted
//! and timed by the [`RecordRequests`] layer, through series resolved once per label set.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;

use super::{RpcOutcome, DURATION, REQUESTS};
use crate::http::around::Around;

/// The request counter and latency histogram of each label set, resolved once per process:
/// building a metric key per request (a label list, a string per label, the registry's hash
/// lookup, twice) cost more allocations than answering the card itself. The label sets are
/// the ones `a2a_http_requests_total` has anyway: routes, methods, statuses and codes.
#[derive(Default)]
pub struct RequestSeries {
    resolved: std::sync::RwLock<Resolved>,
}

#[derive(Default)]
struct Resolved {
    /// The matched routes seen, by position (a handful: the route table's).
    routes: Vec<Box<str>>,
    handles: std::collections::HashMap<SeriesKey, (metrics::Counter, metrics::Histogram)>,
}

/// Route (its position in `Resolved::routes`), JSON-RPC method, HTTP status, and the JSON-RPC
/// outcome: none off the RPC route or for an HTTP refusal, `Some(None)` for a result,
/// `Some(Some(code))` for an error.
type SeriesKey = (usize, &'static str, u16, Option<Option<i32>>);

impl RequestSeries {
    /// Counts one request and its latency under its labels.
    pub(super) fn record(
        &self,
        route: &str,
        rpc_method: &'static str,
        status: u16,
        rpc_code: Option<Option<i32>>,
        seconds: f64,
    ) {
        {
            let resolved = self.resolved.read().unwrap_or_else(|e| e.into_inner());
            if let Some(at) = resolved.routes.iter().position(|r| &**r == route) {
                if let Some((requests, duration)) =
                    resolved.handles.get(&(at, rpc_method, status, rpc_code))
                {
                    requests.increment(1);
                    duration.record(seconds);
                    return;
                }
            }
        }
        let mut resolved = self.resolved.write().unwrap_or_else(|e| e.into_inner());
        let at = match resolved.routes.iter().position(|r| &**r == route) {
            Some(at) => at,
            None => {
                resolved.routes.push(route.into());
                resolved.routes.len() - 1
            }
        };
        let (requests, duration) = resolved
            .handles
            .entry((at, rpc_method, status, rpc_code))
            .or_insert_with(|| {
                let code = match rpc_code {
                    None => String::new(),
                    Some(None) => "ok".to_owned(),
                    Some(Some(code)) => code.to_string(),
                };
                (
                    metrics::counter!(
                        REQUESTS,
                        "route" => route.to_owned(),
                        "rpc_method" => rpc_method,
                        "status" => status.to_string(),
                        "rpc_code" => code,
                    ),
                    metrics::histogram!(
                        DURATION,
                        "route" => route.to_owned(),
                        "rpc_method" => rpc_method,
                    ),
                )
            });
        requests.increment(1);
        duration.record(seconds);
    }
}

/// The route of a request served without axum's router (which marks its requests with their
/// [`MatchedPath`]): the route template it would have matched.
#[derive(Debug, Clone, Copy)]
pub struct RouteLabel(pub &'static str);

/// The route a request is counted under.
pub enum Route {
    Matched(MatchedPath),
    Label(&'static str),
}

/// Middleware: counts and times every request (run by [`crate::http::around::AroundLayer`]).
#[derive(Clone, Default)]
pub struct RecordRequests(Arc<RequestSeries>);

impl Around for RecordRequests {
    /// When the request came in, and the route it matched.
    type Kept = (Instant, Option<Route>);

    fn before(&self, request: &mut Request) -> Self::Kept {
        let extensions = request.extensions();
        let route = match extensions.get::<RouteLabel>() {
            Some(label) => Some(Route::Label(label.0)),
            None => extensions.get::<MatchedPath>().cloned().map(Route::Matched),
        };
        (Instant::now(), route)
    }

    fn after(&self, (started, matched): Self::Kept, response: Response) -> Response {
        // The RPC route's trailing-slash alias counts as the route itself.
        let route = match &matched {
            Some(Route::Matched(path)) => path.as_str().trim_end_matches('/'),
            Some(Route::Label(label)) => label,
            None => "unmatched",
        };
        let outcome = response.extensions().get::<RpcOutcome>().copied();
        self.0.record(
            route,
            outcome.and_then(|o| o.method).unwrap_or(""),
            response.status().as_u16(),
            outcome.map(|o| o.error_code),
            started.elapsed().as_secs_f64(),
        );
        response
    }
}
