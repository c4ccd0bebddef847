//! The top of the crate: builds every service once from the configuration, owns the route
//! table (the only module that knows every handler), and runs the background tasks. Nothing
//! below imports this module.
//!
//! Layers, from the top down (see docs/architecture.md):
//! - wiring: this module, `server` (listener, connections, shutdown), `main`;
//! - route handlers: `a2a::card`, `a2a::rpc` (+ `a2a::observe` for streams), `outbound::*`,
//!   `health`, `http::retired`; each takes the narrow state its routes need;
//! - stages and services: `http::authorize` (the one authorisation stage), `a2a::tasks`,
//!   `dispatch`, `reconciler`;
//! - ports: `store` (PostgreSQL), `upstream` (Q), `lease` (Redis); plus `config`, `error`,
//!   `metrics`.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use hyper::body::Body as HttpBody;
use tokio::sync::watch;
use tower::{BoxError, Service, ServiceBuilder};
use tower_http::trace::TraceLayer;

use crate::a2a::caller::AgentAccess;
use crate::a2a::cursor::CursorCodec;
use crate::a2a::tasks::{FinishedSettings, TaskPorts, TaskService, TaskSettings};
use crate::a2a::{card, card_keys, rpc, ProfileRoutes};
use crate::access::{AccessCache, AccessSettings};
use crate::auth::{AuthSettings, Authenticator, CacheBounds, PoolBounds};
use crate::card_signature::CardSigner;
use crate::changes::hub::RunHub;
use crate::changes::{FollowSettings, Followers};
use crate::client_address::TrustedProxies;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::error::HttpError;
use crate::health::{self, Health, WriteGraces};
use crate::http::around::AroundLayer;
use crate::http::authorize::Authorizer;
use crate::http::profile_gate::{self, ProfileEnabled};
use crate::http::rate_limit::{PrincipalRateLimit, FORGET_INTERVAL};
use crate::http::request_id::{RequestIds, REQUEST_ID};
use crate::http::retired::{self, RetiredRoutes};
use crate::http::trace_context;
use crate::lease::ObserverLeases;
use crate::outbound::{delegation, registrations, OutboundRoutes, OutboundSettings};
use crate::reconciler::{Reconciler, ReconcilerSettings, RetentionSettings};
use crate::server::ConnectionLimits;
use crate::shared_limits::SharedLimits;
use crate::store::migrate::STATUS_MIGRATION;
use crate::store::outbound::PgOutboundStore;
use crate::store::retired::PgRetiredHits;
use crate::store::PgTaskStore;
use crate::upstream::UpstreamRunApi;
use gateway::{Gateway, HotHandlers, CARD_ROUTE, RPC_ROUTE, RPC_ROUTE_SLASH};

mod gateway;

/// The retention of each kind of row; 0 in the configuration keeps it.
fn retention_settings(config: &Config) -> RetentionSettings {
    let age = |seconds: u64| (seconds > 0).then(|| Duration::from_secs(seconds));
    let r = &config.retention;
    // An admission statement runs at most the statement timeout (unbounded when it is off):
    // a tombstone stands that long, and 5 s more, before its task goes.
    let statement = config.database.statement_timeout_ms;
    RetentionSettings {
        tasks: age(r.tasks_seconds),
        delegations: age(r.delegations_seconds),
        discovered_cards: age(r.discovered_cards_seconds),
        batch_size: r.batch_size,
        tombstone_settle: if statement == 0 {
            Duration::from_secs(60)
        } else {
            Duration::from_millis(statement) + Duration::from_secs(5)
        },
    }
}

/// The access caches' settings (the freshness rule's bounds, `crate::access`).
pub fn access_settings(config: &Config) -> AccessSettings {
    let auth = &config.auth;
    AccessSettings {
        feed_trust: Duration::from_millis(auth.access_feed_trust_ms),
        direct_ttl: Duration::from_millis(auth.access_direct_ttl_ms),
        max_age: Duration::from_millis(auth.access_cache_max_age_ms),
        outage_grace: Duration::from_secs(auth.outage_read_grace_seconds),
        capacity: auth.access_cache_capacity,
    }
}

/// The rollout gate: an enabled profile is never served on a database without the status
/// migration.
pub struct RolloutCheck {
    store: PgTaskStore,
    profile_enabled: bool,
}

