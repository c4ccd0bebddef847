//! Helpers shared by the unit tests of the reference upstream.

use std::path::Path;
use std::time::Duration;

use crate::contract::{CreateRunRequest, Run, RunInput, RunStatus};
use crate::fixtures::Fixtures;
use crate::state::AppState;

/// The repository's own fixtures file.
pub fn fixtures() -> Fixtures {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/q-fixtures.json");
    Fixtures::load(&path).expect("fixtures load")
}

/// A create request of p-alice in t-acme.
pub fn req(workflow_id: &str, agent_id: &str, parts: &[&str]) -> CreateRunRequest {
    CreateRunRequest {
        workflow_id: workflow_id.to_owned(),
        tenant_id: "t-acme".to_owned(),
        principal_id: "p-alice".to_owned(),
        agent_id: agent_id.to_owned(),
        input: RunInput {
            parts: parts.iter().map(|p| (*p).to_owned()).collect(),
        },
        execution_timeout_seconds: 3600,
    }
}

/// Polls the run until it reaches `status` (two seconds at most).
pub async fn wait_for(state: &AppState, run_id: &str, status: RunStatus) -> Run {
    for _ in 0..200 {
        {
            let mut inner = state.lock().await;
            let run = inner.run_mut(run_id).unwrap().run.clone();
            if run.status == status {
                return run;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("run {run_id} never reached {status:?}");
}
