//! The upstream port: Q's identity, agent, run and approval APIs over the written contract
//! (the `q-upstream-contract` crate, `docs/upstream-api.md`).
//!
//! Every failure says whether the request may have reached Q ([`Delivery`]). A run creation that
//! may have been delivered must never be repeated under a new identity; the caller records it
//! as ambiguous and resolves it by workflow identity.

/// The contract's wire types live in their own crate, shared with the reference upstream; this
/// keeps `crate::upstream::contract::*` as the gateway's path to them.
pub use q_upstream_contract as contract;

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::UpstreamConfig;
use crate::trace_context;
use contract::*;

/// Whether a failed request may have been processed by Q.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The connection was never established: Q certainly did not see the request.
    NotSent,
    /// The request may have been received and acted on (timeout, reset, 5xx, unreadable answer).
    MaybeSent,
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Q answered with a definite refusal: an error code the contract defines for this call,
    /// with the HTTP status the contract pairs it with.
    #[error("Q refused {op}: HTTP {status} {}", code.as_str())]
    Refused {
        op: &'static str,
        status: u16,
        code: ErrorCode,
        message: Option<String>,
    },
    /// No definite answer: no answer at all, a 5xx, or an answer that is not one of the
    /// contract's refusals for this call (401/403 of the service credential, 408, 429, a
    /// proxy's 404 without the contract's code, an unknown code, an unreadable body).
    #[error("Q call {op} failed ({delivery:?}): {reason}")]
    Failed {
        op: &'static str,
        delivery: Delivery,
        reason: String,
    },
}

impl UpstreamError {
    /// Whether Q definitely answered with this contract error code.
    pub fn is(&self, expected: ErrorCode) -> bool {
        matches!(self, UpstreamError::Refused { code, .. } if *code == expected)
    }

    /// Short label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Refused { .. } => "refused",
            UpstreamError::Failed {
                delivery: Delivery::NotSent,
                ..
            } => "unreachable",
            UpstreamError::Failed {
                delivery: Delivery::MaybeSent,
                ..
            } => "ambiguous",
        }
    }
}

/// The contract's definite refusals of each call (`docs/upstream-api.md`, each route's
/// "Status codes"). A code outside its call's list says nothing definite about that call.
mod definite {
    use super::ErrorCode::{self, *};

    pub const INTROSPECT: &[ErrorCode] = &[Invalid];
    pub const AGENT_ACCESS: &[ErrorCode] = &[AgentNotFound, Invalid];
    pub const CREATE_RUN: &[ErrorCode] = &[
        WorkspaceAccessDenied,
        AgentNotFound,
        WorkflowIdConflict,
        Invalid,
    ];
    pub const RUN_READ: &[ErrorCode] = &[RunNotFound];
    pub const RUN_OUTPUT: &[ErrorCode] = &[RunNotFound, OutputNotReady];
    pub const CANCEL_RUN: &[ErrorCode] = &[RunNotFound, RunTerminal, Invalid];
    pub const RUN_EVENTS: &[ErrorCode] = &[RunNotFound, Invalid];
    pub const QUERY: &[ErrorCode] = &[Invalid];
    pub const NONE: &[ErrorCode] = &[];
}

/// Classifies a non-2xx answer of Q: a refusal only when its body carries one of the call's
/// definite codes under the status the contract gives that code; anything else may have been
/// acted on (or will be, once the cause clears) and is retried, never taken as final.
fn classify_error(
    op: &'static str,
    definite: &[ErrorCode],
    status: StatusCode,
    bytes: &[u8],
) -> UpstreamError {
    let body: Option<ErrorBody> = serde_json::from_slice(bytes).ok();
    let code = body
        .as_ref()
        .map_or(ErrorCode::Unknown, |b| ErrorCode::parse(&b.error));
    if definite.contains(&code) && code.status() == Some(status.as_u16()) {
        return UpstreamError::Refused {
            op,
            status: status.as_u16(),
            code,
            message: body.and_then(|b| b.message),
        };
    }
    let reason = match &body {
        Some(b) => format!(
            "HTTP {status} with code {:?}, not a definite answer",
            b.error
        ),
        None => format!("HTTP {status} without a contract error body"),
    };
    UpstreamError::Failed {
        op,
        delivery: Delivery::MaybeSent,
        reason,
    }
}

