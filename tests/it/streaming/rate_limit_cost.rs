//! What a rate-limit decision costs on the request path, against the machine's Redis: the
//! per-replica bucket alone, the shared bucket leased in batches (the gateway's design), and
//! one script per request (the design it did not take). Prints the mean per decision, which
//! docs/architecture.md quotes, and asserts that a batch costs less per request than a
//! round trip per request (each by its fastest of several interleaved rounds).

use std::time::{Duration, Instant};

use q_a2a_gateway::auth::{Claims, Principal};
use q_a2a_gateway::config::RedisConfig;
use q_a2a_gateway::http::rate_limit::{batch, PrincipalRateLimit};
use q_a2a_gateway::redis_link::RedisLink;
use q_a2a_gateway::shared_limits::{Grant, SharedLimits};

use crate::support::new_id;
use crate::support::redis::SHARED_REDIS_URL;

/// The defaults: 50 per second, a burst of 100 (so 100 decisions within the burst).
const PER_SECOND: u32 = 50;
const BURST: u32 = 100;

fn principal() -> Principal {
    Claims {
        tenant_id: "t-cost".into(),
        principal_id: new_id(),
        scopes: vec![],
        tenant_features: vec![],
    }
    .into()
}

fn shared() -> SharedLimits {
    let config = RedisConfig {
        url: SHARED_REDIS_URL.into(),
        ..RedisConfig::default()
    };
    SharedLimits::new(
        RedisLink::connect(&config).unwrap(),
        &format!("q-a2a-test:cost-{}", new_id()),
    )
}

/// Mean time of `BURST` admitted decisions of `limit`, after one to warm the connection.
async fn mean_decision(limit: &PrincipalRateLimit) -> Duration {
    limit.check(&principal()).await.unwrap();
    let who = principal();
    let started = Instant::now();
    for _ in 0..BURST {
        limit.check(&who).await.expect("within the burst");
    }
    started.elapsed() / BURST
}

/// Mean time of `BURST` admitted decisions of one fresh principal, each a script of its own.
async fn mean_script(limits: &SharedLimits) -> Duration {
    let who = principal();
    let started = Instant::now();
    for _ in 0..BURST {
        let grant = limits
            .take_tokens(
                "general",
                &who.tenant_id,
                &who.principal_id,
                PER_SECOND,
                BURST,
                1,
            )
            .await
            .unwrap();
        assert_eq!(grant, Grant::Tokens(1));
    }
    started.elapsed() / BURST
}

/// Each design measured [`ROUNDS`] times, interleaved, and compared by its fastest round: the
/// other tests of the binary run beside this one, and a pause of the machine's during one
/// round says nothing of the design.
const ROUNDS: usize = 5;

#[tokio::test]
async fn a_batch_costs_less_per_request_than_a_round_trip_per_request() {
    let local = PrincipalRateLimit::new("general", true, PER_SECOND, BURST, None);
    let local_mean = mean_decision(&local).await;

    let batched = PrincipalRateLimit::new("general", true, PER_SECOND, BURST, Some(shared()));
    let limits = shared();
    limits
        .take_tokens("general", "t", "warm", PER_SECOND, BURST, 1)
        .await
        .unwrap();
    let mut batched_means = Vec::new();
    let mut per_request_means = Vec::new();
    for _ in 0..ROUNDS {
        batched_means.push(mean_decision(&batched).await);
        per_request_means.push(mean_script(&limits).await);
    }
    assert!(!limits.is_degraded());
    let batched_mean = *batched_means.iter().min().unwrap();
    let per_request_mean = *per_request_means.iter().min().unwrap();

    eprintln!(
        "mean decision: per replica {local_mean:?}; shared, batches of {}: {batched_mean:?}; \
         shared, a script per request: {per_request_mean:?} (fastest of {ROUNDS} rounds each: \
         {batched_means:?}, {per_request_means:?})",
        batch(PER_SECOND, BURST)
    );
    assert!(
        batched_mean < per_request_mean,
        "batches of {} cost {batched_mean:?} per request, a script per request {per_request_mean:?}",
        batch(PER_SECOND, BURST)
    );
}
