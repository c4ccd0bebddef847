//! The authenticated card, the profile gate and every RPC stage before a method runs:
//! body limit, envelope, version, authentication, tenant feature, method, scopes, agent.
//! Each refusal is checked for its documented answer and for writing nothing.

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{new_id, Gateway, GatewayOptions, PUBLIC_BASE};

/// The RPC route of `ag-writer`.
const RPC_PATH: &str = "/v1/a2a/agents/ag-writer/rpc";
/// Alice's token and the A2A version, for raw requests.
const ALICE_V1: &[(&str, &str)] = &[
    ("authorization", "Bearer tok-alice"),
    ("a2a-version", "1.0"),
];

fn message(id: &str) -> Value {
    json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": "hi"}]},
           "configuration": {"returnImmediately": true}})
}

#[tokio::test]
async fn card_is_standard_authenticated_and_uses_public_base_only() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let response = writer
        .card_with(&[
            ("host", "evil.example"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "http"),
            ("forwarded", "host=evil.example"),
        ])
        .await;
    assert_eq!(response.status, 200);
    let etag = response.header("etag").to_string();
    assert!(etag.starts_with("W/\""));
    let card = response.body;
    assert_eq!(card["name"], "Writer");
    assert_eq!(card["version"], "1.0.0");
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    assert_eq!(interfaces.len(), 1);
    assert_eq!(
        interfaces[0],
        json!({"url": format!("{PUBLIC_BASE}/v1/a2a/agents/ag-writer/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"})
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    assert_eq!(card["capabilities"]["extendedAgentCard"], false);
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    let text = card.to_string();
    assert!(!text.contains("oauth2"), "no OAuth issuance claim");
    assert!(
        !text.contains("evil.example"),
        "no URL from request headers"
    );
    // The official type parses it.
    let parsed: a2a::AgentCard = serde_json::from_value(card).unwrap();
    assert_eq!(parsed.supported_interfaces[0].protocol_binding, "JSONRPC");

    // Conditional GET.
    let again = writer.card_with(&[("if-none-match", &etag)]).await;
    assert_eq!(again.status, 304);
}

#[tokio::test]
async fn card_refusals() {
    let gw = Gateway::start().await;
    let cases: &[(&str, Option<&str>, u16, &str)] = &[
        ("ag-writer", None, 401, "unauthorized"),
        ("ag-writer", Some("tok-nope"), 401, "invalid_token"),
        ("ag-writer", Some("tok-alice-expired"), 401, "invalid_token"),
        ("ag-writer", Some("tok-carol"), 404, "agent_not_found"),
        ("ag-nope", Some("tok-alice"), 404, "agent_not_found"),
        (
            "ag-private",
            Some("tok-bob"),
            403,
            "workspace_access_denied",
        ),
        (
            "ag-legacy",
            Some("tok-dave"),
            403,
            "tenant_feature_disabled",
        ),
        (
            "ag-writer",
            Some("tok-alice-noai"),
            403,
            "insufficient_scope",
        ),
        (
            "ag-writer",
            Some("tok-alice-delegate"),
            403,
            "insufficient_scope",
        ),
    ];
    for (agent, token, status, code) in cases {
        let caller = match token {
            Some(token) => gw.caller(token),
            None => gw.anonymous(),
        };
        let response = caller.agent(agent).card().await;
        assert_eq!(response.status, *status, "{agent} {token:?}");
        if *status == 401 {
            assert!(response.header("www-authenticate").starts_with("Bearer"));
        }
        let body = &response.body;
        assert!(body.is_object(), "{agent} {token:?}: {body}");
        assert_eq!(body["error"], *code, "{agent} {token:?}: {body}");
    }
    for token in ["tok-alice-wild", "tok-alice-read"] {
        assert_eq!(gw.caller(token).agent("ag-writer").card().await.status, 200);
    }
}

#[tokio::test]
async fn profile_disabled_answers_404_and_runs_nothing() {
    let gw = Gateway::start_with(GatewayOptions::profile_off()).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    assert_eq!(writer.card().await.status, 404);
    let reply = writer.send_text_immediately(&new_id(), "hi").await;
    assert_eq!(reply.status, 404);
    let get = gw.request(Method::GET, RPC_PATH).await;
    assert_eq!(get.status(), 404);
    assert_eq!(gw.db.task_count().await, 0);
    assert!(gw.upstream.runs(None).await.is_empty());
    // Other routes are unaffected.
    assert_eq!(gw.request(Method::GET, "/healthz").await.status(), 200);
}

#[tokio::test]
async fn version_negotiation() {
    let gw = Gateway::start().await;
    let body = |id: &str| {
        serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": message(id)}),
        )
        .unwrap()
    };
    for version in [
        None,
        Some(""),
        Some("0.3"),
        Some("1.1"),
        Some("2.0"),
        Some("abc"),
        Some("1.0.x"),
    ] {
        let mut headers = vec![("authorization", "Bearer tok-alice")];
        if let Some(v) = version {
            headers.push(("a2a-version", v));
        }
        let reply = gw.post_raw("ag-writer", &headers, body(&new_id())).await;
        assert_eq!(reply.status, 200, "{version:?}");
        assert_eq!(
            reply.error_code(),
            Some(-32009),
            "{version:?}: {}",
            reply.body
        );
        assert_eq!(reply.body["id"], 9);
        assert_eq!(
            reply.body["error"]["data"][0]["reason"],
            "VERSION_NOT_SUPPORTED"
        );
    }
    assert_eq!(
        gw.db.task_count().await,
        0,
        "refused versions write nothing"
    );
    for version in ["1.0", "1.0.7"] {
        let reply = gw
            .post_raw(
                "ag-writer",
                &[
                    ("authorization", "Bearer tok-alice"),
                    ("a2a-version", version),
                ],
                body(&new_id()),
            )
            .await;
        assert!(
            reply.body.get("result").is_some(),
            "{version}: {}",
            reply.body
        );
    }
    assert_eq!(gw.db.task_count().await, 2);
}