/// A value of a newer contract revision in Q's answer: tolerated and logged, and never read
/// as final (the types map it to their `Unknown` variant).
fn note_unknown(op: &'static str, field: &'static str, unknown: bool) {
    if unknown {
        tracing::warn!(
            op,
            field,
            "Q answered a value this contract revision does not define; not taken as final"
        );
    }
}

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
}

impl std::fmt::Debug for UpstreamRunApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamRunApi")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl UpstreamRunApi {
    pub fn new(config: &UpstreamConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_millis(config.request_timeout_ms))
            // Q is reached directly; an ambient HTTP(S)_PROXY must not reroute service calls.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(UpstreamRunApi {
            http,
            base: config.url.trim_end_matches('/').to_string(),
            service_token: config.service_token.expose().to_owned(),
        })
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
            let bytes = response
                .bytes()
                .await
                .map_err(|e| failed(op, Delivery::MaybeSent, error_chain(&e)))?;
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
        let result = call.await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => {
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
            failed(op, delivery, error_chain(&e))
        })?;
        let status = response.status();
        if status.is_server_error() {
            return Err(failed(op, Delivery::MaybeSent, format!("HTTP {status}")));
        }
        if status.is_client_error() {
            let bytes = response
                .bytes()
                .await
                .map_err(|e| failed(op, Delivery::MaybeSent, error_chain(&e)))?;
            return Err(classify_error(op, definite, status, &bytes));
        }
        if !status.is_success() {
            return Err(failed(
                op,
                Delivery::MaybeSent,
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

    /// Q's run change feed after `after`, long-polled up to `wait`.
    pub async fn run_changes(
        &self,
        after: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<RunChanges, UpstreamError> {
        let wait_ms = wait.as_millis().min(30_000) as u64;
        let changes = self
            .call::<(), RunChanges>(
                "run_changes",
                definite::QUERY,
                Method::GET,
                &format!("/changes/runs?after={after}&wait_ms={wait_ms}&limit={limit}"),
                None,
                Some(Duration::from_millis(wait_ms) + Duration::from_secs(5)),
            )
            .await
            .map(|(_, v)| v)?;
        note_unknown(
            "run_changes",
            "status",
            changes
                .changes
                .iter()
                .any(|c| c.status == RunStatus::Unknown),
        );
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

fn note_run(op: &'static str, run: &Run) {
    note_unknown(op, "status", run.status == RunStatus::Unknown);
}

/// Q's answer to an output read, before its body is read.
#[derive(Debug)]
pub struct OutputAnswer {
    op: &'static str,
    response: reqwest::Response,
}

impl OutputAnswer {
    /// The body's size as Q declared it (`Content-Length`), if it did.
    pub fn declared_len(&self) -> Option<u64> {
        self.response.content_length()
    }

    /// The output, if its body is at most `limit` bytes. A longer one (by its declared size,
    /// or as soon as more is read) is `Ok(None)`: the rest is never read, and the connection
    /// is dropped with it.
    pub async fn read_within(mut self, limit: usize) -> Result<Option<RunOutput>, UpstreamError> {
        if self.declared_len().is_some_and(|n| n > limit as u64) {
            return Ok(None);
        }
        let mut body = Vec::with_capacity(self.declared_len().unwrap_or(0) as usize);
        while let Some(chunk) = self
            .response
            .chunk()
            .await
            .map_err(|e| failed(self.op, Delivery::MaybeSent, error_chain(&e)))?
        {
            if body.len() + chunk.len() > limit {
                return Ok(None);
            }
            body.extend_from_slice(&chunk);
        }
        contract_value(self.op, &body).map(Some)
    }
}

fn failed(op: &'static str, delivery: Delivery, reason: String) -> UpstreamError {
    UpstreamError::Failed {
        op,
        delivery,
        reason,
    }
}

/// An answer's body as the contract type it must be.
fn contract_value<T: DeserializeOwned>(op: &'static str, bytes: &[u8]) -> Result<T, UpstreamError> {
    serde_json::from_slice(bytes).map_err(|e| {
        failed(
            op,
            Delivery::MaybeSent,
            format!("response does not match the contract: {e}"),
        )
    })
}

/// Percent-encodes one path or query component.
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

/// The error and its sources in one line (reqwest hides the useful part in `source()`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_not_path_segments() {
        for id in ["", ".", ".."] {
            assert!(!is_path_segment(id), "{id:?}");
        }
        for id in ["...", ".a", "a..b", "ag-writer"] {
            assert!(is_path_segment(id), "{id:?}");
        }
    }

    fn classify(definite: &[ErrorCode], status: u16, body: &str) -> UpstreamError {
        classify_error(
            "create_run",
            definite,
            StatusCode::from_u16(status).unwrap(),
            body.as_bytes(),
        )
    }

    #[test]
    fn only_a_calls_own_contract_codes_under_their_status_are_refusals() {
        let refused = classify(
            definite::CREATE_RUN,
            403,
            r#"{"error":"workspace_access_denied"}"#,
        );
        assert!(refused.is(ErrorCode::WorkspaceAccessDenied), "{refused}");
        assert!(
            classify(definite::RUN_READ, 404, r#"{"error":"run_not_found"}"#)
                .is(ErrorCode::RunNotFound)
        );
        for (definite, status, body) in [
            // The service credential, not the request: fixed by rotating it, then retried.
            (definite::CREATE_RUN, 401, r#"{"error":"unauthorized"}"#),
            // A proxy's answers: no contract body, or a code Q does not define.
            (definite::RUN_READ, 404, "<html>404 Not Found</html>"),
            (definite::RUN_READ, 404, r#"{"error":"not_found"}"#),
            (definite::CREATE_RUN, 403, "Forbidden"),
            (definite::CREATE_RUN, 408, ""),
            (definite::CREATE_RUN, 429, r#"{"error":"rate_limited"}"#),
            // A contract code under another status, or one this call does not define.
            (definite::RUN_READ, 410, r#"{"error":"run_not_found"}"#),
            (definite::CREATE_RUN, 404, r#"{"error":"run_not_found"}"#),
        ] {
            let e = classify(definite, status, body);
            assert!(
                matches!(
                    e,
                    UpstreamError::Failed {
                        delivery: Delivery::MaybeSent,
                        ..
                    }
                ),
                "{status} {body}: {e}"
            );
        }
    }

    /// A Q that streams an output without declaring its length: it is read only up to the
    /// limit, then given up.
    #[tokio::test]
    async fn an_undeclared_output_is_read_only_up_to_its_limit() {
        let output = RunOutput {
            artifact_id: "a".into(),
            name: "answer.md".into(),
            media_type: "text/markdown".into(),
            text: "x".repeat(10_000),
            sha256: text_sha256(&"x".repeat(10_000)),
            byte_count: 10_000,
        };
        let body = serde_json::to_vec(&output).unwrap();
        let chunks: Vec<bytes::Bytes> = body
            .chunks(1000)
            .map(bytes::Bytes::copy_from_slice)
            .collect();
        let app = axum::Router::new().route(
            "/internal/v1/runs/{run_id}/output",
            axum::routing::get(move || {
                let chunks = chunks.clone();
                async move {
                    axum::body::Body::from_stream(futures_util::stream::iter(
                        chunks.into_iter().map(Ok::<_, std::convert::Infallible>),
                    ))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let api = UpstreamRunApi::new(&UpstreamConfig {
            url,
            service_token: "token".into(),
            ..UpstreamConfig::default()
        })
        .unwrap();

        let answer = api.run_output_answer("run-1").await.unwrap();
        assert_eq!(answer.declared_len(), None, "streamed without a length");
        assert!(answer.read_within(body.len() - 1).await.unwrap().is_none());
        let answer = api.run_output_answer("run-1").await.unwrap();
        assert_eq!(answer.read_within(body.len()).await.unwrap(), Some(output));
    }

    #[test]
    fn encode_escapes_path_separators() {
        assert_eq!(encode("a/b?c"), "a%2Fb%3Fc");
        assert_eq!(encode("ag-writer_1.x~"), "ag-writer_1.x~");
    }
}
