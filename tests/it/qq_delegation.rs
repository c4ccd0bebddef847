//! Q delegating to Q, and the outbound rules it needs: no client-chosen `contextId`, a taskId
//! unique per registration across principals, card discovery under the agent's path, and the
//! operator's declaration that a remote deduplicates messageIds.
//!
//! Two complete stacks, each with its own database, reference upstream and gateway process:
//! A delegates through its outbound registration to B's per-agent A2A interface. Between them
//! sits an HTTP proxy the test controls: it records what A sent and can drop one answer after
//! B committed it. Discovery of a domain-level card uses the official a2a-sdk 1.2.2 server
//! (tests/python/remote_agent.py), which needs the repo's `.venv` (`scripts/setup-python`).

use std::sync::{Arc, Mutex};

use crate::support::db::migrate_until;
use crate::support::gateway::migrate;
use crate::support::outbound::{id_of, OutboundGateway};
use crate::support::python::Remote;
use crate::support::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The credential A holds for B: a principal of B's tenant with every A2A scope.
const B_TOKEN: &str = "tok-alice";

/// One request the proxy saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    rpc_method: Option<String>,
    body: Value,
    dropped: bool,
}

#[derive(Default)]
struct ProxyState {
    seen: Mutex<Vec<Seen>>,
    /// The JSON-RPC method whose next answer is read from B and then not passed on.
    drop_next: Mutex<Option<String>>,
}

/// An HTTP/1.1 forwarder between A and B. Each request goes to B on its own connection; B's
/// whole answer is read before it is passed on, so an answer can be dropped after B
/// committed whatever the request caused. Both sides are told `connection: close`.
struct HttpProxy {
    port: u16,
    state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpProxy {
    async fn start(target_base: &str) -> HttpProxy {
        let target = target_base
            .strip_prefix("http://")
            .expect("an http:// base")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::default());
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                connections.spawn(forward(inbound, target.clone(), shared.clone()));
            }
        });
        HttpProxy { port, state, task }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn rpc_url(&self, agent: &str) -> String {
        format!("{}/v1/a2a/agents/{agent}/rpc", self.base())
    }

    /// Drops B's next answer to `rpc_method` (B still processes the request).
    fn drop_next(&self, rpc_method: &str) {
        *self.state.drop_next.lock().unwrap() = Some(rpc_method.to_string());
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The SendMessage requests that carried `message_id`.
    fn sends_of(&self, message_id: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| {
                s.rpc_method.as_deref() == Some("SendMessage")
                    && s.body["params"]["message"]["messageId"] == message_id
            })
            .collect()
    }

    fn count(&self, rpc_method: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.rpc_method.as_deref() == Some(rpc_method))
            .count()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The header block with every `connection` header replaced by `connection: close`.
fn with_connection_close(head: &str) -> String {
    let mut lines = head.split("\r\n");
    let mut out = String::from(lines.next().unwrap_or_default());
    out.push_str("\r\nconnection: close");
    for line in lines.filter(|l| !l.is_empty()) {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.push_str("\r\n");
            out.push_str(line);
        }
    }
    out.push_str("\r\n\r\n");
    out
}

async fn forward(mut inbound: TcpStream, target: String, state: Arc<ProxyState>) {
    // The request: head up to the blank line, then Content-Length bytes.
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(i) = find(&buffer, b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 8192];
        match inbound.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    assert!(
        header("transfer-encoding").is_none(),
        "the proxy forwards Content-Length bodies only"
    );
    let length: usize = header("content-length")
        .map(|v| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 8192];
        match inbound.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let mut request_line = head.split("\r\n").next().unwrap_or_default().split(' ');
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rpc_method = json["method"].as_str().map(str::to_string);
    let mut seen = Seen {
        method: request_line.next().unwrap_or_default().to_string(),
        path: request_line.next().unwrap_or_default().to_string(),
        authorization: header("authorization"),
        rpc_method: rpc_method.clone(),
        body: json,
        dropped: false,
    };

    let mut outbound = TcpStream::connect(&target).await.expect("B is listening");
    outbound
        .write_all(with_connection_close(&head).as_bytes())
        .await
        .unwrap();
    outbound.write_all(&body).await.unwrap();
    let mut answer = Vec::new();
    outbound.read_to_end(&mut answer).await.unwrap();

    let drop_it = {
        let mut armed = state.drop_next.lock().unwrap();
        let hit = rpc_method.is_some() && *armed == rpc_method;
        if hit {
            *armed = None;
        }
        hit
    };
    seen.dropped = drop_it;
    state.seen.lock().unwrap().push(seen);
    if drop_it {
        // B answered; A gets nothing but a closed connection.
        return;
    }
    let Some(answer_head_end) = find(&answer, b"\r\n\r\n") else {
        return;
    };
    let answer_head = String::from_utf8_lossy(&answer[..answer_head_end]).into_owned();
    let _ = inbound
        .write_all(with_connection_close(&answer_head).as_bytes())
        .await;
    let _ = inbound.write_all(&answer[answer_head_end + 4..]).await;
    let _ = inbound.shutdown().await;
}

