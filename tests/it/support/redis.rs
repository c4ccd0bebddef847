//! Redis: the machine's server at 127.0.0.1:6379 (each test's gateways use their own key
//! prefix there), private `redis-server` processes a test may stop, and observer-lease counts.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::gateway::{redis_key_prefix, Gateway};

/// The Redis server tests share (scripts/test starts it).
pub const SHARED_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// A private `redis-server` on a free port, killed on drop.
pub struct PrivateRedis {
    pub port: u16,
    pub child: Child,
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
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server must be installed (scripts/test installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return PrivateRedis { port, child };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("private redis-server did not start on port {port}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// Live observer leases of one principal in the shared Redis, counted straight from the
/// sorted sets: [global, tenant, principal].
pub async fn lease_counts(gw: &Gateway, tenant: &str, principal: &str) -> [i64; 3] {
    let client = redis::Client::open(SHARED_REDIS_URL).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let prefix = redis_key_prefix(&gw.db);
    let keys = [
        format!("{prefix}:leases:global"),
        format!("{prefix}:leases:tenant:{}:{tenant}", tenant.len()),
        format!(
            "{prefix}:leases:principal:{}:{tenant}:{}:{principal}",
            tenant.len(),
            principal.len()
        ),
    ];
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
