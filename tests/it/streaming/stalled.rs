//! A client that stops reading loses its stream once the observation window is over: the
//! gateway does not wait on it forever, and its observer lease goes back.
//!
//! The client is HTTP/2 (prior knowledge) with a stream window of 16 bytes that it never
//! widens, since it never reads: the gateway can write almost nothing, as with any client that
//! stopped reading. Over HTTP/1 the same needs megabytes of unread data first (the socket
//! buffers of a loopback connection), which a stream of keep-alives never produces in a short
//! window.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use tokio::net::TcpStream;

use crate::support::redis::lease_counts;
use crate::support::{Gateway, GatewayOptions};

use super::waiting_task;

#[tokio::test]
async fn a_client_that_stops_reading_loses_stream_and_lease_after_the_window() {
    let window = Duration::from_secs(2);
    let gw = Gateway::start_with(GatewayOptions::with_env(&[
        ("Q_A2A_OBSERVATION_WINDOW_SECONDS", "2"),
        // The stream's 16 buffered frames fill within a fraction of the window.
        ("Q_A2A_SSE_KEEPALIVE_MS", "20"),
    ]))
    .await;
    let id = waiting_task(&gw, "tok-alice").await;

    let tcp = TcpStream::connect(gw.url.trim_start_matches("http://"))
        .await
        .unwrap();
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(16)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!("{}/v1/a2a/agents/ag-approver/rpc", gw.url))
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .header("authorization", "Bearer tok-alice")
        .body(())
        .unwrap();
    let body =
        json!({"jsonrpc": "2.0", "id": "s-1", "method": "SubscribeToTask", "params": {"id": id}});
    let (response, mut upload) = client.send_request(request, false).unwrap();
    upload
        .send_data(Bytes::from(body.to_string()), true)
        .unwrap();
    let response = response.await.unwrap();
    let opened = tokio::time::Instant::now();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    // Held, never read.
    let unread = response.into_body();
    assert_eq!(lease_counts(&gw, "t-acme", "p-alice").await[2], 1);

    let limit = window + Duration::from_secs(3);
    let mut released = false;
    while opened.elapsed() < limit {
        if lease_counts(&gw, "t-acme", "p-alice").await[2] == 0 {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        released,
        "the lease of a stream nobody reads is still held {:?} after it opened (window {window:?})",
        opened.elapsed()
    );
    drop(unread);
}
