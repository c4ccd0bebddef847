//! HTTP/1 or HTTP/2 (prior knowledge), decided from a connection's first bytes, which are then
//! handed back to hyper together with what followed them.
//!
//! hyper-util's auto builder decides the same way, but gives the bytes it read back on their
//! own: hyper's HTTP/1 connection then reads the first 24 bytes of the request into its 8 KiB
//! read buffer, finds the head incomplete, and reserves another 8 KiB on top of them, so every
//! HTTP/1 connection's read buffer is 16 KiB for as long as the connection lasts (an open SSE
//! stream is one connection). [`Replay`] hands the decided bytes back in the same read as the
//! rest of what the client sent: a request head that arrived in one piece is parsed from one
//! 8 KiB buffer. The connection is then served by hyper's builder of that protocol.
//!
//! Deciding has a deadline: a client that connects and sends nothing, or only a prefix of the
//! preface, would otherwise hold its connection (and a file descriptor) forever; hyper's
//! HTTP/1 header timeout only starts once the HTTP/1 connection does.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// What an HTTP/2 client with prior knowledge sends first.
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// Reads until the bytes decide the protocol: the first byte that is not the preface's (any
/// HTTP/1 request), the whole preface, or the end of the stream (HTTP/1, which then sees the
/// end); `TimedOut` if that takes longer than `limit`.
pub async fn decide<IO: AsyncRead + Unpin>(
    mut io: IO,
    limit: Duration,
) -> io::Result<(Protocol, Replay<IO>)> {
    let mut first = [0u8; 24];
    let mut len = 0;
    let reading = async {
        loop {
            let n = io.read(&mut first[len..]).await?;
            let read = &first[len..len + n];
            len += n;
            if n == 0 || read != &H2_PREFACE[len - n..len] {
                return Ok::<_, io::Error>(Protocol::Http1);
            }
            if len == H2_PREFACE.len() {
                return Ok(Protocol::Http2);
            }
        }
    };
    let protocol = tokio::time::timeout(limit, reading).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "no request within the header read timeout",
        )
    })??;
    Ok((
        protocol,
        Replay {
            first,
            len: len as u8,
            given: 0,
            deferred: None,
            io,
        },
    ))
}

/// A connection whose first bytes were read to decide its protocol: the next read returns them
/// followed by whatever the connection has ready, in one read.
pub struct Replay<IO> {
    first: [u8; 24],
    len: u8,
    given: u8,
    /// A read error met right after the replayed bytes, returned by the next read.
    deferred: Option<io::Error>,
    io: IO,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Replay<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(e) = this.deferred.take() {
            return Poll::Ready(Err(e));
        }
        if this.given == this.len {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let pending = &this.first[usize::from(this.given)..usize::from(this.len)];
        let n = pending.len().min(buf.remaining());
        buf.put_slice(&pending[..n]);
        this.given += n as u8;
        if this.given == this.len && buf.remaining() > 0 {
            // The rest of what came with them, if it is there already; if not, the replayed
            // bytes are this read (the waker is registered either way).
            if let Poll::Ready(Err(e)) = Pin::new(&mut this.io).poll_read(cx, buf) {
                this.deferred = Some(e);
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Replay<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn decided(sent: &[&[u8]]) -> (Protocol, Vec<Vec<u8>>) {
        let (mut client, server) = tokio::io::duplex(4096);
        for piece in sent {
            client.write_all(piece).await.unwrap();
        }
        drop(client);
        let (protocol, mut replay) = decide(server, Duration::from_secs(5)).await.unwrap();
        let mut reads = Vec::new();
        loop {
            let mut buf = vec![0u8; 8192];
            let n = replay.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            reads.push(buf[..n].to_vec());
        }
        (protocol, reads)
    }

    #[tokio::test]
    async fn a_request_that_came_in_one_piece_is_read_in_one_piece() {
        let request: &[u8] =
            b"POST /v1/a2a/agents/a/rpc HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        let (protocol, reads) = decided(&[request]).await;
        assert_eq!(protocol, Protocol::Http1);
        assert_eq!(
            reads,
            vec![request.to_vec()],
            "one read, every byte, in order"
        );
    }

    #[tokio::test]
    async fn the_preface_decides_http2_and_is_handed_back_with_what_followed() {
        let frames: &[u8] = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00";
        let (protocol, reads) = decided(&[H2_PREFACE, frames]).await;
        assert_eq!(protocol, Protocol::Http2);
        assert_eq!(reads.concat(), [H2_PREFACE.as_slice(), frames].concat());
        assert_eq!(reads.len(), 1);
    }

    #[tokio::test]
    async fn a_prefix_of_the_preface_then_something_else_is_http1() {
        let (protocol, reads) = decided(&[b"PRI * HT", b"TP/1.1 nonsense"]).await;
        assert_eq!(protocol, Protocol::Http1);
        assert_eq!(reads.concat(), b"PRI * HTTP/1.1 nonsense");
    }

    #[tokio::test]
    async fn nothing_at_all_is_http1_at_its_end() {
        let (protocol, reads) = decided(&[]).await;
        assert_eq!(protocol, Protocol::Http1);
        assert!(reads.is_empty());
    }

    #[tokio::test]
    async fn silence_or_a_stalled_preface_times_out_and_a_request_does_not() {
        let limit = Duration::from_millis(50);
        let (client, server) = tokio::io::duplex(64);
        let e = decide(server, limit).await.err().expect("silence");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(client);

        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b"PRI * HTTP").await.unwrap();
        let e = decide(server, limit)
            .await
            .err()
            .expect("a stalled preface");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);

        // Decided (HTTP/1) by its first bytes: later silence is hyper's header timeout's
        // business.
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b"PO").await.unwrap();
        let (protocol, _) = decide(server, limit).await.unwrap();
        assert_eq!(protocol, Protocol::Http1);
    }

    #[tokio::test]
    async fn a_small_read_buffer_gets_the_replayed_bytes_over_several_reads() {
        let (mut client, server) = tokio::io::duplex(4096);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        drop(client);
        let (_, mut replay) = decide(server, Duration::from_secs(5)).await.unwrap();
        let mut all = Vec::new();
        let mut buf = [0u8; 5];
        loop {
            let n = replay.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        assert_eq!(all, b"GET / HTTP/1.1\r\n\r\n");
    }
}
