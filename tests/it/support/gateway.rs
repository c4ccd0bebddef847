//! The gateway process (`q-a2a-gateway serve`) with its own database and upstream, its
//! configuration (environment variables only, the child's environment is cleared), replicas on
//! the same database, and the one-shot commands `migrate` and `preflight`.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::db::TestDb;
use super::process::{kill9, repo_path, spawn_listening, LogLines, Started, GATEWAY_BIN};
use super::upstream::{Upstream, SERVICE_TOKEN};

pub const PUBLIC_BASE: &str = "https://q.example";
/// Shared by every gateway process of a test, like replicas in production.
pub const CURSOR_KEY: &str = "test-cursor-key-0123456789abcdef";

/// Each test gateway's PostgreSQL pool. With at most [`MAX_GATEWAYS_PER_TEST`] gateways a test
/// and `scripts/test`'s cap on test threads, the suite stays within the server's
/// `max_connections` whatever the machine's core count (`harness::fits_the_database`).
pub const TEST_POOL_SIZE: usize = 8;
/// The most gateway processes any one test runs at once (replicas, two stacks).
pub const MAX_GATEWAYS_PER_TEST: usize = 3;

/// The environment of a gateway without the reconciler, for tests whose counts or recovery its
/// background calls to Q would disturb.
pub const NO_RECONCILER: &[(&str, &str)] = &[("Q_A2A_RECONCILER_ENABLED", "false")];

/// Options for a gateway process.
#[derive(Clone)]
pub struct GatewayOptions {
    pub profile_enabled: bool,
    pub migrate: bool,
    /// Extra environment, applied last (so it overrides the harness's own settings).
    pub env: Vec<(String, String)>,
    /// Another build of `q-a2a-gateway` to run (and migrate with) instead of this one's.
    pub bin: Option<std::path::PathBuf>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            profile_enabled: true,
            migrate: true,
            env: Vec::new(),
            bin: None,
        }
    }
}

impl GatewayOptions {
    /// The defaults plus these environment variables.
    pub fn with_env(env: &[(&str, &str)]) -> GatewayOptions {
        GatewayOptions {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..GatewayOptions::default()
        }
    }

    /// These options on the build `Q_A2A_TEST_GATEWAY_BIN` names, with its configuration
    /// file in `Q_A2A_TEST_GATEWAY_CONFIG` (another build, to see what a test catches in it);
    /// this build's when unset.
    pub fn under_test(mut self) -> GatewayOptions {
        self.bin = std::env::var_os("Q_A2A_TEST_GATEWAY_BIN").map(Into::into);
        if let Ok(file) = std::env::var("Q_A2A_TEST_GATEWAY_CONFIG") {
            self.env.push(("Q_A2A_CONFIG".into(), file));
        }
        self
    }

    /// The defaults with the A2A profile disabled.
    pub fn profile_off() -> GatewayOptions {
        GatewayOptions {
            profile_enabled: false,
            ..GatewayOptions::default()
        }
    }

    /// The same options, without running `migrate` first.
    pub fn unmigrated(self) -> GatewayOptions {
        GatewayOptions {
            migrate: false,
            ..self
        }
    }
}

/// The Redis key prefix of a test's gateways: each test's replicas share their own lease
/// counters in the machine's Redis.
pub fn redis_key_prefix(db: &TestDb) -> String {
    format!("q-a2a-test:{}", db.name)
}

