//! Integration harness: every test gets a fresh PostgreSQL database, its own reference upstream
//! process and its own gateway process, all real, on loopback ports chosen by the OS.
//!
//! PostgreSQL is reached at `Q_A2A_TEST_DATABASE_ADMIN_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_postgres::NoTls;

pub const GATEWAY_BIN: &str = env!("CARGO_BIN_EXE_q-a2a-gateway");
pub const UPSTREAM_BIN: &str = env!("CARGO_BIN_EXE_q-reference-upstream");
pub const SERVICE_TOKEN: &str = "dev-service-token";

pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn admin_url() -> String {
    std::env::var("Q_A2A_TEST_DATABASE_ADMIN_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database created for one test and dropped afterwards.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        let name = format!("q_a2a_test_{}", uuid::Uuid::new_v4().simple());
        let admin = admin_url();
        let (client, conn) = tokio_postgres::connect(&admin, NoTls)
            .await
            .expect("PostgreSQL must be running (see README: scripts/test starts it)");
        tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        TestDb {
            url: format!("{base}/{name}"),
            name,
        }
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url, NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }

    /// The single value of a one-row, one-column query.
    pub async fn one<T: for<'a> tokio_postgres::types::FromSql<'a>>(&self, sql: &str) -> T {
        self.client()
            .await
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.client()
            .await
            .query_one(sql, &[])
            .await
            .unwrap()
            .get(0)
    }

    pub async fn task_count(&self) -> i64 {
        self.count("SELECT count(*) FROM a2a_tasks").await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Best effort, off the test's runtime (which may be shutting down).
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok((client, conn)) = tokio_postgres::connect(&admin_url(), NoTls).await {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// Lines a server wrote to stderr, kept for log scans.
pub type LogLines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Spawns a server binary and waits for its `listening on <url>` line.
async fn spawn_listening(command: Command) -> (Child, String) {
    let (child, url, _, _) = spawn_listening_with(command, None).await;
    (child, url)
}

/// Like [`spawn_listening`]; also returns the URL on the stdout line starting with
/// `extra_prefix` right after it (if asked) and the server's stderr lines.
async fn spawn_listening_with(
    mut command: Command,
    extra_prefix: Option<&str>,
) -> (Child, String, Option<String>, LogLines) {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("spawn server binary");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let log_sink = std::env::var("Q_A2A_TEST_LOG_DIR").ok();
    let logs = LogLines::default();
    let kept = logs.clone();
    // Keep draining stderr so the child never blocks on a full pipe; keep it for log scans.
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut file = match &log_sink {
            Some(dir) => {
                let _ = std::fs::create_dir_all(dir);
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(PathBuf::from(dir).join("servers.log"))
                    .ok()
            }
            None => None,
        };
        while let Ok(Some(line)) = lines.next_line().await {
            kept.lock().unwrap().push(line.clone());
            if let Some(f) = file.as_mut() {
                use std::io::Write;
                let _ = writeln!(f, "{line}");
            }
            if std::env::var("Q_A2A_TEST_VERBOSE").is_ok() {
                eprintln!("{line}");
            }
        }
    });
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("listening on ") {
                return url.trim().to_string();
            }
        }
        panic!("server exited before listening")
    })
    .await
    .expect("server did not start within 30 s");
    let extra = match extra_prefix {
        Some(prefix) => {
            let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
                .await
                .expect("second stdout line")
                .unwrap()
                .unwrap_or_default();
            Some(
                line.strip_prefix(prefix)
                    .unwrap_or_else(|| panic!("expected {prefix:?}, got {line:?}"))
                    .trim()
                    .to_string(),
            )
        }
        None => None,
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url, extra, logs)
}

