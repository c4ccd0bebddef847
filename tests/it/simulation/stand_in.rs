//! Stand-ins for the gateway, placed in front of each replica, so that a test can show the
//! simulation fails a deployment that keeps its promises by doing nothing: one that answers
//! every call 503, and one that acknowledges every send with a task it never creates (and
//! passes everything else on).

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// How the stand-in answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandIn {
    /// Every call: HTTP 503.
    Unavailable,
    /// SendMessage and SendStreamingMessage: a task of its own making, never created; every
    /// other call passed on to the replica behind.
    DropsCreates,
}

#[derive(Clone)]
struct Front {
    mode: StandIn,
    /// The replicas' URLs (the world updates them when it restarts one) and this front's slot.
    backends: Arc<Mutex<Vec<String>>>,
    slot: usize,
    http: reqwest::Client,
}

/// Starts a stand-in in front of replica `slot`; its URL.
pub async fn start(mode: StandIn, backends: Arc<Mutex<Vec<String>>>, slot: usize) -> String {
    let front = Front {
        mode,
        backends,
        slot,
        http: reqwest::Client::new(),
    };
    let app = axum::Router::new().fallback(answer).with_state(front);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn answer(State(front): State<Front>, request: Request) -> Response {
    if front.mode == StandIn::Unavailable {
        return (StatusCode::SERVICE_UNAVAILABLE, "stand-in: unavailable").into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let rpc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if matches!(
        rpc["method"].as_str(),
        Some("SendMessage" | "SendStreamingMessage")
    ) {
        let task = json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "contextId": uuid::Uuid::new_v4().to_string(),
            "status": {"state": "TASK_STATE_SUBMITTED"},
        });
        return axum::Json(json!({"jsonrpc": "2.0", "id": rpc["id"], "result": {"task": task}}))
            .into_response();
    }
    pass_on(&front, parts.method, &parts.uri, &parts.headers, body).await
}

/// The call as the replica answers it (whole, not streamed).
async fn pass_on(
    front: &Front,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let base = front.backends.lock().unwrap()[front.slot].clone();
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut request = front
        .http
        .request(method, format!("{base}{path}"))
        .body(body);
    for name in ["authorization", "a2a-version", "content-type", "accept"] {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(answer) => {
            let status = answer.status();
            let content_type = answer.headers().get("content-type").cloned();
            let bytes = answer.bytes().await.unwrap_or_default();
            let mut response = (status, bytes).into_response();
            if let Some(content_type) = content_type {
                response.headers_mut().insert("content-type", content_type);
            }
            response
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}
