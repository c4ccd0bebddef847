//! JSON-RPC through a typed handle: a [`Caller`] is a bearer token at one gateway process, an
//! [`Agent`] is that caller talking to one agent.
//!
//! ```ignore
//! let writer = gw.caller("tok-alice").agent("ag-writer");
//! let task = writer.send_text(&new_id(), "hello").await.task();
//! let reply = writer.get_task(task["id"].as_str().unwrap()).await;
//! assert_eq!(reply.status, 200);
//! assert_eq!(reply.result()["status"]["state"], "TASK_STATE_COMPLETED");
//! assert_eq!(writer.cancel(&new_id()).await.error_code(), Some(-32001));
//! ```
//!
//! Every call sends `A2A-Version: 1.0` and the caller's bearer token; a handle is cheap to
//! clone and owns what it needs, so it can move into a spawned task.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::gateway::{Gateway, Replica};
use super::http::{client, Reply};

pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A user message with one text part.
pub fn text_message(message_id: &str, text: &str) -> Value {
    json!({"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

/// The text of a task's first artifact part; panics (showing the task) if there is none.
pub fn artifact_text(task: &Value) -> &str {
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no artifact text in {task}"))
}

/// A bearer token (or none) at one gateway process.
#[derive(Clone)]
pub struct Caller {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Caller {
    /// A caller at any gateway process by URL, on a client (and so connections) of its own.
    pub fn at(base_url: &str, token: &str) -> Caller {
        Caller {
            base: base_url.to_string(),
            token: Some(token.to_string()),
            http: client(),
        }
    }

    /// The same caller at the agent `agent`.
    pub fn agent(&self, agent: &str) -> Agent {
        Agent {
            caller: self.clone(),
            agent: agent.to_string(),
        }
    }
}

impl Gateway {
    pub fn caller(&self, token: &str) -> Caller {
        Caller {
            base: self.url.clone(),
            token: Some(token.to_string()),
            http: self.http.clone(),
        }
    }

    /// A caller that sends no `Authorization` header.
    pub fn anonymous(&self) -> Caller {
        Caller {
            base: self.url.clone(),
            token: None,
            http: self.http.clone(),
        }
    }
}

impl Replica {
    pub fn caller(&self, token: &str) -> Caller {
        Caller::at(&self.url, token)
    }
}

/// One caller talking to one agent.
#[derive(Clone)]
pub struct Agent {
    caller: Caller,
    agent: String,
}

impl Agent {
    /// `{gateway}/v1/a2a/agents/{agent}`
    pub fn url(&self) -> String {
        format!("{}/v1/a2a/agents/{}", self.caller.base, self.agent)
    }

    pub fn token(&self) -> Option<&str> {
        self.caller.token.as_deref()
    }

    /// A request to a path under the agent's URL, with the caller's token.
    pub(super) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .caller
            .http
            .request(method, format!("{}{path}", self.url()));
        match &self.caller.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Any JSON-RPC method, with request id `req-1`.
    pub async fn rpc(&self, method: &str, params: Value) -> Reply {
        let body = json!({"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params});
        Reply::send(
            self.request(Method::POST, "/rpc")
                .header("a2a-version", "1.0")
                .json(&body),
        )
        .await
    }

    /// SendMessage with these params as they are.
    pub async fn send(&self, params: Value) -> Reply {
        self.rpc("SendMessage", params).await
    }

    /// A blocking SendMessage of one text part: the answer waits for the task to settle.
    pub async fn send_text(&self, message_id: &str, text: &str) -> Reply {
        self.send_message(message_id, text, false).await
    }

    /// SendMessage of one text part with `returnImmediately`: the answer is the new task.
    pub async fn send_text_immediately(&self, message_id: &str, text: &str) -> Reply {
        self.send_message(message_id, text, true).await
    }

    /// A new task: a fresh messageId sent with `returnImmediately`; the task's id.
    pub async fn new_task(&self, text: &str) -> String {
        self.send_text_immediately(&new_id(), text).await.task_id()
    }

    async fn send_message(&self, message_id: &str, text: &str, return_immediately: bool) -> Reply {
        self.send(json!({
            "message": text_message(message_id, text),
            "configuration": {"returnImmediately": return_immediately}
        }))
        .await
    }

    pub async fn get_task(&self, task_id: &str) -> Reply {
        self.rpc("GetTask", json!({"id": task_id})).await
    }

    pub async fn list_tasks(&self, params: Value) -> Reply {
        self.rpc("ListTasks", params).await
    }

    pub async fn cancel(&self, task_id: &str) -> Reply {
        self.rpc("CancelTask", json!({"id": task_id})).await
    }

    /// The agent's card.
    pub async fn card(&self) -> Reply {
        self.card_with(&[]).await
    }

    /// The agent's card, asked for with extra headers.
    pub async fn card_with(&self, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.request(Method::GET, "/.well-known/agent-card.json");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        Reply::send(request).await
    }

    /// Polls GetTask until the task reaches `state` (or panics after `limit`); returns it.
    pub async fn wait_for_state(&self, task_id: &str, state: &str, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let reply = self.get_task(task_id).await;
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
