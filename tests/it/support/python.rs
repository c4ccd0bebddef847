//! Remote A2A agents for the outbound tests: the official a2a-sdk 1.2.2 server
//! (`tests/python/remote_agent.py`) run from the repo's Python environment, one process per
//! agent, each in one fault mode (see the script's `--mode`).

use std::path::PathBuf;

use serde_json::Value;
use tokio::process::{Child, Command};

use super::process::{repo_path, spawn_listening};

/// `.venv/bin/python`; panics with the fix when it is missing.
pub fn python() -> PathBuf {
    let python = repo_path(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-python first (it installs a2a-sdk 1.2.2 for the \
         remote agent these tests talk to)",
        python.display()
    );
    python
}

/// A remote agent process; killed on drop.
pub struct Remote {
    pub url: String,
    _child: Child,
}

impl Remote {
    /// Starts `remote_agent.py` with these arguments, e.g. `["--mode", "drop-send"]`.
    pub async fn start(args: &[&str]) -> Remote {
        let mut command = Command::new(python());
        command
            .arg(repo_path("tests/python/remote_agent.py"))
            .args(args);
        let started = spawn_listening(command, "remote-agent", &[]).await;
        Remote {
            url: started.url,
            _child: started.child,
        }
    }

    pub fn rpc_url(&self) -> String {
        format!("{}/a2a/rpc", self.url)
    }

    /// Every request the agent received, as it recorded them.
    pub async fn seen(&self) -> Vec<Value> {
        let v: Value = reqwest::get(format!("{}/_seen", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["requests"].as_array().cloned().unwrap_or_default()
    }

    /// How many requests of one JSON-RPC method the agent received.
    pub async fn count(&self, rpc_method: &str) -> usize {
        self.seen()
            .await
            .iter()
            .filter(|r| r["rpcMethod"] == rpc_method)
            .count()
    }
}

impl Remote {
    /// The public JWK of the key a `--sign` agent signed its card with (`GET /_card_key`).
    pub async fn card_key(&self) -> Value {
        reqwest::get(format!("{}/_card_key", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// Runs `tests/python/card_signing.py` (the official SDK's card resolver and signature
/// verifier) with `args`; its one line of JSON: `{"verified": true, ...}` or
/// `{"verified": false, "error": ...}`. Panics if the script itself fails.
pub async fn sdk_card_check(args: &[&str]) -> Value {
    let output = Command::new(python())
        .arg(repo_path("tests/python/card_signing.py"))
        .args(args)
        .output()
        .await
        .expect("run card_signing.py");
    assert!(
        output.status.success(),
        "card_signing.py {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "card_signing.py printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}
