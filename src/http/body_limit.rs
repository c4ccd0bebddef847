//! Request body limit: the profile's 64 KiB, enforced before any parsing, with a bounded read
//! time so a slow body cannot hold a connection and a task slot open.
//!
//! A declared `Content-Length` over the limit is refused without parsing (up to 1 MiB of it is
//! read and dropped first, so the client gets to read the 413); a body that grows past the
//! limit while streaming (chunked) is refused as soon as it does.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::error::HttpError;

/// Most bytes of an oversized body read (and dropped) before answering 413; larger bodies are
/// refused at once.
pub const DRAIN_BEFORE_REFUSING: usize = 1024 * 1024;

/// Longest time a client may take to send its body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn read(body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, HttpError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        // Answering while the client is still writing makes many clients fail with a broken
        // pipe instead of reading the 413; take in (and drop) a bounded amount first.
        if declared.is_some_and(|n| n <= DRAIN_BEFORE_REFUSING as u64) {
            let _ = tokio::time::timeout(
                BODY_READ_TIMEOUT,
                Limited::new(body, DRAIN_BEFORE_REFUSING).collect(),
            )
            .await;
        }
        return Err(HttpError::PayloadTooLarge { limit });
    }
    let collected = tokio::time::timeout(BODY_READ_TIMEOUT, Limited::new(body, limit).collect())
        .await
        .map_err(|_| HttpError::BodyTimeout)?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(HttpError::PayloadTooLarge { limit })
        }
        Err(_) => Err(HttpError::BodyRead),
    }
}
