use super::*;
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn serving(limits: ConnectionLimits) -> (std::net::SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }));
    let (stop, mut stopped) = watch::channel(false);
    tokio::spawn(serve(
        listener,
        app,
        None,
        Duration::from_secs(1),
        limits,
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        },
    ));
    (address, stop)
}

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        header_timeout: Duration::from_secs(60),
        write_timeout: Duration::from_secs(60),
        max_connections: 8,
        h2_keep_alive_interval: Duration::from_millis(200),
        h2_keep_alive_timeout: Duration::from_millis(200),
        response_buffer_bytes: 64 << 20,
        response_buffer_bytes_per_connection: 8 << 20,
    }
}

/// The next frame's type and flags, `None` once the connection is closed.
async fn frame(stream: &mut TcpStream) -> Option<(u8, u8)> {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header).await.ok()?;
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; length];
    stream.read_exact(&mut payload).await.ok()?;
    Some((header[3], header[4]))
}

#[tokio::test]
async fn a_silent_http2_peer_is_pinged_then_dropped() {
    let (address, _stop) = serving(limits()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    // Answers nothing from here on, not even the PING.
    let mut pinged = false;
    let closed = tokio::time::timeout(Duration::from_secs(3), async {
        while let Some((kind, flags)) = frame(&mut stream).await {
            pinged |= (kind, flags) == (0x6, 0);
        }
    })
    .await
    .is_ok();
    assert!(pinged, "a keep-alive PING was sent");
    assert!(closed, "and the connection dropped when it went unanswered");
}

#[tokio::test]
async fn shutdown_closes_kept_alive_connections() {
    let (address, stop) = serving(limits()).await;
    let mut idle = TcpStream::connect(address).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    assert!(idle.read(&mut buf).await.unwrap() > 0);
    let _ = stop.send(true);
    // The kept-alive connection is closed by the shutdown, not left to its idle timeout.
    let closed = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match idle.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "an idle connection is closed at shutdown");
}
