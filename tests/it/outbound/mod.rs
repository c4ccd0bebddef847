//! Outbound: registrations, sealed credentials, the outbound policy and delegation, against
//! real remote agents: the official a2a-sdk 1.2.2 server (tests/python/remote_agent.py) run as
//! subprocesses on loopback, with the gateway, the reference upstream and PostgreSQL real too.
//!
//! Needs the repo's Python environment (`scripts/setup-python` creates `.venv`).

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{Gateway, GatewayOptions};

mod delegation;
mod discovery;
mod policy;
mod registrations;

const ADMIN: &str = "tok-alice-admin";
const CAROL_ADMIN: &str = "tok-carol-admin";
const KEY_K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A gateway with outbound configured for loopback remotes.
struct Gw {
    gateway: Gateway,
}

impl std::ops::Deref for Gw {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.gateway
    }
}

impl Gw {
    async fn start(extra: &[(&str, &str)]) -> Gw {
        let mut env = vec![
            ("Q_A2A_RECONCILER_ENABLED", "false"),
            ("Q_A2A_OUTBOUND_ALLOW_HTTP", "true"),
            ("Q_A2A_OUTBOUND_ALLOW_CIDRS", "127.0.0.1/32"),
            ("Q_A2A_CREDENTIAL_KEYS", KEY_K1),
            ("Q_A2A_CREDENTIAL_ACTIVE_KEY", "k1"),
            ("Q_A2A_OUTBOUND_DELEGATION_WAIT_MS", "15000"),
        ];
        env.extend_from_slice(extra);
        // The management and delegation routes are not behind the profile gate.
        let gateway = Gateway::start_with(GatewayOptions {
            profile_enabled: false,
            ..GatewayOptions::with_env(&env)
        })
        .await;
        Gw { gateway }
    }

    /// A call to the management or delegation API: the status and the JSON (or text) body.
    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http(method, path);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let reply = crate::support::Reply::send(request).await;
        assert_ne!(reply.status, 0, "{path}: {}", reply.body);
        (reply.status, reply.body)
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
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}
