//! HTTP plumbing shared by the routes: body limit, profile gate, per-principal rate limit.

pub mod body_limit;
pub mod profile_gate;
pub mod rate_limit;
