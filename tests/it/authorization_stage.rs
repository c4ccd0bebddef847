//! The one authorisation stage runs in its documented order on every route family: the card,
//! the RPC route, the outbound registrations, discovery and delegation. For each, against a
//! real gateway with a per-principal bucket of 3:
//!
//! 1. authentication comes first: unauthenticated requests are 401 however many are sent;
//! 2. the tenant feature comes before the rate limit: a tenant without `agent_api` gets 403
//!    every time, never 429 (its requests do not reach the bucket);
//! 3. the rate limit comes before scopes: requests with the wrong scopes spend the bucket
//!    (403, 403, 403, then 429), and the same principal with the right scopes is then 429 too;
//! 4. a principal with the right scopes gets three answers from the route, then 429 with
//!    `Retry-After` (the outbound routes had no rate limit before the stage was shared).
//!
//! CancelTask runs the same stage with the bucket of its own admission class (also of 3 here),
//! so it is a family of its own.
//!
//! And the stage needs only the headers, so it runs before anything reads the body: an
//! unauthenticated request is 401 whatever its body (over the limit, not JSON) or its
//! `A2A-Version`, while an authenticated one still gets the body's and the version's own
//! answers, the JSON-RPC ones under the request's id.
//!
//! The gateways run inside the test process ([`InProcessGateway`]).

use crate::support::*;
use reqwest::Method;
use serde_json::{json, Value};

struct Family {
    name: &'static str,
    method: Method,
    path: &'static str,
    body: Option<Value>,
    /// Same principal as `allowed`, without a scope the route needs.
    scope_less: &'static str,
    allowed: &'static str,
    /// Another principal with the route's scopes and a fresh bucket.
    fresh: &'static str,
}

fn families() -> Vec<Family> {
    vec![
        Family {
            name: "card",
            method: Method::GET,
            path: "/v1/a2a/agents/ag-writer/.well-known/agent-card.json",
            body: None,
            scope_less: "tok-alice-delegate",
            allowed: "tok-alice",
            fresh: "tok-bob",
        },
        Family {
            name: "rpc",
            method: Method::POST,
            path: "/v1/a2a/agents/ag-writer/rpc",
            body: Some(json!({
                "jsonrpc": "2.0",
                "id": 1,
                "method": "GetTask",
                "params": {"id": "00000000-0000-4000-8000-000000000000"},
            })),
            scope_less: "tok-alice-delegate",
            allowed: "tok-alice",
            fresh: "tok-bob",
        },
        Family {
            name: "rpc-cancel",
            method: Method::POST,
            path: "/v1/a2a/agents/ag-writer/rpc",
            body: Some(json!({
                "jsonrpc": "2.0",
                "id": 1,
                "method": "CancelTask",
                "params": {"id": "00000000-0000-4000-8000-000000000000"},
            })),
            scope_less: "tok-alice-read",
            allowed: "tok-alice",
            fresh: "tok-bob",
        },
        Family {
            name: "registrations",
            method: Method::GET,
            path: "/v1/a2a/agents",
            body: None,
            scope_less: "tok-alice",
            allowed: "tok-alice-admin",
            fresh: "tok-carol-admin",
        },
        Family {
            name: "discovery",
            method: Method::POST,
            path: "/v1/a2a/agents/reg-unknown/discover",
            body: None,
            scope_less: "tok-alice",
            allowed: "tok-alice-admin",
            fresh: "tok-carol-admin",
        },
        Family {
            name: "delegation",
            method: Method::POST,
            path: "/v1/a2a/tasks",
            body: Some(json!({})),
            scope_less: "tok-alice-read",
            allowed: "tok-alice",
            fresh: "tok-bob",
        },
    ]
}

struct Answer {
    status: u16,
    error: String,
    retry_after: Option<String>,
}

async fn call(gw: &InProcessGateway, family: &Family, token: Option<&str>) -> Answer {
    let mut request = reqwest::Client::new()
        .request(family.method.clone(), format!("{}{}", gw.url, family.path))
        .header("A2A-Version", "1.0");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = &family.body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        error: body["error"].as_str().unwrap_or_default().to_string(),
        retry_after,
    }
}

