//! HTTP plumbing shared by the routes: body limit, profile gate, retired routes and trace
//! context propagation.

pub mod body_limit;
pub mod profile_gate;
pub mod retired;
pub mod trace_context;
