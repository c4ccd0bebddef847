//! Prometheus metrics, served on their own listener (`metrics_listen`), never through the
//! proxied A2A listener.
//!
//! - `a2a_http_requests_total{route, rpc_method, status, rpc_code}`: every request, by matched
//!   route (`unmatched` otherwise), JSON-RPC method (`""` off the RPC route, `unknown` for a
//!   method the gateway does not know), HTTP status and JSON-RPC outcome (`ok`, the error code,
//!   or `""` when no JSON-RPC answer was produced).
//! - `a2a_http_request_duration_seconds{route, rpc_method}`: latency histogram.
//! - `a2a_upstream_errors_total{op, kind}`: failed calls to Q by operation and
//!   `UpstreamError::kind()` (`refused`, `unreachable`, `ambiguous`).
//! - `a2a_upstream_request_duration_seconds{op, outcome}`: latency histogram of every call to Q,
//!   `outcome` being `ok` or the error's kind; its `_count` is the call count the error ratio
//!   divides by. `run_events` and `run_changes` are long polls (up to 30 s by design).
//! - `a2a_reconciler_backlog`: tasks whose dispatch is `pending` or `unknown`, refreshed every
//!   few seconds from the store.
//! - `a2a_reconciler_passes_total`: passes the reconciler leader on this replica began
//!   (dispatches, cancellations and deadlines, retention): one per `reconciler.interval_ms`
//!   at most, however fast Q's run feed moves (the feed is followed between passes).
//! - `a2a_tasks_dispatch_unknown`: the part of that backlog whose run creation may or may not
//!   have reached Q (`unknown`), refreshed with it.
//! - `a2a_observer_leases{scope="global"}`: observer leases live in Redis across all replicas,
//!   refreshed with the backlog; tenant and principal counts are not exported (one series per
//!   tenant or principal would be unbounded).
//! - `a2a_observer_leases_held`: leases held by this replica's streams, subscriptions and
//!   blocking sends right now.
//! - `a2a_observer_lease_limit{scope}`: the configured bound of each scope (`global`, `tenant`,
//!   `principal`), so saturation is `a2a_observer_leases / a2a_observer_lease_limit`.
//! - `a2a_observer_lease_refusals_total{scope}`: observations refused because a scope was at
//!   its bound (the tenant and principal counts themselves are not exported).
//! - `a2a_observer_lease_renewal_calls_total{outcome}`: Redis calls renewing this replica's
//!   leases (`ok`, `error`): one per round (every third of the lease TTL) and 128 leases held,
//!   whatever the number of streams.
//! - `a2a_observer_leases_lost_total{reason}`: observations ended because their lease was lost:
//!   `missing` (Redis no longer held it: expired, or Redis restarted empty), `unreachable`
//!   (Redis could not confirm it before it would have expired).
//! - `a2a_access_cache_lookups_total{cache, outcome}`: agent access (`agent`) and evidence
//!   grant (`grant`) lookups: `hit` (a cached answer within the freshness bound), `miss` (Q
//!   asked), `stale` (Q down; a read used the last known agent access within the outage
//!   grace, to answer content-free receipts).
//!   The hit ratio is `hit / (hit + miss + stale)`.
//! - `a2a_finished_task_cache_lookups_total{outcome}`: GetTask lookups of the finished tasks
//!   kept in process (`crate::a2a::tasks::finished`): `hit`, `miss` (read from the store),
//!   `other_owner` (a kept task of another principal or agent: -32001).
//! - `a2a_feed_lag{feed}`: changes Q had issued beyond the follower's position at its last
//!   answer (`runs`, `access`); `a2a_feed_position{feed}`: the cursor applied;
//!   `a2a_feed_last_answer_timestamp_seconds{feed}`: when it was
//!   (`time() - …` is the feed's age); `a2a_feed_failures_total{feed}`: failed reads.
//! - `a2a_feed_resets_total{feed, reason}`: a follower lost its place in a feed and started
//!   over at the head (`epoch`: another history, `compacted`: its position fell below the
//!   floor, `head_below`: the head fell below its position, `gap`: cursors out of order).
//! - `a2a_upstream_down`: 1 while this replica counts Q as down (consecutive failures for
//!   lack of Q and no answer for a second: `upstream::Reachability`), else 0.
//! - `a2a_introspections_shed_total{token}`: requests answered 503 because the introspection
//!   pool had no slot for them (`crate::auth::pool`): `known` (a token seen active within
//!   `auth.known_token_seconds`; the whole pool, `auth.max_introspections_in_flight`, was in
//!   use), `stranger` (any other token; the strangers' share,
//!   `auth.stranger_introspections_in_flight`, was in use).
//! - `a2a_unknown_tokens_limited_total`: requests answered 429 `too_many_unknown_tokens`
//!   because their client address spent its bucket of requests with tokens neither cached nor
//!   known (`auth.unknown_token_rate`, `auth.unknown_token_burst`).
//! - `a2a_outbound_refusals_total{calls, scope}`: delegations and card discoveries (`calls`)
//!   answered 429 before anything was written because their tenant had `outbound.tenant_*`
//!   calls in flight (`scope="tenant"`: `tenant_concurrency_limit`) or their principal its
//!   share, `outbound.principal_*` (`scope="principal"`: `principal_concurrency_limit`).
//! - `a2a_runs_observed`: runs this replica's streams and blocking waits follow (one
//!   subscription per run, whatever the number of observers).
//! - `a2a_retention_removed_total{kind}`: rows the reconciler leader's retention pass deleted
//!   (`tasks`, `delegations`) or cleared (`discovered_cards`).
//! - `a2a_card_verifications_total{policy, reason}`: discovered cards checked against their
//!   registration's trusted keys, by trust policy (`prefer`, `require`) and outcome (`verified`
//!   or why not: `card_signature::verify`'s reasons).
//! - `a2a_response_bytes_buffered`: bytes of answers handed to the connections and not yet
//!   taken by their clients (`http::response_budget`); its bound is
//!   `limits.response_buffer_bytes`.
//! - `a2a_response_buffer_refusals_total{scope}`: answers refused with HTTP 503 because the
//!   `connection`'s, the caller's `principal`'s or `tenant`'s share, or the `process`'s budget
//!   of such bytes was full (before the answer was built, for those that reserve).
//! - `a2a_stalled_connections_closed_total`: connections closed because an answer's client
//!   took nothing of it within `limits.write_timeout_seconds` (a closed HTTP/2 window, a
//!   client that stopped reading).
//! - `a2a_shared_limits_degraded`: 1 while Redis is unreachable and the rate limits and
//!   outbound caps hold per replica (`shared_limits`), else 0.
//! - `a2a_store_errors_total{class}`: failed store calls (each attempt), by the SQLSTATE's
//!   class (`25` a read-only server, `57` a server shutting down or starting, `08` a
//!   connection exception, `23` a constraint, ...) or `connection` (the socket broke or
//!   closed), `connect` (no host took a connection), `acquire_timeout`, `other`.
//! - `a2a_store_connections_discarded_total{reason}`: pooled connections that left the pool:
//!   `closed`, `wrong_server` (its server, or a sibling's, refused a write as read-only),
//!   `lost` (the session ended under a call), `max_lifetime` (`database.max_lifetime_seconds`).
//! - `a2a_store_share_refusals_total{scope}`: reads refused because their principal's
//!   (`principal`, `database.principal_share`) or tenant's (`tenant`, `database.tenant_share`)
//!   share of the pool stayed in use for the acquire timeout.
//! - `a2a_store_writable`, `a2a_redis_writable`: 1 while the last thing the replica saw of
//!   PostgreSQL or Redis was a write taken (a store call, a new connection, a readiness
//!   check), 0 once one was refused or could not be made; readiness reads them with
//!   `database.unwritable_grace_ms` and `redis.unwritable_grace_ms`.
//! - `a2a_redis_reconnects_total{reason}`: connections to a single Redis replaced because the
//!   server behind the address refused writes (`READONLY`: a demoted primary), was loading
//!   its data (`LOADING`) or had lost its primary (`MASTERDOWN`).
//! - `a2a_cards_signed_total{kid}`: served cards signed, by signing key (a key switch shows as
//!   one series falling silent and another rising).
//! - `a2a_allocations_total`, `a2a_allocated_bytes_total`: only in the benchmark build
//!   (`--features alloc-count`), every allocation of the process and its bytes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

