//! Neighbours: what one caller's traffic may take from another's on a shared replica. A flood
//! of made-up tokens against the introspection pool (known callers keep their reads, open
//! streams and re-checks; strangers are shed at their share) and against the per-address
//! limit on unknown tokens (one address is refused with 429, another is not; a forwarded
//! address counts only from a trusted proxy); stalled readers against the response budget
//! (one tenant's hold at most its principals' and its own shares; another tenant's large
//! answers are still served, and a page is cut to what is left of its caller's share).
//!
//! `Q_A2A_TEST_GATEWAY_BIN` (with its configuration file in `Q_A2A_TEST_GATEWAY_CONFIG`) runs
//! these tests against another build, to see what they catch in it.

use crate::support::GatewayOptions;

mod introspection;
mod response_budget;

/// The options of a gateway of these tests: this build's, or the one
/// `Q_A2A_TEST_GATEWAY_BIN` names, with `env` on top.
fn options(env: &[(&str, &str)]) -> GatewayOptions {
    GatewayOptions::with_env(env).under_test()
}
