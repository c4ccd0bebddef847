//! Liveness and readiness.
//!
//! `/healthz` says the process serves HTTP, and nothing else: liveness never depends on a
//! dependency, so a failover never restarts a replica. `/readyz` says this replica can do its
//! work right now: PostgreSQL takes writes, Redis takes writes, Q answers with a compatible
//! contract version, and, when the profile is enabled, the status migration is applied.
//!
//! "Takes writes", not "answers": a standby, a demoted primary or a server in read-only mode
//! answers every read, and every send would fail there. PostgreSQL is asked
//! `SHOW transaction_read_only` on a pooled connection (a connection that finds its server
//! read-only leaves the pool, with every connection made before it); Redis takes a `SET` of a
//! probe key with a short expiry. Each of the two is still counted ready for
//! `database.unwritable_grace_ms` / `redis.unwritable_grace_ms` (5 s by default) after it last
//! took a write (a store call, a new connection, a check), so a failover shorter than that
//! does not take every replica out of its Service at once; past it, the replica is not ready
//! until a write is taken again. Each check is bounded by
//! [`CHECK_TIMEOUT`] and they run concurrently; the report is reused for [`REPORT_TTL`] so
//! frequent probes (several replicas, several probe kinds) cannot hammer the dependencies.
//! The same checks back `q-a2a-gateway preflight`.
//!
//! Q is a *degrading* dependency when reads may outlive it (`auth.outage_read_grace_seconds`
//! above 0): with Q failing, the replica stays ready (200) and lists `upstream` under
//! `degraded`, because GetTask and ListTasks of committed tasks still answer from the store;
//! writes answer HTTP 503 meanwhile. With no outage grace, Q failing makes the replica not
//! ready, like the other dependencies.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::lease::ObserverLeases;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::store::migrate::STATUS_MIGRATION;
use crate::store::{fault, PgTaskStore};
use crate::upstream::contract::CONTRACT_VERSION;
use crate::upstream::UpstreamRunApi;
use crate::writable::Writable;

/// Longest any one dependency check may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a readiness report is reused.
pub const REPORT_TTL: Duration = Duration::from_secs(1);

/// The outcome of one check: `ok`, and what was seen (never a credential).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    pub detail: String,
}

impl Check {
    fn pass(detail: impl Into<String>) -> Check {
        Check {
            ok: true,
            detail: detail.into(),
        }
    }
    fn fail(detail: impl Into<String>) -> Check {
        Check {
            ok: false,
            detail: detail.into(),
        }
    }
}

async fn bounded<F>(what: &str, check: F) -> Check
where
    F: std::future::Future<Output = Check>,
{
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| Check::fail(format!("{what}: no answer within {CHECK_TIMEOUT:?}")))
}

/// A dependency that takes writes now, or took one at most `grace` ago.
async fn writable<E: std::fmt::Display>(
    what: &str,
    state: &Writable,
    grace: Duration,
    check: impl std::future::Future<Output = Result<(), E>>,
) -> Check {
    let now = bounded(what, async {
        match check.await {
            Ok(()) => Check::pass(format!("{what} takes writes")),
            Err(e) => Check::fail(format!("{what}: {e}")),
        }
    })
    .await;
    if now.ok || !state.within(grace) {
        return now;
    }
    let ago = state.since_confirmed().unwrap_or_default();
    Check::pass(format!(
        "{}; took a write {} ms ago, within the {} ms grace",
        now.detail,
        ago.as_millis(),
        grace.as_millis()
    ))
}

/// PostgreSQL takes writes (a pooled connection's server answers `transaction_read_only =
/// off`), or took one at most `grace` ago.
pub async fn check_database(store: &PgTaskStore, grace: Duration) -> Check {
    writable(
        "PostgreSQL",
        store.writable(),
        grace,
        store.check_writable(),
    )
    .await
}

/// Redis takes a write, or took one at most `grace` ago.
pub async fn check_redis(redis: &ObserverLeases, grace: Duration) -> Check {
    writable("Redis", redis.writable(), grace, redis.check_writable()).await
}

