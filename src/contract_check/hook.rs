//! The operator hook: how the kit makes Q change a grant, which the contract has no route for.
//! Q's team supplies it (docs/contract-kit.md, "The operator hook"): a URL the kit POSTs each
//! change to, or a command it runs for each. Either way it must return only once Q has
//! committed the change, and fail (non-2xx, non-zero exit) when it could not make it.
//!
//! Every change is for the kit's own test principal, and the kit undoes each revocation it made
//! before it exits.

use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;

/// Longest a hook may take for one change.
const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Most bytes of a failed hook's output quoted in the evidence.
const QUOTED: usize = 300;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// POST the change as JSON; a 2xx answer means it was made.
    Url(String),
    /// Run through `sh -c` with the change as JSON on stdin and in `CONTRACT_HOOK_*`
    /// variables; exit status 0 means it was made.
    Command(String),
}

/// The change asked of the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Revoke the principal's membership of the workspace (the access API then answers
    /// `revoked` and creates for it are refused).
    RevokeMembership,
    /// Make the principal a member of the workspace again.
    RestoreMembership,
    /// Revoke the principal's evidence grant on one of its runs.
    RevokeEvidence,
    /// Grant it again.
    RestoreEvidence,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::RevokeMembership => "revoke_membership",
            Action::RestoreMembership => "restore_membership",
            Action::RevokeEvidence => "revoke_evidence",
            Action::RestoreEvidence => "restore_evidence",
        }
    }
}

/// One change: the action and the ids it is about.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub action: Action,
    pub tenant_id: String,
    pub principal_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl Hook {
    pub fn describe(&self) -> String {
        match self {
            Hook::Url(url) => format!("POST {url}"),
            Hook::Command(_) => "a command".to_owned(),
        }
    }

    /// Makes the change; `Err` says why the hook did not.
    pub async fn call(&self, http: &reqwest::Client, change: &Change) -> Result<(), String> {
        let name = change.action.name();
        let outcome = tokio::time::timeout(HOOK_TIMEOUT, async {
            match self {
                Hook::Url(url) => post(http, url, change).await,
                Hook::Command(command) => run(command, change).await,
            }
        })
        .await;
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(format!("hook {name} failed: {why}")),
            Err(_) => Err(format!(
                "hook {name} did not finish within {} s",
                HOOK_TIMEOUT.as_secs()
            )),
        }
    }
}

async fn post(http: &reqwest::Client, url: &str, change: &Change) -> Result<(), String> {
    let response = http
        .post(url)
        .json(change)
        .send()
        .await
        .map_err(|e| crate::upstream::error_chain(&e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    Err(format!("HTTP {status}: {}", quote(&body)))
}

async fn run(command: &str, change: &Change) -> Result<(), String> {
    let json = serde_json::to_vec(change).map_err(|e| e.to_string())?;
    let optional = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("CONTRACT_HOOK_ACTION", change.action.name())
        .env("CONTRACT_HOOK_TENANT_ID", &change.tenant_id)
        .env("CONTRACT_HOOK_PRINCIPAL_ID", &change.principal_id)
        .env("CONTRACT_HOOK_WORKSPACE_ID", optional(&change.workspace_id))
        .env("CONTRACT_HOOK_RUN_ID", optional(&change.run_id))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input is fine.
        let _ = stdin.write_all(&json).await;
    }
    let output = child.wait_with_output().await.map_err(|e| e.to_string())?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}: {}",
        output.status,
        quote(&String::from_utf8_lossy(&output.stderr))
    ))
}

fn quote(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(QUOTED) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change() -> Change {
        Change {
            action: Action::RevokeEvidence,
            tenant_id: "t-acme".into(),
            principal_id: "p-alice".into(),
            workspace_id: None,
            run_id: Some("run-1".into()),
        }
    }

    #[tokio::test]
    async fn a_command_hook_gets_the_change_on_stdin_and_in_its_environment() {
        let dir = std::env::temp_dir().join(format!("contract-hook-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let command = format!(
            "cat > '{0}'; echo \" $CONTRACT_HOOK_ACTION $CONTRACT_HOOK_RUN_ID \
             [$CONTRACT_HOOK_WORKSPACE_ID]\" >> '{0}'",
            out.display()
        );
        let http = reqwest::Client::new();
        Hook::Command(command).call(&http, &change()).await.unwrap();
        let written = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            written,
            "{\"action\":\"revoke_evidence\",\"tenant_id\":\"t-acme\",\"principal_id\":\
             \"p-alice\",\"run_id\":\"run-1\"} revoke_evidence run-1 []\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_failing_hook_says_why() {
        let http = reqwest::Client::new();
        let failed = Hook::Command("echo 'no such principal' >&2; exit 3".into())
            .call(&http, &change())
            .await
            .unwrap_err();
        assert!(
            failed.starts_with("hook revoke_evidence failed: exit status: 3"),
            "{failed}"
        );
        assert!(failed.ends_with("no such principal"), "{failed}");
        // Nothing listens on port 9 of loopback: the URL hook reports the connection failure.
        let refused = Hook::Url("http://127.0.0.1:9/hook".into())
            .call(&http, &change())
            .await
            .unwrap_err();
        assert!(
            refused.starts_with("hook revoke_evidence failed: "),
            "{refused}"
        );
    }
}
