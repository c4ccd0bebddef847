//! The Rust integration tests, in one binary (`cargo test --test it`): one module per suite, the
//! harness in `support/`. They start the real gateway and reference-upstream binaries and use
//! real PostgreSQL and Redis (see `support/mod.rs`); `properties` and `fuzz_stable` call the
//! library directly.
//!
//! One binary links once and runs every test on one pool of threads; run a suite or a single
//! test with a filter, e.g. `cargo test --test it lifecycle::cancel::`.

mod support;

mod admission;
mod authorization_stage;
mod authz_matrix;
mod bad_input;
mod card_and_stages;
mod card_signing;
mod contract_kit;
mod dependency_faults;
mod dispatch_record;
mod docs_links;
mod docs_truth;
mod failover;
mod finished_tasks;
mod freshness;
mod fuzz_stable;
mod harness;
mod hot_routes;
mod lifecycle;
mod migrations;
mod neighbours;
mod neighbours_store;
mod observability;
mod outbound;
mod postgres_tls;
mod preflight;
mod projection;
mod properties;
mod q_failures;
mod qq_delegation;
mod readiness;
mod reference_upstream;
mod retention;
mod retired_attribution;
mod retired_routes;
mod run_feed_batch;
mod secrets;
mod send_and_get;
mod shutdown_and_tls;
mod simulation;
mod stalled_answer;
mod store_plans;
mod store_statements;
mod storm;
mod streaming;
mod tck_fixes;
mod tenant_data;
mod traces;
mod upstream_pool;
mod upstream_tls;