impl RolloutCheck {
    /// `Ok(true)` when checked, the refusal when the migration is missing. A database that
    /// cannot be reached now (a failover, a restart) is `Ok(false)`: the replica serves, not
    /// ready, and [`RolloutCheck::confirm`] checks again until it can, rather than exiting into
    /// a restart loop while the database fails over.
    pub async fn check(&self) -> anyhow::Result<bool> {
        if !self.profile_enabled {
            return Ok(true);
        }
        match self.store.migration_applied(STATUS_MIGRATION).await {
            Ok(true) => Ok(true),
            Ok(false) => anyhow::bail!(
                "A2A_SERVER_PROFILE_ENABLED=true but migration {STATUS_MIGRATION} is not applied; run `q-a2a-gateway migrate` first"
            ),
            Err(e) if crate::store::fault::unavailable(&e) => {
                tracing::warn!(
                    error = %e,
                    "cannot check migrations now: serving, not ready until PostgreSQL answers"
                );
                Ok(false)
            }
            Err(e) => Err(anyhow::anyhow!("cannot check migrations: {e}")),
        }
    }

    /// [`RolloutCheck::check`] again, once a second, until the database answers: `Ok` once
    /// the status migration is found applied, the refusal otherwise (the caller stops
    /// serving).
    pub async fn confirm(&self) -> anyhow::Result<()> {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if self.check().await? {
                tracing::info!("migrations checked: {STATUS_MIGRATION} applied");
                return Ok(());
            }
        }
    }
}

/// The gateway's services, each built once with the narrow handles and typed settings it needs.
pub struct App {
    profile_enabled: bool,
    /// Serve the card signing public keys (`card_signing.publish_keys`).
    publish_card_keys: bool,
    store: PgTaskStore,
    leases: ObserverLeases,
    authorizer: Arc<Authorizer>,
    profile: Arc<ProfileRoutes>,
    outbound: Arc<OutboundRoutes>,
    health: Arc<Health>,
    retired: Arc<RetiredRoutes>,
    /// `None` when the reconciler is disabled on this replica.
    reconciler: Option<Arc<Reconciler>>,
    /// Turns true when the gateway drains for shutdown: open observations end.
    drain: watch::Sender<bool>,
    /// Q's change feeds as this replica follows them.
    followers: Arc<Followers>,
}