#[tokio::test]
async fn every_route_family_runs_authenticate_feature_rate_limit_scopes_in_order() {
    for family in families() {
        let name = family.name;
        // A fresh gateway (and so fresh buckets) per family, inside the test process: no
        // process is killed here, so none needs to be started.
        let gw = InProcessGateway::start_with(GatewayOptions {
            env: vec![
                ("Q_A2A_RATE_LIMIT_ENABLED".into(), "true".into()),
                ("Q_A2A_RATE_LIMIT_PER_SECOND".into(), "1".into()),
                ("Q_A2A_RATE_LIMIT_BURST".into(), "3".into()),
                ("Q_A2A_RATE_LIMIT_CANCEL_PER_SECOND".into(), "1".into()),
                ("Q_A2A_RATE_LIMIT_CANCEL_BURST".into(), "3".into()),
            ],
            ..Default::default()
        })
        .await;

        for token in [None, Some("tok-nope")] {
            for _ in 0..5 {
                let answer = call(&gw, &family, token).await;
                assert_eq!(
                    answer.status, 401,
                    "{name}: unauthenticated is 401 every time"
                );
            }
        }

        for _ in 0..5 {
            let answer = call(&gw, &family, Some("tok-dave")).await;
            assert_eq!(
                (answer.status, answer.error.as_str()),
                (403, "tenant_feature_disabled"),
                "{name}: the feature is checked before the bucket, so never 429"
            );
        }

        for _ in 0..3 {
            let answer = call(&gw, &family, Some(family.scope_less)).await;
            assert_eq!(
                (answer.status, answer.error.as_str()),
                (403, "insufficient_scope"),
                "{name}: missing scope"
            );
        }
        let answer = call(&gw, &family, Some(family.scope_less)).await;
        assert_eq!(
            (answer.status, answer.error.as_str()),
            (429, "rate_limited"),
            "{name}: requests with the wrong scopes spent the bucket before the scope check"
        );
        let answer = call(&gw, &family, Some(family.allowed)).await;
        assert_eq!(
            answer.status, 429,
            "{name}: the principal's bucket is shared whatever its token's scopes"
        );

        for _ in 0..3 {
            let answer = call(&gw, &family, Some(family.fresh)).await;
            assert!(
                ![401, 403, 429].contains(&answer.status),
                "{name}: an authorised caller reaches the route, got {} {}",
                answer.status,
                answer.error
            );
        }
        let answer = call(&gw, &family, Some(family.fresh)).await;
        assert_eq!(answer.status, 429, "{name}: bucket of 3 spent");
        let retry_after: u64 = answer
            .retry_after
            .expect("429 carries Retry-After")
            .parse()
            .unwrap();
        assert!(retry_after >= 1, "{name}");
    }
}

async fn post(
    gw: &InProcessGateway,
    path: &str,
    token: Option<&str>,
    version: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", gw.url))
        .header("A2A-Version", version)
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_stage_runs_before_the_body_is_read() {
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let oversized = vec![b' '; 70_000];
    let not_json = b"{not json".to_vec();
    for family in families().into_iter().filter(|f| f.method == Method::POST) {
        let name = family.name;
        for body in [&oversized, &not_json] {
            for token in [None, Some("tok-nope")] {
                let (status, _) = post(&gw, family.path, token, "1.0", body.clone()).await;
                assert_eq!(
                    status,
                    401,
                    "{name}: a {} byte body from {token:?} is refused from the headers",
                    body.len()
                );
            }
        }
    }

    let rpc = "/v1/a2a/agents/ag-writer/rpc";
    let get = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": 7,
        "method": "GetTask",
        "params": {"id": "00000000-0000-4000-8000-000000000000"},
    }))
    .unwrap();
    let (status, _) = post(&gw, rpc, None, "0.3", get.clone()).await;
    assert_eq!(
        status, 401,
        "an unsupported version is not looked at before the credential"
    );
    let (status, body) = post(&gw, rpc, Some("tok-alice"), "0.3", get).await;
    assert_eq!(
        (status, &body["error"]["code"], &body["id"]),
        (200, &json!(-32009), &json!(7)),
        "authenticated, the version refusal carries the request id: {body}"
    );
    let (status, _) = post(&gw, rpc, Some("tok-alice"), "1.0", oversized).await;
    assert_eq!(status, 413);
    let (status, body) = post(&gw, rpc, Some("tok-alice"), "1.0", not_json).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (200, &json!(-32700)),
        "{body}"
    );
}