/// Registers `endpoint` at A; `extra` is merged into the body. The registration's id.
async fn register(a: &OutboundGateway, endpoint: &str, extra: Value) -> String {
    let mut body = json!({"name": "Q elsewhere", "endpoint": endpoint});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    id_of(&a.register_with(body).await)
}

/// Gateway B (a full stack with the A2A profile on, serving `ag-writer`) behind a proxy, and
/// gateway A (a full stack whose outbound policy allows loopback) with a registration of B's
/// `ag-writer` through the proxy, holding B's credential.
struct Stacks {
    b: Gateway,
    proxy: HttpProxy,
    a: OutboundGateway,
    reg: String,
}

impl Stacks {
    /// `deduplicates`: the registration declares that B deduplicates messageIds.
    async fn start(deduplicates: bool) -> Stacks {
        let b = Gateway::start().await;
        let proxy = HttpProxy::start(&b.url).await;
        let a = OutboundGateway::start(&[]).await;
        let mut extra = json!({"bearerToken": B_TOKEN});
        if deduplicates {
            extra["deduplicatesMessageIds"] = json!(true);
        }
        let reg = register(&a, &proxy.rpc_url("ag-writer"), extra).await;
        Stacks { b, proxy, a, reg }
    }

    /// A's admin delegates to the registration; A must answer 200.
    async fn delegate(&self, task_id: &str, text: &str) -> Value {
        let (status, v) = self.a.delegate(task_id, &self.reg, text).await;
        assert_eq!(status, 200, "{v}");
        v
    }
}

