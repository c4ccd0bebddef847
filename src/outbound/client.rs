//! The outbound A2A client: JSON-RPC 1.0 calls to a registered remote agent, on the official
//! `a2a` types, through the outbound policy.
//!
//! Why not `a2a-client-lf` (0.2.9): it cannot honour three of the policy's rules. It reads
//! whole bodies (`Response::text`) with no byte cap; it discards the JSON-RPC id of the answer,
//! so an answer to another request would be accepted; and it reports every failure as one
//! `A2AError::internal` string, losing whether the request may have reached the remote, which
//! is exactly what decides whether a send may be repeated. It also builds on reqwest 0.13,
//! a second HTTP stack beside the gateway's. The wire types are still the official ones.
//!
//! Every call: the URL passes the policy (literal addresses too), names resolve through
//! [`PolicyResolver`](super::policy::PolicyResolver), no redirect is followed (a 3xx is an
//! error), no ambient proxy is used, connect and total time are bounded, the body is read in
//! chunks and abandoned past the byte cap, it is parsed only within a bound set of depth,
//! elements, objects and string length ([`decode`]), and the answer must carry the request's id. The
//! bearer credential is attached only when the URL's origin is the one it is bound to.
//!
//! A message carries no `contextId` (nor `taskId`): contexts belong to the server, and a
//! server may refuse a client-chosen one (Q's own inbound profile does). So correlation rests
//! on the JSON-RPC id and on what the answer says about itself: a task must be consistent
//! (its messages name this task and its context) and, when its history shows user messages,
//! include ours; a message must be the agent's and not ours. The context a task is in is
//! recorded from the remote's answer, and later reads of that task must stay in it.

mod correlation;
pub mod decode;
mod error;
mod sanitize;

use std::sync::Arc;
use std::time::Duration;

use a2a::{
    GetTaskRequest, JsonRpcId, JsonRpcRequest, Message, Part, Role, SendMessageConfiguration,
    SendMessageRequest, SendMessageResponse, Task,
};
use reqwest::{header, StatusCode, Url};
use serde_json::Value;

use super::credential::BearerCredential;
use super::policy::{origin, redacted, OutboundPolicy, PolicyRefusal, PolicyResolver};
use crate::config::OutboundConfig;
use crate::upstream::Delivery;
use correlation::{correlate_read, correlate_send};
use error::{chain_without_url, classify_send, refuses_definitely, rpc_refuses_definitely};
use sanitize::text_without_nul;

pub use error::OutboundError;

/// Where one call goes and with which credential.
pub struct Target<'a> {
    /// The registered endpoint (already checked when registered; checked again per call).
    pub endpoint: &'a str,
    /// The opened credential and the origin it is bound to.
    pub credential: Option<(&'a BearerCredential, &'a str)>,
}

/// The client for remote A2A agents. One instance serves every registration.
#[derive(Clone)]
pub struct RemoteAgentClient {
    http: reqwest::Client,
    policy: Arc<OutboundPolicy>,
    max_response_bytes: usize,
    max_card_bytes: usize,
}