impl App {
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        if config.upstream.service_token.is_empty() {
            // Q refuses every call without it: better no replica than one that answers 503s.
            anyhow::bail!(
                "upstream.service_token (Q_A2A_UPSTREAM_SERVICE_TOKEN) is empty: the gateway cannot call Q without its service credential"
            );
        }
        let store = PgTaskStore::connect(&config.database)?;
        let upstream = UpstreamRunApi::new(&config.upstream)?;
        let leases = ObserverLeases::new(&config.redis, config.observers.clone())?;
        let auth = &config.auth;
        let outage_grace = Duration::from_secs(auth.outage_read_grace_seconds);
        let access = access_settings(config);
        let followers = Followers::new(
            upstream.clone(),
            RunHub::new(),
            AccessCache::new(upstream.clone(), access),
            FollowSettings {
                long_poll: Duration::from_millis(auth.feed_long_poll_ms),
                trust: access.feed_trust,
            },
        );
        let token_ttl = Duration::from_millis(auth.cache_ttl_ms);
        let authenticator = Arc::new(Authenticator::new(
            upstream.clone(),
            AuthSettings {
                active: CacheBounds {
                    ttl: token_ttl,
                    capacity: auth.cache_capacity,
                },
                inactive: CacheBounds {
                    ttl: Duration::from_millis(auth.negative_cache_ttl_ms),
                    capacity: auth.negative_cache_capacity,
                },
                outage_grace,
                pool: PoolBounds {
                    max_in_flight: auth.max_introspections_in_flight,
                    stranger_in_flight: auth.stranger_introspections_in_flight,
                    known_for: Duration::from_secs(auth.known_token_seconds),
                },
                unknown_token_rate: auth.unknown_token_rate,
                unknown_token_burst: auth.unknown_token_burst,
                trusted_proxies: TrustedProxies::new(auth.trusted_proxy_nets()?),
            },
        ));
        // The rate limits and outbound caps hold for the deployment through the leases' Redis.
        let shared = SharedLimits::new(leases.link().clone(), &config.redis.key_prefix);
        let authorizer = Arc::new(Authorizer::new(
            authenticator.clone(),
            PrincipalRateLimit::new(
                "general",
                config.rate_limit.enabled,
                config.rate_limit.per_second,
                config.rate_limit.burst,
                Some(shared.clone()),
            ),
            PrincipalRateLimit::new(
                "cancellation",
                config.rate_limit.enabled,
                config.rate_limit.cancel_per_second,
                config.rate_limit.cancel_burst,
                Some(shared.clone()),
            ),
        ));
        let dispatcher = Dispatcher::new(
            store.clone(),
            upstream.clone(),
            config.upstream.execution_timeout_seconds,
            Duration::from_millis(config.upstream.request_timeout_ms),
        );
        let cursors = cursor_codec(config);
        let (drain, draining) = watch::channel(false);
        let tasks = Arc::new(TaskService::new(
            TaskPorts {
                store: store.clone(),
                upstream: upstream.clone(),
                leases: leases.clone(),
                dispatcher: dispatcher.clone(),
                followers: followers.clone(),
                authenticator,
            },
            cursors.clone(),
            TaskSettings {
                limits: config.limits.clone(),
                observation_window: config.observation_window(),
                keepalive: Duration::from_millis(config.observers.keepalive_ms),
                // Half the token bound, accepting answers at most that old: a revoked token
                // ends an observation within the bound.
                token_recheck: (token_ttl / 2).max(Duration::from_millis(50)),
                finished: FinishedSettings {
                    ttl: Duration::from_millis(config.task_cache.ttl_ms),
                    capacity_bytes: config.task_cache.capacity_bytes,
                    retention: retention_settings(config).tasks,
                },
            },
            draining,
        ));
        let card_signer = CardSigner::from_config(&config.card_signing)
            .map_err(|e| anyhow::anyhow!("card signing keys: {e}"))?;
        match card_signer.keys() {
            Some(keys) => {
                crate::metrics::card_signing_keys(&keys.kids());
                tracing::info!(
                    active = keys.active().kid(),
                    alg = keys.active().algorithm().jws_name(),
                    kids = ?keys.kids(),
                    "served agent cards are signed"
                )
            }
            None => tracing::info!("served agent cards are not signed (no card_signing.keys_dir)"),
        }
        let profile = Arc::new(ProfileRoutes {
            authorizer: authorizer.clone(),
            agents: AgentAccess::new(followers.access.clone()),
            tasks,
            public_base: config.public_base().to_string(),
            max_body_bytes: config.limits.max_body_bytes,
            served_cards: Default::default(),
            card_signer,
        });
        let outbound = Arc::new(OutboundRoutes::new(
            &config.outbound,
            authorizer.clone(),
            PgOutboundStore::new(store.pool().clone()),
            OutboundSettings {
                public_base: config.public_base().to_string(),
                max_body_bytes: config.limits.max_body_bytes,
                max_text_chars: config.limits.max_text_chars,
                delegation_wait: Duration::from_millis(config.outbound.delegation_wait_ms),
                poll_interval: Duration::from_millis(config.outbound.poll_interval_ms),
                max_stored_result_bytes: config.outbound.max_stored_result_bytes,
                max_registrations: config.outbound.max_registrations_per_tenant,
            },
            Some(shared),
            cursors,
        )?);
        let health = Arc::new(Health::new(
            store.clone(),
            leases.clone(),
            upstream.clone(),
            config.profile_enabled,
            !outage_grace.is_zero(),
            WriteGraces {
                database: Duration::from_millis(config.database.unwritable_grace_ms),
                redis: Duration::from_millis(config.redis.unwritable_grace_ms),
            },
        ));
        let reconciler = config.reconciler.enabled.then(|| {
            Arc::new(Reconciler::new(
                store.clone(),
                upstream.clone(),
                dispatcher,
                ReconcilerSettings {
                    interval: Duration::from_millis(config.reconciler.interval_ms),
                    grace: Duration::from_millis(config.reconciler.grace_ms),
                    batch_size: config.reconciler.batch_size,
                    execution_timeout: chrono::Duration::seconds(
                        config.upstream.execution_timeout_seconds as i64,
                    ),
                    retention: retention_settings(config),
                    max_result_bytes: config.limits.max_result_bytes,
                },
            ))
        });
        let retired = Arc::new(RetiredRoutes::new(
            authorizer.clone(),
            PgRetiredHits::new(store.pool().clone()),
        ));
        Ok(App {
            retired,
            profile_enabled: config.profile_enabled,
            publish_card_keys: config.card_signing.publish_keys,
            store,
            leases,
            authorizer,
            profile,
            outbound,
            health,
            reconciler,
            drain,
            followers,
        })
    }

    /// Refuses to serve an enabled profile on a database without the status migration
    /// ([`RolloutCheck::check`]).
    pub async fn check_rollout(&self) -> anyhow::Result<bool> {
        self.rollout().check().await
    }

    /// The rollout gate, on its own: what checks it again while the replica serves.
    pub fn rollout(&self) -> RolloutCheck {
        RolloutCheck {
            store: self.store.clone(),
            profile_enabled: self.profile_enabled,
        }
    }

    /// The route table and the stack around it: the service the server runs.
    pub fn router(
        &self,
    ) -> impl Service<
        Request,
        Response = Response<
            impl HttpBody<Data = Bytes, Error = impl Into<BoxError>> + Send + 'static,
        >,
        Error = Infallible,
        Future = impl Future + Send + 'static,
    > + Clone
           + Send
           + 'static {
        // The hosted profile: the gate is attached to these routes and nothing else.
        // With the profile enabled, the gateway serves these routes' GET and POST requests
        // ahead of the router (`gateway`); the router answers the rest of them.
        let mut profile = Router::new()
            .route(CARD_ROUTE, get(card::serve))
            .route(RPC_ROUTE, post(rpc::serve))
            // Behind the same gate.
            .route(RPC_ROUTE_SLASH, post(rpc::serve));
        if self.publish_card_keys {
            // Public keys, unauthenticated: only when the operator asked for it.
            profile = profile.route(card_keys::JWKS_PATH, get(card_keys::serve));
        }
        let profile = profile.with_state(self.profile.clone());
        // The gate is fixed at start-up: an enabled profile has no layer to pass through (a
        // middleware layer costs each request a clone of its boxed inner service and a boxed
        // future).
        let profile = if self.profile_enabled {
            profile
        } else {
            profile.layer(axum::middleware::from_fn_with_state(
                ProfileEnabled(false),
                profile_gate::gate,
            ))
        };
        // Outbound management and delegation: the same authorisation stage, not behind the
        // profile gate (docs/outbound.md).
        let outbound = Router::new()
            .route(
                "/v1/a2a/agents",
                get(registrations::list).post(registrations::create),
            )
            .route(
                "/v1/a2a/agents/{agent_id}",
                get(registrations::get)
                    .patch(registrations::update)
                    .delete(registrations::delete),
            )
            .route(
                "/v1/a2a/agents/{agent_id}/discover",
                post(registrations::discover),
            )
            .route("/v1/a2a/tasks", post(delegation::delegate))
            .with_state(self.outbound.clone());
        let probes = Router::new()
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz))
            .with_state(self.health.clone());
        let routes = Router::new()
            .merge(profile)
            .merge(outbound)
            .merge(probes)
            .merge(retired::router(self.retired.clone()))
            .fallback(|| async { HttpError::NotFound.into_response() });

        // Outermost first: a request passes these top to bottom before reaching a route.
        let layers = ServiceBuilder::new()
            // Every request gets an id (or keeps the proxy's), echoed on the response.
            .layer(AroundLayer(RequestIds))
            // One span per request: id, method, path; the stages add tenant, principal,
            // rpc_method. Never headers: they carry credentials.
            .layer(TraceLayer::new_for_http().make_span_with(request_span))
            // Counts and times every answer, the gate's 404s and the retired routes' 410s
            // included.
            .layer(AroundLayer(crate::metrics::RecordRequests::default()))
            // Every answer counts against its connection's and the process's budget of
            // bytes not yet taken by clients; a large one past it is refused (503).
            .layer(AroundLayer(crate::http::response_budget::AdmitAnswers))
            // Continues the caller's W3C trace (or starts one) into every call to Q.
            .layer(trace_context::PropagateLayer);
        Gateway {
            hot: self
                .profile_enabled
                .then(|| layers.clone().service(HotHandlers(self.profile.clone()))),
            router: routes.layer(layers),
        }
    }

    /// Serves on `listener` until `stopped` turns true, with the background tasks running, then
    /// drains: open observations end, in-flight requests get `grace`, the reconciler finishes
    /// its pass. What `q-a2a-gateway serve` runs, and what a test can run inside its own process.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
        grace: Duration,
        limits: ConnectionLimits,
        stopped: watch::Receiver<bool>,
    ) {
        let background = self.spawn_background(stopped.clone());
        let mut stop = stopped;
        let shutdown = async move {
            let _ = stop.wait_for(|stop| *stop).await;
        };
        crate::server::serve(listener, self.router(), tls, grace, limits, shutdown).await;
        background.stop().await;
    }

    /// Starts the background tasks: the reconciler (when enabled on this replica), Q's change
    /// feed followers (run changes to observers, access changes to the access cache, which is
    /// not trusted until its follower has answered once), the rate limiter's idle-bucket sweep,
    /// the backlog and lease gauges, and the drain of open observations once `stopped` turns
    /// true.
    pub fn spawn_background(&self, stopped: watch::Receiver<bool>) -> Background {
        let reconciler = self
            .reconciler
            .clone()
            .map(|r| tokio::spawn(crate::reconciler::run(r, stopped.clone())));
        let authorizer = self.authorizer.clone();
        let forgetter = tokio::spawn(async move {
            loop {
                tokio::time::sleep(FORGET_INTERVAL).await;
                authorizer.forget_idle();
            }
        });
        // The followers outlive the drain (an in-flight blocking send still needs its run's
        // changes during the shutdown grace): they stop with the background tasks.
        let (followers_stop, following) = watch::channel(false);
        let followers = tokio::spawn(self.followers.clone().run(following));
        let drain = self.drain.clone();
        let mut draining = stopped;
        tokio::spawn(async move {
            let _ = draining.wait_for(|stop| *stop).await;
            let _ = drain.send(true);
        });
        let gauges = spawn_gauge_refresh(self.store.clone(), self.leases.clone());
        Background {
            reconciler,
            others: vec![forgetter, gauges, followers],
            _followers_stop: followers_stop,
        }
    }
}

