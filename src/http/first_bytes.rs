//! A deadline on a connection's first bytes.
//!
//! hyper's HTTP/1 `header_read_timeout` only runs once the HTTP/1 connection does. Before that,
//! the server reads until it can tell a request line from the HTTP/2 preface
//! (`crate::http::protocol`), with no time limit of its own: a client that connects and sends nothing, or only a prefix of
//! the preface, would hold its connection (and a file descriptor) forever. This wrapper fails
//! the read with `TimedOut` if the protocol is not decided within the deadline; from the first
//! byte that is not the preface's (any HTTP/1 request), or once the whole preface arrived, it
//! is a plain pass-through.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

use crate::http::protocol::H2_PREFACE;

pub struct FirstBytesDeadline<S> {
    inner: S,
    /// Armed until the protocol is decided.
    deadline: Option<Pin<Box<Sleep>>>,
    preface_bytes_seen: usize,
}

impl<S> FirstBytesDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        FirstBytesDeadline {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(limit))),
            preface_bytes_seen: 0,
        }
    }

    /// Whether `read` (the bytes just received) decides the protocol.
    fn decided_by(&mut self, read: &[u8]) -> bool {
        for &byte in read {
            if H2_PREFACE.get(self.preface_bytes_seen) != Some(&byte) {
                return true;
            }
            self.preface_bytes_seen += 1;
        }
        self.preface_bytes_seen >= H2_PREFACE.len()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytesDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.deadline.is_none() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = buf.filled()[before..].to_vec();
                if this.decided_by(&read) {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request within the header read timeout",
                ))),
                _ => Poll::Pending,
            },
        }
    }
}

writes_pass_through!(FirstBytesDeadline, inner);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn silence_times_out_and_a_request_disarms() {
        let (client, server) = tokio::io::duplex(64);
        let mut wrapped = FirstBytesDeadline::new(server, Duration::from_millis(50));
        let mut buf = [0u8; 16];
        let e = wrapped.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(client);

        let (mut client, server) = tokio::io::duplex(64);
        let mut wrapped = FirstBytesDeadline::new(server, Duration::from_millis(50));
        client.write_all(b"PO").await.unwrap();
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 2);
        // Decided (HTTP/1): later silence is hyper's header timeout's business, not ours.
        assert!(
            tokio::time::timeout(Duration::from_millis(150), wrapped.read(&mut buf))
                .await
                .is_err()
        );

        let (mut client, server) = tokio::io::duplex(64);
        let mut wrapped = FirstBytesDeadline::new(server, Duration::from_millis(50));
        client.write_all(b"PRI * HTTP").await.unwrap();
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 10);
        let e = wrapped.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "a stalled preface");
    }
}
