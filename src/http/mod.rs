//! HTTP plumbing shared by the routes: body limit and the profile gate.

pub mod body_limit;
pub mod profile_gate;