#[tokio::test]
async fn envelope_errors_follow_the_sdk() {
    let gw = Gateway::start().await;
    let cases: &[(&str, i64, Value)] = &[
        ("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\"", -32700, Value::Null),
        ("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"GetTask\"}]", -32600, Value::Null),
        ("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"GetTask\"}", -32600, json!(1)),
        ("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"GetTask\"}", -32600, Value::Null),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"message/send\",\"params\":{}}", -32601, json!("x")),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"GetTask\",\"params\":{}}", -32602, json!("x")),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"CreateTaskPushNotificationConfig\",\"params\":{\"taskId\":\"t\",\"url\":\"https://h\"}}", -32003, json!("x")),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"GetTaskPushNotificationConfig\",\"params\":{\"taskId\":\"t\",\"id\":\"c\"}}", -32003, json!("x")),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"GetExtendedAgentCard\"}", -32004, json!("x")),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"SendStreamingMessage\",\"params\":{}}", -32602, json!("x")),
    ];
    for (body, code, id) in cases {
        let reply = gw
            .post_raw("ag-writer", ALICE_V1, body.as_bytes().to_vec())
            .await;
        assert_eq!(reply.status, 200, "{body}");
        assert_eq!(reply.error_code(), Some(*code), "{body}: {}", reply.body);
        assert_eq!(reply.body["id"], *id, "{body}");
        assert_eq!(reply.body["jsonrpc"], "2.0");
    }
    // A notification (no id) is answered with id null.
    let reply = gw
        .post_raw(
            "ag-writer",
            ALICE_V1,
            br#"{"jsonrpc":"2.0","method":"GetTask","params":{"id":"nope"}}"#.to_vec(),
        )
        .await;
    assert_eq!(reply.body["id"], Value::Null);
    assert_eq!(reply.error_code(), Some(-32001));
    // GET on the RPC route is not a JSON-RPC call.
    let get = gw.request(Method::GET, RPC_PATH).await;
    assert_eq!(get.status(), 405);
    assert_eq!(gw.db.task_count().await, 0);
}