/// The configuration every test gateway gets (the file `config/gateway.toml` plus these
/// overrides, then `options.env`), whether it runs as a process or inside the test.
pub(super) fn settings(
    db: &TestDb,
    upstream_url: &str,
    options: &GatewayOptions,
) -> Vec<(String, String)> {
    let mut settings: Vec<(String, String)> = [
        ("Q_A2A_LISTEN", "127.0.0.1:0".to_string()),
        ("Q_A2A_METRICS_LISTEN", "127.0.0.1:0".to_string()),
        ("Q_A2A_PUBLIC_BASE_URL", PUBLIC_BASE.to_string()),
        ("Q_A2A_DATABASE_URL", db.url.clone()),
        ("Q_A2A_DATABASE_POOL_SIZE", TEST_POOL_SIZE.to_string()),
        ("Q_A2A_UPSTREAM_URL", upstream_url.to_string()),
        ("Q_A2A_UPSTREAM_SERVICE_TOKEN", SERVICE_TOKEN.to_string()),
        ("Q_A2A_CURSOR_KEY", CURSOR_KEY.to_string()),
        ("Q_A2A_REDIS_KEY_PREFIX", redis_key_prefix(db)),
        // Suites send bursts; the tests where it is the subject turn the limit on.
        ("Q_A2A_RATE_LIMIT_ENABLED", "false".to_string()),
        // Fast reconciler passes so recovery is observable within a test.
        ("Q_A2A_RECONCILER_INTERVAL_MS", "200".to_string()),
        ("Q_A2A_RECONCILER_GRACE_MS", "1000".to_string()),
        (
            "A2A_SERVER_PROFILE_ENABLED",
            options.profile_enabled.to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    settings.extend(options.env.iter().cloned());
    settings
}

fn gateway_command(db: &TestDb, upstream_url: &str, options: &GatewayOptions) -> Command {
    let mut command = match &options.bin {
        Some(bin) => Command::new(bin),
        None => Command::new(GATEWAY_BIN),
    };
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .env("Q_A2A_CONFIG", repo_path("config/gateway.toml"));
    for (k, v) in settings(db, upstream_url, options) {
        command.env(k, v);
    }
    command
}

/// Starts `q-a2a-gateway serve`; its stdout names the A2A and then the metrics listener.
async fn serve(db: &TestDb, upstream_url: &str, options: &GatewayOptions) -> Started {
    let mut command = gateway_command(db, upstream_url, options);
    command.arg("serve");
    spawn_listening(command, "gateway", &["metrics on "]).await
}

/// Runs `q-a2a-gateway migrate` against the test database.
pub async fn migrate(db: &TestDb, upstream_url: &str) -> std::process::Output {
    migrate_with(db, upstream_url, &GatewayOptions::default()).await
}

/// Runs `q-a2a-gateway migrate` with `options`' environment (e.g. another database).
pub async fn migrate_with(
    db: &TestDb,
    upstream_url: &str,
    options: &GatewayOptions,
) -> std::process::Output {
    let mut command = gateway_command(db, upstream_url, options);
    command.arg("migrate");
    command.output().await.expect("run migrate")
}

/// Runs `q-a2a-gateway preflight` against the test database and upstream with extra env.
pub async fn preflight(
    db: &TestDb,
    upstream_url: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut command = gateway_command(db, upstream_url, &GatewayOptions::with_env(env));
    command.arg("preflight");
    command.output().await.expect("run preflight")
}

/// Runs a one-shot command of `q-a2a-gateway` (`args`, e.g. `tenant export ...`) with the test
/// gateway's configuration plus `env`.
pub async fn run_command(
    db: &TestDb,
    upstream_url: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> std::process::Output {
    run_command_with(db, upstream_url, &GatewayOptions::with_env(env), args).await
}

/// [`run_command`] with `options` (another build, say).
pub async fn run_command_with(
    db: &TestDb,
    upstream_url: &str,
    options: &GatewayOptions,
    args: &[&str],
) -> std::process::Output {
    let mut command = gateway_command(db, upstream_url, options);
    command.args(args);
    command.output().await.expect("run the gateway command")
}

/// Runs `q-a2a-gateway serve` with nothing but `env` (no configuration file) and expects it
/// to refuse to start; returns what it printed.
pub async fn serve_refused(env: &[(&str, &str)]) -> std::process::Output {
    let output = Command::new(GATEWAY_BIN)
        .env_clear()
        .envs(env.iter().copied())
        .arg("serve")
        .output()
        .await
        .expect("run serve");
    assert!(!output.status.success(), "serve started with {env:?}");
    output
}

/// A running gateway with its own database and upstream.
pub struct Gateway {
    pub url: String,
    /// The separate Prometheus listener, `http://ADDR`.
    pub metrics_url: String,
    /// Everything the gateway wrote to stderr so far.
    pub logs: LogLines,
    pub child: Child,
    pub db: TestDb,
    pub upstream: Upstream,
    pub(super) http: reqwest::Client,
    stderr_drained: Option<JoinHandle<()>>,
}

impl Gateway {
    pub async fn start() -> Gateway {
        Gateway::start_with(GatewayOptions::default()).await
    }

    /// A gateway with the default options plus these environment variables.
    pub async fn start_with_env(env: &[(&str, &str)]) -> Gateway {
        Gateway::start_with(GatewayOptions::with_env(env)).await
    }

    pub async fn start_with(options: GatewayOptions) -> Gateway {
        Gateway::start_with_upstream(Upstream::start().await, options).await
    }

    /// A gateway using `upstream` (which the options may reach through a proxy, by
    /// overriding `Q_A2A_UPSTREAM_URL`).
    pub async fn start_with_upstream(upstream: Upstream, options: GatewayOptions) -> Gateway {
        Gateway::start_on(TestDb::create().await, upstream, options).await
    }

    /// A gateway on `db` (one of the test's own making, e.g. on a private primary and standby;
    /// `options` may give the gateway another URL of it than `db.url`, which the test's own
    /// checks use).
    pub async fn start_on(db: TestDb, upstream: Upstream, options: GatewayOptions) -> Gateway {
        if options.migrate {
            // Another build migrates with its own settings (its configuration file, too).
            let out = match options.bin {
                Some(_) => migrate_with(&db, &upstream.url, &options).await,
                None => migrate(&db, &upstream.url).await,
            };
            assert!(
                out.status.success(),
                "migrate failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut started = serve(&db, &upstream.url, &options).await;
        Gateway {
            url: started.url,
            metrics_url: started.then.remove(0),
            logs: started.logs,
            child: started.child,
            db,
            upstream,
            http: super::http::client(),
            stderr_drained: Some(started.stderr_drained),
        }
    }

    /// Starts another gateway process on the same database and upstream (a replica).
    pub async fn start_replica(&self, options: &GatewayOptions) -> Replica {
        let mut started = serve(&self.db, &self.upstream.url, options).await;
        Replica {
            url: started.url,
            metrics_url: started.then.remove(0),
            logs: started.logs,
            child: started.child,
        }
    }

    /// Replaces this gateway's process with a new one on the same database and upstream
    /// (`logs` and `metrics_url` are the new process's from then on).
    pub async fn restart(&mut self, options: &GatewayOptions) {
        kill9(&mut self.child).await;
        let mut started = serve(&self.db, &self.upstream.url, options).await;
        self.url = started.url;
        self.metrics_url = started.then.remove(0);
        self.logs = started.logs;
        self.child = started.child;
        self.stderr_drained = Some(started.stderr_drained);
    }

    /// Waits for the process to exit (after a signal), then for the rest of its stderr: the
    /// last lines are written right before the exit, and `log_text` must have them.
    pub async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("gateway still running {limit:?} after the signal"))
            .unwrap();
        if let Some(drained) = self.stderr_drained.take() {
            tokio::time::timeout(Duration::from_secs(10), drained)
                .await
                .expect("the gateway's stderr closes once it exited")
                .unwrap();
        }
        status
    }

    /// The gateway's stderr so far, one string.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Whether a JSON log line carries the field `reason` = `reason`. Lines reach `logs`
    /// through a pipe, a moment after the gateway wrote them (and maybe after it answered), so
    /// this looks for up to 5 s.
    pub async fn logged_reason(&self, reason: &str) -> bool {
        let needle = format!("\"reason\":\"{reason}\"");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            if self
                .logs
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&needle))
            {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET {metrics_url}/metrics` as text.
    /// A task of Alice's at ag-writer, completed, whose output Q serves corrupted by `mode`
    /// (a mode of the reference upstream's `corrupt-output`) from its run's creation, so no
    /// read can have seen it whole; its id.
    pub async fn completed_with_corrupt_output(&self, mode: &str) -> String {
        self.upstream.corrupt_next_outputs(mode, 1).await;
        let id = self
            .caller("tok-alice")
            .agent("ag-writer")
            .send_text_immediately(&super::new_id(), mode)
            .await
            .task_id();
        self.db.wait_task_state(&id, "TASK_STATE_COMPLETED").await;
        id
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.metrics_url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// `GET /readyz`: the status and the report.
    pub async fn readyz(&self) -> (u16, Value) {
        let response = self.request(Method::GET, "/readyz").await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Polls `/readyz` (every 200 ms, the report is cached for about a second) until it
    /// answers `status`; returns the report.
    pub async fn wait_readyz(&self, status: u16, within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (got, body) = self.readyz().await;
            if got == status {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/readyz never answered {status} within {within:?}: last {got} {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Another gateway process sharing a test's database and upstream.
pub struct Replica {
    pub url: String,
    /// The replica's Prometheus listener, `http://ADDR`.
    pub metrics_url: String,
    /// Everything the replica wrote to stderr so far.
    pub logs: LogLines,
    pub child: Child,
}

impl Replica {
    /// `GET {metrics_url}/metrics` as text.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.metrics_url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The replica's stderr so far, one string.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }
}
