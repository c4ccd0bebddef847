//! The connection pool, and how a store call runs on it ([`on_connection!`]).
//!
//! A connection leaves the pool, never to be lent again:
//!
//! | when | `a2a_store_connections_discarded_total{reason}` |
//! |---|---|
//! | it closed (the server ended the session, the socket broke, the answer deadline passed) | `closed` |
//! | a call on it failed as [`Failure::WrongServer`] (25006, 57P03, "in recovery"): then every connection made before it goes too, lent or idle, since all were made to the server that no longer takes writes | `wrong_server` |
//! | a call on it failed as [`Failure::Lost`] (57P01, 57P02, class 08, a broken socket) | `lost` |
//! | it was made before a [`Failure::WrongServer`] on another connection | `wrong_server` |
//! | it reached its lifetime, `database.max_lifetime_seconds` less up to a fifth (the jitter keeps connections opened together from all being replaced at once): a pool follows a DNS name or Service that now points at another server | `max_lifetime` |
//!
//! A store call is tried once more, on a fresh connection, when its failure shows it did not
//! commit ([`Failure::WrongServer`]; [`Failure::NoConnection`] short of the acquire timeout;
//! [`Failure::Lost`] before anything was written to the socket), and, for reads and writes
//! whose second run changes nothing the first did not ([`Call::Read`], [`Call::Write`]), after
//! any [`Failure::Lost`]. A write that must run at most once ([`Call::WriteOnce`]) is never
//! repeated after it may have reached the server. The second attempt must get its connection
//! within the same acquire window as the first, so a call takes at most
//! `acquire_timeout_ms + statement_timeout_ms + 1 s` whether it is repeated or not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool::managed::{Metrics, Object, RecycleError, RecycleResult};
use deadpool_postgres::ClientWrapper;
use tokio::time::Instant;

use super::connect::Lending;
use super::fault::{self, Failure};
use super::{ConnectError, PgConnector, StoreError};
use crate::config::DatabaseConfig;
use crate::writable::Writable;

/// What a store call does, which decides when it may run a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// Reads only: repeated once after any failure of its connection.
    Read,
    /// Writes whose second run changes nothing the first did not (a conditional update, an
    /// insert that does nothing on conflict under a key the caller chose): repeated once after
    /// any failure of its connection.
    Write,
    /// A write that must run at most once: repeated only when nothing can have committed.
    WriteOnce,
}

impl Call {
    /// As `a2a_store_calls_total` labels it.
    pub fn label(self) -> &'static str {
        match self {
            Call::Read => "read",
            Call::Write => "write",
            Call::WriteOnce => "write_once",
        }
    }
}

/// Makes the pool's connections through [`PgConnector`]. deadpool-postgres's `ClientWrapper`
/// keeps the statement cache and aborts the connection's task when the pool drops it.
#[derive(Debug)]
pub struct PgManager {
    connector: PgConnector,
    lifetime: Option<Duration>,
    /// Moves on when a connection finds its server no longer takes writes: connections of an
    /// earlier epoch are not lent again.
    epoch: AtomicU64,
}

/// A pooled connection with the count its byte stream reads: odd while the pool lends it out.
#[derive(Debug)]
pub struct PgConnection {
    client: ClientWrapper,
    pub(crate) lending: Lending,
    epoch: u64,
    /// When it leaves the pool at the latest.
    retire_at: Option<Instant>,
}

impl std::ops::Deref for PgConnection {
    type Target = ClientWrapper;
    fn deref(&self) -> &ClientWrapper {
        &self.client
    }
}

impl std::ops::DerefMut for PgConnection {
    fn deref_mut(&mut self) -> &mut ClientWrapper {
        &mut self.client
    }
}

/// A lifetime less up to a fifth of it, drawn per connection.
fn jittered(lifetime: Duration) -> Duration {
    let fifth = lifetime / 5;
    let draw = (uuid::Uuid::new_v4().as_u128() % 1_000_000) as u32;
    lifetime - fifth.mul_f64(f64::from(draw) / 1_000_000.0)
}