/// The messageIds in a task's history.
fn history_ids(task: &Value) -> Vec<String> {
    task["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["messageId"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn q_delegates_to_q_without_a_context_of_its_own() {
    let s = Stacks::start(false).await;

    let v = s.delegate("qq-1", "Summarise order 4711").await;
    assert_eq!(v["status"], "completed", "{v}");
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(v["remoteTaskId"], task["id"]);
    assert_eq!(
        task["artifacts"][0]["parts"][0]["mediaType"], "text/markdown",
        "{v}"
    );
    assert!(history_ids(task).contains(&"qq-1".to_string()), "{v}");
    // What A sent: our taskId as messageId, no contextId or taskId of our choosing.
    let sent = s.proxy.sends_of("qq-1");
    assert_eq!(sent.len(), 1);
    let message = &sent[0].body["params"]["message"];
    assert!(message.get("contextId").is_none(), "{message}");
    assert!(message.get("taskId").is_none(), "{message}");
    assert_eq!(sent[0].authorization.as_deref(), Some("Bearer tok-alice"));
    // B's own view of the task: the context A recorded is the one B assigned.
    let on_b =
        s.b.caller(B_TOKEN)
            .agent("ag-writer")
            .get_task(task["id"].as_str().unwrap())
            .await;
    assert_eq!(on_b.result()["contextId"], task["contextId"]);
    let recorded: String =
        s.a.db
            .one("SELECT context_id FROM a2a_delegations WHERE task_id = 'qq-1'")
            .await;
    assert_eq!(json!(recorded), task["contextId"]);
    assert_eq!(s.b.upstream.runs(None).await.len(), 1);
    // The remote task was read with GetTask until it completed, in the context B gave it.
    assert!(s.proxy.count("GetTask") >= 1);
}

#[tokio::test]
async fn q_delegates_to_q_and_a_lost_answer_is_resolved_by_the_callers_repeat() {
    let s = Stacks::start(true).await;
    let v = s.delegate("qq-1", "Summarise order 4711").await;
    assert_eq!(v["status"], "completed", "{v}");

    // B commits the second message, but its answer never reaches A.
    s.proxy.drop_next("SendMessage");
    let lost = s.delegate("qq-2", "Summarise order 4712").await;
    assert_eq!(lost["status"], "unknown", "{lost}");
    assert_eq!(lost["remoteTaskId"], Value::Null);
    assert_eq!(lost["error"]["mayHaveReachedRemote"], true, "{lost}");
    assert_eq!(lost["error"]["reason"], "connection", "{lost}");
    let sent = s.proxy.sends_of("qq-2");
    assert_eq!(sent.len(), 1);
    assert!(sent[0].dropped);
    assert_eq!(s.b.db.task_count().await, 2, "B committed the lost message");

    // The caller repeats: the same messageId again, which B recognises.
    let again = s.delegate("qq-2", "Summarise order 4712").await;
    assert_eq!(again["status"], "completed", "{again}");
    let task = &again["result"]["task"];
    assert_eq!(again["remoteTaskId"], task["id"]);
    assert!(history_ids(task).contains(&"qq-2".to_string()), "{again}");
    assert_eq!(s.proxy.sends_of("qq-2").len(), 2, "sent once more, same id");
    assert_eq!(s.b.db.task_count().await, 2);
    assert_eq!(
        s.b.upstream.runs(None).await.len(),
        2,
        "B ran each message exactly once"
    );

    // Settled: another repeat answers from A's record.
    let third = s.delegate("qq-2", "Summarise order 4712").await;
    assert_eq!(third["status"], "completed");
    assert_eq!(third["remoteTaskId"], again["remoteTaskId"]);
    assert_eq!(s.proxy.sends_of("qq-2").len(), 2);
}

#[tokio::test]
async fn without_the_declaration_a_lost_answer_is_never_sent_again() {
    let s = Stacks::start(false).await;

    s.proxy.drop_next("SendMessage");
    let lost = s.delegate("qq-nd-1", "Do it once").await;
    assert_eq!(lost["status"], "unknown", "{lost}");
    for _ in 0..2 {
        let again = s.delegate("qq-nd-1", "Do it once").await;
        assert_eq!(again["status"], "unknown", "{again}");
    }
    assert_eq!(s.proxy.count("SendMessage"), 1, "never replayed on its own");
    assert_eq!(s.proxy.count("GetTask"), 0);

    // The operator declares that this remote deduplicates; the caller's repeat resolves it.
    let (status, v) =
        s.a.patch(&s.reg, json!({"deduplicatesMessageIds": true}))
            .await;
    assert_eq!(
        (status, v["deduplicatesMessageIds"].clone()),
        (200, json!(true))
    );
    let resolved = s.delegate("qq-nd-1", "Do it once").await;
    assert_eq!(resolved["status"], "completed", "{resolved}");
    assert_eq!(s.proxy.sends_of("qq-nd-1").len(), 2);
    assert_eq!(s.b.upstream.runs(None).await.len(), 1);
}

#[tokio::test]
async fn a_resend_goes_only_to_the_endpoint_and_credential_that_may_have_acted() {
    let s = Stacks::start(true).await;
    let first = &s.proxy;
    let second = HttpProxy::start(&s.b.url).await;
    first.drop_next("SendMessage");
    let lost = s.delegate("qq-mv-1", "Where did it go?").await;
    assert_eq!(lost["status"], "unknown", "{lost}");

    // The same token sealed again is another credential as far as the record can tell.
    let (status, _) = s.a.patch(&s.reg, json!({"bearerToken": B_TOKEN})).await;
    assert_eq!(status, 200);
    let again = s.delegate("qq-mv-1", "Where did it go?").await;
    assert_eq!(again["status"], "unknown", "{again}");
    assert_eq!(first.count("SendMessage"), 1);

    // Another endpoint: the declaration is dropped unless restated, and even restated the
    // message is not sent to a remote that never had it.
    let (_, v) =
        s.a.patch(
            &s.reg,
            json!({"endpoint": second.rpc_url("ag-writer"), "bearerToken": B_TOKEN}),
        )
        .await;
    assert_eq!(v["deduplicatesMessageIds"], false, "{v}");
    let (_, v) =
        s.a.patch(&s.reg, json!({"deduplicatesMessageIds": true}))
            .await;
    assert_eq!(v["deduplicatesMessageIds"], true, "{v}");
    let again = s.delegate("qq-mv-1", "Where did it go?").await;
    assert_eq!(again["status"], "unknown", "{again}");
    assert_eq!(second.count("SendMessage"), 0);
    assert_eq!(first.count("SendMessage"), 1);

    // A new taskId goes to the new endpoint as usual.
    let fresh = s.delegate("qq-mv-2", "Where did it go?").await;
    assert_eq!(fresh["status"], "completed", "{fresh}");
    assert_eq!(second.count("SendMessage"), 1);
}

#[tokio::test]
async fn a_task_id_is_unique_per_registration_across_principals() {
    let s = Stacks::start(false).await;

    let v = s.delegate("shared-1", "Alice's question").await;
    assert_eq!(v["status"], "completed", "{v}");

    // Bob shares the registration's credential: the same taskId would be the same messageId
    // of the same principal at B. Refused before anything is sent, whatever the content.
    for text in ["Alice's question", "Bob's question"] {
        let (status, v) = s.a.delegate_as("tok-bob", "shared-1", &s.reg, text).await;
        assert_eq!(status, 409, "{v}");
        assert_eq!(v["error"], "task_id_conflict", "{v}");
        assert!(!v.to_string().contains("Alice's question"), "{v}");
        assert!(!v.to_string().contains("p-alice"), "{v}");
    }
    assert_eq!(s.proxy.count("SendMessage"), 1);
    assert_eq!(
        s.a.db
            .count("SELECT count(*) FROM a2a_delegations WHERE task_id = 'shared-1'")
            .await,
        1
    );
    let principal: String =
        s.a.db
            .one("SELECT principal_id FROM a2a_delegations WHERE task_id = 'shared-1'")
            .await;
    assert_eq!(principal, "p-alice", "Alice's record is untouched");

    // Alice's own repeat still answers from her record, and Bob's own taskId works.
    let again = s.delegate("shared-1", "Alice's question").await;
    assert_eq!(again["remoteTaskId"], v["remoteTaskId"]);
    let (status, bob) =
        s.a.delegate_as("tok-bob", "bob-1", &s.reg, "Bob's question")
            .await;
    assert_eq!(
        (status, bob["status"].clone()),
        (200, json!("completed")),
        "{bob}"
    );
    assert_eq!(s.proxy.count("SendMessage"), 2);
}

#[tokio::test]
async fn registration_validates_the_deduplication_declaration() {
    let a = OutboundGateway::start(&[]).await;
    let endpoint = "http://127.0.0.1:9/v1/a2a/agents/ag-writer/rpc";

    for bad in [json!("yes"), json!(1), json!(null), json!({})] {
        let (status, v) = a
            .post_registration(
                json!({"name": "R", "endpoint": endpoint, "deduplicatesMessageIds": bad}),
            )
            .await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(v["field"], "deduplicatesMessageIds", "{bad}: {v}");
    }
    assert_eq!(
        a.db.count("SELECT count(*) FROM a2a_remote_agents").await,
        0
    );

    // Off unless declared.
    let id = register(&a, endpoint, json!({})).await;
    let (_, v) = a.registration(&id).await;
    assert_eq!(v["deduplicatesMessageIds"], false, "{v}");

    let (_, v) = a.patch(&id, json!({"deduplicatesMessageIds": true})).await;
    assert_eq!(v["deduplicatesMessageIds"], true, "{v}");
    let before: String =
        a.db.one("SELECT row_to_json(r)::text FROM a2a_remote_agents r")
            .await;
    for bad in [json!("false"), json!(0), json!(null)] {
        let (status, v) = a
            .patch(
                &id,
                json!({"name": "Renamed", "deduplicatesMessageIds": bad}),
            )
            .await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(v["field"], "deduplicatesMessageIds", "{bad}: {v}");
    }
    let after: String =
        a.db.one("SELECT row_to_json(r)::text FROM a2a_remote_agents r")
            .await;
    assert_eq!(before, after, "a refused update changes nothing");

    // A new endpoint in the same update keeps a restated declaration.
    let (_, v) = a
        .patch(
            &id,
            json!({"endpoint": "http://127.0.0.1:9/v1/a2a/agents/ag-slow/rpc",
                   "deduplicatesMessageIds": true}),
        )
        .await;
    assert_eq!(v["deduplicatesMessageIds"], true, "{v}");
    let (_, v) = a
        .patch(
            &id,
            json!({"endpoint": "http://127.0.0.1:9/v1/a2a/agents/ag-writer/rpc"}),
        )
        .await;
    assert_eq!(v["deduplicatesMessageIds"], false, "{v}");
}

#[tokio::test]
async fn discovery_finds_a_q_agent_card_under_the_agent_path_with_the_credential() {
    let s = Stacks::start(false).await;

    let (status, v) = s.a.discover(&s.reg).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["discoveredCard"]["name"], "Writer", "{v}");
    assert_eq!(
        v["discoveredCard"]["supportedInterfaces"][0]["url"],
        format!("{PUBLIC_BASE}/v1/a2a/agents/ag-writer/rpc")
    );
    assert_eq!(v["endpoint"], json!(s.proxy.rpc_url("ag-writer")));
    let cards: Vec<Seen> = s.proxy.seen();
    assert_eq!(cards.len(), 1, "{cards:?}");
    assert_eq!(cards[0].method, "GET");
    assert_eq!(
        cards[0].path,
        "/v1/a2a/agents/ag-writer/.well-known/agent-card.json"
    );
    assert_eq!(cards[0].authorization.as_deref(), Some("Bearer tok-alice"));

    // Without a credential B refuses the agent's card; the domain-level one does not exist.
    let bare = register(&s.a, &s.proxy.rpc_url("ag-writer"), json!({})).await;
    let (status, v) = s.a.discover(&bare).await;
    assert_eq!(status, 502, "{v}");
    let tried: Vec<(String, Option<String>)> = s.proxy.seen()[1..]
        .iter()
        .map(|s| (s.path.clone(), s.authorization.clone()))
        .collect();
    assert_eq!(
        tried,
        vec![
            (
                "/v1/a2a/agents/ag-writer/.well-known/agent-card.json".to_string(),
                None
            ),
            ("/.well-known/agent-card.json".to_string(), None),
        ]
    );
    let (_, v) = s.a.registration(&bare).await;
    assert_eq!(v["discoveredCard"], Value::Null);
}

