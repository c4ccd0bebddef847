//! Serves the gateway's router on a listener (plain TCP or TLS), with the connection-level
//! limits and graceful shutdown bounded by the configured grace. The router itself is built by
//! [`crate::app`].
//!
//! What one client can hold is bounded before any credential is checked:
//!
//! | resource | bound |
//! |---|---|
//! | connections | `limits.max_connections` per listener; more wait in the kernel's accept queue |
//! | the bytes deciding HTTP/1 or HTTP/2 | the header timeout (`crate::http::protocol`) |
//! | HTTP/1 headers | the header timeout (hyper's), within a 64 KiB read buffer |
//! | HTTP/2 headers | 16 KiB per header list; a connection with no request in progress for the header timeout is closed, which covers a header block that never ends |
//! | HTTP/2 streams | 64 at once; receive windows of 64 KiB per stream and 256 KiB per connection |
//! | a dead HTTP/2 peer | a PING every 20 s, closed if not answered within 20 s |
//! | a client that stops reading | once a write blocks, `limits.write_timeout_seconds` to take 64 KiB or everything pending ([`WriteDeadline`]) |
//! | an answer its client does not take (a closed HTTP/2 window, a socket that does not drain) | `limits.write_timeout_seconds` for each 16 KiB part, then the connection is closed ([`ConnectionLedger`]) |
//! | answers not yet taken | `limits.response_buffer_bytes_per_connection` per connection and `limits.response_buffer_bytes` for the process, of which one tenant's answers hold at most `limits.response_buffer_tenant_share` and one principal's `limits.response_buffer_principal_share`; past them a large answer is refused with 503 (`crate::http::response_budget`) |
//! | a connection closing with answers its client does not take | closed for good the write timeout after it was asked to close |
//! | requests with tokens neither cached nor known | a bucket per client address (`crate::auth::unknown_tokens`; the peer handed down by [`crate::client_address`]) |
//! | request bodies | read only after authentication, and at most the body limit (`crate::http::body_limit`); a body left unread closes the connection (`Connection: close` on HTTP/1) rather than being drained |

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use axum::response::Response;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tower::{BoxError, Service, ServiceExt};

use crate::client_address;
use crate::config::Config;
use crate::http::protocol::{self, Protocol};
use crate::http::response_budget::{ConnectionLedger, ResponseBudget, ShareFractions};
use crate::http::write_deadline::WriteDeadline;

/// The per-connection limits of a listener.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Bounds the bytes that decide the protocol, hyper's HTTP/1 header read, and how long a
    /// connection may go without a request in progress (an idle keep-alive connection, or an
    /// HTTP/2 header block that never ends).
    pub header_timeout: Duration,
    /// Once a write blocks, the time it has to make enough progress ([`WriteDeadline`]).
    pub write_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// HTTP/2 PING interval and how long its answer may take.
    pub h2_keep_alive_interval: Duration,
    pub h2_keep_alive_timeout: Duration,
    /// Bytes of answers not yet taken by their clients: the process's budget, and each
    /// connection's.
    pub response_buffer_bytes: usize,
    pub response_buffer_bytes_per_connection: usize,
    /// One tenant's and one principal's part of the process's budget.
    pub response_buffer_shares: ShareFractions,
}

impl ConnectionLimits {
    pub fn from_config(config: &Config) -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(config.limits.header_read_timeout_seconds),
            write_timeout: Duration::from_secs(config.limits.write_timeout_seconds),
            max_connections: config.limits.max_connections,
            h2_keep_alive_interval: H2_KEEP_ALIVE,
            h2_keep_alive_timeout: H2_KEEP_ALIVE,
            response_buffer_bytes: config.limits.response_buffer_bytes,
            response_buffer_bytes_per_connection: config
                .limits
                .response_buffer_bytes_per_connection,
            response_buffer_shares: ShareFractions {
                tenant: config.limits.response_buffer_tenant_share,
                principal: config.limits.response_buffer_principal_share,
            },
        }
    }
}

