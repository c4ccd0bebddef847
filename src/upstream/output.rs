//! A run's output answered by Q with its body unread, for a reader that decides from the
//! declared size how much of it to read.

use super::error::{error_chain, failed, Cause};
use super::{contract_value, Delivery, RunOutput, UpstreamError};

/// Q's answer to an output read, before its body is read.
#[derive(Debug)]
pub struct OutputAnswer {
    pub(super) op: &'static str,
    pub(super) response: reqwest::Response,
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
        while let Some(chunk) = self.response.chunk().await.map_err(|e| {
            failed(
                self.op,
                Delivery::MaybeSent,
                Cause::Transport,
                error_chain(&e),
            )
        })? {
            if body.len() + chunk.len() > limit {
                return Ok(None);
            }
            body.extend_from_slice(&chunk);
        }
        contract_value(self.op, &body).map(Some)
    }
}
