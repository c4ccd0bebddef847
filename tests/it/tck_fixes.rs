//! What the official A2A TCK (scripts/tck) found and the gateway now does: the RPC route
//! answers with a trailing slash too (the kit joins "/" onto the card's interface URL), the
//! card carries `Last-Modified` and honours `If-Modified-Since`, and a JSON-RPC request
//! declared as something other than JSON is refused with -32005.

use std::time::{Duration, SystemTime};

use crate::support::metrics::metric;
use crate::support::*;

/// The card as a raw response, with these request headers.
async fn card_get(gw: &Gateway, agent: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!(
        "{}/.well-known/agent-card.json",
        gw.agent_url(agent)
    ));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.send().await.unwrap()
}
use serde_json::{json, Value};

const RPC_ROUTE: &str = "/v1/a2a/agents/{agent_id}/rpc";

struct Reply {
    status: u16,
    body: Value,
}

/// Posts `body` to `url` with the given headers; the body parsed as JSON when it is JSON.
async fn post(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
    let mut request = reqwest::Client::new().post(url).body(body);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Reply { status, body }
}

type Headers<'a> = Vec<(&'a str, &'a str)>;

fn rpc_body(method: &str, params: Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params}),
    )
    .unwrap()
}

const JSON_AND_TOKEN: &[(&str, &str)] = &[
    ("content-type", "application/json"),
    ("authorization", "Bearer tok-alice"),
    ("a2a-version", "1.0"),
];

