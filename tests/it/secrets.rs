//! Secrets never leave where they belong: with `RUST_LOG=debug`, a sequence over every route
//! (card, every RPC method, health, readiness, a retired route, outbound registrations with a
//! bearer credential, discovery and delegation to a remote that fails in several ways, and
//! refusals of all of these) must not put any fixture token, the service token, the outbound
//! credential, the credential sealing key or the cursor key into the gateway's logs, any
//! response (headers or body), the metrics or the OpenTelemetry spans it exports (to an OTLP
//! receiver, every span recorded). `observability` scans the logs of the inbound routes; this
//! extends the scan to responses, metrics, traces and the outbound side.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::otlp::OtlpReceiver;
use crate::support::report::report;
use crate::support::{new_id, repo_path, Gateway, CURSOR_KEY, SERVICE_TOKEN};

const KEY_B64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const OUTBOUND_CREDENTIAL: &str = "remote-credential-5b1e9c0d";
const ROTATED_CREDENTIAL: &str = "remote-credential-rotated-77aa";
const ADMIN: &str = "tok-alice-admin";

/// A remote agent that records every request and answers each one differently badly:
/// HTTP 500, a JSON-RPC answer for another request id, then a dropped connection.
async fn failing_remote() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    tokio::spawn(async move {
        let mut n = 0usize;
        while let Ok((mut stream, _)) = listener.accept().await {
            n += 1;
            let seen = kept.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 8192];
                // Headers, then as much body as Content-Length says.
                loop {
                    match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await
                    {
                        Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                        Ok(Ok(k)) => request.extend_from_slice(&buf[..k]),
                    }
                    let text = String::from_utf8_lossy(&request);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&request).into_owned());
                let answer = match n % 3 {
                    1 => "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"
                        .to_string(),
                    2 => {
                        let body = r#"{"jsonrpc":"2.0","id":"someone-else","result":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}}}"#;
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    }
                    _ => return, // dropped without an answer
                };
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

/// Every response the sequence saw, headers and body, as text.
struct Seen {
    http: reqwest::Client,
    base: String,
    responses: Vec<String>,
}

impl Seen {
    fn new(base: &str) -> Seen {
        Seen {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            base: base.to_string(),
            responses: Vec::new(),
        }
    }

    /// A call to a path of the gateway; keeps the response's headers and body.
    async fn call(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        self.responses.push(format!("{:?}", response.headers()));
        let text = response.text().await.unwrap_or_default();
        self.responses.push(text.clone());
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// A JSON-RPC request body.
fn rpc(method: &str, params: &Value) -> Option<Value> {
    Some(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_reaches_logs_responses_or_metrics() {
    let (remote, remote_seen) = failing_remote().await;
    let traces = OtlpReceiver::start().await;
    let env = [
        ("Q_A2A_TRACES_OTLP_ENDPOINT", traces.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("RUST_LOG", "debug"),
        ("Q_A2A_OUTBOUND_ALLOW_HTTP", "true"),
        ("Q_A2A_OUTBOUND_ALLOW_CIDRS", "127.0.0.1/32"),
        ("Q_A2A_CREDENTIAL_KEYS", &format!("k1:{KEY_B64}")),
        ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k1"),
        ("Q_A2A_OUTBOUND_REQUEST_TIMEOUT_MS", "2000"),
        ("Q_A2A_OUTBOUND_DELEGATION_WAIT_MS", "2000"),
    ];
    let gw = Gateway::start_with_env(&env).await;
    let fixtures: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path("config/q-fixtures.json")).unwrap(),
    )
    .unwrap();
    let tokens: Vec<String> = fixtures["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_str().unwrap().to_string())
        .chain(["tok-never-issued-91c2".to_string()])
        .collect();
    let mut seen = Seen::new(&gw.url);
    let rpc_path = |agent: &str| format!("/v1/a2a/agents/{agent}/rpc");

    // Inbound: the card and every method, for every token, on a reachable and a foreign agent.
    let methods = [
        (
            "SendMessage",
            json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "scan"}]}, "configuration": {"returnImmediately": true}}),
        ),
        ("GetTask", json!({"id": new_id()})),
        ("ListTasks", json!({"pageToken": "forged.token"})),
        ("CancelTask", json!({"id": new_id()})),
        ("SubscribeToTask", json!({"id": new_id()})),
        (
            "SendStreamingMessage",
            json!({"message": {"messageId": "", "role": "ROLE_USER", "parts": []}}),
        ),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "t", "pushNotificationConfig": {"url": "https://x", "token": "push-secret"}}),
        ),
        ("GetExtendedAgentCard", json!({})),
        ("NoSuchMethod", json!({})),
    ];
    let mut calls = 0usize;
    for token in &tokens {
        let bearer = format!("Bearer {token}");
        for agent in ["ag-writer", "ag-globex", "ag-legacy"] {
            let card = format!("/v1/a2a/agents/{agent}/.well-known/agent-card.json");
            seen.call(Method::GET, &card, &[("authorization", &bearer)], None)
                .await;
            for (method, params) in &methods {
                let headers = [("authorization", bearer.as_str()), ("a2a-version", "1.0")];
                seen.call(
                    Method::POST,
                    &rpc_path(agent),
                    &headers,
                    rpc(method, params),
                )
                .await;
                calls += 1;
            }
        }
        // A bad version and a malformed authorization header carrying the token.
        let basic = format!("Basic {token}");
        for headers in [
            [("authorization", bearer.as_str()), ("a2a-version", "0.3")],
            [("authorization", basic.as_str()), ("a2a-version", "1.0")],
        ] {
            let get = rpc("GetTask", &json!({"id": "x"}));
            seen.call(Method::POST, &rpc_path("ag-writer"), &headers, get)
                .await;
        }
        calls += 4;
    }
    // The service token as a caller's credential, and Q failing while it is used.
    gw.upstream
        .faults(json!({"introspect_fail_500": 1, "create_fail_500_after_commit": 1, "read_fail_500": 2}))
        .await;
    for token in ["tok-never-issued-77", "tok-alice", SERVICE_TOKEN] {
        let bearer = format!("Bearer {token}");
        let headers = [("authorization", bearer.as_str()), ("a2a-version", "1.0")];
        let send = rpc("SendMessage", &methods[0].1);
        seen.call(Method::POST, &rpc_path("ag-writer"), &headers, send)
            .await;
        calls += 1;
    }
    for path in [
        "/healthz",
        "/readyz",
        "/v1/a2a/tasks/some-old-id",
        "/nowhere",
    ] {
        seen.call(
            Method::GET,
            path,
            &[("authorization", "Bearer tok-alice")],
            None,
        )
        .await;
        calls += 1;
    }

    // Outbound: registrations with a credential, refused ones, rotation, discovery and
    // delegation against a remote that fails, and deletion.
    let admin = format!("Bearer {ADMIN}");
    let auth = [("authorization", admin.as_str())];
    let endpoint = format!("{remote}/a2a/rpc");
    let registration =
        json!({"name": "remote", "endpoint": endpoint, "bearerToken": OUTBOUND_CREDENTIAL});
    let (status, registration) = seen
        .call(Method::POST, "/v1/a2a/agents", &auth, Some(registration))
        .await;
    assert_eq!(status, 201, "{registration}");
    let id = registration["id"].as_str().unwrap().to_string();
    for refused in [
        json!({"name": "bad", "endpoint": "ftp://x/rpc", "bearerToken": OUTBOUND_CREDENTIAL}),
        json!({"name": "bad", "endpoint": "https://user:pw@example.com/rpc", "bearerToken": OUTBOUND_CREDENTIAL}),
        json!({"name": "bad", "endpoint": endpoint, "bearerToken": format!("{OUTBOUND_CREDENTIAL}\n")}),
        json!({"name": "bad", "endpoint": endpoint, "bearerToken": OUTBOUND_CREDENTIAL, "extra": true}),
    ] {
        let (status, _) = seen
            .call(Method::POST, "/v1/a2a/agents", &auth, Some(refused))
            .await;
        assert!(status >= 400);
        calls += 1;
    }
    // Another tenant's admin, and a caller without a2a:agents, presenting the credential.
    let agent = format!("/v1/a2a/agents/{id}");
    for token in ["tok-carol-admin", "tok-alice"] {
        let bearer = format!("Bearer {token}");
        let credential = Some(json!({"bearerToken": OUTBOUND_CREDENTIAL}));
        seen.call(
            Method::PATCH,
            &agent,
            &[("authorization", &bearer)],
            credential,
        )
        .await;
        calls += 1;
    }
    let delegation =
        |task_id: &str| Some(json!({"taskId": task_id, "agentId": id, "text": "scan"}));
    let rotated = Some(json!({"bearerToken": ROTATED_CREDENTIAL}));
    for (method, path, body) in [
        (Method::GET, "/v1/a2a/agents".to_string(), None),
        (Method::GET, agent.clone(), None),
        (Method::POST, format!("{agent}/discover"), None),
        (
            Method::POST,
            "/v1/a2a/tasks".into(),
            delegation("delegation-0"),
        ),
        (
            Method::POST,
            "/v1/a2a/tasks".into(),
            delegation("delegation-1"),
        ),
        (
            Method::POST,
            "/v1/a2a/tasks".into(),
            delegation("delegation-2"),
        ),
        (Method::PATCH, agent.clone(), rotated),
        (
            Method::POST,
            "/v1/a2a/tasks".into(),
            delegation("delegation-rotated"),
        ),
        (Method::DELETE, agent.clone(), None),
    ] {
        seen.call(method, &path, &auth, body).await;
    }
    calls += 9;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The remote did get the credential, and only the registered one: the sequence reached it.
    let remote_requests = remote_seen.lock().unwrap().clone();
    assert!(
        remote_requests
            .iter()
            .any(|r| r.contains(OUTBOUND_CREDENTIAL)),
        "the remote never saw the outbound credential: {remote_requests:#?}"
    );
    for r in &remote_requests {
        for token in &tokens {
            assert!(
                !r.contains(token.as_str()),
                "a caller's token reached the remote"
            );
        }
    }

    let metrics = gw.metrics().await;
    let logs = gw.log_text();
    crate::support::wait_until("spans exported", Duration::from_secs(10), async || {
        traces.spans().iter().any(|s| s.name == "outbound.call")
    })
    .await;
    let spans = format!("{:?}", traces.spans());
    assert!(logs.lines().count() > 200, "debug logs expected");
    let mut secrets: Vec<String> = tokens.clone();
    secrets.extend(
        [
            SERVICE_TOKEN,
            OUTBOUND_CREDENTIAL,
            ROTATED_CREDENTIAL,
            KEY_B64,
            CURSOR_KEY,
            "push-secret",
        ]
        .map(str::to_string),
    );
    for secret in &secrets {
        assert!(
            !logs.contains(secret.as_str()),
            "{secret} appears in the gateway's logs"
        );
        assert!(
            !metrics.contains(secret.as_str()),
            "{secret} appears in /metrics"
        );
        assert!(
            !spans.contains(secret.as_str()),
            "{secret} appears in an exported span"
        );
        for response in &seen.responses {
            assert!(
                !response.contains(secret.as_str()),
                "{secret} appears in a response: {response}"
            );
        }
    }
    report(
        "secrets",
        &format!(
            "calls={calls} responses_scanned={} log_lines={} secrets={} remote_requests={}",
            seen.responses.len() / 2,
            logs.lines().count(),
            secrets.len(),
            remote_requests.len()
        ),
    );
}
