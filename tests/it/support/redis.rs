//! Redis: the machine's server at 127.0.0.1:6379 (each test's gateways use their own key
//! prefix there), private `redis-server` processes a test may stop (plain, TLS, or three
//! together as a Redis Cluster), and observer-lease counts.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::certs::ServerCerts;
use super::gateway::{redis_key_prefix, Gateway};
use super::rpc::new_id;

/// The Redis server tests share (scripts/test starts it).
pub const SHARED_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// A private `redis-server` on a free port, killed on drop. Its working directory is its own
/// (a replica's full resynchronisation writes an RDB file there even with saving off), removed
/// on drop.
pub struct PrivateRedis {
    pub port: u16,
    pub child: Child,
    dir: PathBuf,
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl PrivateRedis {
    pub async fn start() -> PrivateRedis {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        PrivateRedis::start_on(port).await
    }

    /// A fresh, empty Redis on a given port (e.g. to bring one back after stopping it).
    pub async fn start_on(port: u16) -> PrivateRedis {
        PrivateRedis::spawn(port, &["--port", &port.to_string()]).await
    }

    /// A Redis that speaks TLS only (its plain port is off), with `certs`' server certificate.
    /// Clients are not asked for certificates.
    pub async fn start_tls(certs: &ServerCerts) -> PrivateRedis {
        let port = free_port();
        let args = [
            "--port".to_string(),
            "0".to_string(),
            "--tls-port".to_string(),
            port.to_string(),
            "--tls-cert-file".to_string(),
            certs.cert().display().to_string(),
            "--tls-key-file".to_string(),
            certs.key().display().to_string(),
            "--tls-ca-cert-file".to_string(),
            certs.ca().display().to_string(),
            "--tls-auth-clients".to_string(),
            "no".to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        PrivateRedis::spawn(port, &args).await
    }

    async fn spawn(port: u16, args: &[&str]) -> PrivateRedis {
        let dir = std::env::temp_dir().join(format!("q-a2a-redis-{}", new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = Command::new("redis-server");
        command
            .args(args)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir);
        let child = start_listening(command, port).await;
        PrivateRedis { port, child, dir }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A Redis Cluster of three masters (no replicas) on loopback ports, each node a private
/// `redis-server` that keeps its cluster state in a file, so a node restarted on its port
/// rejoins with its slots (and without its data).
pub struct RedisCluster {
    pub ports: Vec<u16>,
    /// Each node's cluster bus port, chosen free like its client port: the default (client
    /// port + 10000) does not exist for a client port above 55535, and may be taken below it.
    bus_ports: Vec<u16>,
    nodes: Vec<Option<Child>>,
    dir: PathBuf,
}

/// How long a node may be unreachable before the others mark it failed (ms).
const NODE_TIMEOUT_MS: u64 = 1_000;

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!("q-a2a-cluster-{}", new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let bus_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut cluster = RedisCluster {
            ports: ports.clone(),
            bus_ports,
            nodes: Vec::new(),
            dir,
        };
        for i in 0..ports.len() {
            let node = cluster.spawn_node(i).await;
            cluster.nodes.push(Some(node));
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for port in &ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .await
            .expect("redis-cli must be installed with redis-server");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok(Duration::from_secs(20)).await;
        cluster
    }

    async fn spawn_node(&self, i: usize) -> Child {
        let port = self.ports[i];
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-port", &self.bus_ports[i].to_string()])
            .arg("--cluster-config-file")
            .arg(self.dir.join(format!("nodes-{port}.conf")))
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir);
        start_listening(command, port).await
    }

    /// The seed-node list the gateway is given.
    pub fn url(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    async fn node(&self, port: u16) -> redis::aio::MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// Waits until every node says `cluster_state:ok`.
    pub async fn wait_ok(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut ok = 0;
            for port in &self.ports {
                if let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) {
                    if let Ok(Ok(mut conn)) = tokio::time::timeout(
                        Duration::from_secs(1),
                        client.get_multiplexed_async_connection(),
                    )
                    .await
                    {
                        let info: String = redis::cmd("CLUSTER")
                            .arg("INFO")
                            .query_async(&mut conn)
                            .await
                            .unwrap_or_default();
                        if info.contains("cluster_state:ok") {
                            ok += 1;
                        }
                    }
                }
            }
            if ok == self.ports.len() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the cluster did not reach cluster_state:ok within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The port of the master serving `key`'s slot.
    pub async fn owner_of(&self, key: &str) -> u16 {
        let mut conn = self.node(self.ports[0]).await;
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        // Each entry: [first slot, last slot, [ip, port, id, ...], replicas...].
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await
            .unwrap();
        for range in ranges {
            let redis::Value::Array(fields) = range else {
                continue;
            };
            let bound = |v: &redis::Value| match v {
                redis::Value::Int(n) => *n,
                other => panic!("slot bound {other:?}"),
            };
            if bound(&fields[0]) <= slot && slot <= bound(&fields[1]) {
                let redis::Value::Array(master) = &fields[2] else {
                    panic!("master entry {:?}", fields[2]);
                };
                return match &master[1] {
                    redis::Value::Int(port) => *port as u16,
                    other => panic!("port {other:?}"),
                };
            }
        }
        panic!("no node serves slot {slot}");
    }

    /// Kills the node on `port` (SIGKILL: its data is gone).
    pub async fn kill(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        if let Some(mut child) = self.nodes[i].take() {
            child.kill().await.unwrap();
        }
    }

    /// Starts the node on `port` again, from its cluster state file.
    pub async fn restart(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        self.nodes[i] = Some(self.spawn_node(i).await);
    }

    /// Live members of a sorted set, read through the cluster (the key's own node).
    pub async fn live_members(&self, key: &str) -> i64 {
        let client = redis::cluster::ClusterClient::new(
            self.ports
                .iter()
                .map(|p| format!("redis://127.0.0.1:{p}"))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let mut conn = client.get_async_connection().await.unwrap();
        let now_ms: i64 = {
            let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
            s * 1000 + us / 1000
        };
        redis::cmd("ZCOUNT")
            .arg(key)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear(); // kill_on_drop
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Live observer leases of one principal in the shared Redis, counted straight from the
/// sorted sets: [global, tenant, principal].
pub async fn lease_counts(gw: &Gateway, tenant: &str, principal: &str) -> [i64; 3] {
    lease_counts_at(SHARED_REDIS_URL, gw, tenant, principal).await
}

/// The keys of one principal's observer leases: [global, tenant, principal], in the
/// documented layout, spelled out here rather than taken from the gateway.
pub fn lease_keys(gw: &Gateway, tenant: &str, principal: &str) -> [String; 3] {
    let tag = format!("{{{}:leases}}", redis_key_prefix(&gw.db));
    [
        format!("{tag}:global"),
        format!("{tag}:tenant:{}:{tenant}", tenant.len()),
        format!(
            "{tag}:principal:{}:{tenant}:{}:{principal}",
            tenant.len(),
            principal.len()
        ),
    ]
}

/// [`lease_counts`] in the Redis at `url`.
pub async fn lease_counts_at(url: &str, gw: &Gateway, tenant: &str, principal: &str) -> [i64; 3] {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys = lease_keys(gw, tenant, principal);
    let now_ms: i64 = {
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        s * 1000 + us / 1000
    };
    let mut out = [0; 3];
    for (i, key) in keys.iter().enumerate() {
        out[i] = redis::cmd("ZCOUNT")
            .arg(key)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    out
}

/// Starts a `redis-server` and waits (5 s at most) until it accepts connections on `port`.
/// Starts `command` and waits until its port accepts connections: up to 15 s (a loaded
/// two-core machine has taken more than 5), failing at once, with its exit status, when the
/// server exits instead (its port taken, say).
async fn start_listening(mut command: Command, port: u16) -> Child {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server must be installed (scripts/test installs it)");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("redis-server for port {port} exited before listening: {status}");
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return child;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis-server did not start on port {port} within 15 s");
}

/// Scripts the Redis at `url` has run since it started (`EVAL` and `EVALSHA`), from its own
/// `INFO commandstats`.
pub async fn script_calls(url: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .map(|l| {
            let calls = l.split(&[':', ','][..]).nth(1).unwrap_or_default();
            calls
                .strip_prefix("calls=")
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("commandstats line {l}"))
        })
        .sum()
}
