//! Plain HTTP to Q's contract routes (`/internal/v1/*`) with the service token, keeping every
//! answer as it came (status, body, when it was sent and received): the kit judges the wire,
//! not the gateway's reading of it.

use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::upstream::contract::{ErrorBody, ErrorCode, PREFIX};

/// An answer of Q, as received.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
    /// When the answer was read.
    pub received: Instant,
}

/// Q's answer, or why there was none (connection failed, timeout, unreadable body).
pub type Reply = Result<Answer, String>;

impl Answer {
    /// The body as a contract type.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| {
            format!(
                "HTTP {} with a body that is not the contract's: {e}",
                self.status
            )
        })
    }

    /// The `error` of a contract error body, if the body is one.
    pub fn code(&self) -> Option<String> {
        serde_json::from_slice::<ErrorBody>(&self.body)
            .ok()
            .map(|b| b.error)
    }

    /// Whether this is the contract's `code` under the status the contract gives it.
    pub fn is(&self, code: ErrorCode) -> bool {
        Some(self.status) == code.status() && self.code().as_deref() == Some(code.as_str())
    }

    /// `201`, `404 run_not_found`, `404 without a contract error body`.
    pub fn describe(&self) -> String {
        if self.status < 400 {
            return self.status.to_string();
        }
        match self.code() {
            Some(code) => format!("{} {code}", self.status),
            None => format!("{} without a contract error body", self.status),
        }
    }
}

/// What a reply was, in a line of evidence.
pub fn describe(reply: &Reply) -> String {
    match reply {
        Ok(answer) => answer.describe(),
        Err(e) => format!("no answer ({e})"),
    }
}

/// Whether a reply leaves open that Q acted on the request: no answer, or a 5xx.
pub fn indefinite(reply: &Reply) -> bool {
    reply.as_ref().map_or(true, |a| a.status >= 500)
}

/// Q's contract routes, called with the service token.
#[derive(Clone)]
pub struct Q {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Q {
    pub fn new(base: &str, token: &str, timeout: Duration) -> anyhow::Result<Q> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout)
            // The kit talks to the Q it is pointed at, never through an ambient proxy.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Q {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
    }

    /// The HTTP client, shared with the operator hook.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send::<()>(Method::GET, path, None, Some(&self.token))
            .await
    }

    pub async fn post<B: Serialize>(&self, path: &str, body: &B) -> Reply {
        self.send(Method::POST, path, Some(body), Some(&self.token))
            .await
    }

    /// A request under `/internal/v1` with `token` as the bearer (none: no header).
    pub async fn send<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        token: Option<&str>,
    ) -> Reply {
        let mut request = self
            .http
            .request(method, format!("{}{PREFIX}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| crate::upstream::error_chain(&e))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| crate::upstream::error_chain(&e))?;
        Ok(Answer {
            status,
            body,
            received: Instant::now(),
        })
    }
}

/// Percent-encodes one path or query component.
pub fn encode(s: &str) -> String {
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
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            body: Bytes::from(body.to_owned()),
            received: Instant::now(),
        }
    }

    #[test]
    fn an_answer_is_a_contract_code_only_under_its_status() {
        let not_found = answer(404, r#"{"error":"run_not_found"}"#);
        assert!(not_found.is(ErrorCode::RunNotFound));
        assert_eq!(not_found.describe(), "404 run_not_found");
        assert!(!answer(400, r#"{"error":"run_not_found"}"#).is(ErrorCode::RunNotFound));
        let bare = answer(404, "Not Found");
        assert!(!bare.is(ErrorCode::RunNotFound));
        assert_eq!(bare.describe(), "404 without a contract error body");
        assert_eq!(answer(201, "{}").describe(), "201");
    }

    #[test]
    fn only_a_missing_answer_or_a_5xx_is_indefinite() {
        assert!(indefinite(&Err("reset".into())));
        assert!(indefinite(&Ok(answer(503, ""))));
        assert!(!indefinite(&Ok(answer(409, ""))));
        assert_eq!(describe(&Err("timeout".into())), "no answer (timeout)");
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
    }
}
