//! Every request has an id: the proxy's `x-request-id` if it sent one, else a fresh UUID (v4),
//! put on the request before anything below sees it (the request span logs it) and echoed on
//! the response unless the response names its own.
//!
//! Run by [`crate::http::around::AroundLayer`]. It does what tower-http's `SetRequestId` and
//! `PropagateRequestId` layers do together, with one allocation per fresh id instead of four:
//! the UUID is written into a stack buffer, not a `String`, its bytes are shared between the
//! request and the response, and nothing goes into the request's extensions (nothing reads
//! the id from there).

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use uuid::Uuid;

use super::around::Around;

/// The request id header.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Middleware: gives each request its id and echoes it on the response.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIds;

impl<B> Around<B> for RequestIds {
    /// The request's id.
    type Kept = HeaderValue;

    fn before(&self, request: &mut Request) -> HeaderValue {
        if let Some(id) = request.headers().get(&REQUEST_ID) {
            return id.clone();
        }
        let id = fresh_id();
        request.headers_mut().insert(REQUEST_ID.clone(), id.clone());
        id
    }

    fn after(&self, id: HeaderValue, mut response: Response<B>) -> Response<B> {
        response.headers_mut().entry(&REQUEST_ID).or_insert(id);
        response
    }
}

/// A new UUID (v4) as a header value: its 36 bytes in one shared allocation, so the request's
/// copy and the response's are the same bytes.
fn fresh_id() -> HeaderValue {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    Uuid::new_v4().hyphenated().encode_lower(&mut text);
    HeaderValue::from_maybe_shared(Bytes::from_owner(text)).expect("a UUID is a header value")
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use axum::body::Body;
    use tower::{Layer, ServiceExt};

    use super::*;
    use crate::http::around::AroundLayer;

    /// Runs one request through the layer; returns the id the inner service saw and the
    /// response's. `answer_with` is an id the inner service puts on its response.
    async fn through(
        request_id: Option<&'static str>,
        answer_with: Option<&'static str>,
    ) -> (Option<String>, Option<String>) {
        let seen = Arc::new(Mutex::new(None));
        let inner_seen = seen.clone();
        let inner = tower::service_fn(move |request: Request| {
            *inner_seen.lock().unwrap() = request
                .headers()
                .get(&REQUEST_ID)
                .map(|v| v.to_str().unwrap().to_owned());
            async move {
                let mut response = Response::new(Body::empty());
                if let Some(id) = answer_with {
                    response
                        .headers_mut()
                        .insert(REQUEST_ID.clone(), HeaderValue::from_static(id));
                }
                Ok::<_, Infallible>(response)
            }
        });
        let mut request = Request::new(Body::empty());
        if let Some(id) = request_id {
            request
                .headers_mut()
                .insert(REQUEST_ID.clone(), HeaderValue::from_static(id));
        }
        let response = AroundLayer(RequestIds)
            .layer(inner)
            .oneshot(request)
            .await
            .unwrap();
        let echoed = response
            .headers()
            .get(&REQUEST_ID)
            .map(|v| v.to_str().unwrap().to_owned());
        let seen = seen.lock().unwrap().clone();
        (seen, echoed)
    }

    #[tokio::test]
    async fn a_request_without_an_id_gets_a_fresh_uuid_seen_below_and_echoed() {
        let (seen, echoed) = through(None, None).await;
        let seen = seen.expect("the stack below sees an id");
        let uuid = Uuid::parse_str(&seen).expect("a UUID");
        assert_eq!(uuid.get_version_num(), 4);
        assert_eq!(
            seen,
            uuid.hyphenated().to_string(),
            "lower-case, hyphenated"
        );
        assert_eq!(echoed.as_deref(), Some(seen.as_str()));
        let (again, _) = through(None, None).await;
        assert_ne!(
            again.as_deref(),
            Some(seen.as_str()),
            "each request its own"
        );
    }

    #[tokio::test]
    async fn the_proxys_id_is_kept_and_echoed() {
        let (seen, echoed) = through(Some("proxy-7"), None).await;
        assert_eq!(seen.as_deref(), Some("proxy-7"));
        assert_eq!(echoed.as_deref(), Some("proxy-7"));
    }

    #[tokio::test]
    async fn a_response_naming_its_own_id_keeps_it() {
        let (_, echoed) = through(Some("proxy-7"), Some("answer-9")).await;
        assert_eq!(echoed.as_deref(), Some("answer-9"));
    }
}