mod requests;
pub use requests::{RecordRequests, RequestSeries, RouteLabel};

pub const REQUESTS: &str = "a2a_http_requests_total";
pub const DURATION: &str = "a2a_http_request_duration_seconds";
pub const UPSTREAM_ERRORS: &str = "a2a_upstream_errors_total";
pub const UPSTREAM_DURATION: &str = "a2a_upstream_request_duration_seconds";
pub const RECONCILER_BACKLOG: &str = "a2a_reconciler_backlog";
pub const RECONCILER_PASSES: &str = "a2a_reconciler_passes_total";
pub const DISPATCH_UNKNOWN: &str = "a2a_tasks_dispatch_unknown";
pub const LEASES: &str = "a2a_observer_leases";
pub const LEASES_HELD: &str = "a2a_observer_leases_held";
pub const RETIRED_HITS: &str = "a2a_retired_route_hits_total";
pub const LEASE_LIMIT: &str = "a2a_observer_lease_limit";
pub const LEASE_REFUSALS: &str = "a2a_observer_lease_refusals_total";
pub const LEASE_RENEWAL_CALLS: &str = "a2a_observer_lease_renewal_calls_total";
pub const LEASES_LOST: &str = "a2a_observer_leases_lost_total";
pub const ACCESS_LOOKUPS: &str = "a2a_access_cache_lookups_total";
pub const FINISHED_LOOKUPS: &str = "a2a_finished_task_cache_lookups_total";
pub const FEED_LAG: &str = "a2a_feed_lag";
pub const FEED_POSITION: &str = "a2a_feed_position";
pub const FEED_ANSWERED: &str = "a2a_feed_last_answer_timestamp_seconds";
pub const FEED_FAILURES: &str = "a2a_feed_failures_total";
pub const RUN_SUBSCRIBED: &str = "a2a_runs_observed";
pub const RETENTION_REMOVED: &str = "a2a_retention_removed_total";
pub const FEED_RESETS: &str = "a2a_feed_resets_total";
pub const UPSTREAM_DOWN: &str = "a2a_upstream_down";
pub const INTROSPECTIONS_SHED: &str = "a2a_introspections_shed_total";
pub const UNKNOWN_TOKENS_LIMITED: &str = "a2a_unknown_tokens_limited_total";
pub const OUTBOUND_REFUSALS: &str = "a2a_outbound_refusals_total";
pub const CARD_VERIFICATIONS: &str = "a2a_card_verifications_total";
pub const CARDS_SIGNED: &str = "a2a_cards_signed_total";
pub const RESPONSE_BUFFERED: &str = "a2a_response_bytes_buffered";
pub const RESPONSE_BUFFER_REFUSALS: &str = "a2a_response_buffer_refusals_total";
pub const STALLED_CLOSED: &str = "a2a_stalled_connections_closed_total";
pub const SHARED_LIMITS_DEGRADED: &str = "a2a_shared_limits_degraded";
pub const STORE_ERRORS: &str = "a2a_store_errors_total";
pub const STORE_CALLS: &str = "a2a_store_calls_total";
pub const STORE_DISCARDED: &str = "a2a_store_connections_discarded_total";
pub const STORE_SHARE_REFUSALS: &str = "a2a_store_share_refusals_total";
pub const STORE_WRITABLE: &str = "a2a_store_writable";
pub const REDIS_WRITABLE: &str = "a2a_redis_writable";
pub const REDIS_RECONNECTS: &str = "a2a_redis_reconnects_total";

