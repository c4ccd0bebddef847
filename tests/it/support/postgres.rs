//! A private PostgreSQL server (initdb and postgres from the machine's installation) on a
//! loopback port, for what the shared server cannot be set up for: TLS with a test CA. Run as
//! the `postgres` user when the tests run as root (PostgreSQL refuses root). Stopped (immediate
//! shutdown) and removed on drop.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio_postgres::NoTls;

use super::certs::ServerCerts;
use super::rpc::new_id;

pub struct PrivatePostgres {
    pub port: u16,
    /// The data directory, also the directory of the Unix socket.
    pub dir: PathBuf,
    child: Child,
}

/// `initdb`'s directory (links followed): on PATH, else the newest Debian installation.
pub(super) fn bindir() -> PathBuf {
    let on_path = std::env::var("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&on_path) {
        if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
            // A link on PATH (/usr/local/bin/initdb): the installation's own directory, which
            // holds pg_ctl and pg_basebackup too.
            return std::fs::canonicalize(dir.join("initdb"))
                .ok()
                .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
                .unwrap_or(dir);
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL must be installed (scripts/test installs it)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort_by_key(|bin| {
        bin.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop().expect("no initdb under /usr/lib/postgresql")
}

/// The uid and gid of the `postgres` user when running as root; `None` otherwise.
pub(super) fn server_user() -> Option<(u32, u32)> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))?;
    if !root {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let fields: Vec<&str> = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("a postgres user (the PostgreSQL package creates it)")
        .split(':')
        .collect();
    Some((fields[2].parse().unwrap(), fields[3].parse().unwrap()))
}

pub(super) fn as_server_user(command: &mut Command, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        command.as_std_mut().gid(gid).uid(uid);
    }
}

pub(super) fn give(path: &Path, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }
}

/// A connection as `postgres` over the Unix socket in `dir` of the server on `port` (trust).
pub(super) async fn unix_client(
    dir: &Path,
    port: u16,
    dbname: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::Config::new()
        .host_path(dir)
        .port(port)
        .user("postgres")
        .dbname(dbname)
        .connect(NoTls)
        .await?;
    tokio::spawn(connection);
    Ok(client)
}

impl PrivatePostgres {
    /// A server that accepts TCP connections on 127.0.0.1 only over TLS, with `certs`' server
    /// certificate; the Unix socket (trust) is for the test's own set-up.
    pub async fn start_tls(certs: &ServerCerts) -> PrivatePostgres {
        Self::start_tls_with(certs, false).await
    }

    /// As `start_tls`, and the server authenticates TCP clients by a certificate that `certs`'
    /// CA signed, for the user named by its CN (`cert` in pg_hba.conf).
    pub async fn start_tls_client_certs(certs: &ServerCerts) -> PrivatePostgres {
        Self::start_tls_with(certs, true).await
    }

    async fn start_tls_with(certs: &ServerCerts, client_certs: bool) -> PrivatePostgres {
        let user = server_user();
        let bin = bindir();
        let dir = std::env::temp_dir().join(format!("q-a2a-pg-{}", new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        give(&dir, user);
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .arg("--locale=C")
            .arg("-D")
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        as_server_user(&mut initdb, user);
        let out = initdb.output().await.expect("run initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tcp_auth = if client_certs { "cert" } else { "trust" };
        std::fs::write(
            data.join("pg_hba.conf"),
            format!(
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 {tcp_auth}\n\
                 hostnossl all all 127.0.0.1/32 reject\n"
            ),
        )
        .unwrap();
        for (name, from) in [
            ("server.crt", certs.cert()),
            ("server.key", certs.key()),
            ("ca.pem", certs.ca()),
        ] {
            let to = data.join(name);
            std::fs::copy(from, &to).unwrap();
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
            give(&to, user);
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut postgres = Command::new(bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()))
            .args(["-c", "ssl=on"])
            .args(["-c", "ssl_cert_file=server.crt"])
            .args(["-c", "ssl_key_file=server.key"])
            .args(["-c", "ssl_ca_file=ca.pem"])
            .args(["-c", "fsync=off", "-c", "max_connections=30"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        as_server_user(&mut postgres, user);
        let child = postgres.spawn().expect("start postgres");
        let server = PrivatePostgres { port, dir, child };
        for _ in 0..150 {
            if server.local("postgres").await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the private PostgreSQL did not start on port {port}");
    }

    /// A connection over the Unix socket (trust), for the test's own set-up and checks.
    pub async fn local(
        &self,
        dbname: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        unix_client(&self.dir, self.port, dbname).await
    }

    /// A new database and its TCP URL (no password: trust over TLS).
    pub async fn create_database(&self, name: &str) -> String {
        self.local("postgres")
            .await
            .unwrap()
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // Immediate shutdown: the postmaster takes its backends with it (SIGKILL would leave
        // them to notice on their own).
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-QUIT", &pid.to_string()])
                .status();
        }
        for _ in 0..100 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
