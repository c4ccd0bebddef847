//! Routes of the pre-1.0 gateway, retired with HTTP 410.
//!
//! They used non-standard shapes and volatile, process-only tasks. Each answers 410 `gone`
//! with its replacement and a link into `docs/migration.md`, for every caller, whether or not
//! the A2A profile is enabled, and before any authentication: there is nothing behind them.
//!
//! Who still calls them: when a call carries a bearer credential, the answer (always the same
//! 410, at once) is followed in the background by identifying the caller through Q's
//! introspection (cached like every route's) and counting the call for its tenant, per route
//! and day, in PostgreSQL (`q-a2a-gateway retired-report` prints the table), with a log line
//! naming the tenant. At most [`MAX_ATTRIBUTIONS`] identifications run at once: beyond that,
//! and for calls without a credential or with one Q does not know, only the metric
//! `a2a_retired_route_hits_total{route, attribution}` counts the call.
//!
//! Not retired, and deliberately absent here: `/v1/a2a/agents` (outbound registrations) and
//! `POST /v1/a2a/tasks` (the delegation wrapper). `GET /v1/a2a/tasks` is retired, so its
//! method router answers other methods with 404 rather than 405, leaving `POST` to the wrapper.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use tokio::sync::Semaphore;

use crate::auth::bearer_token;
use crate::error::HttpError;
use crate::http::authorize::Authorizer;
use crate::metrics::RETIRED_HITS;
use crate::store::retired::PgRetiredHits;

/// Most identifications of retired-route callers running at once.
pub const MAX_ATTRIBUTIONS: usize = 8;

/// What the retired routes use to attribute calls to tenants.
pub struct RetiredRoutes {
    authorizer: Arc<Authorizer>,
    hits: PgRetiredHits,
    permits: Arc<Semaphore>,
}

impl RetiredRoutes {
    pub fn new(authorizer: Arc<Authorizer>, hits: PgRetiredHits) -> Self {
        RetiredRoutes {
            authorizer,
            hits,
            permits: Arc::new(Semaphore::new(MAX_ATTRIBUTIONS)),
        }
    }

    /// Counts the call, and attributes it in the background when it carries a credential.
    fn attribute(&self, route: &'static str, headers: &HeaderMap) {
        let count = move |attribution: &'static str| {
            metrics::counter!(RETIRED_HITS, "route" => route, "attribution" => attribution)
                .increment(1)
        };
        if bearer_token(headers).is_none() {
            return count("anonymous");
        }
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return count("skipped");
        };
        // Only the credential is needed: no other header, nor the body, leaves this handler.
        let mut credential = HeaderMap::new();
        if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
            credential.insert(axum::http::header::AUTHORIZATION, value.clone());
        }
        let authorizer = self.authorizer.clone();
        let hits = self.hits.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match authorizer.identify(&credential).await {
                Ok(principal) => {
                    tracing::info!(
                        route,
                        tenant = %principal.tenant_id,
                        principal = %principal.principal_id,
                        "retired route called"
                    );
                    match hits.record(&principal.tenant_id, route).await {
                        Ok(()) => count("tenant"),
                        Err(e) => {
                            tracing::warn!(error = %e, route, "retired route call not recorded");
                            count("error")
                        }
                    }
                }
                Err(HttpError::IdentityUnavailable { .. }) => count("error"),
                Err(_) => count("invalid_token"),
            }
        });
    }
}

/// A retired route: what replaces it and where the migration guide explains it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retirement {
    pub replacement: &'static str,
    pub guide: &'static str,
}