/// How often the backlog gauge is refreshed.
pub const BACKLOG_REFRESH: Duration = Duration::from_secs(2);

/// Latency buckets (seconds): fast refusals up to the 110 s observation window.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// What the RPC route tells the metrics layer about its answer (a response extension).
#[derive(Debug, Clone, Copy, Default)]
pub struct RpcOutcome {
    /// The method, when the envelope named one (`unknown` for a name the gateway lacks).
    pub method: Option<&'static str>,
    /// `None`: success, `Some(code)`: a JSON-RPC error. Absent extension: HTTP refusal.
    pub error_code: Option<i32>,
}

/// Installs the process-wide recorder; call once, before serving.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let recorder = recorder()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))?;
    describe();
    zero_counters();
    Ok(handle)
}

/// Counters of events that may not happen for a long time are exported at 0 from the start,
/// so a dashboard's `rate()` and an alert see the series before the first event.
fn zero_counters() {
    for feed in ["runs", "access"] {
        metrics::counter!(FEED_FAILURES, "feed" => feed).increment(0);
    }
    for kind in ["tasks", "delegations", "discovered_cards"] {
        metrics::counter!(RETENTION_REMOVED, "kind" => kind).increment(0);
    }
    for feed in ["runs", "access"] {
        for reason in ["epoch", "compacted", "head_below", "gap"] {
            metrics::counter!(FEED_RESETS, "feed" => feed, "reason" => reason).increment(0);
        }
    }
    for token in ["known", "stranger"] {
        metrics::counter!(INTROSPECTIONS_SHED, "token" => token).increment(0);
    }
    metrics::counter!(UNKNOWN_TOKENS_LIMITED).increment(0);
    for calls in ["delegations", "discoveries"] {
        for scope in ["tenant", "principal"] {
            metrics::counter!(OUTBOUND_REFUSALS, "calls" => calls, "scope" => scope).increment(0);
        }
    }
    metrics::counter!(RECONCILER_PASSES).increment(0);
    metrics::gauge!(UPSTREAM_DOWN).set(0.0);
    metrics::gauge!(RESPONSE_BUFFERED).increment(0.0);
    for scope in ["connection", "process"] {
        metrics::counter!(RESPONSE_BUFFER_REFUSALS, "scope" => scope).increment(0);
    }
    metrics::counter!(STALLED_CLOSED).increment(0);
    for outcome in ["hit", "miss", "not_kept", "other_owner"] {
        metrics::counter!(FINISHED_LOOKUPS, "outcome" => outcome).increment(0);
    }
    for reason in ["missing", "unreachable"] {
        metrics::counter!(LEASES_LOST, "reason" => reason).increment(0);
    }
    metrics::gauge!(SHARED_LIMITS_DEGRADED).set(0.0);
    for reason in ["closed", "wrong_server", "lost", "max_lifetime"] {
        metrics::counter!(STORE_DISCARDED, "reason" => reason).increment(0);
    }
    for scope in ["tenant", "principal"] {
        metrics::counter!(STORE_SHARE_REFUSALS, "scope" => scope).increment(0);
    }
    for origin in ["request", "background"] {
        for call in ["read", "write", "write_once"] {
            metrics::counter!(STORE_CALLS, "origin" => origin, "call" => call).increment(0);
        }
    }
    for class in ["25", "57", "08", "connection", "connect", "acquire_timeout"] {
        metrics::counter!(STORE_ERRORS, "class" => class).increment(0);
    }
    for reason in ["READONLY", "LOADING", "MASTERDOWN"] {
        metrics::counter!(REDIS_RECONNECTS, "reason" => reason).increment(0);
    }
    for policy in ["prefer", "require"] {
        for reason in crate::card_signature::verify::REASONS {
            metrics::counter!(CARD_VERIFICATIONS, "policy" => policy, "reason" => *reason)
                .increment(0);
        }
    }
}

