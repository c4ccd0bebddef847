//! What every integration test builds on. A test gets its own PostgreSQL database, its own
//! reference upstream process and its own gateway process, all real, on loopback ports the OS
//! chooses; the PostgreSQL and Redis servers are the only things tests share (each test has its
//! own database and its own Redis key prefix).
//!
//! Every test runs as a thread of one process (`tests/it`), so nothing here may lean on
//! process-wide state: no `std::env::set_var` (give a setting to the child process through
//! [`GatewayOptions::env`]), no fixed ports, and no HTTP client or runtime kept in a static
//! (each `#[tokio::test]` has its own runtime, and connections belong to the runtime that opened
//! them).
//!
//! | module | concern |
//! |---|---|
//! | [`db`] | a fresh database per test, and the task-table queries tests make |
//! | [`process`] | spawning the binaries, waiting for `listening on`, SIGKILL and SIGTERM |
//! | [`upstream`] | the reference Q upstream and its `/admin` and `/internal` APIs |
//! | [`gateway`] | the gateway process, its configuration, replicas, `migrate`, `preflight` |
//! | [`in_process`] | the same gateway inside the test process, where process death is not the point |
//! | [`http`] | plain HTTP to a gateway, answers read into [`Reply`] |
//! | [`rpc`] | JSON-RPC through the typed handle `gw.caller(token).agent(agent)` |
//! | [`sse`] | streaming calls read frame by frame |
//! | [`otlp`] | an OTLP/HTTP trace receiver, keeping the spans a gateway exports |
//! | [`outbound`] | a gateway that may call loopback remotes, and its registration and delegation API |
//! | [`python`] | official-SDK remote agents (`tests/python/remote_agent.py`) |
//! | [`redis`] | private `redis-server` processes (plain, TLS, a three-node cluster) and observer-lease counts |
//! | [`postgres`] | a private PostgreSQL server (TLS with a test CA) |
//! | [`pg_pair`] | a private PostgreSQL primary and its synchronous standby: crash, promote, rejoin |
//! | [`certs`] | a test CA and the server and client certificates it signed |
//! | [`tls_proxy`] | a TLS-terminating forwarder: Q behind `https://` |
//! | [`proxy`] | a TCP forwarder that makes a dependency go away, fall silent, come back, or move |
//! | [`metrics`] | reading one sample of the Prometheus exposition |
//! | [`wait`] | polling until a condition holds |
//! | [`report`], [`rng`] | the reliability suites' counts, long-run switch and seeded RNG |
//!
//! Everything here is used by some test (one binary, so an unused function is a warning).

pub mod certs;
pub mod db;
pub mod gateway;
pub mod http;
pub mod in_process;
pub mod metrics;
pub mod otlp;
pub mod outbound;
pub mod pg_pair;
pub mod postgres;
pub mod process;
pub mod proxy;
pub mod python;
pub mod redis;
pub mod report;
pub mod rng;
pub mod rpc;
pub mod sse;
pub mod tls_proxy;
pub mod upstream;
pub mod wait;

pub use db::TestDb;
pub use gateway::{Gateway, GatewayOptions, CURSOR_KEY, NO_RECONCILER, PUBLIC_BASE};
pub use http::Reply;
pub use in_process::InProcessGateway;
pub use process::{kill9, repo_path, sigterm, GATEWAY_BIN};
pub use rpc::{artifact_text, new_id, Agent, Caller};
pub use sse::SseFrame;
pub use upstream::{Upstream, SERVICE_TOKEN};
pub use wait::{wait_until, within_revocation_bound};
