//! HTTP plumbing shared by the routes: the authorisation stage, body limit, profile gate,
//! per-principal rate limit, request ids, retired routes and trace context propagation; and the
//! write deadline of connections, and how a connection's protocol is decided (within the
//! header timeout).

pub mod around;
pub mod authorize;
pub mod body_limit;
pub mod profile_gate;
pub mod protocol;
pub mod rate_limit;
pub mod request_id;
pub mod response_budget;
pub mod retired;
pub mod trace_context;
pub mod write_deadline;
