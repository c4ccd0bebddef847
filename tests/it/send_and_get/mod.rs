//! SendMessage and GetTask end to end: validation (with nothing written), durable message
//! identity, dispatch ambiguity, concurrent duplicates, artifact verification and ownership.

use serde_json::Value;

mod artifacts;
mod dispatch;
mod identity;
mod ownership;
mod send;
mod validation;

/// The workflow identity the gateway saves for a task's run in Q.
fn workflow_of(task: &Value) -> String {
    format!("a2a-task-{}", task["id"].as_str().unwrap())
}
