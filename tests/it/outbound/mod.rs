//! Outbound: registrations, sealed credentials, the outbound policy and delegation, against
//! real remote agents: the official a2a-sdk 1.2.2 server (tests/python/remote_agent.py) run as
//! subprocesses on loopback, with the gateway, the reference upstream and PostgreSQL real too.
//!
//! Needs the repo's Python environment (`scripts/setup-python` creates `.venv`). The gateway
//! and its API: `support::outbound`.

mod delegation;
mod discovery;
mod limits;
mod policy;
mod registrations;
mod reseal;

/// An admin of another tenant (`t-globex`).
const CAROL_ADMIN: &str = "tok-carol-admin";
