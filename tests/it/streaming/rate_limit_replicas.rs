//! The per-principal rate limit holds for the deployment, not per replica: three replicas
//! behind one Redis, one principal sending at three times its rate through all of them, is
//! admitted at its rate (±10 % over 10 s). With Redis stopped each replica still limits, on
//! its own (the same rate and burst per replica), says so once in its log and in
//! `a2a_shared_limits_degraded`, and goes back to the shared bucket once Redis returns.

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::support::gateway::Replica;
use crate::support::metrics::metric;
use crate::support::redis::PrivateRedis;
use crate::support::{new_id, Agent, Gateway, GatewayOptions};

const PER_SECOND: u32 = 20;
const BURST: u32 = 20;
const TOLERANCE: f64 = 0.10;
const DEGRADED_LOG: &str = "Redis unreachable: rate limits and outbound caps hold per replica";
const RECOVERED_LOG: &str = "Redis reachable again";

/// Sends GetTask requests at `per_second` for `duration`, round robin over `agents`; returns
/// the status of each, by agent.
async fn paced(agents: &[Agent], per_second: u32, duration: Duration) -> Vec<Vec<u16>> {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(per_second)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let total = (f64::from(per_second) * duration.as_secs_f64()).round() as usize;
    let mut sent = Vec::with_capacity(total);
    for i in 0..total {
        tick.tick().await;
        let which = i % agents.len();
        let agent = agents[which].clone();
        sent.push(tokio::spawn(async move {
            (which, agent.get_task(&new_id()).await.status)
        }));
    }
    let mut statuses = vec![Vec::new(); agents.len()];
    for request in sent {
        let (which, status) = request.await.unwrap();
        assert!(
            status == 200 || status == 429,
            "an answer neither admitted nor limited: {status}"
        );
        statuses[which].push(status);
    }
    statuses
}

fn admitted(statuses: &[u16]) -> usize {
    statuses.iter().filter(|s| **s == 200).count()
}

fn within(got: usize, expected: f64) -> bool {
    (got as f64 - expected).abs() <= TOLERANCE * expected
}

/// A replica leases a tenth of a second's tokens at a time (docs/architecture.md, "Limits that
/// hold across replicas").
const BATCH: u32 = PER_SECOND / 10;

/// The most a burst sent through the three replicas over `elapsed` may be admitted, as the docs
/// state it: the burst, what the bucket refilled meanwhile, and one batch per replica let
/// through ahead of the bucket. Nothing else is tolerated.
fn burst_bound(elapsed: Duration) -> usize {
    let refilled = (f64::from(PER_SECOND) * elapsed.as_secs_f64()).ceil() as u32;
    (BURST + refilled + 3 * BATCH) as usize
}

fn degraded(metrics: &str) -> Option<f64> {
    metric(metrics, "a2a_shared_limits_degraded", &[])
}

