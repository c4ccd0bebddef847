//! The reference Q upstream (`q-reference-upstream`) with the fixtures of
//! `config/q-fixtures.json`, and its test-only `/admin` API: faults, runs, grants, stats.

use reqwest::Method;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use super::process::{repo_path, spawn_listening, UPSTREAM_BIN};

/// The token the gateway presents to Q (`service_token` in the fixtures).
pub const SERVICE_TOKEN: &str = "dev-service-token";

pub struct Upstream {
    pub url: String,
    pub child: Child,
    http: reqwest::Client,
}

impl Upstream {
    pub async fn start() -> Upstream {
        Upstream::start_with(&[]).await
    }

    /// The reference started with more arguments (e.g. `--break PROMISE`).
    pub async fn start_with(args: &[&str]) -> Upstream {
        let mut command = Command::new(UPSTREAM_BIN);
        command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--fixtures")
            .arg(repo_path("config/q-fixtures.json"))
            .args(args);
        let started = spawn_listening(command, "upstream", &[]).await;
        Upstream {
            url: started.url,
            child: started.child,
            http: reqwest::Client::new(),
        }
    }

    /// A call to the `/admin` API; panics unless it succeeds.
    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{}", self.url, path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("admin call");
        assert!(
            response.status().is_success(),
            "admin {path} -> {}",
            response.status()
        );
        response.json().await.unwrap_or(Value::Null)
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.admin(Method::POST, path, Some(body)).await
    }

    /// Arms faults (`/admin/faults`), e.g. `{"create_drop_after_commit": 1}`.
    pub async fn faults(&self, faults: Value) {
        self.post("/admin/faults", faults).await;
    }

    /// The faults not consumed yet.
    pub async fn faults_left(&self) -> Value {
        self.admin(Method::GET, "/admin/faults", None).await
    }

    /// The next `count` runs Q creates serve their output corrupted by `mode` from the start.
    pub async fn corrupt_next_outputs(&self, mode: &str, count: u32) {
        self.faults(json!({"corrupt_output": mode, "corrupt_output_count": count}))
            .await;
    }

    /// Runs Q holds under a workflow identity (or all).
    pub async fn runs(&self, workflow_id: Option<&str>) -> Vec<Value> {
        let path = match workflow_id {
            Some(w) => format!("/admin/runs?workflow_id={w}"),
            None => "/admin/runs".into(),
        };
        let v = self.admin(Method::GET, &path, None).await;
        v["runs"].as_array().cloned().unwrap_or_default()
    }

    /// Q's request counters (`create_requests`, `runs_created`, ...).
    pub async fn stats(&self) -> Value {
        self.admin(Method::GET, "/admin/stats", None).await
    }

    /// Grants or revokes a principal's evidence grant on one run.
    pub async fn grant_evidence(&self, run_id: &str, principal_id: &str, granted: bool) {
        self.post(
            "/admin/grants/evidence",
            json!({"run_id": run_id, "principal_id": principal_id, "granted": granted}),
        )
        .await;
    }

    /// Grants or revokes a principal's access to a workspace.
    pub async fn grant_workspace(&self, workspace_id: &str, principal_id: &str, granted: bool) {
        self.post(
            "/admin/grants/workspace",
            json!({"workspace_id": workspace_id, "principal_id": principal_id, "granted": granted}),
        )
        .await;
    }

    /// Makes an existing run's output wrong in one way (`checksum`, `byte_count`, `large`, ...)
    /// from now on. The gateway's feed follower reads and commits an output as soon as its run
    /// succeeds, so a run that must never have been read uncorrupted is armed before it is
    /// created instead ([`Upstream::corrupt_next_outputs`]).
    pub async fn corrupt_output(&self, run_id: &str, mode: &str) {
        self.post(
            &format!("/admin/runs/{run_id}/corrupt-output"),
            json!({"mode": mode}),
        )
        .await;
    }

    /// The calls Q received, most recent last, each with its path and `traceparent`.
    pub async fn recent_calls(&self) -> Vec<Value> {
        let v = self
            .admin(Method::GET, "/admin/last-traceparent", None)
            .await;
        v["recent"].as_array().cloned().unwrap_or_default()
    }

    /// A read of Q's internal API with the service token; panics unless it answers 200.
    pub async fn internal_get(&self, path: &str) -> Value {
        let response = self.internal(Method::GET, path, None).await;
        assert_eq!(response.status(), 200, "GET {path}");
        response.json().await.unwrap()
    }

    /// The calls Q received that name `workflow_id` (a create's body, a lookup's path), in
    /// arrival order, each with `method`, `path` and the `status` it was answered with.
    pub async fn calls_for(&self, workflow_id: &str) -> Vec<Value> {
        let v = self
            .admin(
                Method::GET,
                &format!("/admin/calls?workflow_id={workflow_id}"),
                None,
            )
            .await;
        v["calls"].as_array().cloned().unwrap_or_default()
    }

    /// Turns Q's workflow-id deduplication on or off.
    pub async fn workflow_dedup(&self, enabled: bool) {
        self.post("/admin/workflow-dedup", json!({"enabled": enabled}))
            .await;
    }

    /// A call to Q's internal API with the service token, as a Q client would make it (e.g. to
    /// approve a pending approval).
    pub async fn internal(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .request(method, format!("{}/internal/v1{}", self.url, path))
            .bearer_auth(SERVICE_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.unwrap()
    }
}
