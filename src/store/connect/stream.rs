//! The byte streams under a PostgreSQL connection: a TCP or Unix socket, and the answer
//! deadline wrapped around it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A TCP or Unix socket. An enum, not a boxed trait object: the compiler cannot prove the
/// rustls handshake's future Send through a trait object's lifetime.
pub(crate) enum Socket {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Socket::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Socket::Tcp(s) => s.is_write_vectored(),
            Socket::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_flush(cx),
            Socket::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The pool's lending of one connection, as its byte stream sees it: a count that is odd while
/// the connection is lent out and moves on at every lending and every return, so the stream
/// tells one lending from the next (`super::super::PgPool::get` lends, dropping the
/// `PooledClient` gives back); and the lending during which the stream last wrote, so the pool
/// knows whether a failed call sent anything at all.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lending(Arc<LendingState>);

#[derive(Debug, Default)]
struct LendingState {
    count: AtomicU64,
    /// The lending (its count) of the last write, 0 for none.
    wrote: AtomicU64,
}

impl Lending {
    /// A new lending begins.
    pub(crate) fn lend(&self) {
        let _ = self
            .0
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(if n % 2 == 0 { n + 1 } else { n + 2 })
            });
    }

    /// The connection is back in the pool.
    pub(crate) fn give_back(&self) {
        let _ = self
            .0
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n % 2 == 1).then_some(n + 1)
            });
    }

    /// The lending in progress, if the connection is lent out.
    fn current(&self) -> Option<u64> {
        let n = self.0.count.load(Ordering::Relaxed);
        (n % 2 == 1).then_some(n)
    }

    /// Bytes went out on the socket.
    fn wrote(&self) {
        if let Some(n) = self.current() {
            self.0.wrote.store(n, Ordering::Relaxed);
        }
    }

    /// Whether anything was written to the socket during the lending in progress: if not, no
    /// statement of it can have reached the server.
    pub(crate) fn sent_anything(&self) -> bool {
        self.current()
            .is_some_and(|n| self.0.wrote.load(Ordering::Relaxed) == n)
    }
}

/// A stream whose reads fail once something was written and nothing has come back for
/// `deadline`, and, while the pool lends the connection out, once part of an answer came and
/// the rest stopped coming for `deadline`.
///
/// The protocol's framing is under TLS, out of sight, so the stream cannot tell a whole answer
/// from part of one. Two rules together bound every wait: a write arms the deadline (nothing at
/// all came back), and bytes read while the connection is lent out re-arm it (the rest of the
/// answer must keep coming). The second would also end a lent connection whose holder sits idle
/// for longer than the deadline between two statements: the store's calls do not (they hold a
/// connection only for their statements), and the next statement would fail, not hang. A
/// connection back in the pool, or one never lent (the reconciler's leader connection), is only
/// bound by the first rule: a stall after a partial answer is left to keep-alive and the next
/// write there. Bytes count only for the lending they came in: lent out again after a long
/// idle, a connection is not held to its last answer's deadline (the connection task reads
/// before it writes the next statement).
pub(crate) struct Answered<S> {
    inner: S,
    deadline: Option<Duration>,
    /// Armed by the first write not yet answered.
    waiting: bool,
    /// The lending during which bytes came: while it lasts, the deadline runs from the last of
    /// them.
    receiving: Option<u64>,
    lending: Lending,
    timer: Pin<Box<Sleep>>,
}

impl<S> Answered<S> {
    pub(crate) fn new(inner: S, deadline: Option<Duration>, lending: Lending) -> Self {
        Answered {
            inner,
            deadline,
            waiting: false,
            receiving: None,
            lending,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    fn arm(&mut self, cx: &mut Context<'_>) {
        if let (Some(deadline), false) = (self.deadline, self.waiting) {
            self.waiting = true;
            self.timer.as_mut().reset(Instant::now() + deadline);
            // Registers this task with the timer: the connection task may not poll a read again
            // before the deadline (nothing arrives from a black hole to wake it).
            let _ = self.timer.as_mut().poll(cx);
        }
    }

    /// Whether a silence now counts against the deadline.
    fn armed(&self) -> bool {
        self.waiting || (self.receiving.is_some() && self.receiving == self.lending.current())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Answered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.waiting = false;
                    this.receiving = None;
                    if let (Some(deadline), Some(lending)) = (this.deadline, this.lending.current())
                    {
                        this.receiving = Some(lending);
                        this.timer.as_mut().reset(Instant::now() + deadline);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.armed() && this.timer.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "PostgreSQL sent nothing for {:?} while an answer was due",
                        this.deadline.unwrap_or_default()
                    ),
                )))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Answered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.lending.wrote();
            this.arm(cx);
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.lending.wrote();
            this.arm(cx);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