#[tokio::test]
async fn one_principal_through_three_replicas_is_admitted_at_its_rate() {
    let redis = PrivateRedis::start().await;
    let port = redis.port;
    let url = redis.url();
    let options = GatewayOptions::with_env(&[
        ("Q_A2A_REDIS_URL", &url),
        ("Q_A2A_RATE_LIMIT_ENABLED", "true"),
        ("Q_A2A_RATE_LIMIT_PER_SECOND", &PER_SECOND.to_string()),
        ("Q_A2A_RATE_LIMIT_BURST", &BURST.to_string()),
        ("Q_A2A_RECONCILER_ENABLED", "false"),
    ]);
    let gw = Gateway::start_with(options.clone()).await;
    let replicas: Vec<Replica> = vec![
        gw.start_replica(&options).await,
        gw.start_replica(&options).await,
    ];
    let agents: Vec<Agent> = std::iter::once(gw.caller("tok-alice"))
        .chain(replicas.iter().map(|r| r.caller("tok-alice")))
        .map(|c| c.agent("ag-writer"))
        .collect();

    // The burst first, whichever replica spends it: then only the rate is left. At most the
    // burst, the refill while it is spent and a batch per replica; at least the burst less the
    // batches the two other replicas may hold unspent when one is refused.
    let mut spent = 0;
    let started = Instant::now();
    for i in 0..(3 * BURST) as usize {
        if agents[i % 3].get_task(&new_id()).await.status == 429 {
            break;
        }
        spent += 1;
    }
    let bound = burst_bound(started.elapsed());
    eprintln!("the burst: {spent} admitted (bound {bound})");
    assert!(
        spent <= bound && spent >= (BURST - 2 * BATCH) as usize,
        "the three replicas spent {spent} of one burst of {BURST} (at most {bound})"
    );

    // Three times the rate, through all three, for 10 s.
    let period = Duration::from_secs(10);
    let statuses = paced(&agents, 3 * PER_SECOND, period).await;
    let total: usize = statuses.iter().map(|s| admitted(s)).sum();
    let expected = f64::from(PER_SECOND) * period.as_secs_f64();
    let by_replica: Vec<usize> = statuses.iter().map(|s| admitted(s)).collect();
    eprintln!("admitted {total} over {period:?} (expected {expected}): {by_replica:?}");
    assert!(
        within(total, expected),
        "admitted {total} over {period:?}, expected {expected} ± {}%",
        TOLERANCE * 100.0
    );
    // Which replica admits is whichever asks the bucket first after a token came: not
    // balanced, and not meant to be; what each received is in `statuses`.
    for (i, answers) in statuses.iter().enumerate() {
        assert_eq!(
            answers.len(),
            (3 * PER_SECOND * 10 / 3) as usize,
            "replica {i}"
        );
    }
    assert_eq!(degraded(&gw.metrics().await), Some(0.0));

    // Redis stopped: each replica limits on its own, at three times the rate each.
    drop(redis);
    let period = Duration::from_secs(3);
    let mut each = Vec::new();
    for agent in &agents {
        let agent = agent.clone();
        each.push(tokio::spawn(async move {
            paced(&[agent], 3 * PER_SECOND, period).await.remove(0)
        }));
    }
    for (i, statuses) in futures_util::future::join_all(each)
        .await
        .into_iter()
        .enumerate()
    {
        let statuses = statuses.unwrap();
        let got = admitted(&statuses);
        // The first decision of each replica finds Redis gone; from then on its own bucket.
        let expected = f64::from(BURST) + f64::from(PER_SECOND) * period.as_secs_f64();
        eprintln!("without Redis, replica {i} admitted {got} (expected {expected})");
        assert!(
            statuses.contains(&429),
            "replica {i} stopped limiting: {statuses:?}"
        );
        assert!(
            within(got, expected),
            "replica {i} admitted {got} of {} without Redis, expected {expected} ± {}%",
            statuses.len(),
            TOLERANCE * 100.0
        );
    }
    let logs: Vec<String> = std::iter::once(gw.log_text())
        .chain(replicas.iter().map(Replica::log_text))
        .collect();
    let scrapes = [
        gw.metrics().await,
        replicas[0].metrics().await,
        replicas[1].metrics().await,
    ];
    for (i, (log, scrape)) in logs.iter().zip(&scrapes).enumerate() {
        assert_eq!(degraded(scrape), Some(1.0), "replica {i}");
        assert_eq!(
            log.matches(DEGRADED_LOG).count(),
            1,
            "replica {i} logs the degradation once, not per request"
        );
    }

    // Redis back (empty, on the same port): the shared buckets again.
    let _back = PrivateRedis::start_on(port).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let scrapes = [
            gw.metrics().await,
            replicas[0].metrics().await,
            replicas[1].metrics().await,
        ];
        if scrapes.iter().all(|s| degraded(s) == Some(0.0)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still degraded 10 s after Redis returned"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (i, log) in std::iter::once(gw.log_text())
        .chain(replicas.iter().map(Replica::log_text))
        .enumerate()
    {
        assert_eq!(log.matches(RECOVERED_LOG).count(), 1, "replica {i}");
    }
    // One bucket again: a burst through all three replicas is one burst (the bound above).
    let mut admitted_again = 0;
    let started = Instant::now();
    for i in 0..(3 * BURST) as usize {
        if agents[i % 3].get_task(&new_id()).await.status == 200 {
            admitted_again += 1;
        }
    }
    let bound = burst_bound(started.elapsed());
    eprintln!("after Redis returned: {admitted_again} admitted (bound {bound})");
    assert!(
        admitted_again <= bound,
        "{admitted_again} of {} admitted at once after Redis returned (at most {bound})",
        3 * BURST
    );
}
