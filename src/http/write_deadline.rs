//! A deadline on a connection's writes.
//!
//! A client that stops reading (its receive window closed) leaves every write pending: without
//! a limit, the connection, its task and whatever answer it was sending stay in memory for as
//! long as the client likes. Once a write is blocked, this wrapper gives the connection the
//! limit to either hand everything it has to the kernel (a flush completes) or move at least
//! [`MIN_PROGRESS`] bytes; otherwise the write fails with `TimedOut` and hyper closes the
//! connection. Counting bytes rather than any progress matters: the kernel keeps opening the
//! window by a few bytes for a while after the reader stopped (or a client can read a byte at
//! a time), and that must not re-arm the limit. Reads pass through.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Bytes a blocked connection must move within the limit to get a fresh one: about 2 KiB/s at
/// the default 30 s, far below any real client.
pub const MIN_PROGRESS: usize = 64 * 1024;

pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Set from the first blocked write until enough progress or a completed flush.
    stall: Option<Stall>,
}

struct Stall {
    deadline: Pin<Box<Sleep>>,
    progress: usize,
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the client did not read its answer within the write timeout",
    )
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stall: None,
        }
    }

    /// A write returned `Pending`: starts the clock (once), fails if it ran out.
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let stall = self.stall.get_or_insert_with(|| Stall {
            deadline: Box::pin(tokio::time::sleep(limit)),
            progress: 0,
        });
        match stall.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match poll {
            Poll::Ready(Ok(n)) => {
                if let Some(stall) = &mut self.stall {
                    stall.progress += n;
                    if stall.progress >= MIN_PROGRESS {
                        self.stall = None;
                    } else if stall.deadline.is_elapsed() {
                        return Poll::Ready(Err(timed_out()));
                    }
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.blocked(cx),
        }
    }

    /// A completed flush or shutdown means nothing is waiting on the client any more.
    fn after_flush(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<()>>,
    ) -> Poll<io::Result<()>> {
        match poll {
            Poll::Ready(result) => {
                self.stall = None;
                Poll::Ready(result)
            }
            Poll::Pending => self.blocked(cx),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.after_write(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after_write(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.after_flush(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.after_flush(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    const LIMIT: Duration = Duration::from_millis(200);

    /// Reads `chunk` bytes every `pause` until `total` are read or the writer is gone.
    fn reader(mut client: DuplexStream, chunk: usize, pause: Duration, total: usize) {
        tokio::spawn(async move {
            let mut buf = vec![0u8; chunk];
            let mut read = 0;
            while read < total {
                tokio::time::sleep(pause).await;
                match client.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => read += n,
                }
            }
        });
    }

    #[tokio::test]
    async fn a_reader_that_stops_times_the_write_out() {
        let (_client, server) = tokio::io::duplex(16);
        let mut wrapped = WriteDeadline::new(server, LIMIT);
        let e = wrapped.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn a_trickle_does_not_rearm_the_limit() {
        // 16 bytes every 20 ms is progress, but far below MIN_PROGRESS per limit.
        let (client, server) = tokio::io::duplex(16);
        reader(client, 16, Duration::from_millis(20), usize::MAX);
        let mut wrapped = WriteDeadline::new(server, LIMIT);
        let started = tokio::time::Instant::now();
        let e = wrapped.write_all(&vec![0u8; 1 << 20]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < 4 * LIMIT, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_reader_that_keeps_up_in_bursts_is_never_cut() {
        // Pauses shorter than the limit, each followed by a full buffer's worth.
        let total = 8 * MIN_PROGRESS;
        let (client, server) = tokio::io::duplex(MIN_PROGRESS);
        reader(client, MIN_PROGRESS, Duration::from_millis(120), total);
        let mut wrapped = WriteDeadline::new(server, LIMIT);
        wrapped.write_all(&vec![0u8; total]).await.unwrap();
    }

    #[tokio::test]
    async fn a_completed_flush_clears_the_stall() {
        // Blocked once, then the reader takes everything: a later write starts afresh.
        let (client, server) = tokio::io::duplex(16);
        reader(client, 16, Duration::from_millis(100), 32);
        let mut wrapped = WriteDeadline::new(server, LIMIT);
        wrapped.write_all(&[0u8; 32]).await.unwrap();
        wrapped.flush().await.unwrap();
        assert!(wrapped.stall.is_none());
    }
}