/// The background tasks of a running gateway.
pub struct Background {
    reconciler: Option<tokio::task::JoinHandle<()>>,
    others: Vec<tokio::task::JoinHandle<()>>,
    /// Dropped with the background tasks: the feed followers stop.
    _followers_stop: watch::Sender<bool>,
}

impl Background {
    /// Stops the periodic tasks and waits for the reconciler to finish its pass.
    pub async fn stop(self) {
        for task in self.others {
            task.abort();
        }
        if let Some(reconciler) = self.reconciler {
            let _ = reconciler.await;
        }
    }
}

fn request_span(request: &Request) -> tracing::Span {
    let request_id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    // Named `telemetry::REQUEST_SPAN`: the span exported as the inbound request.
    let span = tracing::info_span!(
        "request",
        request_id,
        http_method = %request.method(),
        path = %request.uri().path(),
        trace_id = tracing::field::Empty,
        tenant = tracing::field::Empty,
        principal = tracing::field::Empty,
        rpc_method = tracing::field::Empty,
    );
    // With OpenTelemetry export on, the span continues the caller's trace (else: no-op).
    if let Some(parent) = request
        .headers()
        .get(crate::trace_context::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::trace_context::remote_parent)
    {
        let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
    }
    span
}

/// Page tokens (ListTasks', the registration listing's) are signed with the configured key, or
/// a per-process one.
fn cursor_codec(config: &Config) -> CursorCodec {
    if config.cursor_key.is_empty() {
        tracing::warn!("no cursor_key configured: page tokens (ListTasks, the registration listing) are signed with a per-process key and do not survive a restart or move between replicas");
        let random: Vec<u8> = (0..4)
            .flat_map(|_| *uuid::Uuid::new_v4().as_bytes())
            .collect();
        CursorCodec::new(&random)
    } else {
        CursorCodec::new(config.cursor_key.expose().as_bytes())
    }
}