/// The reference Q upstream.
pub struct Upstream {
    pub url: String,
    pub child: Child,
    http: reqwest::Client,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let mut command = Command::new(UPSTREAM_BIN);
        command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--fixtures")
            .arg(repo_path("config/q-fixtures.json"));
        let (child, url) = spawn_listening(command).await;
        Upstream {
            url,
            child,
            http: reqwest::Client::new(),
        }
    }

    pub async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{}", self.url, path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("admin call");
        assert!(
            response.status().is_success(),
            "admin {path} -> {}",
            response.status()
        );
        response.json().await.unwrap_or(Value::Null)
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.admin(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn faults(&self, faults: Value) {
        self.post("/admin/faults", faults).await;
    }

    /// Runs Q holds under a workflow identity (or all).
    pub async fn runs(&self, workflow_id: Option<&str>) -> Vec<Value> {
        let path = match workflow_id {
            Some(w) => format!("/admin/runs?workflow_id={w}"),
            None => "/admin/runs".into(),
        };
        let v = self.admin(reqwest::Method::GET, &path, None).await;
        v["runs"].as_array().cloned().unwrap_or_default()
    }

    /// Approves a pending approval through Q's approval API (as a Q client would).
    pub async fn internal(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .request(method, format!("{}/internal/v1{}", self.url, path))
            .bearer_auth(SERVICE_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.unwrap()
    }
}

/// Options for a gateway process.
#[derive(Clone)]
pub struct GatewayOptions {
    pub profile_enabled: bool,
    pub migrate: bool,
    pub env: Vec<(String, String)>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            profile_enabled: true,
            migrate: true,
            env: Vec::new(),
        }
    }
}

pub const PUBLIC_BASE: &str = "https://q.example";
/// Shared by every gateway process of a test, like replicas in production.
pub const CURSOR_KEY: &str = "test-cursor-key-0123456789abcdef";

fn gateway_command(db: &TestDb, upstream_url: &str, options: &GatewayOptions) -> Command {
    let mut command = Command::new(GATEWAY_BIN);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .env("Q_A2A_CONFIG", repo_path("config/gateway.toml"))
        .env("Q_A2A_LISTEN", "127.0.0.1:0")
        .env("Q_A2A_METRICS_LISTEN", "127.0.0.1:0")
        .env("Q_A2A_PUBLIC_BASE_URL", PUBLIC_BASE)
        .env("Q_A2A_DATABASE_URL", &db.url)
        .env("Q_A2A_UPSTREAM_URL", upstream_url)
        .env("Q_A2A_UPSTREAM_SERVICE_TOKEN", SERVICE_TOKEN)
        .env("Q_A2A_CURSOR_KEY", CURSOR_KEY)
        // Each test's replicas share their own lease counters in the machine's Redis.
        .env("Q_A2A_REDIS_KEY_PREFIX", format!("q-a2a-test:{}", db.name))
        // Suites send bursts; tests/streaming.rs turns the limit on where it is the subject.
        .env("Q_A2A_RATE_LIMIT_ENABLED", "false")
        // Fast reconciler passes so recovery is observable within a test.
        .env("Q_A2A_RECONCILER_INTERVAL_MS", "200")
        .env("Q_A2A_RECONCILER_GRACE_MS", "1000")
        .env(
            "A2A_SERVER_PROFILE_ENABLED",
            if options.profile_enabled {
                "true"
            } else {
                "false"
            },
        );
    for (k, v) in &options.env {
        command.env(k, v);
    }
    command
}

/// Runs `q-a2a-gateway migrate` against the test database.
pub async fn migrate(db: &TestDb, upstream_url: &str) -> std::process::Output {
    let mut command = gateway_command(db, upstream_url, &GatewayOptions::default());
    command.arg("migrate");
    command.output().await.expect("run migrate")
}

/// A running gateway with its own database and upstream.
pub struct Gateway {
    pub url: String,
    /// The separate Prometheus listener, `http://ADDR`.
    pub metrics_url: String,
    /// Everything the gateway wrote to stderr so far.
    pub logs: LogLines,
    pub child: Child,
    pub db: TestDb,
    pub upstream: Upstream,
    http: reqwest::Client,
}