/// Exports `a2a_cards_signed_total` at 0 for every configured card signing key, so a key's
/// series exists before (and whether or not) it signs.
pub fn card_signing_keys(kids: &[&str]) {
    for kid in kids {
        metrics::counter!(CARDS_SIGNED, "kid" => kid.to_string()).increment(0);
    }
}

/// Every histogram gets the buckets (without them the exporter would render summaries).
fn recorder() -> anyhow::Result<metrics_exporter_prometheus::PrometheusRecorder> {
    Ok(PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| anyhow::anyhow!("metrics buckets: {e}"))?
        .build_recorder())
}

fn describe() {
    metrics::describe_counter!(
        REQUESTS,
        "HTTP requests by route, JSON-RPC method and outcome"
    );
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "HTTP request latency by route and JSON-RPC method"
    );
    metrics::describe_counter!(UPSTREAM_ERRORS, "Failed calls to Q by operation and kind");
    metrics::describe_histogram!(
        UPSTREAM_DURATION,
        metrics::Unit::Seconds,
        "Latency of calls to Q by operation and outcome (ok or the error kind)"
    );
    metrics::describe_gauge!(
        RECONCILER_BACKLOG,
        "Tasks whose dispatch to Q is pending or unknown"
    );
    metrics::describe_counter!(
        RECONCILER_PASSES,
        "Passes the reconciler leader on this replica began (at most one per interval)"
    );
    metrics::describe_gauge!(
        DISPATCH_UNKNOWN,
        "Tasks whose run creation may or may not have reached Q"
    );
    metrics::describe_gauge!(LEASES, "Observer leases live in Redis, by scope");
    metrics::describe_gauge!(LEASES_HELD, "Observer leases held by this replica");
    metrics::describe_gauge!(LEASE_LIMIT, "Configured observer lease bound, by scope");
    metrics::describe_counter!(
        LEASE_REFUSALS,
        "Observations refused at an observer lease bound, by scope"
    );
    metrics::describe_counter!(
        LEASE_RENEWAL_CALLS,
        "Redis calls renewing this replica's observer leases (one per round and 128 leases), by outcome"
    );
    metrics::describe_counter!(
        LEASES_LOST,
        "Observations ended because their lease was lost, by reason (missing, unreachable)"
    );
    metrics::describe_counter!(
        RETENTION_REMOVED,
        "Rows removed by the retention pass, by kind (tasks, delegations, discovered_cards)"
    );
    metrics::describe_counter!(
        CARD_VERIFICATIONS,
        "Discovered cards checked against trusted keys, by trust policy and reason"
    );
    metrics::describe_counter!(CARDS_SIGNED, "Served agent cards signed, by key id");
    metrics::describe_counter!(
        RETIRED_HITS,
        "Calls to the retired routes, by route and how they were attributed"
    );
    metrics::describe_counter!(
        ACCESS_LOOKUPS,
        "Agent access and evidence grant lookups by cache and outcome (hit, miss, stale)"
    );
    metrics::describe_counter!(
        FINISHED_LOOKUPS,
        "GetTask lookups of the finished tasks kept in process, by outcome (hit; miss: a finished task read from the store and kept; not_kept: a task read from the store that could not be kept; other_owner)"
    );
    metrics::describe_gauge!(
        FEED_LAG,
        "Changes Q had issued beyond the follower's position at its last answer, by feed"
    );
    metrics::describe_gauge!(
        FEED_POSITION,
        "The feed cursor this replica has applied, by feed"
    );
    metrics::describe_gauge!(
        FEED_ANSWERED,
        "Unix time of the last answer this replica applied, by feed"
    );
    metrics::describe_counter!(FEED_FAILURES, "Failed reads of Q's change feeds, by feed");
    metrics::describe_counter!(
        FEED_RESETS,
        "Times a follower lost its place in a feed and started over, by feed and reason"
    );
    metrics::describe_gauge!(UPSTREAM_DOWN, "1 while this replica counts Q as down");
    metrics::describe_counter!(
        INTROSPECTIONS_SHED,
        "Requests refused because the introspection pool had no slot for their token, by token (known, stranger)"
    );
    metrics::describe_counter!(
        UNKNOWN_TOKENS_LIMITED,
        "Requests refused with 429 because their client address sent too many tokens neither cached nor known"
    );
    metrics::describe_counter!(
        OUTBOUND_REFUSALS,
        "Outbound calls refused with 429 before anything was written, by calls (delegations, discoveries) and the limit reached (tenant, principal)"
    );
    metrics::describe_gauge!(
        RESPONSE_BUFFERED,
        metrics::Unit::Bytes,
        "Bytes of answers handed to the connections and not yet taken by their clients"
    );
    metrics::describe_counter!(
        RESPONSE_BUFFER_REFUSALS,
        "Answers refused because the response buffer budget was full, by scope"
    );
    metrics::describe_gauge!(
        SHARED_LIMITS_DEGRADED,
        "1 while Redis is unreachable and rate limits and outbound caps hold per replica"
    );
    metrics::describe_counter!(
        STALLED_CLOSED,
        "Connections closed because an answer's client took nothing within the write timeout"
    );
    metrics::describe_counter!(
        STORE_CALLS,
        "Store call attempts given a pooled connection (each one statement and one transaction in the common case), by origin (request, background) and call (read, write, write_once)"
    );
    metrics::describe_counter!(
        STORE_ERRORS,
        "Failed store calls, by SQLSTATE class or connection, connect, acquire_timeout, other"
    );
    metrics::describe_counter!(
        STORE_DISCARDED,
        "PostgreSQL connections taken out of the pool, by reason (closed, wrong_server, lost, max_lifetime)"
    );
    metrics::describe_counter!(
        STORE_SHARE_REFUSALS,
        "Reads refused because their principal's or tenant's share of the store pool stayed in use, by scope"
    );
    metrics::describe_gauge!(
        STORE_WRITABLE,
        "1 while PostgreSQL was last seen taking writes, 0 once it refused one or none could be made"
    );
    metrics::describe_gauge!(
        REDIS_WRITABLE,
        "1 while Redis was last seen taking writes, 0 once it refused one or could not be reached"
    );
    metrics::describe_counter!(
        REDIS_RECONNECTS,
        "Redis connections replaced because the server refused writes or was not serving (READONLY, LOADING, MASTERDOWN)"
    );
    metrics::describe_gauge!(
        RUN_SUBSCRIBED,
        "Runs this replica's streams and blocking waits follow right now"
    );
}

