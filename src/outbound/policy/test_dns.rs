//! A DNS server on a loopback UDP port for the resolver's tests: it answers every A question
//! with one address (and every other question with no record), or never answers at all.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

pub(crate) struct LoopbackDns {
    pub addr: SocketAddr,
    queries: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl LoopbackDns {
    /// A server answering A questions with `address`.
    pub async fn answering(address: Ipv4Addr) -> Self {
        Self::start(Some(address)).await
    }

    /// A server that reads every query and never replies.
    pub async fn silent() -> Self {
        Self::start(None).await
    }

    async fn start(answer: Option<Ipv4Addr>) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind loopback UDP");
        let addr = socket.local_addr().unwrap();
        let queries = Arc::new(AtomicUsize::new(0));
        let counted = queries.clone();
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
                counted.fetch_add(1, Ordering::SeqCst);
                if let Some(reply) = answer.and_then(|ip| reply(&buf[..n], ip)) {
                    let _ = socket.send_to(&reply, peer).await;
                }
            }
        });
        LoopbackDns {
            addr,
            queries,
            task,
        }
    }

    /// Queries received so far.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

impl Drop for LoopbackDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The response to one query: its id and question, NOERROR, and one A record (TTL 60) when
/// the question is for an A record.
fn reply(query: &[u8], ip: Ipv4Addr) -> Option<Vec<u8>> {
    const HEADER: usize = 12;
    // The question: length-prefixed labels up to a zero length, then type and class.
    let mut end = HEADER;
    loop {
        let len = usize::from(*query.get(end)?);
        end += 1 + len;
        if len == 0 {
            break;
        }
    }
    let question = query.get(HEADER..end + 4)?;
    let is_a = query[end..end + 2] == [0, 1];
    let mut out = Vec::with_capacity(question.len() + 32);
    out.extend_from_slice(&query[..2]);
    // QR, RD; RA; one question, one or no answer, no authority or additional records.
    out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(is_a), 0, 0, 0, 0]);
    out.extend_from_slice(question);
    if is_a {
        // Name: a pointer to the question's; type A, class IN, TTL 60, 4 bytes of address.
        out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        out.extend_from_slice(&ip.octets());
    }
    Some(out)
}
