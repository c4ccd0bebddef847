//! Plain HTTP to a gateway, and [`Reply`], the answer every call here returns: the HTTP status,
//! the headers and the body as JSON (or, if it is not JSON, its text as a JSON string).

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;

use super::gateway::Gateway;

/// The client a test's calls share (one per gateway: connections stay on the test's runtime).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(150))
        .build()
        .unwrap()
}

/// An HTTP answer; for JSON-RPC calls, `result()` or `error_code()` say how it went.
#[derive(Debug)]
pub struct Reply {
    /// 0 when the request got no answer at all (connection refused, reset, timed out).
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Sends the request and reads the whole answer; a transport failure is status 0 with the
    /// error as the body.
    pub async fn send(request: RequestBuilder) -> Reply {
        match request.send().await {
            Ok(response) => Reply::read(response).await,
            Err(e) => Reply {
                status: 0,
                headers: HeaderMap::new(),
                body: Value::String(e.to_string()),
            },
        }
    }

    pub async fn read(response: reqwest::Response) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = match response.bytes().await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) => Value::String(e.to_string()),
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    /// The JSON-RPC error code, if the answer is a JSON-RPC error.
    pub fn error_code(&self) -> Option<i64> {
        self.body["error"]["code"].as_i64()
    }

    /// The JSON-RPC result; panics (showing the answer) if there is none.
    pub fn result(&self) -> &Value {
        assert!(
            self.body.get("result").is_some(),
            "expected a result, got HTTP {} {}",
            self.status,
            self.body
        );
        &self.body["result"]
    }

    pub fn is_result(&self) -> bool {
        self.body.get("result").is_some()
    }

    /// The task of a SendMessage result.
    pub fn task(&self) -> Value {
        self.result()["task"].clone()
    }

    /// The id of the task of a SendMessage result.
    pub fn task_id(&self) -> String {
        let task = self.task();
        task["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no task id in {task}"))
            .to_string()
    }

    /// A header's value as text; panics if it is missing.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header: {:?}", self.headers))
            .to_str()
            .unwrap()
    }
}

impl Gateway {
    /// A request to this gateway's listener, on the test's client, for any path.
    pub fn http(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, format!("{}{}", self.url, path))
    }

    /// A plain request (no token, no A2A headers).
    pub async fn request(&self, method: Method, path: &str) -> reqwest::Response {
        self.http(method, path).send().await.unwrap()
    }

    /// Posts raw bytes to an agent's RPC route with exactly these headers (and a JSON
    /// content type): for what the typed handle would not send.
    pub async fn post_raw(&self, agent: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
        let mut request = self
            .http(Method::POST, &format!("/v1/a2a/agents/{agent}/rpc"))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        Reply::send(request).await
    }

    pub fn agent_url(&self, agent: &str) -> String {
        format!("{}/v1/a2a/agents/{agent}", self.url)
    }
}