#[tokio::test]
async fn discovery_falls_back_to_the_domain_card_without_the_credential() {
    let a = OutboundGateway::start(&[]).await;
    let secret = "secret-for-the-sdk-remote";
    let remote = Remote::start(&["--require-token", secret]).await;
    let reg = register(&a, &remote.rpc_url(), json!({"bearerToken": secret})).await;

    let (status, v) = a.discover(&reg).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["discoveredCard"]["name"], "Remote Markdown Agent", "{v}");
    let tried: Vec<(Value, Value)> = remote
        .seen()
        .await
        .iter()
        .map(|r| (r["path"].clone(), r["authorization"].clone()))
        .collect();
    assert_eq!(
        tried,
        vec![
            (
                json!("/a2a/.well-known/agent-card.json"),
                json!(format!("Bearer {secret}"))
            ),
            (json!("/.well-known/agent-card.json"), Value::Null),
        ],
        "the agent's path with the credential (same origin), then the domain without it"
    );

    // A card request that is redirected is not followed, with or without a credential.
    let elsewhere = Remote::start(&[]).await;
    let redirector = Remote::start(&[
        "--mode",
        "redirect",
        "--redirect-to",
        &format!("{}/.well-known/agent-card.json", elsewhere.url),
    ])
    .await;
    let reg = register(
        &a,
        &redirector.rpc_url(),
        json!({"bearerToken": "for-the-redirector"}),
    )
    .await;
    let (status, v) = a.discover(&reg).await;
    assert_eq!(
        (status, v["reason"].clone()),
        (502, json!("redirect")),
        "{v}"
    );
    assert_eq!(elsewhere.seen().await, Vec::<Value>::new());
}

