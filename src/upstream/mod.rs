//! The upstream port: Q's identity, agent, run and approval APIs over the written contract
//! (the `q-upstream-contract` crate, `docs/upstream-api.md`).
//!
//! Every failure says whether the request may have reached Q ([`Delivery`]). A run creation that
//! may have been delivered must never be repeated under a new identity; the caller records it
//! as ambiguous and resolves it by workflow identity.

/// The contract's wire types live in their own crate, shared with the reference upstream; this
/// keeps `crate::upstream::contract::*` as the gateway's path to them.
pub use q_upstream_contract as contract;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::UpstreamConfig;
use crate::trace_context;
use contract::*;

mod answer;
mod error;
mod output;
pub mod reachability;

use answer::{answer_limit, contract_value, note_run, read_bounded, ERROR_BODY_LIMIT};
pub use error::definite;
use error::{classify_error, failed, note_unknown};
pub use error::{error_chain, Cause, Delivery, UpstreamError};
pub use output::OutputAnswer;
pub use reachability::Reachability;

/// Result of `POST /runs`.
#[derive(Debug, Clone)]
pub struct Created {
    pub run: Run,
    /// False when Q answered with an existing run for the same workflow identity.
    pub new: bool,
}

/// Client for Q's internal API.
#[derive(Clone)]
pub struct UpstreamRunApi {
    http: reqwest::Client,
    base: String,
    service_token: String,
    /// Every call's outcome, shared by every clone: whether Q is down.
    reachability: Arc<Reachability>,
}

impl std::fmt::Debug for UpstreamRunApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamRunApi")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Why the client for Q could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamSetupError {
    #[error("upstream.tls_ca_file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("HTTP client for Q: {0}")]
    Client(#[from] reqwest::Error),
}

/// Connections to Q kept open while idle (for `upstream.idle_timeout_ms`); one returned beyond them
/// closes. A burst (256 streams opening, each reading its run from Q) opens as many
/// connections as it has calls in flight, each with hyper's buffers and task (about 20 KiB):
/// kept, they would outlast the burst by the idle timeout. The steady load of a replica keeps
/// fewer calls in flight (one per request being answered, its calls to Q being serial).
pub const IDLE_CONNECTIONS: usize = 32;

