//! Serves the gateway's router on a listener (plain TCP or TLS), with the connection-level
//! limits (first bytes, header read timeout, TLS handshake) and graceful shutdown bounded by
//! the configured grace. The router itself is built by [`crate::app`].

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::http::first_bytes::FirstBytesDeadline;

/// Serves until `shutdown` resolves, then stops accepting (new connections are refused), lets
/// in-flight requests finish for at most `grace`, and returns; whatever is still running then
/// is abandoned. With `tls`, every connection is a TLS connection (HTTP/2 or HTTP/1.1 by ALPN).
///
/// Slow or silent clients must not hold connections: `header_timeout` bounds the bytes that
/// decide the protocol, then hyper's HTTP/1 header read (which needs a timer to run at all).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    grace: Duration,
    header_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(connection) => connection,
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            app.clone().oneshot(request.map(Body::new))
        });
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let result = match tls {
                None => {
                    let stream = FirstBytesDeadline::new(stream, header_timeout);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    let stream = FirstBytesDeadline::new(stream, header_timeout);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(
        grace_seconds = grace.as_secs(),
        "shutdown requested: no new connections; finishing in-flight requests"
    );
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace elapsed; abandoning the requests still in flight");
    }
}

/// Longest a client may take to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
