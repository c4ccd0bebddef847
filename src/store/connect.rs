//! How every PostgreSQL connection is made: the pool's, the reconciler leader's and the one
//! `migrate` and the other one-shot commands use. The gateway opens the socket itself and hands
//! it to tokio-postgres, so that on every connection:
//!
//! - only a server that accepts writes is used (libpq's `target_session_attrs=read-write`, the
//!   only value the gateway takes, and its default): the hosts of a multi-host URL
//!   (`postgres://u@standby:5432,primary:5432/db`) are tried in order, or in a random order
//!   with `load_balance_hosts=random`, each resolved name's addresses in turn, and a server
//!   that answers `SHOW transaction_read_only` with `on` (a standby, a demoted primary, a
//!   server in read-only mode) is left for the next host, as is one that refuses the
//!   connection (57P03: starting up, in recovery). `connect_timeout` (the URL's; without
//!   one, `database.acquire_timeout_ms` shared out among the hosts, 200 ms at least) bounds
//!   each host's attempt, as libpq's does, so a first host that takes the connection and never
//!   answers leaves time for the next within one acquire;
//! - TCP keep-alive is on (`database.keepalive_*`): a server host that vanished, or a network
//!   path that drops everything, is noticed by the kernel on an idle connection;
//! - the session's `statement_timeout` is set in the startup packet: the server ends a
//!   statement that runs too long;
//! - an answer deadline holds: once the gateway has written, some bytes must come back within
//!   the statement timeout plus [`ANSWER_SLACK`], or the connection fails. Keep-alive cannot see
//!   a peer that still acknowledges packets but never answers (a wedged proxy or server); this
//!   does, and it bounds every query whatever the server does;
//! - TLS (rustls) when `database.sslmode = "verify-full"`, with a client certificate when
//!   `database.ssl_cert` and `ssl_key` are set.

use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use socket2::{SockRef, TcpKeepalive};
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, LoadBalanceHosts, SslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

mod stream;

use super::StoreError;
use crate::config::{DatabaseConfig, PgSslMode};
use crate::writable::Writable;
pub(crate) use stream::Lending;
use stream::{Answered, Socket};

/// Time granted past `statement_timeout` for the server's answer to arrive: the server's own
/// timer, its error and the network.
pub const ANSWER_SLACK: Duration = Duration::from_secs(1);

const DEFAULT_PORT: u16 = 5432;

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server took the connection and answered `transaction_read_only = on`.
    #[error("{0} accepts no writes (a standby, or default_transaction_read_only is on)")]
    ReadOnly(String),
    /// Every host of a multi-host URL failed: each with its reason, in the order tried.
    #[error("no host accepts writes: {}", describe_hosts(.0))]
    Hosts(Vec<(String, ConnectError)>),
    #[error("cannot reach {target}: {source}")]
    Socket {
        target: String,
        #[source]
        source: io::Error,
    },
    #[error("no connection within {0:?}")]
    Timeout(Duration),
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    #[error("database.url names no host")]
    NoHost,
    #[error("{}", super::fault::describe(.0))]
    Db(#[from] tokio_postgres::Error),
}

