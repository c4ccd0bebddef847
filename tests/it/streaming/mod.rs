//! Streaming and observation: SendStreamingMessage, SubscribeToTask, windows and keep-alives,
//! observer leases in real Redis across replicas (bounds, SIGKILL expiry, disconnect release,
//! cancel under full bounds, Redis outage and return, Redis over TLS, a Redis Cluster and the
//! restart of one of its nodes), the per-principal rate limit (per bucket, across three
//! replicas with Redis stopped and back, and what a decision costs), and the memory a client
//! that keeps its HTTP/2 windows closed can hold.

use crate::support::{new_id, Agent, Gateway};

mod lease_renewal;
mod leases;
mod rate_limit;
mod rate_limit_cost;
mod rate_limit_replicas;
mod redis_cluster;
mod redis_outage;
mod redis_tls;
mod stalled;
pub(crate) mod stalled_window;
mod streams;

/// `ag-approver` as this caller: its tasks wait in INPUT_REQUIRED until approved, so
/// subscriptions to them stay open.
fn approver(gw: &Gateway, token: &str) -> Agent {
    gw.caller(token).agent("ag-approver")
}

/// A task that waits in INPUT_REQUIRED until approved: subscriptions to it stay open.
async fn waiting_task(gw: &Gateway, token: &str) -> String {
    let task = approver(gw, token)
        .send_text(&new_id(), "wait for me")
        .await
        .task();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    task["id"].as_str().unwrap().to_string()
}