#[tokio::test]
async fn body_limit_is_64_kib_and_writes_nothing() {
    let gw = Gateway::start().await;
    // Exactly at the limit passes the limit (and then fails validation for its size).
    let mut params = message(&new_id());
    let filler = "a".repeat(65_536);
    params["message"]["parts"][0]["text"] = json!(filler);
    let body = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}),
    )
    .unwrap();
    assert!(body.len() > 65_536);
    let reply = gw.post_raw("ag-writer", ALICE_V1, body).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.body["error"], "payload_too_large");

    // A body that stays under the limit but exceeds 32,000 characters is a -32602.
    let mut params = message(&new_id());
    params["message"]["parts"][0]["text"] = json!("b".repeat(32_001));
    let body = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}),
    )
    .unwrap();
    assert!(body.len() <= 65_536);
    let reply = gw.post_raw("ag-writer", ALICE_V1, body).await;
    assert_eq!(reply.error_code(), Some(-32602));
    assert_eq!(gw.db.task_count().await, 0);
}

#[tokio::test]
async fn authentication_feature_and_scopes_on_rpc() {
    let gw = Gateway::start().await;
    let send_to = async |token: &str, agent: &str| {
        gw.caller(token)
            .agent(agent)
            .send_text_immediately(&new_id(), "hi")
            .await
    };
    let send = async |token: &str| send_to(token, "ag-writer").await;
    // No bearer / unknown / expired: 401 with a bearer challenge.
    let reply = gw
        .post_raw(
            "ag-writer",
            &[("a2a-version", "1.0")],
            serde_json::to_vec(
                &json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params":message(&new_id())}),
            )
            .unwrap(),
        )
        .await;
    assert_eq!(reply.status, 401);
    assert!(reply.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    assert_eq!(send("tok-nope").await.status, 401);
    assert_eq!(send("tok-alice-expired").await.status, 401);
    // Tenant without agent_api.
    let reply = send_to("tok-dave", "ag-legacy").await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["error"], "tenant_feature_disabled");
    // Scopes: read-only cannot send; delegate-only cannot read; no ai:answer cannot do either.
    let reply = send("tok-alice-read").await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["requiredScopes"], json!(["a2a:delegate"]));
    assert!(reply
        .header("www-authenticate")
        .contains("insufficient_scope"));
    let reply = send("tok-alice-noai").await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["requiredScopes"], json!(["ai:answer"]));
    let reply = gw
        .caller("tok-alice-delegate")
        .agent("ag-writer")
        .get_task(&new_id())
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(gw.db.task_count().await, 0, "refused callers write nothing");
    // Wildcards and exact scopes work.
    let reply = send("tok-alice-wild").await;
    let task_id = reply.result()["task"]["id"].as_str().unwrap().to_string();
    for token in ["tok-alice-wild", "tok-alice-read"] {
        let reply = gw.caller(token).agent("ag-writer").get_task(&task_id).await;
        assert_eq!(reply.result()["id"], task_id.as_str());
    }
    // Another tenant's agent and unknown agents are 404.
    for (token, agent) in [
        ("tok-carol", "ag-writer"),
        ("tok-alice", "ag-globex"),
        ("tok-alice", "ag-nope"),
    ] {
        let reply = send_to(token, agent).await;
        assert_eq!(reply.status, 404, "{token} {agent}");
    }
    // No access to the agent's workspace: sending is refused.
    let reply = send_to("tok-bob", "ag-private").await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["error"], "workspace_access_denied");
    assert_eq!(gw.db.task_count().await, 1);
}

#[tokio::test]
async fn revoked_token_stops_within_the_cache_ttl() {
    let gw = Gateway::start_with_env(&[("Q_A2A_AUTH_CACHE_TTL_MS", "300")]).await;
    let bob = gw.caller("tok-bob").agent("ag-writer");
    assert_eq!(bob.card().await.status, 200);
    gw.upstream
        .post("/admin/tokens/revoke", json!({"token": "tok-bob"}))
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(bob.card().await.status, 401);
}

/// Introspection calls Q has received so far.
async fn introspections(gw: &Gateway) -> u64 {
    gw.upstream.stats().await["introspect_requests"]
        .as_u64()
        .expect("introspect_requests counted")
}

