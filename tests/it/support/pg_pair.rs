//! A PostgreSQL primary and its synchronous standby, both private servers of the machine's
//! PostgreSQL installation on loopback ports, for failover as production has it: `initdb`,
//! `pg_basebackup -R`, `pg_ctl stop -m immediate` (a crash), `pg_ctl start`, `pg_ctl promote`.
//! Run as the `postgres` user when the tests run as root. Both are stopped (immediate) and
//! removed on drop.
//!
//! The standby is synchronous (`synchronous_standby_names = '*'` on the primary): a commit the
//! gateway acknowledged is on both servers, so a promotion loses none, as with Patroni's or
//! CloudNativePG's synchronous mode. The promoted server carries no synchronous standby of its
//! own (the setting is written on the primary after the base backup), so it takes writes alone.
//! A standby whose primary went away tries again every 500 ms (`wal_retrieve_retry_interval`,
//! 5 s by default): until it is back, a restarted primary's commits wait for it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::postgres::{as_server_user, bindir, give, server_user, unix_client};
use super::rpc::new_id;

/// The database the gateway uses on the pair.
pub const DATABASE: &str = "q_a2a";
/// The password the pair's URLs carry (the servers trust loopback and never ask for it): a
/// test can look for it where it must never be, in logs.
pub const PASSWORD: &str = "pw-never-logged";

/// One server of the pair.
pub struct PgNode {
    pub port: u16,
    pub data: PathBuf,
    log: PathBuf,
}

impl PgNode {
    /// `host:port` for a URL.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Which of the two servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    A,
    B,
}

