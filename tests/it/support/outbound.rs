//! A gateway whose outbound side may reach loopback remotes, and its management and delegation
//! API (`/v1/a2a/agents`, `POST /v1/a2a/tasks`), answers read as the status and the JSON (or
//! text) body.

use reqwest::Method;
use serde_json::{json, Value};

use super::gateway::{Gateway, GatewayOptions, Replica};
use super::http::Reply;

/// An admin of tenant `t-acme`, who manages its registrations.
pub const ADMIN: &str = "tok-alice-admin";
/// The credential sealing key the outbound gateway uses.
pub const KEY_K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A gateway with outbound configured for loopback remotes (and no reconciler).
/// `Q_A2A_TEST_GATEWAY_BIN` (with its configuration file in `Q_A2A_TEST_GATEWAY_CONFIG`) runs
/// it from another build.
pub struct OutboundGateway {
    gateway: Gateway,
}

impl std::ops::Deref for OutboundGateway {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.gateway
    }
}

impl OutboundGateway {
    /// Starts one; `extra` is applied after the outbound settings.
    pub async fn start(extra: &[(&str, &str)]) -> OutboundGateway {
        OutboundGateway::start_with(false, extra).await
    }

    /// Starts one that also serves the A2A profile (tasks as well as delegations).
    pub async fn start_with_profile(extra: &[(&str, &str)]) -> OutboundGateway {
        OutboundGateway::start_with(true, extra).await
    }

    async fn start_with(profile_enabled: bool, extra: &[(&str, &str)]) -> OutboundGateway {
        let gateway = Gateway::start_with(OutboundGateway::options(profile_enabled, extra)).await;
        OutboundGateway { gateway }
    }

    /// Another gateway process with the same outbound settings plus `extra` (a replica).
    pub async fn start_outbound_replica(&self, extra: &[(&str, &str)]) -> Replica {
        self.gateway
            .start_replica(&OutboundGateway::options(false, extra))
            .await
    }

    fn options(profile_enabled: bool, extra: &[(&str, &str)]) -> GatewayOptions {
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
        GatewayOptions {
            profile_enabled,
            ..GatewayOptions::with_env(&env)
        }
        .under_test()
    }

    /// A call to the management or delegation API: the status and the JSON (or text) body.
    pub async fn call(
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
        let reply = Reply::send(request).await;
        assert_ne!(reply.status, 0, "{path}: {}", reply.body);
        (reply.status, reply.body)
    }

    /// Registers a remote agent (with a bearer credential, if any) as [`ADMIN`]; panics unless
    /// it is created. The registration.
    pub async fn register(&self, name: &str, endpoint: &str, token: Option<&str>) -> Value {
        let mut body = json!({"name": name, "endpoint": endpoint});
        if let Some(token) = token {
            body["bearerToken"] = json!(token);
        }
        self.register_with(body).await
    }

    /// Registers a remote agent as [`ADMIN`] with this body; panics unless it is created.
    pub async fn register_with(&self, body: Value) -> Value {
        let (status, v) = self.post_registration(body.clone()).await;
        assert_eq!(status, 201, "register {}: {v}", body["endpoint"]);
        v
    }

    /// `POST /v1/a2a/agents` as [`ADMIN`], whatever the answer.
    pub async fn post_registration(&self, body: Value) -> (u16, Value) {
        self.call(Method::POST, "/v1/a2a/agents", Some(ADMIN), Some(body))
            .await
    }

    /// A call on one registration (`/v1/a2a/agents/{id}{rest}`) as `token`.
    pub async fn on_registration(
        &self,
        method: Method,
        id: &str,
        rest: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let path = format!("/v1/a2a/agents/{id}{rest}");
        self.call(method, &path, Some(token), body).await
    }

    /// `GET` of a registration as [`ADMIN`].
    pub async fn registration(&self, id: &str) -> (u16, Value) {
        self.on_registration(Method::GET, id, "", ADMIN, None).await
    }

    /// `PATCH` of a registration as [`ADMIN`].
    pub async fn patch(&self, id: &str, body: Value) -> (u16, Value) {
        self.on_registration(Method::PATCH, id, "", ADMIN, Some(body))
            .await
    }

    /// Card discovery for a registration as [`ADMIN`].
    pub async fn discover(&self, id: &str) -> (u16, Value) {
        self.on_registration(Method::POST, id, "/discover", ADMIN, None)
            .await
    }

    /// A delegation by `token`: `taskId`, the registration as `agentId`, and the text.
    pub async fn delegate_as(
        &self,
        token: &str,
        task_id: &str,
        agent_id: &str,
        text: &str,
    ) -> (u16, Value) {
        let body = json!({"taskId": task_id, "agentId": agent_id, "text": text});
        self.call(Method::POST, "/v1/a2a/tasks", Some(token), Some(body))
            .await
    }

    /// A delegation by [`ADMIN`].
    pub async fn delegate(&self, task_id: &str, agent_id: &str, text: &str) -> (u16, Value) {
        self.delegate_as(ADMIN, task_id, agent_id, text).await
    }
}

/// The `id` of a registration.
pub fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}