fn describe_hosts(failed: &[(String, ConnectError)]) -> String {
    failed
        .iter()
        .map(|(host, e)| format!("{host}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The least time one host of a multi-host URL gets to take a connection.
const MIN_HOST_TIMEOUT: Duration = Duration::from_millis(200);

/// How many hosts a connection string names.
fn hosts(config: &tokio_postgres::Config) -> usize {
    config.get_hosts().len().max(config.get_hostaddrs().len())
}

/// The one `target_session_attrs` the gateway takes: it writes on every connection.
const SESSION_ATTRS: &str = "read-write";

/// The value of `target_session_attrs` in a connection string (URL or `key=value` form).
fn session_attrs(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("target_session_attrs=")?;
    let end = rest.find(['&', ' ', '\t']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('\''))
}

/// Opens connections with the configured socket options, session settings and TLS.
#[derive(Clone)]
pub struct PgConnector {
    config: tokio_postgres::Config,
    tls: Option<MakeRustlsConnect>,
    keepalive: TcpKeepalive,
    connect_timeout: Duration,
    answer_deadline: Option<Duration>,
    /// `load_balance_hosts=random`: hosts tried in a random order.
    random_order: bool,
    /// What the connections made show about the primary (`/readyz`, `a2a_store_writable`).
    writable: Arc<Writable>,
}

impl std::fmt::Debug for PgConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConnector")
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("answer_deadline", &self.answer_deadline)
            .finish_non_exhaustive()
    }
}

impl PgConnector {
    pub fn new(db: &DatabaseConfig) -> Result<Self, StoreError> {
        match session_attrs(db.url.expose()) {
            None | Some(SESSION_ATTRS) => {}
            Some(other) => {
                return Err(StoreError::Setup(format!(
                    "database.url: target_session_attrs={other} is not supported: the gateway \
                     writes on every connection, so it only connects to a server that accepts \
                     writes (target_session_attrs={SESSION_ATTRS}, the default)"
                )))
            }
        }
        // tokio-postgres's parse errors name the option, never its value.
        let mut config: tokio_postgres::Config = db
            .url
            .expose()
            .parse()
            .map_err(|e| StoreError::Setup(format!("database.url: {e}")))?;
        let tls = match db.sslmode {
            PgSslMode::Disable => {
                if config.get_ssl_mode() == SslMode::Require {
                    // Plain TCP when the URL asks for TLS would be a silent downgrade.
                    return Err(StoreError::Setup(
                        "database.url asks for sslmode=require but database.sslmode is \
                         \"disable\"; set database.sslmode = \"verify-full\""
                            .into(),
                    ));
                }
                config.ssl_mode(SslMode::Disable);
                None
            }
            PgSslMode::VerifyFull => {
                config.ssl_mode(SslMode::Require);
                Some(MakeRustlsConnect::new(client_config(
                    db.ssl_root_cert.as_deref(),
                    db.ssl_cert.as_deref().zip(db.ssl_key.as_deref()),
                )?))
            }
        };
        if db.statement_timeout_ms > 0 {
            let setting = format!("-c statement_timeout={}", db.statement_timeout_ms);
            let options = match config.get_options() {
                Some(given) if !given.trim().is_empty() => format!("{given} {setting}"),
                _ => setting,
            };
            config.options(options);
        }
        let keepalive = TcpKeepalive::new()
            .with_time(Duration::from_secs(db.keepalive_idle_seconds))
            .with_interval(Duration::from_secs(db.keepalive_interval_seconds))
            .with_retries(db.keepalive_retries);
        Ok(PgConnector {
            connect_timeout: match config.get_connect_timeout() {
                Some(given) => *given,
                // Every host gets its share of one acquire window: a first host that takes
                // the connection and never answers must leave time for the next.
                None => (Duration::from_millis(db.acquire_timeout_ms)
                    / hosts(&config).max(1) as u32)
                    .max(MIN_HOST_TIMEOUT),
            },
            answer_deadline: (db.statement_timeout_ms > 0)
                .then(|| Duration::from_millis(db.statement_timeout_ms) + ANSWER_SLACK),
            random_order: config.get_load_balance_hosts() == LoadBalanceHosts::Random,
            config,
            tls,
            keepalive,
            writable: Arc::new(Writable::new(crate::metrics::STORE_WRITABLE)),
        })
    }

    /// Whether the store takes writes, as its connections and calls last showed.
    pub fn writable(&self) -> &Arc<Writable> {
        &self.writable
    }

    /// Whether connections use TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A new connection and the task driving it; aborting the task closes the socket.
    pub async fn connect(&self) -> Result<(Client, JoinHandle<()>), ConnectError> {
        self.connect_lendable(Lending::default()).await
    }

    /// A connection the pool lends out: while `lending` says it is out, part of an answer
    /// followed by silence fails it at the answer deadline too (`stream::Answered`). Each
    /// host is tried in turn; the first that takes the connection and accepts writes is used.
    pub(crate) async fn connect_lendable(
        &self,
        lending: Lending,
    ) -> Result<(Client, JoinHandle<()>), ConnectError> {
        let mut targets = self.targets();
        if self.random_order {
            shuffle(&mut targets);
        }
        let several = targets.len() > 1;
        let mut failed = Vec::new();
        for target in targets {
            let label = target.label();
            let attempt = self.connect_to(target, lending.clone());
            match tokio::time::timeout(self.connect_timeout, attempt).await {
                Ok(Ok(connected)) => {
                    self.writable.confirmed();
                    return Ok(connected);
                }
                Ok(Err(e)) => failed.push((label, e)),
                Err(_) => failed.push((label, ConnectError::Timeout(self.connect_timeout))),
            }
        }
        self.writable.refused();
        match failed.pop() {
            None => Err(ConnectError::NoHost),
            Some((label, last)) if several => {
                failed.push((label, last));
                Err(ConnectError::Hosts(failed))
            }
            Some((_, only)) => Err(only),
        }
    }

    /// One host: the socket, the startup (TLS, authentication, the session's settings), then
    /// whether the server accepts writes.
    async fn connect_to(
        &self,
        target: Target,
        lending: Lending,
    ) -> Result<(Client, JoinHandle<()>), ConnectError> {
        let label = target.label();
        let (socket, server_name) = open(target, &self.keepalive).await?;
        let stream = Answered::new(socket, self.answer_deadline, lending);
        let (client, task) = match &self.tls {
            None => drive(self.config.connect_raw(stream, NoTls).await?),
            Some(make) => {
                let tls = MakeTlsConnect::<Answered<Socket>>::make_tls_connect(
                    &mut make.clone(),
                    &server_name,
                )
                .map_err(|_| ConnectError::ServerName(server_name.clone()))?;
                drive(self.config.connect_raw(stream, tls).await?)
            }
        };
        match read_only(&client).await {
            Ok(false) => Ok((client, task)),
            Ok(true) => {
                task.abort();
                Err(ConnectError::ReadOnly(label))
            }
            Err(e) => {
                task.abort();
                Err(e.into())
            }
        }
    }

    /// Where to connect, in the URL's order, each with the name its certificate must carry.
    fn targets(&self) -> Vec<Target> {
        let hosts = self.config.get_hosts();
        let addrs = self.config.get_hostaddrs();
        let ports = self.config.get_ports();
        (0..hosts.len().max(addrs.len()))
            .filter_map(|i| {
                let port = match ports {
                    [] => DEFAULT_PORT,
                    [one] => *one,
                    many => many.get(i).copied().unwrap_or(DEFAULT_PORT),
                };
                let host = hosts.get(i);
                match (addrs.get(i), host) {
                    (Some(addr), host) => Some(Target::Tcp {
                        address: addr.to_string(),
                        port,
                        name: match host {
                            Some(Host::Tcp(name)) => name.clone(),
                            _ => addr.to_string(),
                        },
                    }),
                    (None, Some(Host::Tcp(name))) => Some(Target::Tcp {
                        address: name.clone(),
                        port,
                        name: name.clone(),
                    }),
                    (None, Some(Host::Unix(dir))) => {
                        Some(Target::Unix(dir.join(format!(".s.PGSQL.{port}"))))
                    }
                    (None, None) => None,
                }
            })
            .collect()
    }
}

/// One place PostgreSQL may listen.
enum Target {
    Tcp {
        address: String,
        port: u16,
        name: String,
    },
    Unix(std::path::PathBuf),
}

impl Target {
    /// How the target is named in errors and logs: `host:port` or the socket's path.
    fn label(&self) -> String {
        match self {
            Target::Tcp { name, port, .. } => format!("{name}:{port}"),
            Target::Unix(path) => path.display().to_string(),
        }
    }
}

/// Whether the server refuses writes in this session: what libpq asks for
/// `target_session_attrs=read-write` (`on` on a hot standby, and wherever
/// `default_transaction_read_only` is on).
pub async fn read_only(client: &Client) -> Result<bool, tokio_postgres::Error> {
    let answer = client.simple_query("SHOW transaction_read_only").await?;
    Ok(answer
        .iter()
        .any(|message| matches!(message, SimpleQueryMessage::Row(row) if row.get(0) == Some("on"))))
}

/// Shuffles the hosts for `load_balance_hosts=random` (Fisher-Yates, with the process's
/// random number generator behind UUIDs).
fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = (uuid::Uuid::new_v4().as_u128() % (i as u128 + 1)) as usize;
        items.swap(i, j);
    }
}

