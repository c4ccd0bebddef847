//! Child processes: the gateway and reference-upstream binaries (and the Python remote agent)
//! are started for real, and a test waits for the `listening on URL` line each prints on
//! stdout once its listener is bound.
//!
//! Stderr is drained into [`LogLines`] for log scans. `Q_A2A_TEST_LOG_DIR=DIR` also appends
//! every line to `DIR/servers.log`, prefixed with the process (`gateway[PID]`), since the
//! servers of every running test write there; `Q_A2A_TEST_VERBOSE=1` echoes the lines.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// How long a spawned server may take to print its address.
const START_WITHIN: Duration = Duration::from_secs(60);

pub const GATEWAY_BIN: &str = env!("CARGO_BIN_EXE_q-a2a-gateway");
pub const UPSTREAM_BIN: &str = env!("CARGO_BIN_EXE_q-reference-upstream");

pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Lines a server wrote to stderr, kept for log scans.
pub type LogLines = Arc<Mutex<Vec<String>>>;

/// A server that is listening.
pub struct Started {
    pub child: Child,
    /// From the `listening on URL` line.
    pub url: String,
    /// The rest of each line asked for with `then` (in order), read right after `listening on`.
    pub then: Vec<String>,
    /// Everything the server wrote to stderr so far.
    pub logs: LogLines,
    /// Ends once the server's stderr is closed and every line is in `logs`.
    pub stderr_drained: JoinHandle<()>,
}

/// Spawns `command` (`what` names it in messages) and waits, 30 s at most, for its
/// `listening on URL` line; then reads one more stdout line per prefix in `then`.
pub async fn spawn_listening(mut command: Command, what: &str, then: &[&str]) -> Started {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let label = format!("{what}[{}]", child.id().unwrap_or_default());
    let logs = LogLines::default();
    let kept = logs.clone();
    // Keep draining stderr so the child never blocks on a full pipe; keep it for log scans.
    let stderr_drained = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut sink = log_sink();
        let verbose = std::env::var("Q_A2A_TEST_VERBOSE").is_ok();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(file) = sink.as_mut() {
                // One write per line: other tests' servers append to the same file.
                let _ = file.write_all(format!("{label} {line}\n").as_bytes());
            }
            if verbose {
                eprintln!("{label} {line}");
            }
            kept.lock().unwrap().push(line);
        }
    });
    let mut lines = BufReader::new(stdout).lines();
    // A Python server imports the SDK first: seconds on a loaded machine.
    let url = tokio::time::timeout(START_WITHIN, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("listening on ") {
                return url.trim().to_string();
            }
        }
        panic!("{what} exited before listening")
    })
    .await
    .unwrap_or_else(|_| panic!("{what} did not start within {START_WITHIN:?}"));
    let mut rest = Vec::new();
    for prefix in then {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{what}: no {prefix:?} line"))
            .unwrap()
            .unwrap_or_default();
        rest.push(
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("{what}: expected {prefix:?}, got {line:?}"))
                .trim()
                .to_string(),
        );
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Started {
        child,
        url,
        then: rest,
        logs,
        stderr_drained,
    }
}

fn log_sink() -> Option<std::fs::File> {
    let dir = std::env::var("Q_A2A_TEST_LOG_DIR").ok()?;
    let _ = std::fs::create_dir_all(&dir);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(PathBuf::from(dir).join("servers.log"))
        .ok()
}

/// SIGKILL: the process gets no chance to clean up, like a crashed replica.
pub async fn kill9(child: &mut Child) {
    child.start_kill().expect("SIGKILL");
    let _ = child.wait().await;
}

/// Sends SIGTERM to a child process.
pub fn sigterm(child: &Child) {
    let pid = child.id().expect("child still running");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}