/// A primary (`Node::A` at first) and its synchronous standby (`Node::B`).
pub struct PgPair {
    dir: PathBuf,
    bin: PathBuf,
    user: Option<(u32, u32)>,
    pub a: PgNode,
    pub b: PgNode,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl PgPair {
    pub async fn start() -> PgPair {
        let user = server_user();
        let dir = std::env::temp_dir().join(format!("q-a2a-pg-pair-{}", new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        give(&dir, user);
        let node = |name: &str| PgNode {
            port: free_port(),
            data: dir.join(name),
            log: dir.join(format!("{name}.log")),
        };
        let pair = PgPair {
            a: node("a"),
            b: node("b"),
            bin: bindir(),
            user,
            dir,
        };
        pair.run(
            "initdb",
            &[
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
                "-D",
                &pair.a.data.display().to_string(),
            ],
        )
        .await;
        std::fs::write(
            pair.a.data.join("pg_hba.conf"),
            "local all all trust\n\
             host all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        // fsync off: the faults here are process crashes, which leave the kernel's page cache
        // (and so every write the server made) in place.
        let settings = format!(
            "listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\n\
             fsync = off\n\
             max_connections = 60\n\
             shared_buffers = 16MB\n\
             max_wal_senders = 4\n\
             wal_keep_size = 64MB\n\
             hot_standby = on\n\
             wal_retrieve_retry_interval = 500ms\n\
             log_min_messages = warning\n",
            pair.dir.display()
        );
        append(&pair.a.data.join("postgresql.conf"), &settings);
        append(
            &pair.a.data.join("postgresql.conf"),
            &format!("port = {}\n", pair.a.port),
        );
        pair.start_node(Node::A).await;
        pair.sql(Node::A, &format!("CREATE DATABASE {DATABASE}"))
            .await;
        pair.make_standby(Node::B, Node::A).await;
        pair.sql(Node::A, "ALTER SYSTEM SET synchronous_standby_names = '*'")
            .await;
        pair.sql(Node::A, "SELECT pg_reload_conf()").await;
        pair.wait_sync(Node::A).await;
        pair
    }

    pub fn node(&self, which: Node) -> &PgNode {
        match which {
            Node::A => &self.a,
            Node::B => &self.b,
        }
    }

    /// A URL over these servers, in this order (libpq's multi-host form).
    pub fn url(&self, order: &[Node]) -> String {
        let hosts: Vec<String> = order.iter().map(|n| self.node(*n).addr()).collect();
        format!(
            "postgres://postgres:{PASSWORD}@{}/{DATABASE}",
            hosts.join(",")
        )
    }

    /// A URL of one `host:port` (a forwarder's, say).
    pub fn url_at(addr: &str) -> String {
        format!("postgres://postgres:{PASSWORD}@{addr}/{DATABASE}")
    }

    /// Runs one of PostgreSQL's programs as the server's user; panics with its output unless
    /// it succeeds.
    async fn run(&self, program: &str, args: &[&str]) {
        let mut command = Command::new(self.bin.join(program));
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        as_server_user(&mut command, self.user);
        let out = command.output().await.expect(program);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pg_ctl start -w`: returns once the server accepts connections.
    pub async fn start_node(&self, which: Node) {
        let log = self.node(which).log.display().to_string();
        self.pg_ctl(which, &["start", "-w", "-t", "60", "-l", &log])
            .await;
    }

    /// `pg_ctl` on `which`'s data directory.
    async fn pg_ctl(&self, which: Node, args: &[&str]) {
        let data = self.node(which).data.display().to_string();
        let mut all = args.to_vec();
        all.extend(["-D", &data]);
        self.run("pg_ctl", &all).await;
    }

    /// `pg_ctl stop -m immediate`: the server and its backends end at once, as in a crash.
    pub async fn crash(&self, which: Node) {
        self.pg_ctl(which, &["stop", "-m", "immediate"]).await;
    }

    /// `pg_ctl promote -w`: returns once the standby takes writes.
    pub async fn promote(&self, which: Node) {
        self.pg_ctl(which, &["promote", "-w", "-t", "60"]).await;
    }

    /// `which` (stopped) becomes a fresh standby of `of`: its data is replaced by a base
    /// backup (`pg_basebackup -R`), and it is started.
    pub async fn make_standby(&self, which: Node, of: Node) {
        let node = self.node(which);
        let _ = std::fs::remove_dir_all(&node.data);
        let source = self.node(of);
        self.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &source.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &node.data.display().to_string(),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        )
        .await;
        // The copied configuration names the source's port; the last line wins. A synchronous
        // standby list copied from the source is cleared: a standby has none.
        append(
            &node.data.join("postgresql.auto.conf"),
            &format!("port = {}\nsynchronous_standby_names = ''\n", node.port),
        );
        self.start_node(which).await;
    }

    /// The crashed primary `which` comes back read-only: started as a standby of `of` (a
    /// demoted primary rejoining, as Patroni does). It accepts connections and refuses every
    /// write, whether or not it manages to follow `of`.
    pub async fn restart_as_standby(&self, which: Node, of: Node) {
        let node = self.node(which);
        std::fs::write(node.data.join("standby.signal"), "").unwrap();
        give(&node.data.join("standby.signal"), self.user);
        append(
            &node.data.join("postgresql.auto.conf"),
            &format!(
                "primary_conninfo = 'host=127.0.0.1 port={} user=postgres'\n\
                 synchronous_standby_names = ''\n",
                self.node(of).port
            ),
        );
        self.start_node(which).await;
    }

    /// Waits (30 s at most) until `primary` has a synchronous standby streaming.
    pub async fn wait_sync(&self, primary: Node) {
        for _ in 0..300 {
            if let Ok(client) = self.local(primary, "postgres").await {
                if let Ok(row) = client
                    .query_one(
                        "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                        &[],
                    )
                    .await
                {
                    if row.get::<_, i64>(0) > 0 {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no synchronous standby streamed from {primary:?} within 30 s");
    }

    /// Puts a running server in read-only mode without a restart
    /// (`default_transaction_read_only`), as a fenced primary or a full disk's guard does: its
    /// sessions stay open and refuse every write from their next transaction.
    pub async fn set_read_only(&self, which: Node, on: bool) {
        self.sql(
            which,
            &format!("ALTER SYSTEM SET default_transaction_read_only = {on}"),
        )
        .await;
        self.sql(which, "SELECT pg_reload_conf()").await;
    }

    /// A connection over the Unix socket (trust), for the test's own set-up and checks.
    pub async fn local(
        &self,
        which: Node,
        dbname: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        unix_client(&self.dir, self.node(which).port, dbname).await
    }

    /// Runs a statement on `which`'s `postgres` database; panics unless it succeeds.
    pub async fn sql(&self, which: Node, sql: &str) {
        self.local(which, "postgres")
            .await
            .unwrap_or_else(|e| panic!("connect to {which:?}: {e}"))
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql} on {which:?}: {e}"));
    }

    /// Whether `which` answers and takes writes.
    pub async fn writable(&self, which: Node) -> bool {
        match self.local(which, "postgres").await {
            Ok(client) => client
                .query_one("SHOW transaction_read_only", &[])
                .await
                .is_ok_and(|row| row.get::<_, String>(0) == "off"),
            Err(_) => false,
        }
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

impl Drop for PgPair {
    fn drop(&mut self) {
        for node in [&self.a, &self.b] {
            let mut command = std::process::Command::new(self.bin.join("pg_ctl"));
            command
                .args(["stop", "-m", "immediate", "-D"])
                .arg(&node.data)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if let Some((uid, gid)) = self.user {
                use std::os::unix::process::CommandExt;
                command.gid(gid).uid(uid);
            }
            let _ = command.status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