/// A socket to `target`, and the name its certificate must carry.
async fn open(target: Target, keepalive: &TcpKeepalive) -> Result<(Socket, String), ConnectError> {
    match target {
        Target::Tcp {
            address,
            port,
            name,
        } => tcp(address, port, keepalive)
            .await
            .map(|s| (Socket::Tcp(s), name)),
        Target::Unix(path) => match tokio::net::UnixStream::connect(&path).await {
            Ok(s) => Ok((Socket::Unix(s), "localhost".to_string())),
            Err(source) => Err(ConnectError::Socket {
                target: path.display().to_string(),
                source,
            }),
        },
    }
}

/// A TCP connection to the first address `host` resolves to that accepts, with keep-alive.
async fn tcp(
    host: String,
    port: u16,
    keepalive: &TcpKeepalive,
) -> Result<tokio::net::TcpStream, ConnectError> {
    let target = format!("{host}:{port}");
    let mut last = io::Error::new(io::ErrorKind::NotFound, "name resolved to no address");
    let addrs = match tokio::net::lookup_host((host.as_str(), port)).await {
        Ok(addrs) => addrs,
        Err(source) => return Err(ConnectError::Socket { target, source }),
    };
    for addr in addrs {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => {
                let set = stream
                    .set_nodelay(true)
                    .and_then(|()| SockRef::from(&stream).set_tcp_keepalive(keepalive));
                return match set {
                    Ok(()) => Ok(stream),
                    Err(source) => Err(ConnectError::Socket { target, source }),
                };
            }
            Err(e) => last = e,
        }
    }
    Err(ConnectError::Socket {
        target,
        source: last,
    })
}