impl deadpool::managed::Manager for PgManager {
    type Type = PgConnection;
    type Error = ConnectError;

    async fn create(&self) -> Result<PgConnection, ConnectError> {
        let lending = Lending::default();
        let epoch = self.epoch.load(Ordering::Acquire);
        // Boxed: connecting (TCP, TLS, startup) is a future of about 10 KiB, and deadpool's
        // `get` holds `create` inline, so without the box every store call, and every request
        // future holding one, would carry it while it only waits for a pooled connection.
        let (client, task) = Box::pin(self.connector.connect_lendable(lending.clone())).await?;
        Ok(PgConnection {
            client: ClientWrapper::new(client, task),
            lending,
            epoch,
            retire_at: self.lifetime.map(|l| Instant::now() + jittered(l)),
        })
    }

    async fn recycle(
        &self,
        connection: &mut PgConnection,
        _: &Metrics,
    ) -> RecycleResult<ConnectError> {
        // A connection that failed its answer deadline is closed: never handed out again.
        let reason = if connection.client.is_closed() {
            "closed"
        } else if connection.epoch < self.epoch.load(Ordering::Acquire) {
            "wrong_server"
        } else if connection.retire_at.is_some_and(|at| Instant::now() >= at) {
            "max_lifetime"
        } else {
            return Ok(());
        };
        crate::metrics::store_connection_discarded(reason);
        Err(RecycleError::message(reason))
    }
}

/// A connection lent by the pool, for the statements of one store call. While it is out, an
/// answer that starts and then stops coming fails at the answer deadline (`connect::stream`);
/// dropping it gives it back.
pub struct PooledClient(Option<Object<PgManager>>);

impl std::ops::Deref for PooledClient {
    type Target = Object<PgManager>;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("a lent connection until discarded")
    }
}

impl std::ops::DerefMut for PooledClient {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut().expect("a lent connection until discarded")
    }
}

impl PooledClient {
    /// Takes the connection out of the pool and closes it.
    fn discard(mut self) {
        if let Some(object) = self.0.take() {
            object.lending.give_back();
            // Detached from the pool; dropping it aborts the connection's task.
            drop(Object::take(object));
        }
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        if let Some(object) = &self.0 {
            object.lending.give_back();
        }
    }
}

/// The connection pool, with one bound on getting a connection: waiting for a free slot and
/// opening a new connection together take at most `acquire_timeout_ms`.
#[derive(Clone)]
pub struct PgPool {
    pool: deadpool::managed::Pool<PgManager>,
    acquire: Duration,
    writable: Arc<Writable>,
}

impl PgPool {
    pub fn new(connector: PgConnector, config: &DatabaseConfig) -> Result<Self, StoreError> {
        let writable = connector.writable().clone();
        let manager = PgManager {
            connector,
            lifetime: (config.max_lifetime_seconds > 0)
                .then(|| Duration::from_secs(config.max_lifetime_seconds)),
            epoch: AtomicU64::new(0),
        };
        let pool = deadpool::managed::Pool::builder(manager)
            .max_size(config.pool_size)
            .build()
            .map_err(|e| StoreError::Setup(e.to_string()))?;
        Ok(PgPool {
            pool,
            acquire: Duration::from_millis(config.acquire_timeout_ms),
            writable,
        })
    }

    /// Whether the store takes writes, as its connections and calls last showed.
    pub fn writable(&self) -> &Arc<Writable> {
        &self.writable
    }

    /// A connection, within the acquire timeout. Prefer [`on_connection!`], which also discards a
    /// connection that failed under its call and repeats what may be repeated.
    pub async fn get(&self) -> Result<PooledClient, StoreError> {
        self.get_by(Instant::now() + self.acquire).await
    }

