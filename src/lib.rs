//! The Q A2A gateway: the sidecar behind `/v1/a2a/*` that speaks A2A 1.0 JSON-RPC to clients
//! and translates it into calls on Q's agent, run and approval APIs, without owning the runs.
//!
//! Reading order follows the request path (docs/architecture.md draws it): [`app`] builds the
//! services and the route table; [`server`] serves it; [`http`] holds the one authorisation
//! stage, the profile gate and the body limit; [`a2a::rpc`] runs the RPC stages (envelope,
//! version, authorisation, agent) and calls [`a2a::tasks`]; [`dispatch`] creates Q runs under a
//! saved workflow identity; [`reconciler`] keeps the store in step with Q (one leader across
//! replicas); [`store`], [`upstream`] and [`lease`] are the ports to PostgreSQL, Q and Redis;
//! [`error`] is the one rescue point. [`outbound`] is the other direction: registrations of
//! remote agents and delegation to them. [`contract_check`] is the command that checks a Q
//! keeps the contract's promises.

#![forbid(unsafe_code)]

pub mod a2a;
pub mod access;
pub mod app;
pub mod auth;
pub mod card_signature;
pub mod changes;
pub mod client_address;
pub mod config;
pub mod contract_check;
pub mod dispatch;
pub mod error;
pub mod health;
pub mod http;
pub mod json_bounds;
pub mod lease;
pub mod metrics;
pub mod ops;
pub mod outbound;
pub mod preflight;
pub mod reconciler;
pub mod redis_link;
pub mod server;
pub mod shared_limits;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod trace_context;
pub mod upstream;
pub mod writable;

#[cfg(test)]
mod future_sizes;
#[cfg(test)]
mod layering;