pub struct RpcReply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl RpcReply {
    pub fn error_code(&self) -> Option<i64> {
        self.body["error"]["code"].as_i64()
    }
    pub fn result(&self) -> &Value {
        assert!(
            self.body.get("error").is_none(),
            "expected a result, got {}",
            self.body
        );
        &self.body["result"]
    }
}

impl Gateway {
    pub async fn start() -> Gateway {
        Gateway::start_with(GatewayOptions::default()).await
    }

    pub async fn start_with(options: GatewayOptions) -> Gateway {
        let db = TestDb::create().await;
        let upstream = Upstream::start().await;
        if options.migrate {
            let out = migrate(&db, &upstream.url).await;
            assert!(
                out.status.success(),
                "migrate failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut command = gateway_command(&db, &upstream.url, &options);
        command.arg("serve");
        let (child, url, metrics_url, logs) =
            spawn_listening_with(command, Some("metrics on ")).await;
        Gateway {
            url,
            metrics_url: metrics_url.unwrap(),
            logs,
            child,
            db,
            upstream,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(150))
                .build()
                .unwrap(),
        }
    }

    /// Starts another gateway process on the same database and upstream (a replica).
    pub async fn start_replica(&self, options: &GatewayOptions) -> Replica {
        let mut command = gateway_command(&self.db, &self.upstream.url, options);
        command.arg("serve");
        let (child, url) = spawn_listening(command).await;
        Replica { url, child }
    }

    /// Replaces this gateway's process with a new one on the same database and upstream.
    pub async fn restart(&mut self, options: &GatewayOptions) {
        kill9(&mut self.child).await;
        let replica = self.start_replica(options).await;
        self.url = replica.url;
        self.child = replica.child;
    }

    /// The gateway's stderr so far, one string.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// `GET {metrics_url}/metrics` as text.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.metrics_url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A plain HTTP request to the gateway (no token, no A2A headers).
    pub async fn request(&self, method: reqwest::Method, path: &str) -> reqwest::Response {
        self.http
            .request(method, format!("{}{}", self.url, path))
            .send()
            .await
            .unwrap()
    }

    pub fn agent_url(&self, agent: &str) -> String {
        format!("{}/v1/a2a/agents/{agent}", self.url)
    }

    pub async fn card(&self, agent: &str, token: Option<&str>) -> reqwest::Response {
        let mut request = self.http.get(format!(
            "{}/.well-known/agent-card.json",
            self.agent_url(agent)
        ));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.unwrap()
    }

    /// Fetches an agent's card with arbitrary headers.
    pub async fn http_get_with(&self, agent: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.http.get(format!(
            "{}/.well-known/agent-card.json",
            self.agent_url(agent)
        ));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.send().await.unwrap()
    }

    /// Posts raw bytes to an agent's RPC route with the given headers.
    pub async fn post_raw(&self, agent: &str, headers: &[(&str, &str)], body: Vec<u8>) -> RpcReply {
        let mut request = self
            .http
            .post(format!("{}/rpc", self.agent_url(agent)))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        RpcReply {
            status,
            headers,
            body,
        }
    }

    /// A JSON-RPC call to any gateway process (e.g. a replica) at `base`.
    pub async fn rpc_at(
        base: &str,
        token: &str,
        agent: &str,
        method: &str,
        params: Value,
    ) -> RpcReply {
        let body = json!({"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params});
        let response = reqwest::Client::new()
            .post(format!("{base}/v1/a2a/agents/{agent}/rpc"))
            .bearer_auth(token)
            .header("a2a-version", "1.0")
            .json(&body)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                return RpcReply {
                    status: 0,
                    headers: Default::default(),
                    body: Value::String(e.to_string()),
                }
            }
        };
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        RpcReply {
            status,
            headers,
            body,
        }
    }

    /// A JSON-RPC call with `A2A-Version: 1.0` and the bearer token.
    pub async fn rpc(&self, token: &str, agent: &str, method: &str, params: Value) -> RpcReply {
        let body = json!({"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params});
        self.post_raw(
            agent,
            &[
                ("authorization", &format!("Bearer {token}")),
                ("a2a-version", "1.0"),
            ],
            serde_json::to_vec(&body).unwrap(),
        )
        .await
    }

    pub async fn send(
        &self,
        token: &str,
        agent: &str,
        message_id: &str,
        text: &str,
        return_immediately: bool,
    ) -> RpcReply {
        self.rpc(
            token,
            agent,
            "SendMessage",
            json!({
                "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
                "configuration": {"returnImmediately": return_immediately}
            }),
        )
        .await
    }

    pub async fn get_task(&self, token: &str, agent: &str, task_id: &str) -> RpcReply {
        self.rpc(token, agent, "GetTask", json!({"id": task_id}))
            .await
    }

    /// Polls GetTask until the task reaches `state` (or panics after `limit`).
    pub async fn wait_for_state(
        &self,
        token: &str,
        agent: &str,
        task_id: &str,
        state: &str,
        limit: Duration,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let reply = self.get_task(token, agent, task_id).await;
            if reply.body["result"]["status"]["state"] == state {
                return reply.body["result"].clone();
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "task {task_id} never reached {state}: last reply {}",
                    reply.body
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Another gateway process sharing a test's database and upstream.
pub struct Replica {
    pub url: String,
    pub child: Child,
}

/// SIGKILL: the process gets no chance to clean up, like a crashed replica.
pub async fn kill9(child: &mut Child) {
    child.start_kill().expect("SIGKILL");
    let _ = child.wait().await;
}

/// One SSE frame: a comment, or an event (default `message`) with its JSON data.
#[derive(Debug, Clone)]
pub enum SseFrame {
    Comment(String),
    Event { event: String, data: Value },
}

/// An open SSE response, read frame by frame.
pub struct SseStream {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    response: Option<reqwest::Response>,
    buffer: String,
    pub body_if_json: Option<Value>,
}

impl SseStream {
    /// Posts a streaming JSON-RPC call.
    pub async fn open(
        base: &str,
        token: &str,
        agent: &str,
        method: &str,
        params: Value,
    ) -> SseStream {
        let body = json!({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params});
        let response = reqwest::Client::new()
            .post(format!("{base}/v1/a2a/agents/{agent}/rpc"))
            .bearer_auth(token)
            .header("a2a-version", "1.0")
            .header("accept", "text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("streaming request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let is_sse = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse {
            SseStream {
                status,
                headers,
                response: Some(response),
                buffer: String::new(),
                body_if_json: None,
            }
        } else {
            let body = response.json().await.ok();
            SseStream {
                status,
                headers,
                response: None,
                buffer: String::new(),
                body_if_json: body,
            }
        }
    }

    pub fn is_sse(&self) -> bool {
        self.body_if_json.is_none() && self.response.is_some()
    }

    /// The next frame, or None when the server closed the stream.
    pub async fn next(&mut self) -> Option<SseFrame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                let mut event = "message".to_string();
                let mut data = String::new();
                let mut comment = None;
                for line in raw.lines() {
                    if let Some(c) = line.strip_prefix(':') {
                        comment = Some(c.trim().to_string());
                    } else if let Some(e) = line.strip_prefix("event:") {
                        event = e.trim().to_string();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
                if data.is_empty() {
                    return Some(SseFrame::Comment(comment.unwrap_or_default()));
                }
                return Some(SseFrame::Event {
                    event,
                    data: serde_json::from_str(&data).expect("data is JSON"),
                });
            }
            let chunk = self.response.as_mut()?.chunk().await.ok()??;
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8 frames"));
        }
    }

    /// The next event's JSON-RPC `result` (skipping comments); None at the end of the stream.
    pub async fn next_result(&mut self) -> Option<Value> {
        loop {
            match self.next().await? {
                SseFrame::Comment(_) => continue,
                SseFrame::Event { event, data } => {
                    assert_eq!(event, "message", "unexpected event: {data}");
                    assert_eq!(data["id"], "s-1");
                    return Some(data["result"].clone());
                }
            }
        }
    }

    /// Every remaining result until the stream closes.
    pub async fn rest(&mut self) -> Vec<Value> {
        let mut all = Vec::new();
        while let Some(result) = self.next_result().await {
            all.push(result);
        }
        all
    }
}

pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Runs `q-a2a-gateway preflight` against the test database and upstream with extra env.
pub async fn preflight(
    db: &TestDb,
    upstream_url: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    let options = GatewayOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..GatewayOptions::default()
    };
    let mut command = gateway_command(db, upstream_url, &options);
    command.arg("preflight");
    command.output().await.expect("run preflight")
}

/// A TCP forwarder the test controls, standing between the gateway and a real service (e.g.
/// PostgreSQL), so a dependency can "go away" without disturbing anything else on the machine.
/// `stop` closes the listener and every forwarded connection; `start` listens again on the
/// same port.
pub struct TcpProxy {
    pub port: u16,
    target: String,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TcpProxy {
    pub async fn start(target: &str) -> TcpProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut proxy = TcpProxy {
            port,
            target: target.to_string(),
            task: None,
        };
        proxy.run(listener);
        proxy
    }

    fn run(&mut self, listener: tokio::net::TcpListener) {
        let target = self.target.clone();
        self.task = Some(tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let target = target.clone();
                connections.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
            // Dropping the task drops the JoinSet, which aborts every forwarded connection.
        }));
    }

    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    pub async fn restart(&mut self) {
        self.stop();
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("rebinding proxy port {}: {e}", self.port),
            }
        };
        self.run(listener);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `host:port` of the test PostgreSQL server.
pub fn postgres_addr() -> String {
    let url = admin_url();
    let after_at = url.rsplit_once('@').map(|(_, r)| r).unwrap_or(&url);
    let host_port = after_at.split('/').next().unwrap_or("127.0.0.1:5432");
    if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:5432")
    }
}

/// A test database's URL with its host and port replaced (to go through a [`TcpProxy`]).
pub fn via_port(db_url: &str, port: u16) -> String {
    let (scheme_creds, rest) = db_url.rsplit_once('@').expect("database URL with user@");
    let path = rest.split_once('/').map(|(_, p)| p).unwrap_or("");
    format!("{scheme_creds}@127.0.0.1:{port}/{path}")
}

/// A private `redis-server` on a free port, killed on drop.
pub struct PrivateRedis {
    pub port: u16,
    pub child: Child,
}

impl PrivateRedis {
    pub async fn start() -> PrivateRedis {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        PrivateRedis::start_on(port).await
    }

    /// A fresh, empty Redis on a given port (e.g. to bring one back after stopping it).
    pub async fn start_on(port: u16) -> PrivateRedis {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server must be installed (scripts/test installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return PrivateRedis { port, child };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("private redis-server did not start on port {port}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// Sends SIGTERM to a child process.
pub fn sigterm(child: &Child) {
    let pid = child.id().expect("child still running");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// One sample of a Prometheus text exposition, matched on the exact label set.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: std::collections::BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, label_text) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let mut found = std::collections::BTreeMap::new();
        for pair in split_labels(label_text) {
            if let Some((k, v)) = pair.split_once('=') {
                found.insert(k.to_string(), v.trim_matches('"').to_string());
            }
        }
        if found == wanted {
            return value.parse().ok();
        }
    }
    None
}

/// Splits `a="x",b="y,z"` on the commas between labels.
fn split_labels(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}
