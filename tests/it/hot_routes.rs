//! The card and the JSON-RPC route are served ahead of axum's router (`src/app/gateway.rs`)
//! for their own method and an agent id without percent-encoding; the router serves every
//! other request to the same paths. Both answer the same bytes and count under the same route.

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::metrics::metric;
use crate::support::{new_id, Gateway, NO_RECONCILER};

const CARD_ROUTE: &str = "/v1/a2a/agents/{agent_id}/.well-known/agent-card.json";
const RPC_ROUTE: &str = "/v1/a2a/agents/{agent_id}/rpc";

/// The agent `ag-writer` by its plain id (the hot path) and percent-encoded (the router).
const HOT: &str = "/v1/a2a/agents/ag-writer";
const ROUTED: &str = "/v1/a2a/agents/ag%2Dwriter";

/// The answer's status, the headers both paths must agree on, and the body.
async fn answer(response: reqwest::Response) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let status = response.status().as_u16();
    let headers = [
        "content-type",
        "content-length",
        "etag",
        "last-modified",
        "cache-control",
        "vary",
    ]
    .iter()
    .filter_map(|name| {
        let value = response.headers().get(*name)?;
        Some((name.to_string(), value.to_str().unwrap().to_owned()))
    })
    .collect();
    (status, headers, response.bytes().await.unwrap().to_vec())
}

fn rpc_body(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params})
}

#[tokio::test]
async fn the_hot_path_and_the_router_answer_and_count_alike() {
    let gw = Gateway::start_with_env(NO_RECONCILER).await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    // A completed task: its answer does not change between the requests compared.
    let sent = writer.send_text(&new_id(), "hot or routed").await;
    assert_eq!(sent.task()["status"]["state"], "TASK_STATE_COMPLETED");
    let task_id = sent.task_id();

    // The card: a GET on each path, then a HEAD (the router's, on either path).
    let card = |base: &str, method: Method| {
        gw.http(method, &format!("{base}/.well-known/agent-card.json"))
            .bearer_auth("tok-alice")
            .send()
    };
    let hot = answer(card(HOT, Method::GET).await.unwrap()).await;
    let routed = answer(card(ROUTED, Method::GET).await.unwrap()).await;
    assert_eq!(hot.0, 200, "{}", String::from_utf8_lossy(&hot.2));
    assert!(hot.1.iter().any(|(name, _)| name == "etag"), "{:?}", hot.1);
    assert_eq!(hot, routed);
    let head = answer(card(HOT, Method::HEAD).await.unwrap()).await;
    assert_eq!((head.0, head.2.len()), (200, 0));

    // JSON-RPC: the same requests on the plain route, its trailing-slash form and the
    // percent-encoded id.
    let requests = [
        (rpc_body("GetTask", json!({"id": task_id})), "1.0"),
        (rpc_body("GetTask", json!({"id": new_id()})), "1.0"),
        (rpc_body("GetTask", json!({"id": task_id})), "0.3"),
    ];
    for (body, version) in &requests {
        let mut answers = Vec::new();
        for path in [
            format!("{HOT}/rpc"),
            format!("{HOT}/rpc/"),
            format!("{ROUTED}/rpc"),
        ] {
            let response = gw
                .http(Method::POST, &path)
                .bearer_auth("tok-alice")
                .header("a2a-version", *version)
                .json(body)
                .send()
                .await
                .unwrap();
            answers.push(answer(response).await);
        }
        assert_eq!(answers[0].0, 200);
        assert_eq!(answers[0], answers[1], "{body} {version}");
        assert_eq!(answers[0], answers[2], "{body} {version}");
    }
    // Another method on the RPC route is the router's 405 on both paths.
    for base in [HOT, ROUTED] {
        let response = gw
            .http(Method::GET, &format!("{base}/rpc"))
            .bearer_auth("tok-alice")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405);
    }

    let text = gw.metrics().await;
    let count = |route: &str, rpc_method: &str, status: &str, rpc_code: &str| {
        metric(
            &text,
            "a2a_http_requests_total",
            &[
                ("route", route),
                ("rpc_method", rpc_method),
                ("status", status),
                ("rpc_code", rpc_code),
            ],
        )
    };
    assert_eq!(count(CARD_ROUTE, "", "200", ""), Some(3.0), "{text}");
    assert_eq!(
        count(RPC_ROUTE, "GetTask", "200", "ok"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        count(RPC_ROUTE, "GetTask", "200", "-32001"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        count(RPC_ROUTE, "GetTask", "200", "-32009"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(count(RPC_ROUTE, "", "405", ""), Some(2.0), "{text}");
}
