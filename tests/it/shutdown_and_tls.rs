//! Graceful shutdown under load (an in-flight blocking SendMessage finishes, new connections
//! are refused, the process exits 0 within its grace) and TLS on the listener.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use tokio::task::JoinHandle;

use crate::support::gateway::serve_refused;
use crate::support::{new_id, sigterm, wait_until, Gateway, GatewayOptions, TestDb};

fn addr_of(url: &str) -> String {
    url.split("://").nth(1).unwrap().to_string()
}

/// A blocking SendMessage to ag-slow (a ~4 s run) with this JSON-RPC id, on a client of its own
/// in the background; returns once it is certainly in flight: its row is committed before
/// dispatch, and the run keeps the request open long after.
async fn send_in_flight(
    gw: &Gateway,
    request_id: Value,
    text: &str,
) -> JoinHandle<reqwest::Result<reqwest::Response>> {
    let url = format!("{}/rpc", gw.agent_url("ag-slow"));
    let body = json!({"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": {
        "message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}}});
    let in_flight = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .bearer_auth("tok-alice")
            .header("a2a-version", "1.0")
            .json(&body)
            .send()
            .await
    });
    wait_until(
        "the send to be in flight",
        Duration::from_secs(10),
        async || gw.db.task_count().await == 1,
    )
    .await;
    in_flight
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_blocking_send_finish() {
    let mut gw = Gateway::start().await;
    let in_flight = send_in_flight(&gw, json!("slow-1"), "take 4 s").await;
    let signalled = Instant::now();
    sigterm(&gw.child);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // No new connections once the signal is handled.
    let refused = tokio::net::TcpStream::connect(addr_of(&gw.url)).await;
    assert!(
        refused.is_err(),
        "a new connection was accepted after SIGTERM"
    );

    // The in-flight request still gets its complete JSON-RPC answer.
    let response = in_flight
        .await
        .unwrap()
        .expect("the in-flight request completes");
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.expect("a complete JSON body");
    assert_eq!(reply["jsonrpc"], "2.0");
    assert_eq!(reply["id"], "slow-1");
    assert_eq!(
        reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{reply}"
    );

    let status = gw.wait_exit(Duration::from_secs(30)).await;
    assert!(status.success(), "exit status {status}");
    assert!(signalled.elapsed() < Duration::from_secs(15));
    assert!(gw.log_text().contains("shutdown requested"));
}

#[tokio::test]
async fn shutdown_grace_bounds_the_exit() {
    let mut gw = Gateway::start_with_env(&[("Q_A2A_SHUTDOWN_GRACE_SECONDS", "1")]).await;
    let in_flight = send_in_flight(&gw, json!(1), "too slow").await;
    let signalled = Instant::now();
    sigterm(&gw.child);
    let status = gw.wait_exit(Duration::from_secs(10)).await;
    let took = signalled.elapsed();
    assert!(status.success(), "exit status {status}");
    // The 4 s run cannot finish inside the 1 s grace: the process leaves without it.
    assert!(took < Duration::from_millis(3000), "exit took {took:?}");
    assert!(gw.log_text().contains("shutdown grace elapsed"));
    // The client sees the connection close, not a truncated success.
    match in_flight.await.unwrap() {
        Err(_) => {}
        Ok(response) => assert!(response.json::<Value>().await.is_err()),
    }
    // The task was committed before dispatch, so the same messageId recovers it later.
    assert_eq!(gw.db.task_count().await, 1);
}

struct TlsFiles {
    dir: std::path::PathBuf,
    cert_pem: String,
}

impl TlsFiles {
    fn generate() -> TlsFiles {
        let certified =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
                .unwrap();
        let dir = std::env::temp_dir().join(format!("q-a2a-tls-{}", new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert_pem = certified.cert.pem();
        std::fs::write(dir.join("tls.crt"), &cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), certified.signing_key.serialize_pem()).unwrap();
        TlsFiles { dir, cert_pem }
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "Q_A2A_TLS_CERT_FILE".into(),
                self.dir.join("tls.crt").display().to_string(),
            ),
            (
                "Q_A2A_TLS_KEY_FILE".into(),
                self.dir.join("tls.key").display().to_string(),
            ),
        ]
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn tls_listener_serves_the_profile_and_shuts_down_cleanly() {
    let tls = TlsFiles::generate();
    let mut gw = Gateway::start_with(GatewayOptions {
        env: tls.env(),
        ..Default::default()
    })
    .await;
    assert!(gw.url.starts_with("https://127.0.0.1:"), "{}", gw.url);
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(tls.cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let health = client
        .get(format!("{}/healthz", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // The hostname in the certificate works too.
    let by_name = gw.url.replace("127.0.0.1", "localhost");
    let card = client
        .get(format!(
            "{by_name}/v1/a2a/agents/ag-writer/.well-known/agent-card.json"
        ))
        .bearer_auth("tok-alice")
        .send()
        .await
        .unwrap();
    assert_eq!(card.status(), 200);
    let reply: Value = client
        .post(format!("{}/v1/a2a/agents/ag-writer/rpc", gw.url))
        .bearer_auth("tok-alice")
        .header("a2a-version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "over TLS"}]}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        reply["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // A client that does not trust the certificate is refused; plain HTTP gets no answer.
    assert!(reqwest::get(format!("{}/healthz", gw.url)).await.is_err());
    let plain = gw.url.replace("https://", "http://");
    let plain_result = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("{plain}/healthz"))
        .send()
        .await;
    assert!(
        plain_result.map(|r| r.status() != 200).unwrap_or(true),
        "plain HTTP must not be served on the TLS listener"
    );

    sigterm(&gw.child);
    let status = gw.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success());
}

#[tokio::test]
async fn unusable_tls_files_are_a_startup_error() {
    let db = TestDb::create().await;
    let output = serve_refused(&[
        ("Q_A2A_LISTEN", "127.0.0.1:0"),
        ("Q_A2A_METRICS_LISTEN", "127.0.0.1:0"),
        ("Q_A2A_DATABASE_URL", &db.url),
        ("Q_A2A_TLS_CERT_FILE", "/nonexistent/tls.crt"),
        ("Q_A2A_TLS_KEY_FILE", "/nonexistent/tls.key"),
    ])
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tls.cert_file"), "{stderr}");
}