    async fn get_by(&self, deadline: Instant) -> Result<PooledClient, StoreError> {
        match tokio::time::timeout_at(deadline, self.pool.get()).await {
            Ok(got) => {
                let got = got?;
                got.lending.lend();
                Ok(PooledClient(Some(got)))
            }
            Err(_) => Err(StoreError::AcquireTimeout(self.acquire)),
        }
    }

    /// The attempts of one store call ([`on_connection!`]), within one acquire window.
    pub fn attempts(&self, call: Call) -> Attempts<'_> {
        Attempts {
            pool: self,
            call,
            acquire_by: Instant::now() + self.acquire,
            first: true,
        }
    }

    /// A call on `client` failed with `error`: a connection on the wrong server, or one that
    /// ended, leaves the pool now; with a wrong server, every connection made before it follows.
    fn failed(&self, client: PooledClient, error: &StoreError) {
        match Failure::of(error) {
            Failure::WrongServer => {
                let epoch = client.epoch;
                // Once per server change: the connections of later epochs were made since.
                let _ = self.pool.manager().epoch.compare_exchange(
                    epoch,
                    epoch + 1,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                crate::metrics::store_connection_discarded("wrong_server");
                client.discard();
            }
            Failure::Lost => {
                crate::metrics::store_connection_discarded("lost");
                client.discard();
            }
            Failure::NoConnection | Failure::Statement => {}
        }
    }
}

/// Runs `$body` with `$client` bound to a connection of `$pool` (`&mut PooledClient`): a
/// store call, under the rules of the module's documentation (which connection is discarded,
/// when `$body` runs a second time, on a fresh connection). `$body` is an expression of type
/// `Result<T, StoreError>`; `return` and `?` in it end the attempt, as in a function. Every
/// failure is counted (`a2a_store_errors_total{class}`).
///
/// A macro rather than a function taking an async closure: the future of an async closure
/// called with a borrowed connection cannot be shown `Send` for every lifetime, which every
/// request future must be.
macro_rules! on_connection {
    ($pool:expr, $call:expr, |$client:ident| $body:expr) => {{
        let mut attempts = $pool.attempts($call);
        loop {
            let settled = match attempts.connection().await {
                Ok(mut pooled) => {
                    let result = $crate::store::pool::typed(async {
                        let $client = &mut pooled;
                        $body
                    })
                    .await;
                    attempts.settle(Some(pooled), result)
                }
                Err(e) => attempts.settle(None, Err(e)),
            };
            if let Some(result) = settled {
                break result;
            }
        }
    }};
}
pub(crate) use on_connection;

/// Fixes the output of an attempt's future, so that `?` in its body converts to
/// [`StoreError`].
pub fn typed<T, F: std::future::Future<Output = Result<T, StoreError>>>(attempt: F) -> F {
    attempt
}

/// The attempts of one store call: at most two, the second only as the module's
/// documentation allows, both getting their connection within one acquire window.
pub struct Attempts<'p> {
    pool: &'p PgPool,
    call: Call,
    acquire_by: Instant,
    first: bool,
}