/// Concurrent requests with a token not yet cached wait for one introspection instead of
/// each asking Q. Q answers slowly, so every request arrives while the first call is open.
#[tokio::test]
async fn concurrent_requests_with_a_fresh_token_make_one_introspection() {
    const CALLERS: usize = 16;
    let gw = Gateway::start().await;
    gw.upstream
        .faults(json!({"introspect_delay_ms": 400, "introspect_delay_count": CALLERS}))
        .await;
    let before = introspections(&gw).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let cards = futures_util::future::join_all((0..CALLERS).map(|_| writer.card())).await;
    for card in &cards {
        assert_eq!(card.status, 200, "{}", card.body);
    }
    assert_eq!(introspections(&gw).await - before, 1);
}

/// A failure to reach Q is shared by the requests that waited for that one call, and is not
/// cached: the next request asks again.
#[tokio::test]
async fn a_failed_introspection_is_shared_with_its_waiters_only() {
    const CALLERS: usize = 8;
    let gw = Gateway::start().await;
    gw.upstream
        .faults(json!({"introspect_delay_ms": 400, "introspect_fail_500": 1}))
        .await;
    let before = introspections(&gw).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let cards = futures_util::future::join_all((0..CALLERS).map(|_| writer.card())).await;
    for card in &cards {
        assert_eq!(card.status, 503, "{}", card.body);
    }
    assert_eq!(introspections(&gw).await - before, 1);
    assert_eq!(
        writer.card().await.status,
        200,
        "the failure was not cached"
    );
    assert_eq!(introspections(&gw).await - before, 2);
}

/// Q's "inactive" is cached apart, for `auth.negative_cache_ttl_ms` (1 s by default): a
/// flood of one unknown token asks Q once, concurrent or one after another. This gateway's
/// window is 4 s (its own copy of the configuration file), so the sixteen requests fit in it
/// on a loaded machine too.
#[tokio::test]
async fn an_unknown_token_is_asked_once_within_the_negative_ttl() {
    const TTL_MS: u64 = 4_000;
    let shipped =
        std::fs::read_to_string(crate::support::process::repo_path("config/gateway.toml")).unwrap();
    assert!(shipped.contains("\nnegative_cache_ttl_ms = 1000\n"));
    let config = std::env::temp_dir().join(format!("q-a2a-negative-ttl-{}.toml", new_id()));
    std::fs::write(
        &config,
        shipped.replace(
            "\nnegative_cache_ttl_ms = 1000\n",
            &format!("\nnegative_cache_ttl_ms = {TTL_MS}\n"),
        ),
    )
    .unwrap();
    let gw = Gateway::start_with_env(&[("Q_A2A_CONFIG", config.to_str().unwrap())]).await;
    let started = std::time::Instant::now();
    let before = introspections(&gw).await;
    let stranger = gw.caller("tok-nobody").agent("ag-writer");
    let flood = futures_util::future::join_all((0..8).map(|_| stranger.card())).await;
    for card in &flood {
        assert_eq!(card.status, 401, "{}", card.body);
    }
    for _ in 0..8 {
        assert_eq!(stranger.card().await.status, 401);
    }
    // All sixteen were answered within the window: the count below asserts the cache, not
    // the machine's speed.
    assert!(started.elapsed() < std::time::Duration::from_millis(TTL_MS));
    assert_eq!(introspections(&gw).await - before, 1);
    // The known token is unaffected by the unknown one's entry.
    assert_eq!(
        gw.caller("tok-alice")
            .agent("ag-writer")
            .card()
            .await
            .status,
        200
    );
    // Past the shipped 1 s and still cached: this gateway runs with its own window.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    assert_eq!(stranger.card().await.status, 401);
    assert!(started.elapsed() < std::time::Duration::from_millis(TTL_MS));
    assert_eq!(introspections(&gw).await - before, 2);
    tokio::time::sleep(std::time::Duration::from_millis(TTL_MS + 100)).await;
    assert_eq!(stranger.card().await.status, 401);
    assert_eq!(
        introspections(&gw).await - before,
        3,
        "asked again after the TTL"
    );
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn identity_outage_is_503_with_retry_after() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    gw.upstream.faults(json!({"introspect_fail_500": 1})).await;
    let response = writer.card().await;
    assert_eq!(response.status, 503);
    assert_eq!(response.header("retry-after"), "1");
    assert_eq!(writer.card().await.status, 200);
}

