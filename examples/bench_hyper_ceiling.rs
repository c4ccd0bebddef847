//! The benchmark's HTTP ceiling: a raw hyper server (the same hyper-util auto builder and tokio
//! multi-threaded runtime as the gateway, no router, no middleware) answering every request with
//! a fixed small JSON body. Nothing served on this machine can beat it over the same loopback and
//! load generator, so the gateway's non-database paths are reported as a ratio of it.
//!
//!     cargo build --release --example bench_hyper_ceiling
//!     target/release/examples/bench_hyper_ceiling [127.0.0.1:0]
//!
//! Prints `listening on http://ADDR` once bound. Used by `scripts/bench`; not part of the gateway.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(|_request: Request<hyper::body::Incoming>| async {
                    let mut response = Response::new(Full::new(Bytes::from_static(BODY)));
                    response.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(response)
                });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