impl std::fmt::Debug for RemoteAgentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteAgentClient")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl RemoteAgentClient {
    pub fn new(
        config: &OutboundConfig,
        resolver: Arc<PolicyResolver>,
    ) -> Result<Self, reqwest::Error> {
        let policy = resolver.policy().clone();
        let http = reqwest::Client::builder()
            // Names resolve only through the policy; literal addresses are checked per call.
            .dns_resolver(resolver)
            // A redirect could point anywhere, with our headers; a 3xx is an error.
            .redirect(reqwest::redirect::Policy::none())
            // HTTP(S)_PROXY must not reroute remote calls around the address policy.
            .no_proxy()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_millis(config.request_timeout_ms))
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("q-a2a-gateway/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(RemoteAgentClient {
            http,
            policy,
            max_response_bytes: config.max_response_bytes,
            max_card_bytes: config.max_card_bytes,
        })
    }

    pub fn policy(&self) -> &OutboundPolicy {
        &self.policy
    }

    /// `SendMessage` with the caller's `messageId`, `returnImmediately` so the remote task id
    /// arrives as early as possible. The answer must belong to it.
    pub async fn send_message(
        &self,
        target: &Target<'_>,
        message_id: &str,
        text: &str,
    ) -> Result<SendMessageResponse, OutboundError> {
        let request = send_request(message_id, text);
        let result = self.call(target, "SendMessage", &request).await?;
        let answer = decode::send_result(result)?;
        correlate_send(&answer, message_id)?;
        Ok(answer)
    }

    /// `GetTask` for a task id the remote gave us; the answer must be that task, in the
    /// context the remote put it in (when that is known).
    pub async fn get_task(
        &self,
        target: &Target<'_>,
        task_id: &str,
        context_id: Option<&str>,
    ) -> Result<Task, OutboundError> {
        let request = GetTaskRequest {
            id: task_id.to_string(),
            history_length: None,
            tenant: None,
        };
        let result = self.call(target, "GetTask", &request).await?;
        let task = decode::task_result(result)?;
        correlate_read(&task, task_id, context_id)?;
        Ok(task)
    }

    /// Fetches the remote's agent card, size-capped, as untrusted JSON. Where a card lives is a
    /// convention, so the candidates of [`card_urls`] are tried in order: the agent's own path
    /// (a Q agent's card, which needs the credential) with the credential, then the origin's
    /// well-known path without it. A candidate that answers HTTP 4xx or something other than
    /// a JSON object is not the card; any other failure ends discovery at once.
    pub async fn fetch_card(&self, target: &Target<'_>) -> Result<Value, OutboundError> {
        let endpoint = self.policy.check_url(target.endpoint)?;
        let mut first_miss = None;
        for (url, with_credential) in card_urls(&endpoint) {
            let credential = target.credential.filter(|_| with_credential);
            match self.fetch_card_at(&url, credential).await {
                Ok(card) => return Ok(card),
                Err(
                    miss @ (OutboundError::Refused { .. }
                    | OutboundError::Transport {
                        reason: "unparseable",
                        ..
                    }),
                ) => {
                    first_miss.get_or_insert(miss);
                }
                Err(e) => return Err(e),
            }
        }
        Err(first_miss.expect("card_urls yields at least the origin's card"))
    }

    async fn fetch_card_at(
        &self,
        url: &Url,
        credential: Option<(&BearerCredential, &str)>,
    ) -> Result<Value, OutboundError> {
        let request = self
            .http
            .get(url.clone())
            .header(header::ACCEPT, "application/json")
            .header("A2A-Version", "1.0");
        let request = with_credential(request, url, credential)?;
        let (status, bytes) = self.exchange(url, request, self.max_card_bytes).await?;
        if !status.is_success() && !refuses_definitely(status.as_u16()) {
            return Err(OutboundError::ambiguous(
                "remote_http_status",
                format!("card request answered HTTP {status}"),
            ));
        }
        if !status.is_success() {
            return Err(OutboundError::Refused {
                reason: "card_unavailable",
                http_status: status.as_u16(),
                rpc_code: None,
                message: format!("card request answered HTTP {status}"),
            });
        }
        decode::card(&bytes)
    }

    /// One JSON-RPC exchange; returns the `result` of an answer carrying the request's id.
    async fn call<P: serde::Serialize>(
        &self,
        target: &Target<'_>,
        method: &'static str,
        params: &P,
    ) -> Result<Value, OutboundError> {
        let url = self.policy.check_url(target.endpoint)?;
        let id = JsonRpcId::String(uuid::Uuid::new_v4().to_string());
        let params = serde_json::to_value(params)
            .map_err(|e| OutboundError::transport(Delivery::NotSent, "encode", e.to_string()))?;
        let envelope = JsonRpcRequest::new(id.clone(), method, Some(params));
        let request = self
            .http
            .post(url.clone())
            .header(header::ACCEPT, "application/json")
            .header("A2A-Version", "1.0")
            .json(&envelope);
        let request = with_credential(request, &url, target.credential)?;
        let (status, bytes) = self
            .exchange(&url, request, self.max_response_bytes)
            .await?;
        if status.is_client_error() {
            // The endpoint's own refusal, told apart by the JSON-RPC error it carries, if any
            // (its id may be null: the remote may not have read the request's).
            let error = decode::rpc_refusal(&bytes);
            return Err(match error {
                _ if !refuses_definitely(status.as_u16()) => OutboundError::ambiguous(
                    "remote_http_status",
                    format!("{method} answered HTTP {status}"),
                ),
                Some(error) => rpc_error(method, status, error),
                None => OutboundError::Refused {
                    reason: "remote_http_4xx",
                    http_status: status.as_u16(),
                    rpc_code: None,
                    message: format!("{method} answered HTTP {status}"),
                },
            });
        }
        if !status.is_success() {
            return Err(OutboundError::ambiguous(
                "remote_http_status",
                format!("{method} answered HTTP {status}"),
            ));
        }
        let answer = decode::rpc_answer(method, &bytes)?;
        drop(bytes);
        if answer.jsonrpc != "2.0" || answer.id != id {
            return Err(OutboundError::ambiguous(
                "uncorrelated",
                format!("{method}: the answer's JSON-RPC id is not the request's"),
            ));
        }
        match (answer.result, answer.error) {
            (_, Some(error)) => Err(rpc_error(method, status, error)),
            (Some(result), None) => Ok(result),
            (None, None) => Err(OutboundError::ambiguous(
                "unparseable",
                format!("{method}: answer has neither result nor error"),
            )),
        }
    }

    /// Sends and reads the body up to `cap` bytes; classifies every failure.
    #[tracing::instrument(target = "otel", name = "outbound.call", skip_all)]
    async fn exchange(
        &self,
        url: &Url,
        request: reqwest::RequestBuilder,
        cap: usize,
    ) -> Result<(StatusCode, Vec<u8>), OutboundError> {
        let shown = redacted(url);
        let mut response = request
            .send()
            .await
            .map_err(|e| classify_send(&e, &shown))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(OutboundError::ambiguous(
                "redirect",
                format!("{shown} answered HTTP {status}; redirects are not followed"),
            ));
        }
        if status.is_server_error() {
            return Err(OutboundError::ambiguous(
                "remote_http_5xx",
                format!("{shown} answered HTTP {status}"),
            ));
        }
        if response.content_length().is_some_and(|n| n > cap as u64) {
            return Err(OutboundError::ambiguous(
                "response_too_large",
                format!("{shown} declared more than {cap} bytes"),
            ));
        }
        // Sized once from what the remote declares (within the cap, checked above), rather than
        // doubled as it arrives; without a declaration, from a first guess.
        let declared = response.content_length().map_or(0, |n| n as usize);
        let mut body = Vec::with_capacity(if declared > 0 {
            declared
        } else {
            UNDECLARED_BODY_BYTES.min(cap)
        });
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > cap {
                        return Err(OutboundError::ambiguous(
                            "response_too_large",
                            format!("{shown} sent more than {cap} bytes"),
                        ));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => {
                    return Err(OutboundError::ambiguous(
                        "timeout",
                        chain_without_url(&e, &shown),
                    ))
                }
                Err(e) => {
                    return Err(OutboundError::ambiguous(
                        "connection",
                        chain_without_url(&e, &shown),
                    ))
                }
            }
        }
        Ok((status, body))
    }
}

