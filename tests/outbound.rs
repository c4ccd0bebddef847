//! Outbound: registrations, sealed credentials, the outbound policy and delegation, against
//! real remote agents: the official a2a-sdk 1.2.2 server (tests/python/remote_agent.py) run as
//! subprocesses on loopback, with the gateway, the reference upstream and PostgreSQL real too.
//!
//! Needs the repo's Python environment (`scripts/setup-python` creates `.venv`).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{repo_path, Gateway, GatewayOptions};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const ADMIN: &str = "tok-alice-admin";
const CAROL_ADMIN: &str = "tok-carol-admin";
const KEY_K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn python() -> std::path::PathBuf {
    let python = repo_path(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-python first (it installs a2a-sdk 1.2.2 for the \
         remote agent these tests talk to)",
        python.display()
    );
    python
}

/// Reads a child's stdout until `listening on URL`, then keeps draining it.
async fn wait_listening(child: &mut Child, what: &str) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("listening on ") {
                return url.trim().to_string();
            }
        }
        panic!("{what} exited before listening")
    })
    .await
    .unwrap_or_else(|_| panic!("{what} did not start within 30 s"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    url
}

/// A remote A2A agent (official SDK server) in one fault mode.
struct Remote {
    url: String,
    _child: Child,
}

impl Remote {
    async fn start(args: &[&str]) -> Remote {
        let mut child = Command::new(python())
            .arg(repo_path("tests/python/remote_agent.py"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start remote agent");
        let url = wait_listening(&mut child, "remote agent").await;
        Remote { url, _child: child }
    }

    fn rpc_url(&self) -> String {
        format!("{}/a2a/rpc", self.url)
    }

    async fn seen(&self) -> Vec<Value> {
        let v: Value = reqwest::get(format!("{}/_seen", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["requests"].as_array().cloned().unwrap_or_default()
    }

    async fn count(&self, rpc_method: &str) -> usize {
        self.seen()
            .await
            .iter()
            .filter(|r| r["rpcMethod"] == rpc_method)
            .count()
    }
}

/// The test harness's gateway, with outbound configured for loopback remotes.
struct Gw {
    gateway: Gateway,
    http: reqwest::Client,
}

impl std::ops::Deref for Gw {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.gateway
    }
}

impl Gw {
    async fn start(extra: &[(&str, &str)]) -> Gw {
        let mut env: Vec<(String, String)> = [
            ("Q_A2A_RECONCILER_ENABLED", "false"),
            ("Q_A2A_OUTBOUND_ALLOW_HTTP", "true"),
            ("Q_A2A_OUTBOUND_ALLOW_CIDRS", "127.0.0.1/32"),
            ("Q_A2A_CREDENTIAL_KEYS", KEY_K1),
            ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k1"),
            ("Q_A2A_OUTBOUND_DELEGATION_WAIT_MS", "15000"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        // The management and delegation routes are not behind the profile gate.
        let gateway = Gateway::start_with(GatewayOptions {
            profile_enabled: false,
            env,
            ..Default::default()
        })
        .await;
        Gw {
            gateway,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{}", self.url, path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn register(&self, name: &str, endpoint: &str, token: Option<&str>) -> Value {
        let mut body = json!({"name": name, "endpoint": endpoint});
        if let Some(token) = token {
            body["bearerToken"] = json!(token);
        }
        let (status, v) = self
            .call(Method::POST, "/v1/a2a/agents", Some(ADMIN), Some(body))
            .await;
        assert_eq!(status, 201, "register {endpoint}: {v}");
        v
    }

    async fn delegate(&self, task_id: &str, agent_id: &str, text: &str) -> (u16, Value) {
        self.call(
            Method::POST,
            "/v1/a2a/tasks",
            Some(ADMIN),
            Some(json!({"taskId": task_id, "agentId": agent_id, "text": text})),
        )
        .await
    }

    /// Whether a JSON log line carries `reason` = `reason`.
    fn logged_reason(&self, reason: &str) -> bool {
        let needle = format!("\"reason\":\"{reason}\"");
        self.gateway
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(&needle))
    }
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn registrations_crud_tenant_isolation_and_validation() {
    let gw = Gw::start(&[]).await;
    let endpoint = "http://127.0.0.1:9/a2a/rpc";
    let body = json!({"name": "Remote", "endpoint": endpoint});

    // Authentication and the management scope.
    let (status, _) = gw
        .call(Method::POST, "/v1/a2a/agents", None, Some(body.clone()))
        .await;
    assert_eq!(status, 401);
    let (status, v) = gw
        .call(
            Method::POST,
            "/v1/a2a/agents",
            Some("tok-alice"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(v["requiredScopes"], json!(["a2a:agents"]));
    let (status, _) = gw
        .call(Method::GET, "/v1/a2a/agents", Some("tok-alice-wild"), None)
        .await;
    assert_eq!(status, 200, "a2a:* satisfies a2a:agents");

    // Validation: each refused with the field named, nothing stored.
    let invalid = [
        (json!({"endpoint": endpoint}), "name"),
        (json!({"name": " ", "endpoint": endpoint}), "name"),
        (
            json!({"name": "x".repeat(201), "endpoint": endpoint}),
            "name",
        ),
        (json!({"name": "R"}), "endpoint"),
        (
            json!({"name": "R", "endpoint": "ftp://127.0.0.1/"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": "http://u:p@127.0.0.1:9/rpc"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": "http://127.0.0.1:9/rpc#x"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": "http://10.0.0.1/rpc"}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": format!("https://a.example/{}", "p".repeat(2100))}),
            "endpoint",
        ),
        (
            json!({"name": "R", "endpoint": endpoint, "bearerToken": ""}),
            "bearerToken",
        ),
        (
            json!({"name": "R", "endpoint": endpoint, "bearerToken": "a b"}),
            "bearerToken",
        ),
        (
            json!({"name": "R", "endpoint": endpoint, "credentialKeyId": "k9"}),
            "body",
        ),
    ];
    for (body, field) in invalid {
        let (status, v) = gw
            .call(
                Method::POST,
                "/v1/a2a/agents",
                Some(ADMIN),
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["field"], field, "{body}: {v}");
    }
    let big = json!({"name": "R", "endpoint": endpoint, "bearerToken": "x".repeat(70_000)});
    let (status, _) = gw
        .call(Method::POST, "/v1/a2a/agents", Some(ADMIN), Some(big))
        .await;
    assert_eq!(status, 413, "the 64 KiB body limit applies");
    assert_eq!(
        gw.db.count("SELECT count(*) FROM a2a_remote_agents").await,
        0
    );

    // Create: the credential is write-only.
    let secret = "tok-remote-secret-0123456789";
    let created = gw.register("Remote", endpoint, Some(secret)).await;
    let id = id_of(&created);
    assert!(id.starts_with("reg-"), "{created}");
    assert_eq!(created["hasCredential"], true);
    assert_eq!(created["credentialKeyId"], "k1");
    assert_eq!(created["endpoint"], endpoint);
    assert_eq!(created["discoveredCard"], Value::Null);
    assert!(!created.to_string().contains(secret));

    // At rest: ciphertext only.
    let client = gw.db.client().await;
    let row = client
        .query_one(
            "SELECT row_to_json(r)::text, credential_ciphertext FROM a2a_remote_agents r",
            &[],
        )
        .await
        .unwrap();
    let as_text: String = row.get(0);
    let ciphertext: Vec<u8> = row.get(1);
    assert!(!as_text.contains(secret));
    assert!(!ciphertext
        .windows(secret.len())
        .any(|w| w == secret.as_bytes()));
    assert!(
        ciphertext.len() >= secret.len() + 16,
        "AES-GCM adds its tag"
    );

    // Read, list, and another tenant's view.
    let (status, v) = gw
        .call(
            Method::GET,
            &format!("/v1/a2a/agents/{id}"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!((status, v["id"].clone()), (200, json!(id)));
    assert!(!v.to_string().contains(secret));
    let (_, list) = gw
        .call(Method::GET, "/v1/a2a/agents", Some(ADMIN), None)
        .await;
    assert_eq!(list["agents"].as_array().unwrap().len(), 1);
    let (_, list) = gw
        .call(Method::GET, "/v1/a2a/agents", Some(CAROL_ADMIN), None)
        .await;
    assert_eq!(list["agents"], json!([]));
    for method in [Method::GET, Method::DELETE] {
        let (status, v) = gw
            .call(
                method,
                &format!("/v1/a2a/agents/{id}"),
                Some(CAROL_ADMIN),
                None,
            )
            .await;
        assert_eq!(status, 404, "{v}");
    }
    let (status, _) = gw
        .call(
            Method::PATCH,
            &format!("/v1/a2a/agents/{id}"),
            Some(CAROL_ADMIN),
            Some(json!({"name": "mine now"})),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = gw
        .call(Method::GET, "/v1/a2a/agents/ag-writer", Some(ADMIN), None)
        .await;
    assert_eq!(status, 404, "Q agent ids are not registrations");

    // Update: rename keeps the credential; same origin keeps it; another origin drops it.
    let path = format!("/v1/a2a/agents/{id}");
    let patch = |body: Value| gw.call(Method::PATCH, &path, Some(ADMIN), Some(body));
    let (status, v) = patch(json!({"name": "Renamed"})).await;
    assert_eq!(
        (status, v["name"].clone(), v["hasCredential"].clone()),
        (200, json!("Renamed"), json!(true))
    );
    let (_, v) = patch(json!({"endpoint": "http://127.0.0.1:9/other/rpc"})).await;
    assert_eq!(v["hasCredential"], true, "same origin: {v}");
    let (_, v) = patch(json!({"endpoint": "http://127.0.0.1:10/a2a/rpc"})).await;
    assert_eq!(
        v["hasCredential"], false,
        "another origin drops the credential: {v}"
    );
    assert_eq!(
        gw.db
            .count("SELECT count(*) FROM a2a_remote_agents WHERE credential_ciphertext IS NOT NULL")
            .await,
        0
    );
    let (_, v) = patch(json!({"bearerToken": "new-token"})).await;
    assert_eq!(v["hasCredential"], true);
    let (_, v) = patch(json!({"bearerToken": null})).await;
    assert_eq!(v["hasCredential"], false);
    let (status, v) = patch(json!({"endpoint": "http://169.254.169.254/latest"})).await;
    assert_eq!((status, v["field"].clone()), (400, json!("endpoint")));

    // Delete.
    let (status, _) = gw
        .call(
            Method::DELETE,
            &format!("/v1/a2a/agents/{id}"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = gw
        .call(
            Method::GET,
            &format!("/v1/a2a/agents/{id}"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn delegation_completes_and_credentials_reach_only_their_origin() {
    let gw = Gw::start(&[]).await;
    let secret_a = "secret-for-A-only";
    let a = Remote::start(&["--require-token", secret_a]).await;
    let b = Remote::start(&[]).await;
    let reg_a = id_of(&gw.register("A", &a.rpc_url(), Some(secret_a)).await);
    let reg_b = id_of(&gw.register("B", &b.rpc_url(), None).await);

    let (status, v) = gw
        .delegate("task-a-1", &reg_a, "Summarise the profile")
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["taskId"], "task-a-1");
    assert_eq!(v["agentId"], json!(reg_a));
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(v["remoteTaskId"], task["id"]);
    let part = &task["artifacts"][0]["parts"][0];
    assert_eq!(part["mediaType"], "text/markdown");
    assert!(part["text"]
        .as_str()
        .unwrap()
        .contains("Summarise the profile"));
    // The caller's taskId is the outbound messageId.
    assert!(task["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["messageId"] == "task-a-1"));

    let remote_a_task = v["remoteTaskId"].clone();
    let (_, v) = gw.delegate("task-b-1", &reg_b, "Hello B").await;
    assert_eq!(v["status"], "completed", "{v}");

    // A saw its credential on every call; B never saw it (nor any credential).
    let seen_a = a.seen().await;
    assert!(seen_a.iter().filter(|r| r["path"] == "/a2a/rpc").count() >= 1);
    for r in seen_a.iter().filter(|r| r["path"] == "/a2a/rpc") {
        assert_eq!(r["authorization"], format!("Bearer {secret_a}"));
    }
    for r in b.seen().await {
        assert_eq!(r["authorization"], Value::Null, "{r}");
    }

    // A repeat answers from the record; the message is not sent again.
    let (_, again) = gw
        .delegate("task-a-1", &reg_a, "Summarise the profile")
        .await;
    assert_eq!(again["status"], "completed");
    assert_eq!(again["remoteTaskId"], remote_a_task);
    assert_eq!(a.count("SendMessage").await, 1);

    // The same taskId with other content is a conflict; nothing is sent.
    let (status, v) = gw.delegate("task-a-1", &reg_a, "Something else").await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"], "task_id_conflict");
    assert_eq!(a.count("SendMessage").await, 1);

    // A redirect is not followed: C (with its own credential) points at B.
    let c = Remote::start(&["--mode", "redirect", "--redirect-to", &b.rpc_url()]).await;
    let reg_c = id_of(&gw.register("C", &c.rpc_url(), Some("secret-for-C")).await);
    let before = b.seen().await.len();
    let (status, v) = gw.delegate("task-c-1", &reg_c, "Follow me").await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "unknown", "{v}");
    assert_eq!(v["error"]["reason"], "redirect");
    assert_eq!(
        b.seen().await.len(),
        before,
        "B saw nothing from the redirect"
    );
    for r in b.seen().await {
        assert_eq!(r["authorization"], Value::Null);
    }

    // Local q.* targets are retired.
    let (status, v) = gw.delegate("task-q-1", "q.writer", "hi").await;
    assert_eq!(status, 410, "{v}");
    assert_eq!(v["error"], "local_target_retired");
    assert_eq!(
        v["a2a"]["rpcUrl"],
        format!("{}/v1/a2a/agents/writer/rpc", common::PUBLIC_BASE)
    );

    // Request errors.
    let (status, v) = gw
        .call(
            Method::POST,
            "/v1/a2a/tasks",
            Some(ADMIN),
            Some(json!({"agentId": reg_b, "text": "x"})),
        )
        .await;
    assert_eq!((status, v["field"].clone()), (400, json!("taskId")));
    let (status, _) = gw
        .call(
            Method::POST,
            "/v1/a2a/tasks",
            Some("tok-alice-read"),
            Some(json!({"taskId": "t", "agentId": reg_b, "text": "x"})),
        )
        .await;
    assert_eq!(status, 403, "a2a:delegate is required");
    let (status, _) = gw
        .call(
            Method::POST,
            "/v1/a2a/tasks",
            Some("tok-carol"),
            Some(json!({"taskId": "t", "agentId": reg_b, "text": "x"})),
        )
        .await;
    assert_eq!(
        status, 404,
        "another tenant's registration does not exist for carol"
    );
    let (status, _) = gw.delegate("task-x", "ag-writer", "x").await;
    assert_eq!(status, 404, "only registered agents are targets");
}

#[tokio::test]
async fn ambiguous_send_is_unknown_and_never_sent_again() {
    let gw = Gw::start(&[]).await;
    let remote = Remote::start(&["--mode", "drop-send"]).await;
    let reg = id_of(&gw.register("Dropper", &remote.rpc_url(), None).await);

    let (status, v) = gw.delegate("task-drop-1", &reg, "Do it once").await;
    assert_eq!(status, 200, "ambiguity is not a failure: {v}");
    assert_eq!(v["status"], "unknown", "{v}");
    assert_eq!(v["remoteTaskId"], Value::Null);
    assert_eq!(v["result"], Value::Null);
    assert_eq!(v["error"]["mayHaveReachedRemote"], true);
    assert!(gw.logged_reason(v["error"]["reason"].as_str().unwrap()));

    // No remote task id was received: the repeat answers unknown without contacting the remote.
    let (_, again) = gw.delegate("task-drop-1", &reg, "Do it once").await;
    assert_eq!(again["status"], "unknown", "{again}");
    assert_eq!(remote.count("SendMessage").await, 1);
    assert_eq!(remote.count("GetTask").await, 0);
}

#[tokio::test]
async fn lost_answer_after_a_task_id_reconciles_through_get_task() {
    let gw = Gw::start(&[]).await;
    let remote = Remote::start(&["--mode", "drop-get"]).await;
    let reg = id_of(&gw.register("Flaky", &remote.rpc_url(), None).await);

    let (status, v) = gw.delegate("task-flaky-1", &reg, "Take your time").await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "unknown", "{v}");
    let remote_task_id = v["remoteTaskId"]
        .as_str()
        .expect("task id was received")
        .to_string();

    let (_, again) = gw.delegate("task-flaky-1", &reg, "Take your time").await;
    assert_eq!(again["status"], "completed", "{again}");
    assert_eq!(again["remoteTaskId"], json!(remote_task_id));
    assert_eq!(again["result"]["task"]["id"], json!(remote_task_id));
    assert_eq!(remote.count("SendMessage").await, 1, "never sent twice");
    assert!(remote.count("GetTask").await >= 2);
}

#[tokio::test]
async fn answer_with_another_json_rpc_id_is_not_used() {
    let gw = Gw::start(&[]).await;
    let remote = Remote::start(&["--mode", "mismatched-id"]).await;
    let reg = id_of(&gw.register("Confused", &remote.rpc_url(), None).await);

    let (status, v) = gw
        .delegate("task-mm-1", &reg, "Who are you answering?")
        .await;
    assert_eq!(status, 200);
    // The request was delivered and may have been acted on, so the outcome is unknown; the
    // uncorrelated answer (and its task id) is discarded, not used.
    assert_eq!(v["status"], "unknown", "{v}");
    assert_eq!(v["error"]["reason"], "uncorrelated");
    assert_eq!(v["result"], Value::Null);
    assert_eq!(v["remoteTaskId"], Value::Null);
    assert!(gw.logged_reason("uncorrelated"));
    let (_, again) = gw
        .delegate("task-mm-1", &reg, "Who are you answering?")
        .await;
    assert_eq!(again["status"], "unknown");
    assert_eq!(remote.count("SendMessage").await, 1);
}

#[tokio::test]
async fn discovery_stores_the_card_as_untrusted_metadata_only() {
    let gw = Gw::start(&[]).await;
    let secret = "secret-discovery";
    let remote = Remote::start(&["--require-token", secret]).await;
    let created = gw
        .register("Discoverable", &remote.rpc_url(), Some(secret))
        .await;
    let id = id_of(&created);

    let (status, v) = gw
        .call(
            Method::POST,
            &format!("/v1/a2a/agents/{id}/discover"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let card = &v["discoveredCard"];
    assert_eq!(card["name"], "Remote Markdown Agent");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        "https://elsewhere.example/a2a/rpc"
    );
    assert_eq!(card["credentials"]["bearer"], "card-supplied-token");
    // Nothing the card says was installed.
    assert_eq!(v["endpoint"], json!(remote.rpc_url()));
    assert_eq!(v["hasCredential"], true);
    assert_eq!(v["credentialKeyId"], created["credentialKeyId"]);
    assert_eq!(
        gw.db.count("SELECT count(*) FROM a2a_remote_agents").await,
        1
    );
    // The card was fetched without the credential.
    let card_requests: Vec<Value> = remote
        .seen()
        .await
        .into_iter()
        .filter(|r| r["path"] == "/.well-known/agent-card.json")
        .collect();
    assert_eq!(card_requests.len(), 1);
    assert_eq!(card_requests[0]["authorization"], Value::Null);

    // Delegation still uses the registered endpoint and credential.
    let (_, d) = gw.delegate("task-disc-1", &id, "Still you?").await;
    assert_eq!(d["status"], "completed", "{d}");
    assert!(remote
        .seen()
        .await
        .iter()
        .filter(|r| r["rpcMethod"] == "SendMessage")
        .all(|r| r["authorization"] == format!("Bearer {secret}")));

    // Another tenant cannot trigger discovery.
    let (status, _) = gw
        .call(
            Method::POST,
            &format!("/v1/a2a/agents/{id}/discover"),
            Some(CAROL_ADMIN),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

/// The policy at connect time, through the real gateway: every bypass attempt is refused and
/// the reason logged as the structured field `reason`.
#[tokio::test]
async fn outbound_policy_refuses_bypass_attempts() {
    let gw = Gw::start(&[("Q_A2A_OUTBOUND_REQUEST_TIMEOUT_MS", "1500")]).await;
    let normal = Remote::start(&[]).await;
    let port = normal.url.rsplit(':').next().unwrap().to_string();

    // Literal addresses (127.0.0.1/32 is allowlisted, nothing else is).
    let literals = [
        (format!("http://2130706434:{port}/a2a/rpc"), "loopback"),
        (format!("http://0x7f.0.0.2:{port}/a2a/rpc"), "loopback"),
        (format!("http://0177.0.0.2:{port}/a2a/rpc"), "loopback"),
        (format!("http://127.2:{port}/a2a/rpc"), "loopback"),
        (format!("http://[::1]:{port}/a2a/rpc"), "loopback"),
        (
            format!("http://[::ffff:127.0.0.2]:{port}/a2a/rpc"),
            "loopback",
        ),
        (format!("http://0.0.0.0:{port}/a2a/rpc"), "unspecified"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "link_local",
        ),
        ("http://[fd00::1]/rpc".to_string(), "unique_local"),
        ("http://192.168.0.10/rpc".to_string(), "private"),
    ];
    for (endpoint, reason) in &literals {
        let (status, v) = gw
            .call(
                Method::POST,
                "/v1/a2a/agents",
                Some(ADMIN),
                Some(json!({"name": "bad", "endpoint": endpoint})),
            )
            .await;
        assert_eq!(status, 400, "{endpoint}: {v}");
        assert!(
            v["message"].as_str().unwrap().contains(reason),
            "{endpoint}: {v}"
        );
        assert!(gw.logged_reason(reason), "{reason} logged");
    }

    // Oversized answers: the read stops at the cap.
    let big = Remote::start(&["--mode", "oversize"]).await;
    let reg = id_of(&gw.register("Big", &big.rpc_url(), None).await);
    let (_, v) = gw.delegate("task-big", &reg, "x").await;
    assert_eq!(
        (v["status"].clone(), v["error"]["reason"].clone()),
        (json!("unknown"), json!("response_too_large")),
        "{v}"
    );
    let (status, v) = gw
        .call(
            Method::POST,
            &format!("/v1/a2a/agents/{reg}/discover"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(
        (status, v["reason"].clone()),
        (502, json!("response_too_large"))
    );

    // Slow answers: the total time limit ends the call.
    let slow = Remote::start(&["--mode", "slow", "--delay", "5"]).await;
    let reg = id_of(&gw.register("Slow", &slow.rpc_url(), None).await);
    let started = std::time::Instant::now();
    let (_, v) = gw.delegate("task-slow", &reg, "x").await;
    assert_eq!(
        (v["status"].clone(), v["error"]["reason"].clone()),
        (json!("unknown"), json!("timeout")),
        "{v}"
    );
    assert!(started.elapsed() < Duration::from_secs(4));

    // A redirect to the metadata service is not followed.
    let redirector = Remote::start(&[
        "--mode",
        "redirect",
        "--redirect-to",
        "http://169.254.169.254/latest/meta-data/",
    ])
    .await;
    let reg = id_of(&gw.register("Redirector", &redirector.rpc_url(), None).await);
    let (_, v) = gw.delegate("task-redirect", &reg, "x").await;
    assert_eq!(v["error"]["reason"], "redirect", "{v}");

    for reason in ["response_too_large", "timeout", "redirect"] {
        assert!(gw.logged_reason(reason), "{reason} logged");
    }

    // A name that resolves to loopback, with no allowlist: refused when connecting, for
    // delegation and discovery alike; nothing reaches the remote.
    let strict = Gw::start(&[("Q_A2A_OUTBOUND_ALLOW_CIDRS", "")]).await;
    let by_name = format!("http://localhost:{port}/a2a/rpc");
    let reg = id_of(
        &strict
            .register("By name", &by_name, Some("never-sent"))
            .await,
    );
    let before = normal.seen().await.len();
    let (status, v) = strict.delegate("task-name", &reg, "x").await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "failed", "certainly not sent: {v}");
    assert_eq!(v["error"]["reason"], "loopback", "{v}");
    assert_eq!(v["error"]["mayHaveReachedRemote"], false);
    let (status, v) = strict
        .call(
            Method::POST,
            &format!("/v1/a2a/agents/{reg}/discover"),
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!((status, v["reason"].clone()), (502, json!("loopback")));
    assert_eq!(
        normal.seen().await.len(),
        before,
        "nothing reached the remote"
    );
    assert!(strict.logged_reason("loopback"));
    // The literal allowlisted address is refused too without the allowlist.
    let (status, _) = strict
        .call(
            Method::POST,
            "/v1/a2a/agents",
            Some(ADMIN),
            Some(json!({"name": "lit", "endpoint": normal.rpc_url()})),
        )
        .await;
    assert_eq!(status, 400);
}