impl Attempts<'_> {
    /// A connection for this attempt; the attempt is counted once it has one
    /// (`a2a_store_calls_total`).
    pub async fn connection(&self) -> Result<PooledClient, StoreError> {
        let client = self.pool.get_by(self.acquire_by).await?;
        crate::metrics::store_call(self.call.label());
        Ok(client)
    }

    /// How the attempt ended: `Some` with the call's result, or `None` to try once more.
    pub fn settle<T>(
        &mut self,
        client: Option<PooledClient>,
        result: Result<T, StoreError>,
    ) -> Option<Result<T, StoreError>> {
        let pool = self.pool;
        let error = match result {
            Ok(done) => {
                if self.call != Call::Read {
                    pool.writable.confirmed();
                }
                return Some(Ok(done));
            }
            Err(error) => error,
        };
        let sent = match client {
            Some(client) => {
                let sent = client.lending.sent_anything();
                pool.failed(client, &error);
                sent
            }
            None => false,
        };
        if !matches!(error, StoreError::TaskGone) {
            crate::metrics::store_error(fault::class(&error));
        }
        let failure = Failure::of(&error);
        if matches!(failure, Failure::WrongServer | Failure::Lost) {
            pool.writable.refused();
        }
        let again = self.first
            && Instant::now() < self.acquire_by
            && match failure {
                Failure::WrongServer => true,
                Failure::NoConnection => !matches!(error, StoreError::AcquireTimeout(_)),
                Failure::Lost => self.call != Call::WriteOnce || !sent,
                Failure::Statement => false,
            };
        if !again {
            return Some(Err(error));
        }
        tracing::info!(error = %error, "store: trying once more on a fresh connection");
        self.first = false;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(acquire_timeout_ms: u64) -> PgPool {
        let config = DatabaseConfig {
            acquire_timeout_ms,
            ..DatabaseConfig::default()
        };
        PgPool::new(PgConnector::new(&config).unwrap(), &config).unwrap()
    }

    fn no_host() -> StoreError {
        StoreError::Pool(deadpool::managed::PoolError::Backend(ConnectError::NoHost))
    }

    /// When a failed attempt runs again: a refusal as read-only, or no connection short of the
    /// acquire timeout, once, for every kind of call; a statement's own failure, an acquire
    /// timeout, or an attempt that ended past the acquire window, never.
    #[tokio::test]
    async fn a_call_runs_once_more_only_when_nothing_can_have_committed() {
        let pool = pool(2_000);
        for call in [Call::Read, Call::Write, Call::WriteOnce] {
            for again in [|| StoreError::ReadOnly, no_host] {
                let mut attempts = pool.attempts(call);
                assert!(
                    attempts.settle::<()>(None, Err(again())).is_none(),
                    "{call:?}"
                );
                let second = attempts.settle::<()>(None, Err(again()));
                assert!(matches!(second, Some(Err(_))), "{call:?}: only once");
            }
            for last in [
                StoreError::AcquireTimeout(Duration::from_secs(2)),
                StoreError::Corrupt("a row".into()),
                StoreError::TaskGone,
            ] {
                let mut attempts = pool.attempts(call);
                assert!(
                    matches!(attempts.settle::<()>(None, Err(last)), Some(Err(_))),
                    "{call:?}"
                );
            }
            let mut attempts = pool.attempts(call);
            assert!(matches!(attempts.settle(None, Ok(7)), Some(Ok(7))));
        }
        // Past the acquire window, no second attempt: the call's bound holds.
        let pool = self::pool(50);
        let mut attempts = pool.attempts(Call::Read);
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert!(matches!(
            attempts.settle::<()>(None, Err(StoreError::ReadOnly)),
            Some(Err(StoreError::ReadOnly))
        ));
    }

    /// A refused or lost call says the store takes no writes now; a write taken says it does.
    #[tokio::test]
    async fn the_store_is_writable_as_its_calls_last_showed() {
        let pool = pool(2_000);
        pool.attempts(Call::Write).settle(None, Ok(()));
        assert!(pool.writable().now());
        pool.attempts(Call::Write)
            .settle::<()>(None, Err(StoreError::ReadOnly));
        assert!(!pool.writable().now());
        pool.attempts(Call::Read).settle(None, Ok(()));
        assert!(!pool.writable().now(), "a read says nothing of writes");
        pool.attempts(Call::WriteOnce).settle(None, Ok(()));
        assert!(pool.writable().now());
    }

    #[test]
    fn a_lifetime_is_shortened_by_at_most_a_fifth() {
        let lifetime = Duration::from_secs(300);
        let draws: Vec<Duration> = (0..200).map(|_| jittered(lifetime)).collect();
        assert!(draws
            .iter()
            .all(|d| *d <= lifetime && *d >= Duration::from_secs(240)));
        let spread =
            draws.iter().max().unwrap().as_secs_f64() - draws.iter().min().unwrap().as_secs_f64();
        assert!(spread > 30.0, "the draws spread over the fifth: {spread} s");
    }
}