#[tokio::test]
async fn rpc_url_with_a_trailing_slash_is_the_rpc_route() {
    let gw = Gateway::start().await;
    let slash = format!("{}/rpc/", gw.agent_url("ag-writer"));
    let plain = format!("{}/rpc", gw.agent_url("ag-writer"));

    // A send through the slash URL creates the task; the plain URL reads it and vice versa.
    let message_id = new_id();
    let params = json!({
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"returnImmediately": true}
    });
    let sent = post(
        &slash,
        JSON_AND_TOKEN,
        rpc_body("SendMessage", params.clone()),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    let task_id = sent.body["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let read = post(
        &plain,
        JSON_AND_TOKEN,
        rpc_body("GetTask", json!({"id": task_id})),
    )
    .await;
    assert_eq!(read.body["result"]["id"], task_id.as_str());
    let again = post(&slash, JSON_AND_TOKEN, rpc_body("SendMessage", params)).await;
    assert_eq!(
        again.body["result"]["task"]["id"],
        task_id.as_str(),
        "the same durable identity behind both URLs"
    );
    assert_eq!(gw.db.task_count().await, 1);

    // Every stage answers the same on both: refusals, JSON-RPC errors, streams, methods.
    let cases: Vec<(&str, Headers, Vec<u8>)> = vec![
        (
            "no token",
            vec![("a2a-version", "1.0")],
            rpc_body("GetTask", json!({"id": "x"})),
        ),
        (
            "unknown task",
            JSON_AND_TOKEN.to_vec(),
            rpc_body("GetTask", json!({"id": "x"})),
        ),
        (
            "no version",
            vec![JSON_AND_TOKEN[0], JSON_AND_TOKEN[1]],
            rpc_body("GetTask", json!({"id": "x"})),
        ),
        (
            "unknown method",
            JSON_AND_TOKEN.to_vec(),
            rpc_body("Nope", json!({})),
        ),
        ("parse error", JSON_AND_TOKEN.to_vec(), b"{".to_vec()),
    ];
    for (name, headers, body) in cases {
        let a = post(&plain, &headers, body.clone()).await;
        let b = post(&slash, &headers, body).await;
        assert_eq!((a.status, &a.body), (b.status, &b.body), "{name}");
    }
    let get_plain = reqwest::get(&plain).await.unwrap().status();
    let get_slash = reqwest::get(&slash).await.unwrap().status();
    assert_eq!(get_plain, 405);
    assert_eq!(get_slash, get_plain);

    // Streams too: a streamed send through the slash URL runs to completion.
    let response = reqwest::Client::new()
        .post(&slash)
        .header("content-type", "application/json")
        .header("authorization", "Bearer tok-alice")
        .header("a2a-version", "1.0")
        .header("accept", "text/event-stream")
        .body(rpc_body(
            "SendStreamingMessage",
            json!({"message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
        ))
        .send()
        .await
        .unwrap();
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    let results: Vec<Value> = text
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data:")))
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap()["result"].clone())
        .collect();
    assert!(results[0].get("task").is_some(), "{text}");
    assert_eq!(
        results.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{text}"
    );

    // One metrics series for the route, whichever spelling was used.
    let metrics = gw.metrics().await;
    assert!(
        !metrics.contains(&format!("{RPC_ROUTE}/\"")),
        "no separate series for the slash spelling"
    );
    let sends = metric(
        &metrics,
        "a2a_http_requests_total",
        &[
            ("route", RPC_ROUTE),
            ("rpc_method", "SendMessage"),
            ("status", "200"),
            ("rpc_code", "ok"),
        ],
    );
    assert_eq!(sends, Some(2.0), "both sends went through the slash URL");
}

#[tokio::test]
async fn rpc_url_with_a_trailing_slash_is_behind_the_profile_gate() {
    let gw = Gateway::start_with(GatewayOptions::profile_off()).await;
    let slash = format!("{}/rpc/", gw.agent_url("ag-writer"));
    let params = json!({
        "message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"returnImmediately": true}
    });
    let reply = post(&slash, JSON_AND_TOKEN, rpc_body("SendMessage", params)).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.body["error"], "not_found");
    assert_eq!(reqwest::get(&slash).await.unwrap().status(), 404);
    assert_eq!(gw.db.task_count().await, 0);
    assert!(gw.upstream.runs(None).await.is_empty());
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn card_has_last_modified_and_honours_if_modified_since() {
    let gw = Gateway::start().await;
    let token = ("authorization", "Bearer tok-alice");
    let first = card_get(&gw, "ag-writer", &[token]).await;
    assert_eq!(first.status(), 200);
    let last_modified = header(&first, "last-modified").unwrap().to_string();
    let etag = header(&first, "etag").unwrap().to_string();
    let modified = httpdate::parse_http_date(&last_modified).unwrap();
    let date = httpdate::parse_http_date(header(&first, "date").unwrap()).unwrap();
    assert!(modified <= date, "Last-Modified is not in the future");

    // Unchanged content keeps its date.
    let second = card_get(&gw, "ag-writer", &[token]).await;
    assert_eq!(
        header(&second, "last-modified"),
        Some(last_modified.as_str())
    );

    let later = httpdate::fmt_http_date(modified + Duration::from_secs(3600));
    let earlier = httpdate::fmt_http_date(modified - Duration::from_secs(1));
    let cases: Vec<(&str, Headers, u16)> = vec![
        (
            "the card's own date",
            vec![("if-modified-since", &last_modified)],
            304,
        ),
        ("a later date", vec![("if-modified-since", &later)], 304),
        (
            "an earlier date",
            vec![("if-modified-since", &earlier)],
            200,
        ),
        ("not a date", vec![("if-modified-since", "yesterday")], 200),
        // RFC 9110 §13.1.3: If-None-Match decides when both are sent.
        (
            "another ETag with a matching date",
            vec![
                ("if-none-match", "W/\"other\""),
                ("if-modified-since", &last_modified),
            ],
            200,
        ),
        (
            "the ETag with an earlier date",
            vec![("if-none-match", &etag), ("if-modified-since", &earlier)],
            304,
        ),
    ];
    for (name, conditions, status) in cases {
        let mut headers = vec![token];
        headers.extend(conditions);
        let response = card_get(&gw, "ag-writer", &headers).await;
        assert_eq!(response.status(), status, "{name}");
        assert_eq!(header(&response, "etag"), Some(etag.as_str()), "{name}");
        assert_eq!(
            header(&response, "last-modified"),
            Some(last_modified.as_str()),
            "{name}"
        );
        let body = response.bytes().await.unwrap();
        assert_eq!(body.is_empty(), status == 304, "{name}");
    }

    // A date is only a validator after authorisation: without a token it is still 401.
    let anonymous = card_get(&gw, "ag-writer", &[("if-modified-since", &later)]).await;
    assert_eq!(anonymous.status(), 401);
    assert!(header(&anonymous, "last-modified").is_none());

    // Another agent's card is dated on its own.
    let other = card_get(&gw, "ag-approver", &[token]).await;
    let other_modified =
        httpdate::parse_http_date(header(&other, "last-modified").unwrap()).unwrap();
    assert!(other_modified >= modified);
    assert!(other_modified <= SystemTime::now());
}

#[tokio::test]
async fn request_declared_as_not_json_is_refused_with_32005() {
    let gw = Gateway::start().await;
    let url = format!("{}/rpc", gw.agent_url("ag-writer"));
    let send = |id: &str| {
        rpc_body(
            "SendMessage",
            json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": "hi"}]},
                   "configuration": {"returnImmediately": true}}),
        )
    };
    let with_type = |content_type: &'static str| {
        vec![
            ("content-type", content_type),
            ("authorization", "Bearer tok-alice"),
            ("a2a-version", "1.0"),
        ]
    };

    // The kit's request: a text/plain body (a Python repr, not JSON) and valid JSON alike.
    for (content_type, body) in [
        (
            "text/plain",
            b"{'jsonrpc': '2.0', 'id': 1, 'method': 'SendMessage'}".to_vec(),
        ),
        ("text/plain", send(&new_id())),
        ("application/x-www-form-urlencoded", send(&new_id())),
        ("text/json", send(&new_id())),
    ] {
        let reply = post(&url, &with_type(content_type), body).await;
        assert_eq!(reply.status, 200, "{content_type}");
        assert_eq!(
            reply.body["error"]["code"], -32005,
            "{content_type}: {}",
            reply.body
        );
        assert_eq!(reply.body["id"], Value::Null);
        let info = &reply.body["error"]["data"][0];
        assert_eq!(info["reason"], "CONTENT_TYPE_NOT_SUPPORTED");
        assert_eq!(info["domain"], "a2a-protocol.org");
        assert_eq!(info["metadata"]["contentType"], content_type);
    }
    // Authentication comes first, from the headers: without a credential it is 401, the body
    // never looked at.
    let anonymous = post(&url, &[("content-type", "text/plain")], send(&new_id())).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    assert_eq!(gw.db.task_count().await, 0, "nothing written");
    assert!(gw.upstream.runs(None).await.is_empty());

    // JSON in any spelling, and a body that declares nothing, are read as JSON.
    for headers in [
        with_type("application/json; charset=utf-8"),
        with_type("Application/JSON"),
        with_type("application/a2a+json"),
        vec![
            ("authorization", "Bearer tok-alice"),
            ("a2a-version", "1.0"),
        ],
    ] {
        let reply = post(&url, &headers, send(&new_id())).await;
        assert!(
            reply.body["result"]["task"]["id"].is_string(),
            "{headers:?}: {}",
            reply.body
        );
    }
    assert_eq!(gw.db.task_count().await, 4);
}