#[tokio::test]
async fn migration_refuses_task_ids_already_shared_across_principals() {
    let db = TestDb::create().await;
    migrate_until(&db, "20261101_000000_a2a_outbound").await;
    let client = db.client().await;
    for principal in ["p-alice", "p-bob"] {
        client
            .execute(
                "INSERT INTO a2a_delegations (tenant_id, principal_id, task_id, registration_id,
                    content_sha256, context_id, outcome, status)
                 VALUES ('t-acme', $1, 'shared', 'reg-1', 'h', 'q-ctx-1', 'answered', 'completed')",
                &[&principal],
            )
            .await
            .unwrap();
    }
    let applied_before = db.count("SELECT count(*) FROM a2a_schema_migrations").await;

    let upstream = "http://127.0.0.1:9"; // migrate never calls Q
    let out = migrate(&db, upstream).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("several principals") && stderr.contains("t-acme"),
        "{stderr}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM a2a_schema_migrations").await,
        applied_before
    );
    assert_eq!(db.count("SELECT count(*) FROM a2a_delegations").await, 2);
    assert_eq!(
        db.count(
            "SELECT count(*) FROM information_schema.columns
             WHERE table_name = 'a2a_remote_agents' AND column_name = 'deduplicates_message_ids'"
        )
        .await,
        0,
        "nothing of the migration was applied"
    );

    // Once the operator resolved the collision, the migration applies.
    client
        .execute(
            "DELETE FROM a2a_delegations WHERE principal_id = 'p-bob'",
            &[],
        )
        .await
        .unwrap();
    let out = migrate(&db, upstream).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every migration, plus the former name of each renamed one.
    assert_eq!(
        db.count("SELECT count(*) FROM a2a_schema_migrations").await,
        (q_a2a_gateway::store::migrate::MIGRATIONS.len()
            + q_a2a_gateway::store::migrate::FORMER_NAMES.len()) as i64
    );
}