/// HTTP/2 streams one connection may have open at once (hyper's default is 200).
const H2_MAX_CONCURRENT_STREAMS: u32 = 64;
/// HTTP/2 receive window of a stream: a whole body within the 64 KiB limit, no more (hyper's
/// default, 1 MiB, lets a client park that much per connection without being read).
const H2_STREAM_WINDOW: u32 = 64 * 1024;
/// HTTP/2 receive window of a connection, all its streams together.
const H2_CONNECTION_WINDOW: u32 = 256 * 1024;
/// Largest HTTP/2 header list (decoded).
const H2_MAX_HEADER_LIST: u32 = 16 * 1024;
/// Largest HTTP/1 read buffer, which also bounds a request's headers.
const H1_MAX_BUFFER: usize = 64 * 1024;
/// HTTP/2 keep-alive PING interval, and how long its answer may take.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);
/// Longest a client may take to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one "connection limit reached" warning per this interval.
const FULL_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Serves until `shutdown` resolves, then stops accepting (new connections are refused), asks
/// every connection to finish its in-flight requests and close, waits for them for at most
/// `grace`, and returns; whatever is still running then is abandoned. With `tls`, every
/// connection is a TLS connection (HTTP/2 or HTTP/1.1 by ALPN).
pub async fn serve<S, B>(
    listener: TcpListener,
    app: S,
    tls: Option<TlsAcceptor>,
    grace: Duration,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    S: Service<Request, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    // One permit per connection: the cap, and at shutdown the count of those still open.
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing, closing_seen) = watch::channel(false);
    let builders = Arc::new(Builders::new(&limits));
    let budget = ResponseBudget::new(
        limits.response_buffer_bytes,
        limits.response_buffer_bytes_per_connection,
        limits.response_buffer_shares,
    );
    let mut shutdown = std::pin::pin!(shutdown);
    let mut warned_full: Option<Instant> = None;
    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if warned_full.is_none_or(|at| at.elapsed() > FULL_WARNING_INTERVAL) {
                    warned_full = Some(Instant::now());
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection limit reached: new connections wait to be accepted"
                    );
                }
                tokio::select! {
                    permit = slots.clone().acquire_owned() => {
                        permit.expect("the connection semaphore is never closed")
                    }
                    () = &mut shutdown => break,
                }
            }
        };
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
        tokio::spawn(connection(
            stream,
            peer,
            tls.clone(),
            app.clone(),
            builders.clone(),
            limits,
            ConnectionLedger::new(budget.clone()),
            closing_seen.clone(),
            permit,
        ));
    }
    drop(listener);
    tracing::info!(
        grace_seconds = grace.as_secs(),
        "shutdown requested: no new connections; finishing in-flight requests"
    );
    let _ = closing.send(true);
    // Every permit back means every connection has ended.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(grace, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace elapsed; abandoning the requests still in flight");
    }
}

/// The connection builder of each protocol; the protocol is decided before either serves
/// (`crate::http::protocol`), so each connection is only the state of its own protocol.
struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

impl Builders {
    fn new(limits: &ConnectionLimits) -> Self {
        let mut h1 = http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(H1_MAX_BUFFER);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
            .initial_stream_window_size(H2_STREAM_WINDOW)
            .initial_connection_window_size(H2_CONNECTION_WINDOW)
            .max_header_list_size(H2_MAX_HEADER_LIST)
            .keep_alive_interval(limits.h2_keep_alive_interval)
            .keep_alive_timeout(limits.h2_keep_alive_timeout);
        Builders {
            http1: h1,
            http2: h2,
        }
    }
}

/// One accepted connection, holding its slot until it ends.
#[allow(clippy::too_many_arguments)]
async fn connection<S, B>(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    tls: Option<TlsAcceptor>,
    app: S,
    builders: Arc<Builders>,
    limits: ConnectionLimits,
    ledger: Arc<ConnectionLedger>,
    closing: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) where
    S: Service<Request, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let _ = stream.set_nodelay(true);
    // Under TLS too, so the handshake's and the records' writes are bounded alike.
    let stream = WriteDeadline::new(stream, limits.write_timeout);
    let result = match tls {
        // Each arm's serving boxed: this task holds a connection for its whole life, and its
        // own allocation would otherwise be sized for the larger (TLS) arm on every connection.
        None => {
            Box::pin(drive(
                stream, peer, app, &builders, &limits, ledger, closing,
            ))
            .await
        }
        Some(acceptor) => {
            let stream = match Box::pin(tokio::time::timeout(
                TLS_HANDSHAKE_TIMEOUT,
                acceptor.accept(stream),
            ))
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
            Box::pin(drive(
                stream, peer, app, &builders, &limits, ledger, closing,
            ))
            .await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Serves HTTP on `io` until the connection ends; closes it gracefully at shutdown, or once it
/// has had no request in progress for the header timeout; closes it at once when an answer's
/// client has taken nothing of it for the write timeout, or when an idle connection's graceful
/// close has not finished within the write timeout. Each request runs knowing `peer`
/// (`crate::client_address`).
async fn drive<IO, S, B>(
    io: IO,
    peer: std::net::SocketAddr,
    app: S,
    builders: &Builders,
    limits: &ConnectionLimits,
    ledger: Arc<ConnectionLedger>,
    mut closing: watch::Receiver<bool>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    // A connection that has not said which protocol it speaks yet has nothing in progress:
    // shutdown closes it at once.
    let (protocol, io) = tokio::select! {
        decided = protocol::decide(io, limits.header_timeout) => decided?,
        _ = closing.wait_for(|closing| *closing) => return Ok(()),
    };
    let activity = Arc::new(Activity::new());
    let in_flight = activity.clone();
    let requests_ledger = ledger.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let request_in_flight = InFlight::start(&activity);
        let app = app.clone();
        let http1 = request.version() < Version::HTTP_2;
        let read_to_end = Arc::new(AtomicBool::new(request.body().is_end_stream()));
        let mut request = request.map(|body| {
            Body::new(Observed {
                body,
                read_to_end: read_to_end.clone(),
            })
        });
        // The answer's bytes count against this connection
        // (`http::response_budget::AdmitAnswers`).
        request.extensions_mut().insert(requests_ledger.clone());
        // Scoped on the request's own future: under HTTP/2 it runs on a task of its own.
        client_address::scope(peer.ip(), async move {
            let mut response = app.oneshot(request).await?;
            // Answered without reading the body (refused before it, or cut at the limit): hyper
            // will close the connection rather than drain it, so say so, or a client would
            // send its next request on a connection that is going away.
            if http1 && !read_to_end.load(Ordering::Acquire) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, std::convert::Infallible>(response.map(|body| Tracked {
                body,
                _in_flight: request_in_flight,
            }))
        })
    });
    let io = TokioIo::new(io);
    // Each protocol's connection boxed on its own: this task holds it for the connection's
    // whole life, and would otherwise be sized for the larger one (HTTP/2) on every connection.
    match protocol {
        Protocol::Http1 => {
            let connection = builders.http1.serve_connection(io, service);
            Box::pin(supervise(connection, in_flight, limits, &ledger, closing)).await
        }
        Protocol::Http2 => {
            let connection = builders.http2.serve_connection(io, service);
            Box::pin(supervise(connection, in_flight, limits, &ledger, closing)).await
        }
    }
}