/// The first room for a body whose length is not declared (chunked).
const UNDECLARED_BODY_BYTES: usize = 16 * 1024;

/// A JSON-RPC error answer: a refusal if its code is a definite one, otherwise no evidence of
/// what the remote did.
fn rpc_error(method: &str, status: StatusCode, error: a2a::JsonRpcError) -> OutboundError {
    let code = i64::from(error.code);
    let message = text_without_nul(error.message);
    if rpc_refuses_definitely(code) {
        OutboundError::Refused {
            reason: "remote_rpc_error",
            http_status: status.as_u16(),
            rpc_code: Some(code),
            message,
        }
    } else {
        OutboundError::ambiguous(
            "remote_rpc_error",
            format!("{method} answered JSON-RPC error {code} (HTTP {status}): {message}"),
        )
    }
}

/// Attaches the credential, only to the origin it was opened for.
fn with_credential(
    request: reqwest::RequestBuilder,
    url: &Url,
    credential: Option<(&BearerCredential, &str)>,
) -> Result<reqwest::RequestBuilder, OutboundError> {
    let Some((credential, bound_origin)) = credential else {
        return Ok(request);
    };
    if origin(url) != bound_origin {
        return Err(PolicyRefusal {
            reason: "credential_origin",
            target: redacted(url),
        }
        .into());
    }
    Ok(request.bearer_auth(credential.expose()))
}

/// Where a remote's card may be, in order, and whether the credential goes with the request.
/// An endpoint `…/x/rpc` is an agent's base `…/x` plus `/rpc` (a Q agent's layout), whose card
/// is `…/x/.well-known/agent-card.json` behind the same credential. Then the origin's
/// `/.well-known/agent-card.json`, a public card, without it. Both are the endpoint's origin,
/// so the credential cannot go anywhere else.
fn card_urls(endpoint: &Url) -> Vec<(Url, bool)> {
    let mut urls = Vec::with_capacity(2);
    if let Some(base) = endpoint
        .path()
        .strip_suffix("/rpc")
        .filter(|base| !base.is_empty())
    {
        let mut url = endpoint.clone();
        url.set_path(&format!("{base}/.well-known/agent-card.json"));
        url.set_query(None);
        urls.push((url, true));
    }
    let mut url = endpoint.clone();
    url.set_path("/.well-known/agent-card.json");
    url.set_query(None);
    urls.push((url, false));
    urls
}

/// The SendMessage params: our messageId and text, nothing the server owns (no `contextId`,
/// no `taskId`).
fn send_request(message_id: &str, text: &str) -> SendMessageRequest {
    SendMessageRequest {
        message: Message {
            message_id: message_id.to_string(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        },
        configuration: Some(SendMessageConfiguration {
            accepted_output_modes: None,
            task_push_notification_config: None,
            history_length: None,
            return_immediately: Some(true),
        }),
        metadata: None,
        tenant: None,
    }
}

#[cfg(test)]
mod tests;