/// Spawns the task that drives a connection. Its error is the only place the reason a
/// connection ended is seen (the client's pending calls only learn it closed), so it is logged.
fn drive<S, T>(
    (client, connection): (Client, tokio_postgres::Connection<S, T>),
) -> (Client, JoinHandle<()>)
where
    tokio_postgres::Connection<S, T>: Future<Output = Result<(), tokio_postgres::Error>>,
    tokio_postgres::Connection<S, T>: Send + 'static,
{
    let task = tokio::spawn(async move {
        if let Err(e) = connection.await {
            let error = crate::upstream::error_chain(&e);
            tracing::warn!(%error, "PostgreSQL connection failed");
        }
    });
    (client, task)
}

/// The rustls configuration: the CA file's certificates, or the system's trust store; and the
/// client certificate and key, when configured.
fn client_config(
    ca_file: Option<&Path>,
    client: Option<(&Path, &Path)>,
) -> Result<ClientConfig, StoreError> {
    let setup = |what: String| StoreError::Setup(what);
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| setup(format!("database.ssl_root_cert {}: {e}", path.display())))?;
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    setup(format!("database.ssl_root_cert {}: {e}", path.display()))
                })?;
            }
            if roots.is_empty() {
                return Err(setup(format!(
                    "database.ssl_root_cert {} holds no certificate",
                    path.display()
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(setup(
                    "database.sslmode = \"verify-full\" without database.ssl_root_cert, and the \
                     system trust store holds no certificate"
                        .into(),
                ));
            }
        }
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| setup(format!("TLS protocol versions: {e}")))?
            .with_root_certificates(roots);
    let Some((cert_file, key_file)) = client else {
        return Ok(builder.with_no_client_auth());
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect())
        .map_err(|e| setup(format!("database.ssl_cert {}: {e}", cert_file.display())))?;
    if chain.is_empty() {
        return Err(setup(format!(
            "database.ssl_cert {} holds no certificate",
            cert_file.display()
        )));
    }
    // The error names the file, never its content.
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| setup(format!("database.ssl_key {}: {e}", key_file.display())))?;
    builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| setup(format!("database.ssl_cert and ssl_key: {e}")))
}

#[cfg(test)]
mod tests;
