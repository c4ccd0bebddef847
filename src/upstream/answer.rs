//! Reading Q's answers: every body read with a bound (by call), and parsed as the contract's
//! types; an answer off the contract is an error that says Q answered, not an outage.

use serde::de::DeserializeOwned;

use super::contract::{Run, RunStatus};
use super::error::{error_chain, failed, note_unknown, Cause, Delivery, UpstreamError};

/// Most bytes read of one successful answer of Q, by call: an output may be a whole result
/// (1 MiB) escaped as JSON; a page of a feed or of a run's events holds up to 1000 entries;
/// everything else is one small object. Past it the answer is not read further and the call
/// fails (not an outage: Q answered, off the contract).
pub(super) fn answer_limit(op: &str) -> usize {
    match op {
        "run_output" => 8 << 20,
        "run_changes" | "access_changes" | "run_events" | "evidence_grants" => 2 << 20,
        _ => 256 << 10,
    }
}

/// Most bytes read of an error answer's body (an `ErrorBody`, or a proxy's page).
pub(super) const ERROR_BODY_LIMIT: usize = 64 << 10;

/// The body of `response`, at most `limit` bytes: a longer one (by its declared length, or as
/// soon as more arrives) is not read further.
pub(super) async fn read_bounded(
    op: &'static str,
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, UpstreamError> {
    let too_long = || {
        failed(
            op,
            Delivery::MaybeSent,
            Cause::Unexpected,
            format!("answer longer than {limit} bytes; not read"),
        )
    };
    let declared = response.content_length();
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_long());
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| failed(op, Delivery::MaybeSent, Cause::Transport, error_chain(&e)))?
    {
        if body.len() + chunk.len() > limit {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

pub(super) fn note_run(op: &'static str, run: &Run) {
    note_unknown(op, "status", run.status == RunStatus::Unknown);
}

/// An answer's body as the contract type it must be.
pub(super) fn contract_value<T: DeserializeOwned>(
    op: &'static str,
    bytes: &[u8],
) -> Result<T, UpstreamError> {
    serde_json::from_slice(bytes).map_err(|e| {
        failed(
            op,
            Delivery::MaybeSent,
            Cause::Unexpected,
            format!("response does not match the contract: {e}"),
        )
    })
}
