//! The service the server runs. The profile's two hot routes, the agent card and the
//! JSON-RPC endpoint, are served ahead of axum's router through the same stack of layers;
//! every other request goes to the router as it is.
//!
//! Why: on those two routes the router cost each request about eight allocations and a path
//! match of its own (`scripts/alloc-sites card`): the matched route's boxed service cloned
//! and its future boxed, the matched path and the URL parameters stored in the request's
//! extensions (the parameter decoded into a `String`), the answer's body boxed again and its
//! length written as a header value. A request takes the hot path only where the router
//! would have given it the same handler: the same method, a path the route matches exactly,
//! and an agent id without percent-encoding (the router decodes it; such a request goes to
//! the router). Another method (HEAD, say) also goes to the router, which answers it as it
//! always has.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::future::RouteFuture;
use axum::Router;
use http_body_util::Either;
use tower::Service;

use crate::a2a::{card, rpc, ProfileRoutes};
use crate::error::HttpError;
use crate::http::response_budget::ConnectionLedger;
use crate::metrics::RouteLabel;

/// The agent card's route, as the router and the request metrics name it.
pub const CARD_ROUTE: &str = "/v1/a2a/agents/{agent_id}/.well-known/agent-card.json";
/// The JSON-RPC route; also served with a trailing slash ([`RPC_ROUTE_SLASH`]), and counted as
/// this one.
pub const RPC_ROUTE: &str = "/v1/a2a/agents/{agent_id}/rpc";
/// The JSON-RPC route with a trailing slash: clients that join "/" onto the card's interface
/// URL (the A2A TCK does) reach the same handler.
pub const RPC_ROUTE_SLASH: &str = "/v1/a2a/agents/{agent_id}/rpc/";

/// A hot route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hot {
    Card,
    Rpc,
}

/// The hot route `method` and `path` take, with the agent id in the path; `None` for any
/// request the router is to answer.
pub fn hot_route<'a>(method: &Method, path: &'a str) -> Option<(Hot, &'a str)> {
    let (agent_id, rest) = path.strip_prefix("/v1/a2a/agents/")?.split_once('/')?;
    if agent_id.is_empty() || agent_id.contains('%') {
        return None;
    }
    match (rest, method) {
        (".well-known/agent-card.json", &Method::GET) => Some((Hot::Card, agent_id)),
        ("rpc" | "rpc/", &Method::POST) => Some((Hot::Rpc, agent_id)),
        _ => None,
    }
}

/// The two routes' handlers as one service, for the stack of layers to wrap.
#[derive(Clone)]
pub struct HotHandlers(pub Arc<ProfileRoutes>);

impl Service<Request> for HotHandlers {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let routes = self.0.clone();
        // Boxed, as the router boxes a handler's future: the request in flight holds it.
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let response = match hot_route(&parts.method, parts.uri.path()) {
                Some((Hot::Card, agent_id)) => {
                    card::answer(&routes, agent_id, &parts.headers).await
                }
                Some((Hot::Rpc, agent_id)) => {
                    let ledger = parts.extensions.get::<Arc<ConnectionLedger>>().cloned();
                    rpc::answer(&routes, agent_id, &parts.headers, body, ledger).await
                }
                // The gateway sends only hot routes here, and no layer changes a request's
                // method or path.
                None => {
                    debug_assert!(false, "not a hot route: {} {}", parts.method, parts.uri);
                    HttpError::NotFound.into_response()
                }
            };
            Ok(response)
        })
    }
}

/// The hot routes (`H`: [`HotHandlers`] in the stack of layers) when the profile is enabled,
/// and the router.
#[derive(Clone)]
pub struct Gateway<H> {
    pub hot: Option<H>,
    pub router: Router,
}

impl<H, B> Service<Request> for Gateway<H>
where
    H: Service<Request, Response = Response<B>, Error = Infallible>,
{
    type Response = Response<Either<Body, B>>;
    type Error = Infallible;
    type Future = GatewayFuture<H::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        ready!(Service::<Request>::poll_ready(&mut self.router, cx))?;
        match &mut self.hot {
            Some(hot) => hot.poll_ready(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        if let Some(hot) = &mut self.hot {
            if let Some((route, _)) = hot_route(request.method(), request.uri().path()) {
                let label = match route {
                    Hot::Card => CARD_ROUTE,
                    Hot::Rpc => RPC_ROUTE,
                };
                request.extensions_mut().insert(RouteLabel(label));
                return GatewayFuture::Hot {
                    inner: hot.call(request),
                };
            }
        }
        GatewayFuture::Router {
            inner: self.router.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// The hot stack's future or the router's.
    #[project = GatewayProjection]
    pub enum GatewayFuture<F> {
        Hot { #[pin] inner: F },
        Router { #[pin] inner: RouteFuture<Infallible> },
    }
}

impl<F, B> Future for GatewayFuture<F>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    type Output = Result<Response<Either<Body, B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = match self.project() {
            GatewayProjection::Hot { inner } => ready!(inner.poll(cx))?.map(Either::Right),
            GatewayProjection::Router { inner } => ready!(inner.poll(cx))?.map(Either::Left),
        };
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_matches_of_the_two_routes_with_their_method_are_hot() {
        let get = &Method::GET;
        let post = &Method::POST;
        assert_eq!(
            hot_route(get, "/v1/a2a/agents/ag-1/.well-known/agent-card.json"),
            Some((Hot::Card, "ag-1"))
        );
        assert_eq!(
            hot_route(post, "/v1/a2a/agents/ag-1/rpc"),
            Some((Hot::Rpc, "ag-1"))
        );
        assert_eq!(
            hot_route(post, "/v1/a2a/agents/ag-1/rpc/"),
            Some((Hot::Rpc, "ag-1"))
        );
        for (method, path) in [
            // Other methods: the router answers (HEAD of the card, 405 for the rest).
            (
                &Method::HEAD,
                "/v1/a2a/agents/ag-1/.well-known/agent-card.json",
            ),
            (post, "/v1/a2a/agents/ag-1/.well-known/agent-card.json"),
            (get, "/v1/a2a/agents/ag-1/rpc"),
            // A percent-encoded id: the router decodes it.
            (post, "/v1/a2a/agents/ag%2D1/rpc"),
            // Not the routes: no id, more segments, another suffix, other routes.
            (post, "/v1/a2a/agents//rpc"),
            (post, "/v1/a2a/agents/ag-1/rpc//"),
            (post, "/v1/a2a/agents/ag-1/x/rpc"),
            (post, "/v1/a2a/agents/ag-1/rpcx"),
            (post, "/v1/a2a/agents/ag-1/discover"),
            (post, "/v1/a2a/agents/ag-1"),
            (post, "/v1/a2a/agents"),
            (post, "/v1/a2a/tasks"),
            (get, "/v1/a2a/agents/ag-1/.well-known/agent-card.json/"),
        ] {
            assert_eq!(hot_route(method, path), None, "{method} {path}");
        }
    }

    #[test]
    fn the_hot_routes_are_the_routers_templates() {
        // The router matches these templates; the hot path's own match is of the same paths.
        let concrete = |template: &str| template.replace("{agent_id}", "ag-1");
        assert!(hot_route(&Method::GET, &concrete(CARD_ROUTE)).is_some());
        assert!(hot_route(&Method::POST, &concrete(RPC_ROUTE)).is_some());
        assert!(hot_route(&Method::POST, &concrete(RPC_ROUTE_SLASH)).is_some());
    }
}