const SEND: Retirement = Retirement {
    replacement:
        "POST /v1/a2a/agents/{agent_id}/rpc with JSON-RPC method SendMessage (A2A-Version: 1.0)",
    guide: "docs/migration.md#sendmessage",
};
const GET_TASK: Retirement = Retirement {
    replacement:
        "POST /v1/a2a/agents/{agent_id}/rpc with JSON-RPC method GetTask (A2A-Version: 1.0)",
    guide: "docs/migration.md#gettask",
};
const LIST_TASKS: Retirement = Retirement {
    replacement:
        "POST /v1/a2a/agents/{agent_id}/rpc with JSON-RPC method ListTasks (A2A-Version: 1.0)",
    guide: "docs/migration.md#listtasks",
};
const CANCEL_TASK: Retirement = Retirement {
    replacement:
        "POST /v1/a2a/agents/{agent_id}/rpc with JSON-RPC method CancelTask (A2A-Version: 1.0)",
    guide: "docs/migration.md#canceltask",
};
const CARDS: Retirement = Retirement {
    replacement: "GET /v1/a2a/agents/{agent_id}/.well-known/agent-card.json (one authenticated card per agent)",
    guide: "docs/migration.md#agent-cards",
};
const LOCAL_Q_TASKS: Retirement = Retirement {
    replacement: "POST /v1/a2a/agents/{agent_id}/rpc with JSON-RPC method SendMessage, for an agent created through Q's agent API",
    guide: "docs/migration.md#local-q-tasks",
};

/// Every retired method and path, with what replaces it (the table in `docs/migration.md`).
pub const RETIRED: &[(&str, &str, Retirement)] = &[
    ("POST", "/v1/a2a/message/send", SEND),
    ("POST", "/v1/a2a/tasks/send", SEND),
    ("POST", "/v1/a2a/tasks/get", GET_TASK),
    ("GET", "/v1/a2a/tasks/{id}", GET_TASK),
    ("GET", "/v1/a2a/tasks", LIST_TASKS),
    ("POST", "/v1/a2a/tasks/list", LIST_TASKS),
    ("POST", "/v1/a2a/tasks/cancel", CANCEL_TASK),
    ("POST", "/v1/a2a/tasks/{id}/cancel", CANCEL_TASK),
    ("GET", "/v1/a2a/cards", CARDS),
    ("GET", "/v1/a2a/.well-known/agents", CARDS),
    ("GET", "/v1/a2a/.well-known/agent.json", CARDS),
    ("POST", "/v1/a2a/local/{skill}", LOCAL_Q_TASKS),
];

fn gone(
    route: &'static str,
    r: Retirement,
) -> impl Fn(State<Arc<RetiredRoutes>>, HeaderMap) -> std::future::Ready<Response> + Clone {
    move |State(routes): State<Arc<RetiredRoutes>>, headers: HeaderMap| {
        routes.attribute(route, &headers);
        std::future::ready(
            HttpError::Gone {
                replacement: r.replacement,
                guide: r.guide,
            }
            .into_response(),
        )
    }
}

async fn not_found() -> Response {
    HttpError::NotFound.into_response()
}

/// The retired routes, to merge into the main router.
pub fn router(routes: Arc<RetiredRoutes>) -> Router {
    let mut router = Router::new();
    for (method, path, retirement) in RETIRED {
        let route: MethodRouter<Arc<RetiredRoutes>> = match *method {
            "GET" => get(gone(path, *retirement)),
            "POST" => post(gone(path, *retirement)),
            other => unreachable!("no retired route uses {other}"),
        };
        let route = if *path == "/v1/a2a/tasks" {
            // POST /v1/a2a/tasks is the live delegation wrapper, routed elsewhere.
            route.fallback(not_found)
        } else {
            route.fallback(gone(path, *retirement))
        };
        router = router.route(path, route);
    }
    router.with_state(routes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_routes_are_not_retired() {
        for (method, path, _) in RETIRED {
            assert_ne!(*path, "/v1/a2a/agents");
            assert!(!path.starts_with("/v1/a2a/agents/"));
            assert!(!(*method == "POST" && *path == "/v1/a2a/tasks"));
        }
    }

    #[test]
    fn every_guide_anchor_exists_in_the_migration_doc() {
        let doc = include_str!("../../docs/migration.md");
        for (method, path, r) in RETIRED {
            let anchor = r.guide.split_once('#').unwrap().1;
            assert!(
                doc.contains(&format!("<a id=\"{anchor}\"></a>")),
                "docs/migration.md lacks anchor {anchor}"
            );
            assert!(
                doc.contains(&format!("`{method} {path}`")),
                "docs/migration.md does not list {method} {path}"
            );
        }
    }
}
