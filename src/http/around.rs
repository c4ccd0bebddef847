//! Middleware that runs around the rest of the stack without boxing anything.
//!
//! `axum::middleware::from_fn` is the easy way to write one, and every request pays for it:
//! its `Next` is the inner service cloned into a box, and its future is boxed. The request
//! metrics and the response budget only look at the request before it goes on and at the
//! response when it comes back; an [`Around`] says what they do, and [`AroundLayer`] runs it
//! with the inner service's own future, unboxed.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use tower::{Layer, Service};

/// What a middleware does around the rest of the stack, whose responses have bodies of type
/// `B` (axum's own unless a layer below wraps them).
pub trait Around<B = Body>: Clone {
    /// What `before` keeps of the request for `after`.
    type Kept;
    /// Sees the request before it goes on, and may add to it.
    fn before(&self, request: &mut Request) -> Self::Kept;
    /// Sees the response on its way back, and may replace it.
    fn after(&self, kept: Self::Kept, response: Response<B>) -> Response<B>;
}

/// Runs `A` around the services it wraps.
#[derive(Clone)]
pub struct AroundLayer<A>(pub A);

impl<S, A: Clone> Layer<S> for AroundLayer<A> {
    type Service = AroundService<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        AroundService {
            inner,
            around: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct AroundService<S, A> {
    inner: S,
    around: A,
}

impl<S, A, B> Service<Request> for AroundService<S, A>
where
    S: Service<Request, Response = Response<B>>,
    A: Around<B>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = AroundFuture<S::Future, A, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let kept = self.around.before(&mut request);
        AroundFuture {
            inner: self.inner.call(request),
            after: Some((self.around.clone(), kept)),
            body: PhantomData,
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's future, then `after` on its response.
    pub struct AroundFuture<F, A, B>
    where
        A: Around<B>,
    {
        #[pin]
        inner: F,
        after: Option<(A, A::Kept)>,
        body: PhantomData<fn() -> B>,
    }
}

impl<F, E, A, B> Future for AroundFuture<F, A, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    A: Around<B>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        let (around, kept) = this
            .after
            .take()
            .expect("an AroundFuture is not polled after it completed");
        Poll::Ready(result.map(|response| around.after(kept, response)))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use axum::body::Body;
    use tower::ServiceExt;

    use super::*;

    /// Notes the request's path before, and adds a header after.
    #[derive(Clone, Default)]
    struct Note(Arc<Mutex<Vec<String>>>);

    impl Around for Note {
        type Kept = String;

        fn before(&self, request: &mut Request) -> String {
            self.0
                .lock()
                .unwrap()
                .push(format!("before {}", request.uri().path()));
            request.uri().path().to_owned()
        }

        fn after(&self, kept: String, mut response: Response) -> Response {
            self.0.lock().unwrap().push(format!("after {kept}"));
            response
                .headers_mut()
                .insert("x-seen", kept.parse().unwrap());
            response
        }
    }

    #[tokio::test]
    async fn runs_before_the_inner_service_and_after_its_response() {
        let note = Note::default();
        let log = note.0.clone();
        let inner_log = log.clone();
        let inner = tower::service_fn(move |_: Request| {
            let log = inner_log.clone();
            async move {
                log.lock().unwrap().push("inner".to_owned());
                tokio::task::yield_now().await;
                Ok::<_, Infallible>(Response::new(Body::empty()))
            }
        });
        let response = AroundLayer(note)
            .layer(inner)
            .oneshot(Request::get("/here").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.headers()["x-seen"], "/here");
        assert_eq!(
            *log.lock().unwrap(),
            ["before /here", "inner", "after /here"]
        );
    }
}