/// The status migration is applied. Not knowing, because the store cannot be reached, is left
/// to the database check and its grace: only a migration seen missing fails this one.
pub async fn check_migration(store: &PgTaskStore) -> Check {
    bounded("PostgreSQL", async {
        match store.migration_applied(STATUS_MIGRATION).await {
            Ok(true) => Check::pass(format!("{STATUS_MIGRATION} applied")),
            Ok(false) => Check::fail(format!("{STATUS_MIGRATION} is not applied")),
            Err(e) if fault::unavailable(&e) => Check::pass(format!(
                "cannot read migrations now ({e}); the database check decides"
            )),
            Err(e) => Check::fail(format!("cannot read migrations: {e}")),
        }
    })
    .await
}

pub async fn check_upstream(upstream: &UpstreamRunApi) -> Check {
    bounded("Q", async {
        match upstream.health().await {
            Ok(h) if h.contract_version == CONTRACT_VERSION => {
                Check::pass(format!("Q contract version {}", h.contract_version))
            }
            Ok(h) => Check::fail(format!(
                "Q speaks contract version {:?}; this gateway needs {CONTRACT_VERSION:?}",
                h.contract_version
            )),
            Err(e) => Check::fail(format!("Q: {e}")),
        }
    })
    .await
}

/// How long PostgreSQL and Redis count as ready after they last took a write
/// (`database.unwritable_grace_ms`, `redis.unwritable_grace_ms`).
#[derive(Debug, Clone, Copy)]
pub struct WriteGraces {
    pub database: Duration,
    pub redis: Duration,
}

/// The readiness answer.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ready: bool,
    /// Failing dependencies the replica serves without (reads only): `upstream`.
    pub degraded: Vec<&'static str>,
    pub checks: BTreeMap<&'static str, Check>,
}

/// Readiness of this replica: the dependencies it checks and the short-lived report cache.
/// Concurrent probes wait for one evaluation.
pub struct Health {
    store: PgTaskStore,
    leases: ObserverLeases,
    upstream: UpstreamRunApi,
    /// The status migration is required only while the profile is enabled.
    profile_enabled: bool,
    /// Whether reads outlive Q (a non-zero outage grace): Q failing only degrades.
    reads_outlive_q: bool,
    /// How long PostgreSQL and Redis count as ready after their last write taken.
    graces: WriteGraces,
    last: Mutex<Option<(Instant, Arc<Report>)>>,
}

impl Health {
    pub fn new(
        store: PgTaskStore,
        leases: ObserverLeases,
        upstream: UpstreamRunApi,
        profile_enabled: bool,
        reads_outlive_q: bool,
        graces: WriteGraces,
    ) -> Self {
        Health {
            store,
            leases,
            upstream,
            profile_enabled,
            reads_outlive_q,
            graces,
            last: Mutex::new(None),
        }
    }

    pub async fn report(&self) -> Arc<Report> {
        let mut last = self.last.lock().await;
        if let Some((at, report)) = last.as_ref() {
            if at.elapsed() < REPORT_TTL {
                return report.clone();
            }
        }
        let report = Arc::new(self.evaluate().await);
        *last = Some((Instant::now(), report.clone()));
        report
    }

    async fn evaluate(&self) -> Report {
        let migration = async {
            if self.profile_enabled {
                check_migration(&self.store).await
            } else {
                Check::pass("not required while the profile is disabled")
            }
        };
        let (database, redis, upstream, migration) = tokio::join!(
            check_database(&self.store, self.graces.database),
            check_redis(&self.leases, self.graces.redis),
            check_upstream(&self.upstream),
            migration,
        );
        let checks = BTreeMap::from([
            ("database", database),
            ("redis", redis),
            ("upstream", upstream),
            ("status_migration", migration),
        ]);
        let (degraded, failing): (Vec<&'static str>, Vec<&'static str>) = checks
            .iter()
            .filter(|(_, c)| !c.ok)
            .map(|(name, _)| *name)
            .partition(|name| *name == "upstream" && self.reads_outlive_q);
        if !failing.is_empty() {
            tracing::warn!(?failing, "not ready");
        } else if !degraded.is_empty() {
            tracing::warn!(
                ?degraded,
                "degraded: Q is failing; reads are served, writes are refused"
            );
        }
        Report {
            ready: failing.is_empty(),
            degraded,
            checks,
        }
    }
}

/// `GET /readyz`: 200 when every check passes, 503 otherwise; the JSON body has each check.
pub async fn readyz(State(health): State<Arc<Health>>) -> Response {
    let report = health.report().await;
    let status = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(report.as_ref().clone())).into_response()
}

/// `GET /healthz`: the process answers HTTP.
pub async fn healthz() -> &'static str {
    "ok"
}