/// Runs `connection` to its end, under the limits [`drive`] describes.
async fn supervise<C>(
    connection: C,
    in_flight: Arc<Activity>,
    limits: &ConnectionLimits,
    ledger: &ConnectionLedger,
    mut closing: watch::Receiver<bool>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    C: GracefulConnection,
    C::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut connection = std::pin::pin!(connection);
    let mut gone_idle = std::pin::pin!(idle(&in_flight, limits.header_timeout));
    let mut stalled = std::pin::pin!(ledger.stalled(limits.write_timeout));
    let mut closing_down = false;
    // Set when an idle connection is asked to close: what its client still has not taken (the
    // end of an answer held back by a closed window) may keep it open this long, no longer.
    // At shutdown the grace bounds it instead.
    let mut close_by: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        tokio::select! {
            result = connection.as_mut() => return result.map_err(Into::into),
            () = stalled.as_mut() => {
                crate::metrics::stalled_connection_closed();
                return Err("an answer's client took nothing of it within the write timeout".into());
            }
            () = async { close_by.as_mut().expect("checked").await }, if close_by.is_some() => {
                return Err("an idle connection did not close within the write timeout".into());
            }
            _ = closing.wait_for(|closing| *closing), if !closing_down => {
                connection.as_mut().graceful_shutdown();
                closing_down = true;
            }
            () = gone_idle.as_mut(), if !closing_down => {
                connection.as_mut().graceful_shutdown();
                closing_down = true;
                close_by = Some(Box::pin(tokio::time::sleep(limits.write_timeout)));
            }
        }
    }
}

/// Resolves once no request has been in progress for `limit`.
///
/// It looks at the connection's [`Activity`] when its timer fires, at most once per `limit`
/// while requests come, rather than being woken by each request's start and end (a wake of
/// the connection's task, which then polls the whole connection again, twice per request).
async fn idle(activity: &Activity, limit: Duration) {
    let mut check_at = activity.idle_since() + limit;
    loop {
        tokio::time::sleep_until(check_at).await;
        if activity.in_progress() {
            check_at = tokio::time::Instant::now() + limit;
            continue;
        }
        let due = activity.idle_since() + limit;
        if due <= tokio::time::Instant::now() {
            return;
        }
        check_at = due;
    }
}

/// A connection's requests in progress, and since when it has had none.
struct Activity {
    in_flight: AtomicUsize,
    /// When the last request in progress ended (the connection's start before any), in
    /// milliseconds since `opened`.
    idle_since_ms: AtomicU64,
    opened: tokio::time::Instant,
}

impl Activity {
    fn new() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            opened: tokio::time::Instant::now(),
        }
    }

    fn in_progress(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    fn idle_since(&self) -> tokio::time::Instant {
        self.opened + Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire))
    }
}

/// Counts a request as in progress from its headers until its answer's body is dropped (sent,
/// or abandoned).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        // Each request notes when it ended before it leaves the count: whoever then reads
        // "none in progress" reads the last one's end, or a later one.
        let ended = u64::try_from(activity.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        activity.idle_since_ms.fetch_max(ended, Ordering::AcqRel);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's body that records whether it was read to its end.
struct Observed {
    body: Incoming,
    read_to_end: Arc<AtomicBool>,
}

impl hyper::body::Body for Observed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let poll = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(poll, Poll::Ready(None)) || self.body.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// An answer's body that keeps its request counted as in progress.
    struct Tracked<B> {
        #[pin]
        body: B,
        _in_flight: InFlight,
    }
}

impl<B> hyper::body::Body for Tracked<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.project().body.poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
