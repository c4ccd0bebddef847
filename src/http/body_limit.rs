//! Request body limit: the profile's 64 KiB, enforced before any parsing, with a bounded read
//! time so a slow body cannot hold a connection and a task slot open. Routes call it only
//! after authentication, so an unauthenticated body is never read at all.
//!
//! A declared `Content-Length` over the limit is refused at once, nothing read: reading (even
//! to drop it) is what lets a few hundred large requests fill memory or hold connections. A
//! body that grows past the limit while streaming (chunked) is counted as it arrives and
//! refused as soon as it does, at most the limit buffered. Either way the rest of the body is
//! never read: hyper then closes the connection after the 413 instead of draining it.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::error::HttpError;

/// Longest time a client may take to send its body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn read(body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, HttpError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use futures_util::stream;

    fn declared(length: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        headers
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_refused_without_polling_the_body() {
        // A body that never yields: any read would hang past the test's timeout.
        let never = Body::from_stream(stream::pending::<Result<Bytes, std::io::Error>>());
        let refused = tokio::time::timeout(
            Duration::from_millis(500),
            read(never, &declared(1 << 20), 64),
        )
        .await
        .expect("answered without reading");
        assert!(matches!(
            refused,
            Err(HttpError::PayloadTooLarge { limit: 64 })
        ));
    }

    #[tokio::test]
    async fn a_streamed_body_is_cut_at_the_limit() {
        // Chunks of 16 bytes, endlessly: refused once past 64, the rest never asked for.
        let polled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = polled.clone();
        let endless = stream::repeat_with(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, std::io::Error>(Bytes::from_static(&[b' '; 16]))
        });
        let refused = read(Body::from_stream(endless), &HeaderMap::new(), 64).await;
        assert!(matches!(
            refused,
            Err(HttpError::PayloadTooLarge { limit: 64 })
        ));
        assert_eq!(polled.load(std::sync::atomic::Ordering::Relaxed), 5);
    }
}
