use super::*;
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn serving(limits: ConnectionLimits) -> (std::net::SocketAddr, watch::Sender<bool>) {
    serving_app(Router::new().route("/", get(|| async { "ok" })), limits).await
}

/// Serves `app` until the returned sender says stop.
async fn serving_app(
    app: Router,
    limits: ConnectionLimits,
) -> (std::net::SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
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
        response_buffer_shares: crate::http::response_budget::ShareFractions::WHOLE,
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

/// The answer of `path` on a kept-alive HTTP/1 connection, read to its end (chunked).
async fn answered(stream: &mut TcpStream, path: &str) -> String {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"0\r\n\r\n") && !answer.ends_with(b"ok") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed mid-answer: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(answer).unwrap()
}

/// How long `stream` stays open, up to `limit`.
async fn open_for(stream: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let _ = tokio::time::timeout(limit, async {
        while !matches!(stream.read(&mut buf).await, Ok(0) | Err(_)) {}
    })
    .await;
    started.elapsed()
}

#[tokio::test]
async fn a_connection_closes_the_header_timeout_after_its_last_answer_ends_not_during_one() {
    // `/slow` answers over 1.2 s, four times the header timeout.
    let app = Router::new().route("/", get(|| async { "ok" })).route(
        "/slow",
        get(|| async {
            let parts = futures_util::stream::unfold(0, |n| async move {
                (n < 4).then_some(())?;
                tokio::time::sleep(Duration::from_millis(300)).await;
                Some((Ok::<_, Infallible>(Bytes::from_static(b"part")), n + 1))
            });
            Body::from_stream(parts)
        }),
    );
    let limits = ConnectionLimits {
        header_timeout: Duration::from_millis(300),
        ..limits()
    };
    let (address, _stop) = serving_app(app, limits).await;

    let mut stream = TcpStream::connect(address).await.unwrap();
    // Requests one after another, each well within the timeout of the last: kept open.
    for _ in 0..4 {
        assert!(answered(&mut stream, "/").await.ends_with("ok"));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // An answer in progress for longer than the timeout is not cut.
    let slow = answered(&mut stream, "/slow").await;
    assert!(
        slow.contains("part") && slow.ends_with("0\r\n\r\n"),
        "{slow}"
    );
    // Then nothing: closed about the timeout after that answer ended.
    let open = open_for(&mut stream, Duration::from_secs(5)).await;
    assert!(
        open >= Duration::from_millis(250) && open < Duration::from_millis(1500),
        "closed {open:?} after the last answer"
    );
}