pub fn upstream_error(op: &'static str, kind: &'static str) {
    metrics::counter!(UPSTREAM_ERRORS, "op" => op, "kind" => kind).increment(1);
}

/// One finished call to Q; `outcome` is `ok` or `UpstreamError::kind()`.
pub fn upstream_call(op: &'static str, outcome: &'static str, elapsed: Duration) {
    metrics::histogram!(UPSTREAM_DURATION, "op" => op, "outcome" => outcome)
        .record(elapsed.as_secs_f64());
}

/// The access cache's hit counters, resolved at their first use: every read hits one cache
/// or both, and the recorder's lookup of a counter allocates on every call. Misses and stale
/// answers are rare and resolve theirs per call ([`access_lookup`]).
#[derive(Default)]
pub struct AccessHits(std::sync::OnceLock<[metrics::Counter; 2]>);

impl AccessHits {
    /// One access lookup (`cache`: `agent` or `grant`) and how it was answered: `hit`
    /// (cached, vouched for by the access feed), `miss` (asked Q) or `stale` (Q unreachable, a
    /// read served from the last known answer within the outage grace).
    pub fn record(&self, cache: &'static str, outcome: &'static str) {
        let at = match (cache, outcome) {
            ("agent", "hit") => 0,
            ("grant", "hit") => 1,
            _ => return access_lookup(cache, outcome),
        };
        self.0.get_or_init(|| {
            [
                metrics::counter!(ACCESS_LOOKUPS, "cache" => "agent", "outcome" => "hit"),
                metrics::counter!(ACCESS_LOOKUPS, "cache" => "grant", "outcome" => "hit"),
            ]
        })[at]
            .increment(1);
    }
}