/// "." and ".." as agent ids cannot be escaped in a path (URL normalisation resolves them) and
/// would address another route of Q: they are unknown agents, and Q is never asked. Sent over a
/// raw connection: an HTTP client library would normalise the URL before sending it.
#[tokio::test]
async fn dot_segment_agent_ids_are_unknown_and_never_reach_q() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = Gateway::start().await;
    // Warm the token cache so that any later call to Q would be the agent lookup.
    assert_eq!(
        gw.caller("tok-alice")
            .agent("ag-writer")
            .card()
            .await
            .status,
        200
    );
    let address = gw.url.trim_start_matches("http://").to_string();
    for id in ["%2E", "%2E%2E", "%2e%2e"] {
        for (method, tail, body) in [
            ("GET", ".well-known/agent-card.json", String::new()),
            (
                "POST",
                "rpc",
                json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": new_id()}})
                    .to_string(),
            ),
        ] {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            let request = format!(
                "{method} /v1/a2a/agents/{id}/{tail} HTTP/1.1\r\nHost: {address}\r\n\
                 Authorization: Bearer tok-alice\r\nA2A-Version: 1.0\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            assert!(
                answer.starts_with("HTTP/1.1 404"),
                "{method} {id}: {answer}"
            );
            assert!(
                answer.contains("agent_not_found"),
                "{method} {id}: {answer}"
            );
        }
    }
    // Normalised, the lookups would have reached Q as `…/t-acme/access` or `…/agents/access`
    // (other calls, like the reconciler's, go on meanwhile).
    let calls = gw.upstream.recent_calls().await;
    let stray: Vec<&Value> = calls
        .iter()
        .filter(|c| {
            let path = c["path"].as_str().unwrap_or_default();
            path.contains("/access")
                && !path.contains("/agents/ag-writer/access")
                && !path.starts_with("/internal/v1/changes/")
        })
        .collect();
    assert!(
        stray.is_empty(),
        "Q received lookups for dot-segment ids: {stray:?}"
    );
}

/// An agent id no agent can have (too long, or characters outside `-._~` and alphanumerics)
/// is 404 on the card and the RPC route before any cache or call to Q: not even the token is
/// introspected, and nothing about the id is kept.
#[tokio::test]
async fn agent_ids_no_agent_can_have_are_404_before_anything_is_asked() {
    let gw = Gateway::start().await;
    let before = gw.upstream.stats().await;
    let long = "a".repeat(129);
    for id in [
        long.as_str(),
        "ag%24writer",
        "ag%20writer",
        "%C3%A4gent",
        "ag:writer",
    ] {
        // A token never seen before: authenticating it would be an introspection.
        let agent = gw.caller(&new_id()).agent(id);
        let card = agent.card().await;
        assert_eq!(card.status, 404, "{id}: {}", card.body);
        assert_eq!(card.body["error"], "agent_not_found", "{id}");
        let rpc = agent.get_task(&new_id()).await;
        assert_eq!(rpc.status, 404, "{id}: {}", rpc.body);
    }
    let after = gw.upstream.stats().await;
    for route in ["introspect", "agent_access"] {
        assert_eq!(
            after["requests"][route], before["requests"][route],
            "Q was asked ({route}) about an id no agent can have"
        );
    }
    // The longest id an agent may have is looked up like any other (and unknown to Q).
    let longest = gw.caller("tok-alice").agent(&"a".repeat(128));
    assert_eq!(longest.card().await.status, 404);
}

/// A bearer value that is no RFC 6750 token is refused with 401 without asking Q.
#[tokio::test]
async fn malformed_bearer_values_are_refused_without_asking_q() {
    let gw = Gateway::start().await;
    let before = gw.upstream.stats().await["requests"]["introspect"].clone();
    let long = "t".repeat(4097);
    for token in ["tok,alice", "tok\"alice", "a=b", long.as_str()] {
        let card = gw.caller(token).agent("ag-writer").card().await;
        assert_eq!(card.status, 401, "{token:.20}: {}", card.body);
        assert_eq!(card.body["error"], "invalid_token");
    }
    assert_eq!(
        gw.upstream.stats().await["requests"]["introspect"],
        before,
        "Q introspected a malformed bearer value"
    );
}