impl UpstreamRunApi {
    pub fn new(config: &UpstreamConfig) -> Result<Self, UpstreamSetupError> {
        let mut builder = reqwest::Client::builder();
        if let Some(path) = &config.tls_ca_file {
            // Only the configured CA: Q is an internal service with a certificate of its own.
            let ca_error = |reason: String| UpstreamSetupError::CaFile {
                path: path.display().to_string(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
            if certs.is_empty() {
                return Err(ca_error("holds no certificate".into()));
            }
            builder = certs
                .into_iter()
                .fold(builder.tls_built_in_root_certs(false), |b, cert| {
                    b.add_root_certificate(cert)
                });
        }
        let http = builder
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_millis(config.request_timeout_ms))
            // Q is reached directly; an ambient HTTP(S)_PROXY must not reroute service calls.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_millis(config.idle_timeout_ms))
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .build()?;
        Ok(UpstreamRunApi {
            http,
            base: config.url.trim_end_matches('/').to_string(),
            service_token: config.service_token.expose().to_owned(),
            reachability: Arc::default(),
        })
    }

    /// Whether Q is down, as every call of this replica saw it.
    pub fn reachability(&self) -> &Arc<Reachability> {
        &self.reachability
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        op: &'static str,
        definite: &[ErrorCode],
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Option<Duration>,
    ) -> Result<(StatusCode, T), UpstreamError> {
        self.timed(op, async {
            let response = self
                .answer(op, definite, method, path, body, timeout)
                .await?;
            let status = response.status();
            let bytes = read_bounded(op, response, answer_limit(op)).await?;
            Ok((status, contract_value(op, &bytes)?))
        })
        .await
    }

    /// Counts and times one call to Q.
    async fn timed<T>(
        &self,
        op: &'static str,
        call: impl std::future::Future<Output = Result<T, UpstreamError>>,
    ) -> Result<T, UpstreamError> {
        let started = Instant::now();
        // The call's own span (exported with OpenTelemetry on): its context is the traceparent
        // Q receives.
        let span = tracing::info_span!(target: "otel", "q.call", op);
        let result = tracing::Instrument::instrument(call, span).await;
        let outcome = match &result {
            Ok(_) => {
                self.reachability.answered();
                "ok"
            }
            Err(e) => {
                match e {
                    UpstreamError::Refused { .. } => self.reachability.answered(),
                    UpstreamError::Failed { cause, .. } => self.reachability.failed(*cause),
                }
                crate::metrics::upstream_error(op, e.kind());
                e.kind()
            }
        };
        crate::metrics::upstream_call(op, outcome, started.elapsed());
        result
    }

    /// Sends a request and returns Q's successful answer with its body still unread; any other
    /// answer is the error it stands for.
    async fn answer<B: Serialize>(
        &self,
        op: &'static str,
        definite: &[ErrorCode],
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, UpstreamError> {
        let url = format!("{}{}{}", self.base, PREFIX, path);
        let mut request = self
            .http
            .request(method, url)
            .bearer_auth(&self.service_token)
            // The request's trace continues into Q (W3C Trace Context).
            .header(
                trace_context::TRACEPARENT,
                trace_context::current_or_new().header_value(),
            );
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        let response = request.send().await.map_err(|e| {
            let delivery = if e.is_connect() {
                Delivery::NotSent
            } else {
                Delivery::MaybeSent
            };
            failed(op, delivery, Cause::Transport, error_chain(&e))
        })?;
        let status = response.status();
        if status.is_server_error() {
            return Err(failed(
                op,
                Delivery::MaybeSent,
                Cause::ServerError,
                format!("HTTP {status}"),
            ));
        }
        if status.is_client_error() {
            let bytes = read_bounded(op, response, ERROR_BODY_LIMIT).await?;
            return Err(classify_error(op, definite, status, &bytes));
        }
        if !status.is_success() {
            return Err(failed(
                op,
                Delivery::MaybeSent,
                Cause::Unexpected,
                format!("unexpected HTTP {status}"),
            ));
        }
        Ok(response)
    }

    async fn get<T: DeserializeOwned>(
        &self,
        op: &'static str,
        definite: &[ErrorCode],
        path: &str,
    ) -> Result<T, UpstreamError> {
        self.call::<(), T>(op, definite, Method::GET, path, None, None)
            .await
            .map(|(_, v)| v)
    }

    pub async fn introspect(&self, token: &str) -> Result<Introspection, UpstreamError> {
        let body = IntrospectRequest {
            token: token.to_string(),
        };
        self.call(
            "introspect",
            definite::INTROSPECT,
            Method::POST,
            "/identity/introspect",
            Some(&body),
            None,
        )
        .await
        .map(|(_, v)| v)
    }

    /// The agent and the principal's current access to its workspace; `Ok(None)` when Q does
    /// not know the agent in this tenant.
    pub async fn agent_access(
        &self,
        tenant_id: &str,
        agent_id: &str,
        principal_id: &str,
    ) -> Result<Option<AgentAccess>, UpstreamError> {
        // The agent id comes from the client's URL. "." and ".." cannot be escaped in a path
        // (URL parsers treat "%2E%2E" as ".." too) and would address another route of Q: no
        // agent has such an id, so it is unknown without asking.
        if !is_path_segment(agent_id) {
            return Ok(None);
        }
        let path = format!(
            "/tenants/{}/agents/{}/access?principal_id={}",
            encode(tenant_id),
            encode(agent_id),
            encode(principal_id)
        );
        match self
            .get::<AgentAccess>("agent_access", definite::AGENT_ACCESS, &path)
            .await
        {
            Ok(access) => {
                note_unknown(
                    "agent_access",
                    "workspace_access",
                    access.workspace_access == WorkspaceAccess::Unknown,
                );
                Ok(Some(access))
            }
            // Only the contract's own not-found: a proxy's bare 404 says nothing about the agent.
            Err(e) if e.is(ErrorCode::AgentNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn create_run(&self, request: &CreateRunRequest) -> Result<Created, UpstreamError> {
        let (status, run) = self
            .call::<_, Run>(
                "create_run",
                definite::CREATE_RUN,
                Method::POST,
                "/runs",
                Some(request),
                None,
            )
            .await?;
        note_run("create_run", &run);
        Ok(Created {
            run,
            new: status == StatusCode::CREATED,
        })
    }

    pub async fn get_run(&self, run_id: &str) -> Result<Run, UpstreamError> {
        let run = self
            .get(
                "get_run",
                definite::RUN_READ,
                &format!("/runs/{}", encode(run_id)),
            )
            .await?;
        note_run("get_run", &run);
        Ok(run)
    }

    /// Looks a run up by the workflow identity it was created under; `Ok(None)` if Q has none.
    pub async fn run_by_workflow(&self, workflow_id: &str) -> Result<Option<Run>, UpstreamError> {
        match self
            .get(
                "run_by_workflow",
                definite::RUN_READ,
                &format!("/runs/by-workflow/{}", encode(workflow_id)),
            )
            .await
        {
            Ok(run) => {
                note_run("run_by_workflow", &run);
                Ok(Some(run))
            }
            // Only Q's `run_not_found` means no run was ever committed: a proxy's 404 does
            // not, and taking it so would create a second run or cancel a live one locally.
            Err(e) if e.is(ErrorCode::RunNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn cancel_run(&self, run_id: &str, principal_id: &str) -> Result<Run, UpstreamError> {
        let body = CancelRunRequest {
            principal_id: principal_id.to_string(),
        };
        let (_, run) = self
            .call::<_, Run>(
                "cancel_run",
                definite::CANCEL_RUN,
                Method::POST,
                &format!("/runs/{}/cancel", encode(run_id)),
                Some(&body),
                None,
            )
            .await?;
        note_run("cancel_run", &run);
        Ok(run)
    }

    pub async fn run_output(&self, run_id: &str) -> Result<RunOutput, UpstreamError> {
        self.get(
            "run_output",
            definite::RUN_OUTPUT,
            &format!("/runs/{}/output", encode(run_id)),
        )
        .await
    }

    /// The run's output answered by Q, its body not read yet: for a reader that decides from
    /// the declared size how much of it to read, if any.
    pub async fn run_output_answer(&self, run_id: &str) -> Result<OutputAnswer, UpstreamError> {
        let op = "run_output";
        let path = format!("/runs/{}/output", encode(run_id));
        let response = self
            .timed(
                op,
                self.answer::<()>(op, definite::RUN_OUTPUT, Method::GET, &path, None, None),
            )
            .await?;
        Ok(OutputAnswer { op, response })
    }

    pub async fn run_events(
        &self,
        run_id: &str,
        after_seq: u64,
        wait: Duration,
    ) -> Result<RunEvents, UpstreamError> {
        let wait_ms = wait.as_millis().min(30_000) as u64;
        let events = self
            .call::<(), RunEvents>(
                "run_events",
                definite::RUN_EVENTS,
                Method::GET,
                &format!(
                    "/runs/{}/events?after_seq={after_seq}&wait_ms={wait_ms}",
                    encode(run_id)
                ),
                None,
                Some(Duration::from_millis(wait_ms) + Duration::from_secs(5)),
            )
            .await
            .map(|(_, v)| v)?;
        note_unknown(
            "run_events",
            "status",
            events.events.iter().any(|e| e.status == RunStatus::Unknown),
        );
        Ok(events)
    }

    /// One answer of Q's change feed `feed` (`runs`, `access`), called `op`, after `after`,
    /// long-polled up to `wait` (at most 30 s), its call given 5 s more than the wait.
    async fn long_poll<T: DeserializeOwned>(
        &self,
        (op, feed): (&'static str, &str),
        after: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<T, UpstreamError> {
        let wait_ms = wait.as_millis().min(30_000) as u64;
        self.call::<(), T>(
            op,
            definite::QUERY,
            Method::GET,
            &format!("/changes/{feed}?after={after}&wait_ms={wait_ms}&limit={limit}"),
            None,
            Some(Duration::from_millis(wait_ms) + Duration::from_secs(5)),
        )
        .await
        .map(|(_, v)| v)
    }

    /// Q's run change feed after `after`, long-polled up to `wait`.
    pub async fn run_changes(
        &self,
        after: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<RunChanges, UpstreamError> {
        let changes: RunChanges = self
            .long_poll(("run_changes", "runs"), after, wait, limit)
            .await?;
        let unknown = changes
            .changes
            .iter()
            .any(|c| c.status == RunStatus::Unknown);
        note_unknown("run_changes", "status", unknown);
        Ok(changes)
    }

    /// Q's access change feed after `after`, long-polled up to `wait`.
    pub async fn access_changes(
        &self,
        after: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<AccessChanges, UpstreamError> {
        let changes: AccessChanges = self
            .long_poll(("access_changes", "access"), after, wait, limit)
            .await?;
        let unknown = changes
            .changes
            .iter()
            .any(|c| c.kind == AccessChangeKind::Unknown);
        note_unknown("access_changes", "kind", unknown);
        Ok(changes)
    }

    /// The principal's evidence grants on many runs in one call.
    pub async fn evidence_grants(
        &self,
        principal_id: &str,
        run_ids: Vec<String>,
    ) -> Result<EvidenceGrants, UpstreamError> {
        let body = EvidenceQuery {
            principal_id: principal_id.to_string(),
            run_ids,
        };
        let (_, grants) = self
            .call::<_, EvidenceGrants>(
                "evidence_grants",
                definite::QUERY,
                Method::POST,
                "/evidence-grants/query",
                Some(&body),
                None,
            )
            .await?;
        note_unknown(
            "evidence_grants",
            "evidence",
            grants
                .grants
                .iter()
                .any(|g| g.evidence == EvidenceGrant::Unknown),
        );
        Ok(grants)
    }

    pub async fn approvals(&self, run_id: &str) -> Result<Approvals, UpstreamError> {
        self.get(
            "approvals",
            definite::RUN_READ,
            &format!("/runs/{}/approvals", encode(run_id)),
        )
        .await
    }

    pub async fn run_grant(
        &self,
        run_id: &str,
        principal_id: &str,
    ) -> Result<RunGrant, UpstreamError> {
        let grant: RunGrant = self
            .get(
                "run_grant",
                definite::RUN_READ,
                &format!("/runs/{}/grants/{}", encode(run_id), encode(principal_id)),
            )
            .await?;
        note_unknown(
            "run_grant",
            "evidence",
            grant.evidence == EvidenceGrant::Unknown,
        );
        Ok(grant)
    }

    pub async fn health(&self) -> Result<Health, UpstreamError> {
        self.get("health", definite::NONE, "/health").await
    }
}

/// Whether `s` can stand as one segment of a path to Q once [`encode`]d: not empty, and not
/// a dot segment, which URL normalisation would resolve whatever its escaping.
fn is_path_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".."
}

/// Percent-encodes one path or query component.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