/// The bytes-buffered gauge of one response budget, resolved at its first use (every answer
/// moves it twice).
#[derive(Debug, Default)]
pub struct BufferedGauge(std::sync::OnceLock<metrics::Gauge>);

impl BufferedGauge {
    pub fn get(&self) -> &metrics::Gauge {
        self.0.get_or_init(|| metrics::gauge!(RESPONSE_BUFFERED))
    }
}

/// A rare access lookup outcome (`miss`, `stale`), its counter resolved per call; hits go
/// through [`AccessHits`].
fn access_lookup(cache: &'static str, outcome: &'static str) {
    metrics::counter!(ACCESS_LOOKUPS, "cache" => cache, "outcome" => outcome).increment(1);
}

/// A GetTask lookup of the finished tasks kept in process and its `outcome`.
pub fn finished_task_lookup(outcome: &'static str) {
    // The hit is on GetTask's fast path: its key is static, not a label list per call.
    let counter = match outcome {
        "hit" => metrics::counter!(FINISHED_LOOKUPS, "outcome" => "hit"),
        _ => metrics::counter!(FINISHED_LOOKUPS, "outcome" => outcome),
    };
    counter.increment(1);
}

/// A follower applied an answer of `feed` (`runs`, `access`) up to `position`, Q's newest
/// cursor being `head`.
pub fn feed_answer(feed: &'static str, position: u64, head: u64) {
    metrics::gauge!(FEED_POSITION, "feed" => feed).set(position as f64);
    metrics::gauge!(FEED_LAG, "feed" => feed).set(head.saturating_sub(position) as f64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!(FEED_ANSWERED, "feed" => feed).set(now);
}

/// A read of `feed` failed.
pub fn feed_failure(feed: &'static str) {
    metrics::counter!(FEED_FAILURES, "feed" => feed).increment(1);
}

/// A follower of `feed` lost its place and started over at the head.
pub fn feed_reset(feed: &'static str, reason: &'static str) {
    metrics::counter!(FEED_RESETS, "feed" => feed, "reason" => reason).increment(1);
}

/// This replica counts Q as down (or up again).
pub fn upstream_down(down: bool) {
    metrics::gauge!(UPSTREAM_DOWN).set(if down { 1.0 } else { 0.0 });
}

/// A request refused because the introspection pool had no slot for its `token` (`known` or
/// `stranger`).
pub fn introspection_shed(token: &'static str) {
    metrics::counter!(INTROSPECTIONS_SHED, "token" => token).increment(1);
}

/// A request refused because its client address sent too many unknown tokens.
pub fn unknown_tokens_limited() {
    metrics::counter!(UNKNOWN_TOKENS_LIMITED).increment(1);
}

/// An outbound call of `calls` refused because its tenant's cap or its principal's share
/// (`scope`) was reached.
pub fn outbound_refused(calls: &'static str, scope: &'static str) {
    metrics::counter!(OUTBOUND_REFUSALS, "calls" => calls, "scope" => scope).increment(1);
}

/// Runs observed by this replica's streams and blocking waits right now.
pub fn run_subscribers(runs: usize) {
    metrics::gauge!(RUN_SUBSCRIBED).set(runs as f64);
}

/// An answer refused because the `scope` budget of unsent answers was full.
pub fn response_buffer_refused(scope: &'static str) {
    metrics::counter!(RESPONSE_BUFFER_REFUSALS, "scope" => scope).increment(1);
}

/// The deployment-wide limits fell back to per-replica limits (or came back).
pub fn shared_limits_degraded(degraded: bool) {
    metrics::gauge!(SHARED_LIMITS_DEGRADED).set(if degraded { 1.0 } else { 0.0 });
}

/// A connection closed because an answer on it made no progress within the write timeout.
pub fn stalled_connection_closed() {
    metrics::counter!(STALLED_CLOSED).increment(1);
}

/// A store call's attempt got its connection: `request` when a request's own future makes it
/// (it runs within [`crate::client_address::scope`]), `background` otherwise.
pub fn store_call(call: &'static str) {
    let origin = if crate::client_address::peer().is_some() {
        "request"
    } else {
        "background"
    };
    metrics::counter!(STORE_CALLS, "origin" => origin, "call" => call).increment(1);
}

/// A store call failed; `class` is [`crate::store::fault::class`]'s.
pub fn store_error(class: String) {
    metrics::counter!(STORE_ERRORS, "class" => class).increment(1);
}

/// A pooled PostgreSQL connection left the pool for `reason`.
pub fn store_connection_discarded(reason: &'static str) {
    metrics::counter!(STORE_DISCARDED, "reason" => reason).increment(1);
}

/// A read refused because its `scope`'s share of the store pool stayed in use.
pub fn store_share_refused(scope: &'static str) {
    metrics::counter!(STORE_SHARE_REFUSALS, "scope" => scope).increment(1);
}

/// The single Redis connection was replaced after the server answered `reason`.
pub fn redis_reconnect(reason: &'static str) {
    metrics::counter!(REDIS_RECONNECTS, "reason" => reason).increment(1);
}

/// An observation refused because `scope` was at its bound.
pub fn lease_refused(scope: &'static str) {
    metrics::counter!(LEASE_REFUSALS, "scope" => scope).increment(1);
}

/// One call renewing a batch of this replica's leases, `ok` or not.
pub fn lease_renewal_call(ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(LEASE_RENEWAL_CALLS, "outcome" => outcome).increment(1);
}

/// Observations ended because their leases were lost: `missing` (Redis no longer held them),
/// `unreachable` (Redis could not confirm them before they expired).
pub fn leases_lost(reason: &'static str, leases: usize) {
    metrics::counter!(LEASES_LOST, "reason" => reason).increment(leases as u64);
}

/// The reconciler leader began a pass.
pub fn reconciler_pass() {
    metrics::counter!(RECONCILER_PASSES).increment(1);
}

/// Rows of `kind` the retention pass removed.
pub fn retention_removed(kind: &'static str, rows: u64) {
    metrics::counter!(RETENTION_REMOVED, "kind" => kind).increment(rows);
}

/// The configured lease bounds; constant for the life of the process.
pub fn lease_limits(global: u32, tenant: u32, principal: u32) {
    for (scope, bound) in [
        ("global", global),
        ("tenant", tenant),
        ("principal", principal),
    ] {
        metrics::gauge!(LEASE_LIMIT, "scope" => scope).set(f64::from(bound));
    }
}

/// Where the benchmark build's counting allocator reads its totals (allocations, bytes); unset in
/// a shipped build, which exports neither counter.
static ALLOCATION_TOTALS: std::sync::OnceLock<fn() -> (u64, u64)> = std::sync::OnceLock::new();

/// Exports `a2a_allocations_total` and `a2a_allocated_bytes_total` from `totals` at every scrape
/// (the binary's `alloc_count`, built with `--features alloc-count`).
pub fn count_allocations_with(totals: fn() -> (u64, u64)) {
    let _ = ALLOCATION_TOTALS.set(totals);
}

/// Serves `GET /metrics` on its own listener until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = Arc::new(handle);
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                handle.run_upkeep();
                if let Some((allocations, bytes)) = ALLOCATION_TOTALS.get().map(|totals| totals()) {
                    // Only the benchmark build has these, so they are not among the constants
                    // above (whose every name a shipped build exports).
                    metrics::counter!("a2a_allocations_total").absolute(allocations);
                    metrics::counter!("a2a_allocated_bytes_total").absolute(bytes);
                }
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    handle.render(),
                )
                    .into_response()
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the metrics listener (port 0 picks a free port).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the metrics listener {addr}: {e}"))
}

#[cfg(test)]
mod tests;
