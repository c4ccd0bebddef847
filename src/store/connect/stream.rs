//! The byte streams under a PostgreSQL connection: a TCP or Unix socket, and the answer
//! deadline wrapped around it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
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
/// write there.
pub(crate) struct Answered<S> {
    inner: S,
    deadline: Option<Duration>,
    /// Armed by the first write not yet answered.
    waiting: bool,
    /// Bytes came while the connection was lent out: the deadline runs from the last of them.
    receiving: bool,
    /// Whether the pool has lent the connection out (`super::super::PgPool::get`).
    lent: Arc<AtomicBool>,
    timer: Pin<Box<Sleep>>,
}

impl<S> Answered<S> {
    pub(crate) fn new(inner: S, deadline: Option<Duration>, lent: Arc<AtomicBool>) -> Self {
        Answered {
            inner,
            deadline,
            waiting: false,
            receiving: false,
            lent,
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
        self.waiting || (self.receiving && self.lent.load(Ordering::Relaxed))
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
                    this.receiving = false;
                    if let (Some(deadline), true) =
                        (this.deadline, this.lent.load(Ordering::Relaxed))
                    {
                        this.receiving = true;
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