/// Sets the lease bound gauges, then keeps the backlog and lease gauges current until aborted.
fn spawn_gauge_refresh(store: PgTaskStore, leases: ObserverLeases) -> tokio::task::JoinHandle<()> {
    use crate::metrics::{BACKLOG_REFRESH, DISPATCH_UNKNOWN, LEASES, RECONCILER_BACKLOG};
    let (global, tenant, principal) = leases.bounds();
    crate::metrics::lease_limits(global, tenant, principal);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(BACKLOG_REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match tokio::time::timeout(Duration::from_secs(2), store.unresolved_count()).await {
                Ok(Ok(count)) => {
                    metrics::gauge!(RECONCILER_BACKLOG).set(count.backlog as f64);
                    metrics::gauge!(DISPATCH_UNKNOWN).set(count.unknown as f64);
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "backlog gauge not refreshed"),
                Err(_) => tracing::debug!("backlog gauge not refreshed: timeout"),
            }
            match tokio::time::timeout(Duration::from_secs(2), leases.global_count()).await {
                Ok(Ok(count)) => metrics::gauge!(LEASES, "scope" => "global").set(count as f64),
                Ok(Err(e)) => tracing::debug!(error = %e, "lease gauge not refreshed"),
                Err(_) => tracing::debug!("lease gauge not refreshed: timeout"),
            }
        }
    })
}
